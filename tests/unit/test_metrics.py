"""Operator metrics as Prometheus scrapes them: known labels at 0, no empty label values, and
per-job state read from real statuses (lifecycle -> status.render) at scrape time."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import pytest
from kopf._core.engines import indexing
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from trainium_operator.cluster.reconcile import Transition
from trainium_operator.domain import history, jobstate, lifecycle, status
from trainium_operator.domain.lifecycle import Child, Observed
from trainium_operator.runtime import metrics

Json = dict[str, Any]
T0 = "2026-11-21T10:00:00Z"
T1 = "2026-11-21T12:30:00Z"


def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the default registry, as Prometheus would parse the page."""
    text = generate_latest(REGISTRY).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_failure_reason_and_error_kind_is_exported_before_its_first_increment() -> None:
    samples = scrape()
    for reason in metrics.FAILURE_REASONS:
        key = ("trainium_operator_job_failures_total", (("reason", reason),))
        assert key in samples, f"{reason} is not exported until it first happens"
    for kind in ("Api403", "Api422", "Api500"):
        assert ("trainium_operator_reconcile_errors_total", (("kind", kind),)) in samples


def _failed_reasons() -> set[str]:
    """Every Failed reason the lifecycle produces, over a grid of observations."""
    reasons = {c.reason for c in lifecycle.invalid(["x"]).conditions if c.type == "Failed"}
    states = list(Child)
    for policy, pre, train, recorded in itertools.product(
        ("IfNotCached", "Always", "Never"), states, states, (False, True)
    ):
        obs = Observed(policy=policy, storage_ready=True, precompile=pre, training=train,
                       cache_recorded=recorded)  # fmt: skip
        decision = lifecycle.decide(obs)
        if decision.phase is lifecycle.Phase.FAILED:
            reasons |= {c.reason for c in decision.conditions if c.type == "Failed"}
    for action, pre in itertools.product(lifecycle.Action, (Child.ABSENT, Child.SUCCEEDED)):
        refused = (lifecycle.Rejection(action, 422, "invalid"),)
        for storage_ready in (False, True):
            obs = Observed(storage_ready=storage_ready, precompile=pre, rejections=refused)
            decision = lifecycle.decide(obs)
            if decision.phase is lifecycle.Phase.FAILED:
                reasons |= {c.reason for c in decision.conditions if c.type == "Failed"}
    return reasons


def test_failure_reasons_cover_every_reason_the_lifecycle_fails_with() -> None:
    found = _failed_reasons()
    assert found >= {"InvalidSpec", "PrecompileFailed", "TrainingFailed", "TrainingRejected"}
    assert found <= set(metrics.FAILURE_REASONS), found - set(metrics.FAILURE_REASONS)


def test_no_empty_label_values_after_a_first_transition() -> None:
    first = Transition(namespace="ns-m", name="first", old_phase=None, new_phase="Pending",
                       reason="Created", message="created")  # fmt: skip
    metrics.count_transition(first)
    samples = scrape()
    key = ("trainium_operator_phase_transitions_total",
           (("from_phase", "New"), ("to_phase", "Pending")))  # fmt: skip
    assert samples[key] >= 1
    empty = [k for k in samples if any(v == "" for _, v in k[1])]
    assert not empty, empty


def job_status(obs: Observed, previous: Json, now: str) -> Json:
    """The status the operator would write for obs at time now (the real renderer)."""
    frame = status.Frame(lifecycle.decide(obs), previous, 1, now, cache_key="k", cache_name="c")
    return status.render(frame)


def epoch(ts: str) -> float:
    return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


COMPILING = Observed(storage_ready=True, precompile=Child.RUNNING)
TRAINING = Observed(storage_ready=True, precompile=Child.SUCCEEDED, cache_recorded=True,
                    training=Child.RUNNING)  # fmt: skip


def test_phase_start_is_the_transition_time_of_the_phase_condition() -> None:
    precompiling = job_status(COMPILING, {}, T0)
    assert precompiling["phase"] == "Precompiling"
    assert jobstate.phase_started(precompiling) == epoch(T0)
    # Later passes keep Precompiling's start; entering Training starts a new clock.
    assert jobstate.phase_started(job_status(COMPILING, precompiling, T1)) == epoch(T0)
    training = job_status(TRAINING, precompiling, T1)
    assert (training["phase"], jobstate.phase_started(training)) == ("Training", epoch(T1))


@pytest.mark.parametrize(
    ("status_", "expected"),
    [
        ({"phase": "Pending", "startTime": T0}, epoch(T0)),
        ({"phase": "Training", "startTime": T0, "conditions": "junk"}, epoch(T0)),
        ({"phase": "Training", "conditions": [{"type": "Running", "status": "True"}]}, None),
        ({"phase": "Failed", "startTime": "yesterday"}, None),
        ({"phase": "Succeeded", "startTime": "2026-11-21T10:00:00.5+01:00"}, epoch(T0) - 3599.5),
    ],
    ids=["pending-start", "bad-conditions", "no-time", "bad-time", "offset"],
)
def test_phase_start_falls_back_to_start_time(status_: Json, expected: float | None) -> None:
    assert jobstate.phase_started(status_) == expected


def test_collector_exports_one_series_per_job_from_a_kopf_index() -> None:
    """A real kopf Index, as handlers.trainiumjob_statuses fills it."""
    index: indexing.Index[tuple[str, str], Json] = indexing.Index()  # what kopf injects
    early = job_status(COMPILING, {}, T0)
    late = job_status(COMPILING, {}, T1)
    index._replace(("ml", "early", "uid-1"), {("ml", "early"): early})
    index._replace(("ml", "late", "uid-2"), {("ml", "late"): late})
    index._replace(("ml", "new", "uid-3"), {("ml", "new"): {}})  # no phase yet: no series
    collector = jobstate.JobStateCollector()
    collector.source = lambda: jobstate.snapshot(index)
    families = list(collector.collect())
    got = {(m.name, s.labels["name"], s.labels["phase"]): s.value
           for m in families for s in m.samples if {"name", "phase"} <= set(s.labels)}  # fmt: skip
    by_phase = {s.labels["phase"]: s.value for m in families for s in m.samples
                if m.name == "trainium_operator_jobs"}  # fmt: skip
    assert by_phase["Precompiling"] == 2 and by_phase["Training"] == 0  # one source, same read
    assert got == {
        ("trainium_operator_job_phase", "early", "Precompiling"): 1,
        ("trainium_operator_job_phase", "late", "Precompiling"): 1,
        ("trainium_operator_job_phase_start_time_seconds", "early", "Precompiling"): epoch(T0),
        ("trainium_operator_job_phase_start_time_seconds", "late", "Precompiling"): epoch(T1),
    }
    index._discard(("ml", "early", "uid-1"))  # kopf drops a deleted job's entry
    families = list(collector.collect())
    assert {s.labels["name"] for m in families for s in m.samples if "name" in s.labels} == {"late"}
    assert {s.labels["phase"]: s.value for s in families[-1].samples}["Precompiling"] == 1


def test_the_registered_collector_serves_what_watch_jobs_is_given() -> None:
    index = {("team", "bert"): [job_status(TRAINING, {}, T0)]}
    metrics.watch_jobs(index)
    try:
        samples = scrape()
    finally:
        metrics.JOB_STATES.source = None
    labels = (("name", "bert"), ("namespace", "team"), ("phase", "Training"))
    assert samples[("trainium_operator_job_phase_start_time_seconds", labels)] == epoch(T0)
    assert ("trainium_operator_job_phase", labels) not in scrape()  # gone with its source


def test_a_negative_compile_figure_counts_as_zero() -> None:
    before = scrape()[("trainium_operator_compile_seconds_total", (("kind", "spent"),))]
    metrics.count_compile((("compileSeconds", -1.0),))
    assert scrape()[("trainium_operator_compile_seconds_total", (("kind", "spent"),))] == before


def test_a_metric_error_is_logged_never_raised_into_the_pass(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A pass that raised after its writes never scheduled its next look (TTL, PV cleanup)."""

    def broken(**_labels: str) -> Any:
        raise ValueError("Counters can only be incremented by non-negative amounts.")

    monkeypatch.setattr(metrics.COMPILE_SECONDS, "labels", broken)
    monkeypatch.setattr(metrics.TRANSITIONS, "labels", broken)
    monkeypatch.setattr(metrics.INSTANCE_SECONDS, "labels", broken)
    metrics.count_compile((("savedSeconds", 5.0),))
    metrics.count_transition(Transition("ns", "j", None, "Pending", "Pending", "m", None))
    from trainium_operator.domain import cost

    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    spent = cost.compute("trn1.2xlarge", 1, [("Training", T0, T1)], now=when, prices={})
    metrics.count_cost(spent)
    errors = [r for r in caplog.records if "metrics" in r.getMessage()]
    assert len(errors) == 3 and all(r.exc_info for r in errors)


def with_history(obs: Observed, previous: Json, now: str) -> Json:
    """The status with status.history advanced, as reconcile writes it."""
    new = job_status(obs, previous, now)
    new["history"] = history.advance(previous, new, now)
    return new


def test_a_job_that_waited_for_another_compile_is_dated_from_its_own_compile() -> None:
    """TrainiumJobPrecompileSlow must not count the wait for another job's compile."""
    waiting = with_history(Observed(storage_ready=True, cache_holder="other"), {}, T0)
    assert waiting["phase"] == "WaitingForCache"
    compiling = with_history(COMPILING, waiting, T1)
    assert compiling["phase"] == "Precompiling"
    assert jobstate.phase_started(compiling) == epoch(T1)
    assert jobstate.phase_started(metrics.indexed_status(compiling)) == epoch(T1)
    later = with_history(COMPILING, compiling, "2026-11-21T13:00:00Z")
    assert jobstate.phase_started(metrics.indexed_status(later)) == epoch(T1)


def test_a_stage_lasts_from_the_entry_time_the_job_record_keeps() -> None:
    """Stage seconds come from the time the caller kept (the job's record), not module memory."""
    hist = metrics.STAGE_SECONDS["Precompiling"]
    before = REGISTRY.get_sample_value("trainium_operator_precompile_duration_seconds_sum") or 0.0
    left = Transition("ns-m", "staged", "Precompiling", "Training", "Started", "m", None)
    metrics.count_transition(left, 100.0, 142.5)
    after = REGISTRY.get_sample_value("trainium_operator_precompile_duration_seconds_sum")
    assert hist is not None and after == pytest.approx(before + 42.5)
    metrics.count_transition(left)  # no entry time kept (an operator restart): nothing observed
    assert REGISTRY.get_sample_value("trainium_operator_precompile_duration_seconds_sum") == after
