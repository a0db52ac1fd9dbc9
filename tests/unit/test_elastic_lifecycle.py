"""The elastic decision, pure, on an injected clock: when a gang shrinks, when it grows back."""

from __future__ import annotations

from typing import Any

import pytest
from support import job

from trainium_operator.api import spec
from trainium_operator.cluster import elasticio, k8s
from trainium_operator.domain import capacity, cost, elastic, lifecycle, status
from trainium_operator.domain.lifecycle import Action, Child, Observed
from trainium_operator.domain.model import Phase

Json = dict[str, Any]
SPEC = spec.parse(
    job(nodes=3, elastic={"minNodes": 2, "globalBatchSize": 192, "batchSizePerProcess": 1,
                          "shrinkAfterSeconds": 60})
)  # fmt: skip


def at(seconds: int) -> str:
    return f"2026-11-27T10:{seconds // 60:02d}:{seconds % 60:02d}Z"


def look(training: Child, t: int, nodes: int | None = None, **kw: Any) -> elastic.Look:
    return elastic.Look(training, at(t), schedulable=nodes, **kw)


def run(state: Json, *looks: elastic.Look) -> tuple[Json, list[elastic.Resize]]:
    done = []
    for seen in looks:
        state, resize = elastic.step(SPEC, state, seen)
        if resize:
            done.append(resize)
    return state, done


def test_a_running_gang_at_full_size_stays_and_shows_its_size() -> None:
    state, resizes = run({}, look(Child.RUNNING, 0, 3))
    assert resizes == [] and state["display"] == "3/3" and state["currentNodes"] == 3
    assert state["sizes"] == [{"nodes": 3, "since": at(0)}]


def test_a_gang_that_cannot_form_shrinks_after_the_bound_only() -> None:
    state, resizes = run({}, look(Child.RUNNING, 0), look(Child.PENDING, 10, 2))
    assert resizes == [] and state["notFormedSince"] == at(10)
    state, resizes = run(state, look(Child.PENDING, 69, 2))  # 59 s: not yet
    assert resizes == []
    assert elastic.needs_count(SPEC, state, look(Child.PENDING, 70))
    state, resizes = run(state, look(Child.PENDING, 70, 2))
    (resize,) = resizes
    assert (resize.old, resize.new, resize.kind) == (3, 2, elastic.SHRINK)
    assert resize.message.startswith("from 3 to 2 nodes because")
    assert state["currentNodes"] == 2 and state["display"] == "2/3" and state["resizes"] == 1
    assert "notFormedSince" not in state
    assert state["sizes"][-1] == {"nodes": 2, "since": at(70)}


def test_a_pending_gang_with_enough_nodes_never_shrinks() -> None:
    """Nodes are there (images pulling, another job's pods): waiting is Volcano's business."""
    state, resizes = run({}, look(Child.PENDING, 0, 3), look(Child.PENDING, 600, 3))
    assert resizes == [] and state["currentNodes"] == 3


def test_never_below_min_nodes() -> None:
    state, resizes = run({}, look(Child.PENDING, 0, 0), look(Child.PENDING, 61, 0))
    assert [r.new for r in resizes] == [2]
    assert not elastic.needs_count(SPEC, state, look(Child.PENDING, 200))  # at minNodes
    state, resizes = run(state, look(Child.PENDING, 100, 0), look(Child.PENDING, 200, 0))
    assert resizes == [] and state["currentNodes"] == 2


def test_it_grows_back_at_the_first_checkpoint_after_capacity_returned() -> None:
    state, _ = run({}, look(Child.PENDING, 0, 2), look(Child.PENDING, 61, 2))
    state, resizes = run(state, look(Child.RUNNING, 90, 2, checkpoint_step=100))
    assert resizes == [] and "capacitySeenAt" not in state
    state, resizes = run(state, look(Child.RUNNING, 120, 3, checkpoint_step=100))
    assert resizes == [] and state["capacitySeenAt"] == at(120)
    assert state["capacityCheckpointStep"] == 100
    state, resizes = run(state, look(Child.RUNNING, 150, 3, checkpoint_step=100))
    assert resizes == []  # no checkpoint since: growing now would lose those steps
    state, resizes = run(state, look(Child.RUNNING, 180, 3, checkpoint_step=110))
    (grow,) = resizes
    assert (grow.old, grow.new, grow.kind) == (2, 3, elastic.GROW)
    assert state["currentNodes"] == 3 and state["resizes"] == 2 and "capacitySeenAt" not in state
    assert [s["nodes"] for s in state["sizes"]] == [3, 2, 3]


def test_a_reported_checkpoint_after_capacity_is_a_boundary_too() -> None:
    state = {"currentNodes": 2, "capacitySeenAt": at(100)}
    _, resizes = run(state, look(Child.RUNNING, 130, 3, checkpoint_time=at(90)))
    assert resizes == []
    _, resizes = run(state, look(Child.RUNNING, 130, 3, checkpoint_time=at(120)))
    assert [r.new for r in resizes] == [3]


def test_capacity_that_goes_again_before_the_checkpoint_is_forgotten() -> None:
    state = {"currentNodes": 2}
    state, _ = run(state, look(Child.RUNNING, 10, 3, checkpoint_step=5))
    state, resizes = run(state, look(Child.RUNNING, 20, 2, checkpoint_step=9))
    assert resizes == [] and "capacitySeenAt" not in state


def test_a_resize_stops_the_live_gang_and_spends_no_retry() -> None:
    resize = elastic.Resize(3, 2, elastic.SHRINK, "from 3 to 2 nodes because x")
    obs = Observed(storage_ready=True, cache_recorded=True, training=Child.PENDING, resize=resize,
                   gang_retries=1, previous_phase="Training")  # fmt: skip
    decision = lifecycle.decide(obs)
    assert decision.phase is Phase.TRAINING and decision.actions == (Action.STOP_TRAINING,)
    running = next(c for c in decision.conditions if c.type == "Running")
    assert running.reason == "Resizing" and "from 3 to 2 nodes" in running.message
    assert decision.restarts == 0


def test_cost_counts_node_hours_of_each_size() -> None:
    phases = [("Training", at(0), None)]
    sizes = [(at(0), 3), (at(120), 2), (at(240), 3)]
    job_cost = cost.compute("trn1.32xlarge", 3, phases, now=cost.to_datetime(at(360)),
                            prices={}, sizes=sizes)  # fmt: skip
    hours = {n: float(h) for n, h in job_cost.by_size.items()}
    assert hours == {3: 2 * 3 * 120 / 3600, 2: 2 * 120 / 3600}
    assert float(job_cost.total_hours) == (3 * 240 + 2 * 120) / 3600
    fragment = cost.status_fragment(job_cost)
    assert fragment["instanceHoursBySize"] == {"3": 0.2, "2": 0.067}


def node(name: str, **kw: Any) -> Json:
    labels = {"node.kubernetes.io/instance-type": kw.pop("itype", "trn1.32xlarge")}
    ready = "True" if kw.pop("ready", True) else "False"
    return {"metadata": {"name": name, "labels": labels},
            "spec": kw, "status": {"conditions": [{"type": "Ready", "status": ready}]}}  # fmt: skip


def test_schedulable_nodes_are_ready_uncordoned_matching_tolerated_and_not_excluded() -> None:
    nodes = [
        node("a"), node("b", unschedulable=True), node("c", ready=False),
        node("d", itype="trn1.2xlarge"), node("e"),
        node("f", taints=[{"key": "aws.amazon.com/neuron", "value": "true",
                           "effect": "NoSchedule"}]),
    ]  # fmt: skip
    assert capacity.schedulable(nodes, SPEC) == 2
    assert capacity.schedulable(nodes, SPEC, excluded=("e",)) == 1
    tolerant = spec.parse(
        job(
            scheduling={
                "tolerations": [
                    {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}
                ]
            }
        )
    )
    assert capacity.schedulable(nodes, tolerant) == 3


def _merge(stored: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies the status patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(stored) if isinstance(stored, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def test_a_gang_that_formed_forgets_its_wait_in_the_stored_status() -> None:
    """A node lost long after the start waits shrinkAfterSeconds again: the old wait is gone."""
    stored: Json = {}
    for seen in (look(Child.PENDING, 0), look(Child.RUNNING, 30)):
        new, resize = elastic.step(SPEC, stored.get("elastic", {}), seen)
        assert resize is None
        old = stored
        stored = _merge(stored, status.patch_body(old, {**old, "elastic": new}))
    assert "notFormedSince" not in stored["elastic"]
    new, resize = elastic.step(SPEC, stored["elastic"], look(Child.PENDING, 3000, nodes=2))
    assert resize is None and new["notFormedSince"] == at(3000)
    _, resize = elastic.step(SPEC, new, look(Child.PENDING, 3061, nodes=2))
    assert resize is not None and (resize.old, resize.new) == (3, 2)


def test_the_patch_names_nothing_new_when_nothing_was_dropped() -> None:
    previous = {"elastic": {"a": 1}, "phase": "Training"}
    assert status.patch_body(previous, {"elastic": {"a": 2}}) == {"elastic": {"a": 2}}
    assert status.patch_body(previous, {"elastic": {}}) == {"elastic": {"a": None}}
    assert status.patch_body({}, {"elastic": {"a": 1}}) == {"elastic": {"a": 1}}


def test_it_grows_at_the_first_checkpoint_read_not_the_first_one_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 34 5(b): rank 0 is read every 10 s, status.progress written every 60 s; the grow
    follows the reading that shows a checkpoint after capacity came back."""
    nodes = [node(n) for n in "abc"]
    monkeypatch.setattr(k8s, "list_nodes", lambda selector: nodes)  # capacity for 3 is back
    previous: Json = {"elastic": {"currentNodes": 2, "resizes": 1},
                      "progress": {"checkpointStep": 100, "observedAt": at(0)}}  # fmt: skip
    running = Observed(training=Child.RUNNING)
    grown_at = None
    for t, served in ((5, 100), (15, 100), (25, 110), (35, 120)):  # readings, none written
        reading = {"checkpointStep": served, "observedAt": at(t)}
        sight = elasticio.Sighting(running, None, at(t), progress=reading)
        observed, new, _ = elasticio.look(SPEC, previous, sight)
        previous = {**previous, "elastic": new}
        if observed.resize is not None:
            grown_at = t
            break
    assert grown_at == 25, "the grow waited for status.progress"
    assert previous["elastic"]["currentNodes"] == 3


def test_the_newest_step_is_the_highest_of_those_seen() -> None:
    assert elastic.newest_step(None, 110, 100) == 110
    assert elastic.newest_step(None, None) is None


def test_sizes_list_the_training_gang_only_not_the_precompile_stages() -> None:
    """Issue 34 5(d): the precompile stage compiles at 3 then 2; training starts at 3."""
    previous: Json = {}
    for t, training in ((0, Child.ABSENT), (30, Child.ABSENT), (60, Child.ABSENT),
                        (90, Child.PENDING), (120, Child.RUNNING)):  # fmt: skip
        sight = elasticio.Sighting(Observed(training=training), None, at(t))
        _, new, _ = elasticio.look(SPEC, previous, sight)
        previous = {"elastic": new}
    assert previous["elastic"]["sizes"] == [{"nodes": 3, "since": at(90)}]
    assert previous["elastic"]["resizes"] == 0
