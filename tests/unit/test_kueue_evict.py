"""Kueue evicts a running job (issue 33): the gang stops, no retry is spent, the Workload is
requeued as Kueue's job framework requeues it, PodsReady follows the gang, and an elastic
resize's old Workload goes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from trainium_operator.domain import kueuejob, lifecycle
from trainium_operator.domain.kueuestate import Admission, Quota, Workload, workload_state
from trainium_operator.domain.lifecycle import Action, Child, Observed, Phase
from trainium_operator.manifests import workload

Json = dict[str, Any]
NOW = "2026-11-28T03:00:00Z"
SAID = "Preempted to accommodate a workload (UID: 1234) due to prioritization in the ClusterQueue"


def wl(state: Admission, reason: str = "", message: str = "", **kw: Any) -> Workload:
    return Workload("trainiumjob-bert-train", state, reason, message, **kw)


def kueue(train: Workload, pre: Workload | None = None, **kw: Any) -> Quota:
    return Quota("q", pre or Workload("trainiumjob-bert-compile"), train, **kw)


EVICTED = wl(Admission.EVICTED, "Preempted", SAID, reserved=True, pods_ready=("True", "Started"))
TRAINING = Observed(
    storage_ready=True, policy="Never", training=Child.RUNNING, restarts=2, disruptions=1,
    previous_phase="Training",
)  # fmt: skip


def running(decision: lifecycle.Decision) -> lifecycle.Condition:
    return next(c for c in decision.conditions if c.type == "Running")


def test_an_evicted_gang_stops_naming_kueues_reason_and_spends_no_retry() -> None:
    decision = lifecycle.decide(replace(TRAINING, quota=kueue(EVICTED)))
    assert decision.actions == (Action.STOP_TRAINING,)
    assert decision.phase is Phase.TRAINING and decision.restarts == 2  # nothing counted
    cond = running(decision)
    assert (cond.status, cond.reason) == ("False", "Preempted")
    assert SAID in cond.message and "checkpoint" in cond.message
    assert decision.blocker is not None and decision.blocker.reason == "Preempted"
    assert decision.blocker.warn  # the Warning Event naming Kueue's reason
    assert not any(c.type == "Failed" and c.status == "True" for c in decision.conditions)


@pytest.mark.parametrize("state", [Child.PENDING, Child.RESTARTING, Child.RUNNING])
def test_a_starting_gang_timed_out_by_kueue_stops_too(state: Child) -> None:
    timed_out = wl(Admission.EVICTED, "PodsReadyTimeout", "Exceeded the PodsReady timeout",
                   reserved=True)  # fmt: skip
    decision = lifecycle.decide(replace(TRAINING, training=state, quota=kueue(timed_out)))
    assert decision.actions == (Action.STOP_TRAINING,)
    assert running(decision).reason == "PodsReadyTimeout"


@pytest.mark.parametrize(
    ("train", "reason"),
    [
        (wl(Admission.PENDING, "Pending", "LocalQueue q is stopped"), "NotAdmitted"),
        (wl(Admission.ABSENT), "NoMatchingWorkload"),
    ],
)
def test_a_gang_without_admission_is_never_left_running(train: Workload, reason: str) -> None:
    decision = lifecycle.decide(replace(TRAINING, quota=kueue(train)))
    assert decision.actions == (Action.STOP_TRAINING,)
    assert running(decision).reason == reason


def test_an_evicted_precompile_stops_and_releases_nothing_else() -> None:
    pre = replace(EVICTED, name="trainiumjob-bert-compile")
    obs = Observed(storage_ready=True, policy="Always", precompile=Child.RUNNING,
                   cache_holder="self", quota=kueue(wl(Admission.ABSENT), pre))  # fmt: skip
    decision = lifecycle.decide(obs)
    assert decision.actions == (Action.STOP_PRECOMPILE,)
    cond = next(c for c in decision.conditions if c.type == "Precompiled")
    assert cond.reason == "Preempted"


def test_once_the_gang_is_gone_the_workload_is_requeued_not_restarted() -> None:
    obs = replace(TRAINING, training=Child.ABSENT, quota=kueue(EVICTED))
    decision = lifecycle.decide(obs)
    assert decision.actions == (Action.REQUEUE_TRAINING_WORKLOAD,)  # no CreateTraining
    assert decision.phase is Phase.PENDING and decision.restarts == 2
    assert running(decision).reason == "Preempted"  # the same reason: its Event is not repeated


def test_requeued_it_waits_then_runs_again_when_admitted() -> None:
    requeued = replace(EVICTED, reserved=False)
    waiting = lifecycle.decide(replace(TRAINING, training=Child.ABSENT, quota=kueue(requeued)))
    assert waiting.actions == (Action.READY_TRAINING_WORKLOAD,)  # PodsReady back to False
    assert kueuejob.pods_ready(requeued, Child.ABSENT) == ("False", "WaitForStart")
    assert running(waiting).reason == "WaitingForQuota" and SAID in waiting.message
    again = replace(TRAINING, training=Child.ABSENT, quota=kueue(wl(Admission.ADMITTED)))
    assert lifecycle.decide(again).actions == (Action.CREATE_TRAINING,)


def test_suspend_stops_once_and_a_finished_job_finishes_its_workload() -> None:
    suspended = lifecycle.decide(replace(TRAINING, suspend=True, quota=kueue(EVICTED)))
    assert suspended.actions == (Action.STOP_TRAINING, Action.DEACTIVATE_WORKLOADS)
    assert suspended.blocker is None  # stopped once, by the suspend: no preemption shown
    done = replace(TRAINING, training=Child.SUCCEEDED, quota=kueue(EVICTED))
    assert lifecycle.decide(done).actions == (Action.FINISH_TRAINING_WORKLOAD,)


def cond(kind: str, status: str, reason: str = "R", message: str = "") -> Json:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-11-28T02:00:00Z"}  # fmt: skip


def test_workload_state_reads_evicted_reservation_and_pods_ready() -> None:
    body = {"status": {"admission": {"clusterQueue": "cq"}, "conditions": [
        cond("QuotaReserved", "True"), cond("Admitted", "True"),
        cond("Evicted", "True", "Preempted", SAID), cond("PodsReady", "True", "Started"),
    ]}}  # fmt: skip
    got = workload_state("w", body)
    assert (got.state, got.reason, got.message) == (Admission.EVICTED, "Preempted", SAID)
    assert got.reserved and got.pods_ready == ("True", "Started")
    body["status"] = {"conditions": [cond("QuotaReserved", "False", "Pending"),
                                     cond("Evicted", "True", "Preempted", SAID)]}  # fmt: skip
    assert not workload_state("w", body).reserved
    again = [cond("Admitted", "True"), cond("Evicted", "False", "QuotaReserved")]
    readmitted = {"status": {"conditions": again}}
    assert workload_state("w", readmitted).state is Admission.ADMITTED


@pytest.mark.parametrize(
    ("state", "child", "seen", "want"),
    [
        (Admission.ADMITTED, Child.RUNNING, ("", ""), ("True", "Started")),
        (Admission.ADMITTED, Child.RUNNING, ("True", "Started"), None),
        (Admission.ADMITTED, Child.PENDING, ("", ""), None),  # absent reads as WaitForStart
        (Admission.ADMITTED, Child.RESTARTING, ("True", "Started"), ("False", "WaitForRecovery")),
        (Admission.ADMITTED, Child.RUNNING, ("False", "WaitForRecovery"), ("True", "Recovered")),
        (Admission.PENDING, Child.ABSENT, ("True", "Started"), ("False", "WaitForStart")),
        (Admission.EVICTED, Child.RUNNING, ("True", "Started"), None),  # the requeue first
        (Admission.ADMITTED, Child.SUCCEEDED, ("True", "Started"), None),  # Finished instead
        (Admission.FINISHED, Child.SUCCEEDED, ("True", "Started"), None),
    ],
)  # fmt: skip
def test_pods_ready_follows_the_gang_as_the_framework_derives_it(
    state: Admission, child: Child, seen: tuple[str, str], want: tuple[str, str] | None
) -> None:
    reserved = state is not Admission.PENDING
    assert kueuejob.pods_ready(wl(state, reserved=reserved, pods_ready=seen), child) == want


def test_the_running_gang_sets_pods_ready_on_its_workload() -> None:
    admitted = wl(Admission.ADMITTED, reserved=True)
    decision = lifecycle.decide(replace(TRAINING, quota=kueue(admitted)))
    assert decision.actions == (Action.READY_TRAINING_WORKLOAD,)


def evicted_body(reason: str = "Preempted", **status: Any) -> Json:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns", "uid": "u-1", "resourceVersion": "41",
                     "generation": 1, "labels": {"a": "b"}},
        "spec": {"queueName": "q"},
        "status": {
            "admission": {"clusterQueue": "cq", "podSetAssignments": []},
            "conditions": [
                cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
                cond("Admitted", "True", "Admitted", "The workload is admitted"),
                cond("Evicted", "True", reason, SAID),
                cond("PodsReady", "True", "Started"),
                cond("Ours", "True", "NotKueues"),
            ],
            **status,
        },
    }  # fmt: skip


def test_requeue_clears_the_admission_as_the_framework_applies_it() -> None:
    body = workload.requeued(evicted_body(schedulingStats={"evictions": [{"reason": "x"}]},
                                          requeueState={"count": 1}), NOW)  # fmt: skip
    assert body is not None
    assert body["metadata"] == {"name": "w", "namespace": "ns", "uid": "u-1",
                                "resourceVersion": "41"}  # fmt: skip
    status = body["status"]
    assert "admission" not in status  # omitted from kueue-admission's apply: removed
    conds = {c["type"]: c for c in status["conditions"]}
    assert set(conds) == {"QuotaReserved", "Admitted", "Evicted", "PodsReady", "Requeued"}
    assert (conds["QuotaReserved"]["status"], conds["QuotaReserved"]["reason"]) == (
        "False", "Pending")  # fmt: skip
    assert conds["QuotaReserved"]["message"] == SAID
    assert conds["QuotaReserved"]["lastTransitionTime"] == NOW
    assert (conds["Admitted"]["status"], conds["Admitted"]["reason"]) == ("False", "NoReservation")
    assert (conds["Requeued"]["status"], conds["Requeued"]["reason"]) == ("True", "Preempted")
    assert conds["Evicted"]["status"] == "True"  # Kueue resets it when it admits again
    assert status["requeueState"] == {"count": 1}
    assert status["schedulingStats"] == {"evictions": [{"reason": "x"}]}


def test_a_timeout_is_requeued_false_kueues_backoff_sets_it_later() -> None:
    body = workload.requeued(evicted_body("PodsReadyTimeout"), NOW)
    assert body is not None
    requeued = next(c for c in body["status"]["conditions"] if c["type"] == "Requeued")
    assert (requeued["status"], requeued["reason"]) == ("False", "PodsReadyTimeout")


def test_nothing_to_requeue_without_eviction_or_reservation() -> None:
    plain = evicted_body()
    plain["status"]["conditions"] = [c for c in plain["status"]["conditions"]
                                     if c["type"] != "Evicted"]  # fmt: skip
    assert workload.requeued(plain, NOW) is None
    done = evicted_body()
    done["status"].pop("admission")
    done["status"]["conditions"][0] = cond("QuotaReserved", "False", "Pending")
    assert workload.requeued(done, NOW) is None


def test_pods_ready_apply_carries_only_its_condition() -> None:
    body = workload.pods_ready(evicted_body(), ("True", "Started"), "ready", NOW)
    assert body["metadata"]["resourceVersion"] == "41"
    (only,) = body["status"]["conditions"]
    assert only["type"] == "PodsReady" and only["status"] == "True" and "admission" not in body


def test_an_elastic_resize_deletes_the_workload_of_the_old_size() -> None:
    admitted = wl(Admission.ADMITTED, reserved=True, pods_ready=("True", "Started"))
    obs = replace(TRAINING, quota=kueue(admitted, stale=("trainiumjob-bert-train-n4",)))
    assert lifecycle.decide(obs).actions == (Action.DELETE_STALE_WORKLOADS,)


ADMITTED = wl(Admission.ADMITTED, reserved=True, pods_ready=("True", "Started"))
DEACTIVATED = wl(Admission.EVICTED, "Deactivated", "The workload is deactivated", reserved=True,
                 active=False)  # fmt: skip
SUSPENDED = replace(TRAINING, suspend=True)


def test_a_suspend_deactivates_the_workloads_and_warns_of_no_preemption() -> None:
    decision = lifecycle.decide(replace(SUSPENDED, quota=kueue(ADMITTED)))
    assert decision.phase is Phase.SUSPENDED
    assert set(decision.actions) == {Action.STOP_TRAINING, Action.DEACTIVATE_WORKLOADS}
    assert decision.blocker is None and running(decision).reason == "Suspended"


@pytest.mark.parametrize("gang", [Child.RUNNING, Child.ABSENT])
def test_our_deactivations_eviction_is_no_preemption(gang: Child) -> None:
    """Kueue evicts the inactive Workload (reason Deactivated): still Suspended, no Warning,
    nothing deactivated twice; once the gang is gone the Workload is requeued (quota back)."""
    obs = replace(SUSPENDED, training=gang, quota=kueue(DEACTIVATED))
    decision = lifecycle.decide(obs)
    assert decision.phase is Phase.SUSPENDED and decision.blocker is None
    assert running(decision).reason == "Suspended" and decision.restarts == 2
    assert Action.DEACTIVATE_WORKLOADS not in decision.actions
    assert (Action.REQUEUE_TRAINING_WORKLOAD in decision.actions) is (gang is Child.ABSENT)


def test_a_resume_activates_the_workload_and_waits_for_admission_quietly() -> None:
    requeued = replace(DEACTIVATED, reserved=False)
    obs = replace(TRAINING, training=Child.ABSENT, previous_phase="Suspended",
                  quota=kueue(requeued))  # fmt: skip
    decision = lifecycle.decide(obs)
    assert decision.phase is Phase.PENDING
    assert decision.actions == (Action.ACTIVATE_WORKLOADS,)  # no gang before admission
    assert decision.blocker is not None and not decision.blocker.warn


def test_kueues_own_deactivation_stands() -> None:
    own = replace(DEACTIVATED, reason="DeactivatedDueToRequeuingLimitExceeded", reserved=False)
    obs = replace(TRAINING, training=Child.ABSENT, quota=kueue(own))
    assert Action.ACTIVATE_WORKLOADS not in lifecycle.decide(obs).actions


def test_spec_active_is_read() -> None:
    body: Json = {"spec": {"active": False}, "status": {}}
    assert not workload_state("w", body).active
    assert workload_state("w", {"spec": {}}).active


def test_a_resume_before_kueues_eviction_starts_the_gang_only_once_active() -> None:
    inactive = replace(ADMITTED, active=False)
    obs = replace(TRAINING, training=Child.ABSENT, previous_phase="Suspended")
    waiting = lifecycle.decide(replace(obs, quota=kueue(inactive)))
    assert Action.ACTIVATE_WORKLOADS in waiting.actions
    assert Action.CREATE_TRAINING not in waiting.actions  # not under a Workload Kueue may evict
    assert waiting.blocker is not None and not waiting.blocker.warn
    assert Action.CREATE_TRAINING in lifecycle.decide(replace(obs, quota=kueue(ADMITTED))).actions


def test_kueue_evicting_our_deactivation_after_a_resume_warns_of_nothing() -> None:
    raced = replace(DEACTIVATED, active=True)
    decision = lifecycle.decide(replace(TRAINING, quota=kueue(raced)))
    assert decision.actions == (Action.STOP_TRAINING,)  # stopped, then requeued as usual
    assert decision.blocker is not None and not decision.blocker.warn
