"""Issue 41: an elastic grow under Kueue keeps the running size's admission until the larger
size's Workload is admitted; a job waiting for another job's compile owns its training
Workload behind Kueue's admission gate (kueue.x-k8s.io/admission-gated-by)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from test_elastic_lifecycle import SPEC, at, node

from trainium_operator.cluster import elasticio, k8s, reads, workloads
from trainium_operator.cluster.reads import Kind
from trainium_operator.domain import kueuejob, lifecycle
from trainium_operator.domain.kueuestate import Admission, Quota, Workload
from trainium_operator.domain.lifecycle import Action, Child, Observed, Phase
from trainium_operator.manifests import workload
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]
OWNER = Owner("bert", "team-a", "0c4a1-uid")
KUEUE = workload.Kueue("q", sizes=(3, 2))


def name_at(size: int) -> str:
    return workload.workload_name(OWNER, replace(SPEC, nodes=size), "train")


def body(size: int, *conds: str, active: bool = True) -> Json:
    """A training Workload of `size` nodes with the True conditions named."""
    status = {"conditions": [{"type": c, "status": "True", "reason": c} for c in conds]}
    md = {"name": name_at(size), "namespace": "team-a", "uid": f"u{size}", "resourceVersion": "7"}
    return {"metadata": md, "spec": {"active": active}, "status": status}


ADMITTED = Workload(name_at(2), Admission.ADMITTED, reserved=True, pods_ready=("True", "Started"))
TRAINING = Observed(
    storage_ready=True, policy="Never", training=Child.RUNNING, previous_phase="Training"
)


def quota(*stale: str, **kw: Any) -> Quota:
    return Quota("q", Workload("trainiumjob-bert-compile"), ADMITTED, stale=stale, **kw)


def held(*stale: Json) -> workloads.Held:
    return workloads.Held(KUEUE, {"train": body(2, "QuotaReserved", "Admitted")}, stale=stale)


# ---- The grow waits for its Workload ------------------------------------------------------


@pytest.mark.parametrize(
    ("found", "admitted", "kept"),
    [
        (None, False, True),  # none yet: made (its name not stale)
        (body(3), False, True),  # queued: kept, holding nothing
        (body(3, "QuotaReserved", "Admitted"), True, True),  # admitted: the grow goes on
        (body(3, "QuotaReserved", "Admitted", active=False), False, True),
        (body(3, "QuotaReserved", "Admitted", "Evicted"), False, False),  # deleted, made again
        (body(3, "Finished"), False, False),
    ],
)  # fmt: skip
def test_growing_keeps_the_larger_workload_while_the_grow_waits(
    found: Json | None, admitted: bool, kept: bool
) -> None:
    stale = (found,) if found else ()
    names = tuple(b["metadata"]["name"] for b in stale)
    got, ok = elasticio.growing(SPEC, OWNER, quota(*names), held(*stale), 3)
    assert ok is admitted
    assert (name_at(3) not in got.stale) is kept
    assert (got.grow is None) is admitted
    if not admitted:
        assert got.grow_size == 3 and got.grow is not None and got.grow.name == name_at(3)
    acting = elasticio.matching(held(*stale), got)
    assert [b["metadata"]["name"] for b in acting.stale] == list(got.stale)
    assert acting.grow == (0 if admitted else 3)


def test_a_grow_waiting_for_quota_keeps_the_gang_and_queues_the_larger_workload() -> None:
    obs = replace(TRAINING, quota=quota(grow=Workload(name_at(3)), grow_size=3))
    d = lifecycle.decide(obs)
    assert d.phase is Phase.TRAINING
    assert d.actions == (Action.CREATE_GROW_WORKLOAD,)  # no STOP_TRAINING: it runs on
    running = next(c for c in d.conditions if c.type == "Running")
    assert (running.status, running.reason) == ("True", kueuejob.GROW_WAITS)
    assert f"a grow to 3 nodes waits for Kueue to admit Workload {name_at(3)}" in running.message


def test_a_queued_grow_is_made_once_and_says_kueues_reason() -> None:
    pending = Workload(name_at(3), Admission.PENDING, "Pending", "insufficient unused quota")
    d = lifecycle.decide(replace(TRAINING, quota=quota(grow=pending, grow_size=3)))
    assert d.actions == ()
    assert "insufficient unused quota" in d.message and "keeps its size" in d.message


def test_look_holds_the_grow_until_its_workload_is_admitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same pass that grows without Kueue keeps the size (and its record) under it."""
    monkeypatch.setattr(k8s, "list_nodes", lambda selector: [node(n) for n in "abc"])
    previous: Json = {"elastic": {"currentNodes": 2, "resizes": 1, "capacitySeenAt": at(0),
                                  "capacityCheckpointStep": 100}}  # fmt: skip
    reading = {"checkpointStep": 110, "observedAt": at(20)}
    running = Observed(training=Child.RUNNING, quota=quota())
    plain = elasticio.Sighting(running, None, at(20), progress=reading)
    assert elasticio.look(SPEC, previous, plain)[0].resize is not None  # no Held: as before
    for found, grows in ((None, False), (body(3), False),
                         (body(3, "QuotaReserved", "Admitted"), True)):  # fmt: skip
        stale = (found,) if found else ()
        names = tuple(b["metadata"]["name"] for b in stale)
        sight = replace(plain, observed=replace(running, quota=quota(*names)), owner=OWNER,
                        held=held(*stale))  # fmt: skip
        observed, new, _ = elasticio.look(SPEC, previous, sight)
        assert (observed.resize is not None) is grows
        assert new is not None and new["currentNodes"] == (3 if grows else 2)
        assert observed.quota is not None and name_at(3) not in observed.quota.stale
        assert (observed.quota.grow is None) is grows


# ---- Compile-aware admission, gated ---------------------------------------------------------

WAITER = Observed(storage_ready=True, policy="IfNotCached", cache_holder="other",
                  cache_holder_job="team-a/first")  # fmt: skip


def test_a_job_waiting_for_another_jobs_compile_queues_its_training_workload_gated() -> None:
    train = Workload(name_at(2))
    d = lifecycle.decide(replace(WAITER, quota=Quota("q", Workload("c"), train)))
    assert d.phase is Phase.WAITING_FOR_CACHE
    assert d.actions == (Action.CREATE_TRAINING_WORKLOAD,)
    assert "gated by kueue.x-k8s.io/admission-gated-by" in d.message
    queued = replace(train, state=Admission.PENDING, gated=True)
    again = lifecycle.decide(replace(WAITER, quota=Quota("q", Workload("c"), queued)))
    assert again.actions == ()  # made once; nothing to lift yet


def test_the_gate_is_lifted_once_the_graphs_are_ready() -> None:
    hit = Observed(storage_ready=True, policy="IfNotCached", cache_recorded=True,
                   previous_phase="WaitingForCache")  # fmt: skip
    queued = Workload(name_at(2), Admission.PENDING, "AdmissionGated", "gated", gated=True)
    d = lifecycle.decide(replace(hit, quota=Quota("q", Workload("c"), queued)))
    assert d.actions == (Action.UNGATE_TRAINING_WORKLOAD,)
    assert "lifting its compile gate" in d.message
    ungated = replace(queued, gated=False, reason="Pending", message="")
    assert lifecycle.decide(replace(hit, quota=Quota("q", Workload("c"), ungated))).actions == ()


def test_the_gate_on_the_workload_as_kueue_reads_it() -> None:
    built = workload.build_workload(SPEC, OWNER, "train", KUEUE, _vcjob(), gated=True)
    assert built["metadata"]["annotations"][workload.GATE_ANNOTATION] == workload.COMPILE_GATE
    assert workload.gated(built)
    assert not workload.gated(workload.build_workload(SPEC, OWNER, "train", KUEUE, _vcjob()))
    built["metadata"]["resourceVersion"] = "3"
    patch = workload.ungated(built)
    assert patch == {"metadata": {"resourceVersion": "3",
                                  "annotations": {workload.GATE_ANNOTATION: None}}}  # fmt: skip
    built["metadata"]["annotations"][workload.GATE_ANNOTATION] = (
        "example.com/x,trainium.dev/compile-cache"
    )
    kept = workload.ungated(built)["metadata"]["annotations"][workload.GATE_ANNOTATION]
    assert kept == "example.com/x"  # another's gate stays (Kueue allows removing, not adding)


def test_the_index_keeps_the_gate_and_the_message_names_it() -> None:
    built = workload.build_workload(SPEC, OWNER, "train", KUEUE, _vcjob(), gated=True)
    slim = reads.slim(Kind.WORKLOAD, built)
    assert workload.gated(slim)
    assert f"{workload.GATE_ANNOTATION}={workload.COMPILE_GATE}" == kueuejob.GATE  # drift


def _vcjob() -> Json:
    pod = {"spec": {"containers": [{"name": "c", "image": "i", "resources": {}}]}}
    return {"spec": {"tasks": [{"replicas": 2, "template": pod}]}}
