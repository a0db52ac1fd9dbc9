"""A node whose step time stays above threshold x the gang's median for the window is flagged,
and, when the spec asks, taken out at the next checkpoint (an injected clock: `now` strings)."""

from __future__ import annotations

import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from trainium_operator.api.spec import Stragglers
from trainium_operator.domain import jobstate, stragglers
from trainium_operator.domain.failures import NODE_FAULTS, NOT_CHARGED
from trainium_trainer import contract

T0 = datetime.datetime(2026, 11, 29, 4, 0, tzinfo=datetime.timezone.utc)
NAMES = {0: "ip-0", 1: "ip-1", 2: "ip-2"}
KNOBS = Stragglers(threshold=1.3, windowSeconds=60)


def at(seconds: float) -> str:
    return (T0 + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def served(times: dict[int, float]) -> str:
    registry = CollectorRegistry()
    gauge = Gauge(contract.METRIC_NODE_STEP_SECONDS, "x", [contract.NODE_STEP_LABEL],
                  registry=registry)  # fmt: skip
    for index, seconds in times.items():
        gauge.labels(str(index)).set(seconds)
    Gauge(contract.METRIC_STEP, "x", registry=registry).set(5)
    return generate_latest(registry).decode()


def run(readings: list[tuple[float, dict[int, float]]], knobs: Stragglers = KNOBS) -> list[Any]:
    """Judge readings in order, as passes would (each starts from the status the last wrote)."""
    entries: list[Any] = []
    out = []
    for t, times in readings:
        judged = stragglers.judge(times, NAMES, entries, knobs, at(t), checkpoint=int(t))
        entries = entries if judged.entries is None else judged.entries
        out.append((judged, list(entries)))
    return out


def test_the_trainers_gauge_parses_to_seconds_by_node_index() -> None:
    assert stragglers.parse(served({0: 0.2, 1: 0.21, 2: 0.3})) == {0: 0.2, 1: 0.21, 2: 0.3}
    assert stragglers.parse("garbage{") == {} and stragglers.parse("") == {}


def test_a_node_slow_for_the_whole_window_is_flagged_once() -> None:
    slow = {0: 0.2, 1: 0.2, 2: 0.3}  # 1.5x the median
    steps = run([(0, slow), (30, slow), (59, slow), (60, slow), (90, slow)])
    assert steps[0][0].entries == [
        {"index": 2, "node": "ip-2", "since": at(0), "ratio": 1.5, "stepSeconds": 0.3}
    ]
    assert [bool(j.flagged) for j, _ in steps] == [False, False, False, True, False]
    flagged = steps[3][0].flagged[0]
    assert flagged["flaggedAt"] == at(60) and flagged["checkpointStep"] == 60
    assert steps[1][0].entries is None and steps[4][0].entries is None  # nothing new to write
    assert stragglers.flagged(steps[-1][1]) == [flagged]


def test_a_reading_under_the_threshold_restarts_the_window() -> None:
    slow, fine = {0: 0.2, 1: 0.2, 2: 0.3}, {0: 0.2, 1: 0.2, 2: 0.21}
    steps = run([(0, slow), (50, fine), (70, slow), (120, slow), (130, slow)])
    assert steps[1][1] == []  # dropped: it caught up
    assert [bool(j.flagged) for j, _ in steps] == [False, False, False, False, True]
    assert steps[-1][1][0]["since"] == at(70)


def test_a_gang_of_even_speed_or_one_node_flags_nothing() -> None:
    assert run([(0, {0: 0.2, 1: 0.25, 2: 0.2})])[0][0].entries is None
    judged = stragglers.judge({0: 0.2}, NAMES, [], KNOBS, at(0))
    assert judged.entries is None and judged.flagged == ()
    unbound = stragglers.judge({0: 0.2, 5: 0.9}, NAMES, [], KNOBS, at(0))
    assert unbound.entries is None  # index 5 has no node: not judged


def test_a_flagged_node_is_replaced_only_when_asked_and_after_a_newer_checkpoint() -> None:
    slow = {0: 0.2, 1: 0.2, 2: 0.3}
    entries = run([(0, slow), (60, slow)])[-1][1]
    assert stragglers.to_replace(entries, KNOBS, checkpoint=80, excluded=()) is None  # not asked
    asked = Stragglers(threshold=1.3, windowSeconds=60, replace=True)
    assert stragglers.to_replace(entries, asked, checkpoint=60, excluded=()) is None
    assert stragglers.to_replace(entries, asked, checkpoint=None, excluded=()) is None
    found = stragglers.to_replace(entries, asked, checkpoint=70, excluded=())
    assert found is not None and found.node == "ip-2" and found.reason == "Straggler"
    assert found.reason in NODE_FAULTS and found.reason in NOT_CHARGED
    assert "1.5x the gang's median" in found.message
    assert stragglers.to_replace(entries, asked, checkpoint=70, excluded=("ip-2",)) is None


def test_the_event_says_what_follows() -> None:
    entry = {"index": 2, "node": "ip-2", "ratio": 1.5, "since": at(0)}
    assert "set spec.stragglers.replace" in stragglers.event(entry, KNOBS)
    asked = Stragglers(replace=True)
    assert "replaced at the next checkpoint" in stragglers.event(entry, asked)


def test_the_metric_counts_flagged_nodes_per_job() -> None:
    collector = jobstate.JobStateCollector()
    flagged = [{"index": 2, "node": "ip-2", "since": at(0), "flaggedAt": at(60)},
               {"index": 1, "node": "ip-1", "since": at(50)}]  # fmt: skip
    collector.source = lambda: [("ml", "a", {"phase": "Training", "stragglers": flagged}),
                                ("ml", "b", {"phase": "Training"})]  # fmt: skip
    found = {
        s.labels["name"]: s.value
        for family in collector.collect()
        if family.name == "trainium_operator_job_straggler_nodes"
        for s in family.samples
    }
    assert found == {"a": 1, "b": 0}


def test_the_metrics_index_keeps_status_stragglers() -> None:
    from trainium_operator.runtime import metrics

    entries = [{"index": 2, "node": "ip-2", "since": at(0), "flaggedAt": at(60)}]
    assert metrics.indexed_status({"phase": "Training", "stragglers": entries})["stragglers"] == (
        entries
    )
