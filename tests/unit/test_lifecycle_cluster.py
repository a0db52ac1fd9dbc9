"""What a real cluster forces on the lifecycle: refusals, binding, resumable phases, no flaps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainium_operator.domain.lifecycle import (
    Action,
    Blocker,
    Child,
    Condition,
    Observed,
    Phase,
    Rejection,
    decide,
)

READY = Observed(storage_ready=True, cache_recorded=True)


def conds(obs: Observed) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in decide(obs).conditions}


# --- refusals are observations -------------------------------------------------------------


def test_a_webhook_refusal_of_the_training_job_fails_with_the_servers_message() -> None:
    msg = 'admission webhook "validatejob.volcano.sh" denied the request: queue q is Closed'
    obs = Observed(
        storage_ready=True,
        cache_recorded=True,
        rejections=(Rejection(Action.CREATE_TRAINING, 400, msg),),
    )
    d = decide(obs)
    assert d.phase is Phase.FAILED and d.actions == ()
    assert msg in d.message and "(400)" in d.message
    assert conds(obs)["Failed"] == ("True", "TrainingRejected")
    assert conds(obs)["Running"] == ("False", "TrainingRejected")


def test_pod_validation_refusal_of_precompile_fails_it() -> None:
    msg = "spec.tasks[0].template.spec.containers[0].resources.requests: Invalid value"
    obs = Observed(storage_ready=True, rejections=(Rejection(Action.CREATE_PRECOMPILE, 422, msg),))
    d = decide(obs)
    assert d.phase is Phase.FAILED
    assert conds(obs)["Precompiled"] == ("False", "PrecompileRejected")


@pytest.mark.parametrize(
    ("code", "message", "reason"),
    [
        (
            403,
            'persistentvolumeclaims "x" is forbidden: exceeded quota: q, requested',
            "QuotaExceeded",
        ),
        (403, "user cannot create resource", "Forbidden"),
        (404, "the server could not find the requested resource", "ApiNotFound"),
    ],
)
def test_quota_and_rbac_refusals_block_and_retry(code: int, message: str, reason: str) -> None:
    obs = Observed(rejections=(Rejection(Action.CREATE_STORAGE, code, message),))
    d = decide(obs)
    assert d.phase is Phase.PENDING and d.actions == ()
    assert d.blocker is not None and d.blocker.reason == reason and message in d.blocker.message
    assert conds(obs)["StorageReady"] == ("False", reason)
    assert conds(obs)["Failed"] == ("False", "InProgress")


def test_a_refused_cache_record_blocks_training_until_it_is_written() -> None:
    obs = Observed(
        storage_ready=True,
        precompile=Child.SUCCEEDED,
        rejections=(Rejection(Action.RECORD_CACHE, 403, "exceeded quota: configmaps"),),
        previous_phase="Precompiling",
    )
    d = decide(obs)
    assert d.actions == () and d.blocker is not None
    assert d.phase is Phase.TRAINING  # precompile is done: the phase does not move back


# --- a Ready entry that a live job compiles again (precompile.policy Always) -----------------


def test_a_ready_entry_being_compiled_again_is_waited_for_not_trusted() -> None:
    obs = Observed(
        storage_ready=True, cache_recorded=True, cache_holder="other", cache_holder_job="ns/again"
    )
    d = decide(obs)
    assert d.phase is Phase.WAITING_FOR_CACHE and d.actions == () and d.cache_hit is False
    assert "ns/again" in d.message
    free = decide(Observed(storage_ready=True, cache_recorded=True, cache_holder="none"))
    assert free.cache_hit is True and Action.CREATE_TRAINING in free.actions


def test_a_finished_compile_does_not_rerecord_an_entry_another_job_compiles_again() -> None:
    done = Observed(storage_ready=True, precompile=Child.SUCCEEDED, cache_recorded=True)
    assert Action.RECORD_CACHE not in decide(replace(done, cache_holder="other")).actions
    assert Action.RECORD_CACHE in decide(replace(done, cache_holder="self")).actions
    unrecorded = replace(done, cache_recorded=False, cache_holder="none")
    assert Action.RECORD_CACHE in decide(unrecorded).actions  # a lost record is written again


# --- storage: bound, not merely present ------------------------------------------------------


def test_a_pending_claim_is_storage_not_ready_with_its_reason() -> None:
    pending = Blocker("ClaimPending", "claim fsx-claim is Pending", warn=True)
    d = decide(Observed(storage_blocker=pending))
    assert d.phase is Phase.PENDING and d.actions == ()
    assert {c.type: c.reason for c in d.conditions}["StorageReady"] == "ClaimPending"


def test_a_released_volume_is_repaired_not_recreated() -> None:
    d = decide(Observed(storage_released=True))
    assert d.actions == (Action.REPAIR_STORAGE,)
    assert {c.type: c.reason for c in d.conditions}["StorageReady"] == "VolumeReleased"


# --- Volcano phases: resumable states and no flapping ----------------------------------------


@pytest.mark.parametrize("child", [Child.ABORTED, Child.TERMINATING])
def test_aborted_or_terminating_training_is_not_a_failure(child: Child) -> None:
    d = decide(Observed(storage_ready=True, cache_recorded=True, training=child))
    assert d.phase is Phase.TRAINING
    c = conds(Observed(storage_ready=True, cache_recorded=True, training=child))
    assert c["Failed"] == ("False", "InProgress") and c["Running"][0] == "False"


def test_aborted_precompile_is_not_a_failure() -> None:
    d = decide(Observed(storage_ready=True, precompile=Child.ABORTED))
    assert d.phase is Phase.PRECOMPILING and d.actions == ()
    assert "vcctl job resume" in d.message


def test_a_gang_restart_stays_in_training() -> None:
    """Volcano goes Restarting -> Pending -> Running: one visible phase, the reason moves."""
    seen = []
    previous = "Training"
    for child in (Child.RUNNING, Child.RESTARTING, Child.PENDING, Child.RUNNING):
        obs = Observed(
            storage_ready=True, cache_recorded=True, training=child, restarts=1,
            gang_retries=1, previous_phase=previous,
        )  # fmt: skip
        d = decide(obs)
        seen.append((d.phase, conds(obs)["Running"][1]))
        previous = d.phase.value
    assert [p for p, _ in seen] == [Phase.TRAINING] * 4
    assert [r for _, r in seen] == ["GangRunning", "Restarting", "Restarting", "GangRunning"]


def test_a_recreated_gang_pending_is_not_restarting() -> None:
    """After suspend/resume the new Volcano job (retryCount 0) waits to start, restarts kept."""
    obs = Observed(storage_ready=True, cache_recorded=True, training=Child.PENDING, restarts=2)
    assert conds(obs)["Running"][1] == "GangPending"
    assert decide(obs).restarts == 2


@pytest.mark.parametrize("previous", ["Precompiling", "Training"])
def test_the_phase_never_moves_back_while_a_stage_job_lives(previous: str) -> None:
    claim = Blocker("ClaimNotFound", "claim gone")
    live = Child.RUNNING if previous == "Precompiling" else Child.ABSENT
    training = Child.RUNNING if previous == "Training" else Child.ABSENT
    obs = Observed(storage_blocker=claim, precompile=live, training=training,
                   cache_holder="self", previous_phase=previous)  # fmt: skip
    assert decide(obs).phase is Phase(previous)
    # With nothing alive, a missing prerequisite is Pending: no later phase is true (issue 21).
    idle = Observed(storage_ready=True, queue_blocker=Blocker("QueueNotFound", "queue gone"),
                    previous_phase=previous)  # fmt: skip
    assert decide(idle).phase is Phase.PENDING


def test_after_precompile_the_job_goes_to_training_not_back_to_pending() -> None:
    d = decide(Observed(storage_ready=True, precompile=Child.SUCCEEDED, cache_recorded=True,
                        previous_phase="Precompiling"))  # fmt: skip
    assert d.phase is Phase.TRAINING and d.actions == (Action.CREATE_TRAINING,)


def test_terminal_phases_are_not_held_back_by_the_guard() -> None:
    obs = Observed(storage_ready=True, cache_recorded=True, training=Child.FAILED)
    assert decide(obs).phase is Phase.FAILED


# --- suspend and deadlines ------------------------------------------------------------------


def test_suspend_stops_the_live_stage_jobs_and_keeps_state() -> None:
    obs = Observed(storage_ready=True, cache_recorded=True, training=Child.RUNNING, suspend=True)
    d = decide(obs)
    assert d.phase is Phase.SUSPENDED and d.actions == (Action.STOP_TRAINING,)
    assert conds(obs)["Running"] == ("False", "Suspended")
    assert conds(obs)["Failed"] == ("False", "InProgress")


def test_a_job_created_suspended_starts_nothing() -> None:
    d = decide(Observed(suspend=True))
    assert d.phase is Phase.SUSPENDED and d.actions == ()


def test_suspend_mid_precompile_stops_it_and_resume_compiles_again() -> None:
    obs = Observed(storage_ready=True, precompile=Child.RUNNING, cache_holder="self", suspend=True)
    assert decide(obs).actions == (Action.STOP_PRECOMPILE,)
    resumed = decide(Observed(storage_ready=True, previous_phase="Suspended"))
    assert resumed.actions == (Action.ACQUIRE_CACHE, Action.CREATE_PRECOMPILE)


def test_resume_after_precompile_recreates_training() -> None:
    d = decide(Observed(storage_ready=True, precompile=Child.SUCCEEDED, cache_recorded=True,
                        previous_phase="Suspended"))  # fmt: skip
    assert d.phase is Phase.TRAINING and d.actions == (Action.CREATE_TRAINING,)


OOM_FAILED = (
    Condition("Validated", "True", "SpecValid", "spec accepted"),
    Condition("Running", "False", "OOMKilled", "pod p: OOMKilled (exit 137)"),
    Condition("Succeeded", "False", "OOMKilled", "pod p: OOMKilled (exit 137)"),
    Condition("Failed", "True", "OOMKilled", "pod p: OOMKilled (exit 137)"),
)
SUCCEEDED = (
    Condition("Validated", "True", "SpecValid", "spec accepted"),
    Condition("Running", "False", "Completed", "training job completed"),
    Condition("Succeeded", "True", "TrainingCompleted", "training completed"),
    Condition("Failed", "False", "TrainingCompleted", ""),
)


@pytest.mark.parametrize("suspend", [True, False])
def test_a_failed_job_ignores_suspend_and_resume_and_never_runs_again(suspend: bool) -> None:
    """Its gang was stopped (OOM): a suspend/resume must not pay for a second run."""
    obs = Observed(storage_ready=True, cache_recorded=True, previous_phase="Failed",
                   previous_conditions=OOM_FAILED, suspend=suspend)  # fmt: skip
    d = decide(obs)
    assert d.phase is Phase.FAILED and d.actions == ()
    assert conds(obs)["Failed"] == ("True", "OOMKilled")
    assert conds(obs)["Running"] == ("False", "OOMKilled")
    if suspend:
        assert conds(obs)["Suspended"] == ("False", "JobFinished")
        said = next(c for c in d.conditions if c.type == "Suspended").message
        assert "runPolicy.suspend is ignored" in said and "Failed" in said
    else:
        assert "Suspended" not in conds(obs)


def test_a_succeeded_job_ignores_suspend() -> None:
    obs = Observed(
        storage_ready=True, cache_recorded=True, training=Child.SUCCEEDED,
        previous_phase="Succeeded", previous_conditions=SUCCEEDED, suspend=True,
    )  # fmt: skip
    d = decide(obs)
    assert d.phase is Phase.SUCCEEDED and d.actions == ()
    assert conds(obs)["Succeeded"] == ("True", "TrainingCompleted")
    assert conds(obs)["Suspended"] == ("False", "JobFinished")


def test_a_job_that_failed_validation_runs_once_its_spec_is_fixed() -> None:
    invalid = (Condition("Validated", "False", "InvalidSpec", "bad"),
               Condition("Failed", "True", "InvalidSpec", "bad"))  # fmt: skip
    d = decide(Observed(previous_phase="Failed", previous_conditions=invalid))
    assert d.phase is Phase.PENDING and d.actions == (Action.CREATE_STORAGE,)


def test_a_passed_deadline_fails_and_stops_what_runs() -> None:
    obs = Observed(
        storage_ready=True, precompile=Child.SUCCEEDED, cache_recorded=True,
        training=Child.RUNNING, deadline_exceeded=True,
    )  # fmt: skip
    d = decide(obs)
    assert d.phase is Phase.FAILED and d.actions == (Action.STOP_TRAINING,)
    assert conds(obs)["Failed"] == ("True", "DeadlineExceeded")


def test_a_changed_graph_field_holds_the_job_and_names_the_field() -> None:
    obs = Observed(storage_ready=True, precompile=Child.SUCCEEDED, changed_fields=("nodes",))
    d = decide(obs)
    assert d.actions == ()  # no training created, no cache record for other graphs
    assert d.blocker is not None and "spec.nodes" in d.blocker.message
    assert conds(obs)["Validated"] == ("False", "ImmutableFieldChanged")


def test_an_unschedulable_gang_past_its_deadline_fails_and_is_stopped() -> None:
    from trainium_operator.domain.failures import make_failure

    stuck = make_failure("Unschedulable", "pod x cannot be scheduled: 4 Insufficient neuron")
    obs = Observed(storage_ready=True, cache_recorded=True, training=Child.PENDING, failure=stuck)
    d = decide(obs)
    assert d.phase is Phase.FAILED and d.actions == (Action.STOP_TRAINING,)
    assert conds(obs)["Failed"] == ("True", "Unschedulable") and "Insufficient" in d.message


# --- admission: a missing PriorityClass, pods Volcano cannot create --------------------------

NO_CLASS = Blocker("PriorityClassNotFound", "PriorityClass 'high' does not exist")
NOT_CREATED = Blocker("FailedCreate", "Volcano cannot create the pods of j-train (FailedCreate)")


def test_a_missing_priority_class_holds_the_training_job_back() -> None:
    obs = replace(READY, policy="Never", queue_blocker=NO_CLASS)
    d = decide(obs)
    assert d.phase is Phase.PENDING and d.actions == () and d.blocker == NO_CLASS
    assert conds(obs)["Running"] == ("False", "PriorityClassNotFound")
    assert conds(obs)["Failed"] == ("False", "InProgress")


def test_a_missing_priority_class_holds_the_precompile_job_back() -> None:
    obs = Observed(storage_ready=True, queue_blocker=NO_CLASS)
    d = decide(obs)
    assert d.actions == () and d.blocker == NO_CLASS
    assert conds(obs)["Precompiled"] == ("False", "PriorityClassNotFound")


def test_pods_volcano_cannot_create_are_a_condition_not_gang_pending() -> None:
    obs = replace(READY, training=Child.PENDING, gang_blocker=NOT_CREATED)
    d = decide(obs)
    assert d.phase is Phase.TRAINING and d.actions == () and d.blocker == NOT_CREATED
    assert conds(obs)["Running"] == ("False", "FailedCreate")
    assert conds(obs)["Failed"] == ("False", "InProgress")


def test_a_precompile_gang_without_pods_says_so() -> None:
    obs = Observed(storage_ready=True, precompile=Child.PENDING, cache_holder="self",
                   gang_blocker=NOT_CREATED)  # fmt: skip
    d = decide(obs)
    assert d.phase is Phase.PRECOMPILING and d.blocker == NOT_CREATED
    assert conds(obs)["Precompiled"] == ("False", "FailedCreate")


def test_a_running_gang_ignores_an_old_failed_create() -> None:
    obs = replace(READY, training=Child.RUNNING, gang_blocker=NOT_CREATED)
    assert conds(obs)["Running"] == ("True", "GangRunning")
    assert decide(obs).blocker is None


@pytest.mark.parametrize("previous", ["Precompiling", "Training"])
def test_a_queue_deleted_after_the_compile_is_pending_not_training(previous: str) -> None:
    """No training job exists: the phase must not say Training (issue 21)."""
    gone = Blocker("QueueNotFound", "Volcano queue q not found")
    obs = Observed(storage_ready=True, precompile=Child.SUCCEEDED, cache_recorded=True,
                   queue_blocker=gone, previous_phase=previous)  # fmt: skip
    d = decide(obs)
    assert d.phase is Phase.PENDING and d.actions == () and d.blocker == gone
    assert conds(obs)["Running"] == ("False", "QueueNotFound")
    assert conds(obs)["Precompiled"][0] == "True"
    said = decide(obs).conditions  # the Pending status says the compile finished
    back = decide(replace(obs, queue_blocker=None, previous_phase="Pending",
                          previous_conditions=said))  # fmt: skip
    assert back.phase is Phase.TRAINING and back.actions == (Action.CREATE_TRAINING,)


def test_a_missing_queue_does_not_move_a_live_gang_back() -> None:
    gone = Blocker("QueueNotFound", "Volcano queue q not found")
    obs = Observed(storage_ready=True, precompile=Child.RUNNING, cache_holder="self",
                   queue_blocker=gone, previous_phase="Precompiling")  # fmt: skip
    assert decide(obs).phase is Phase.PRECOMPILING


# --- the operator recreates a gang itself (a bad node, a hang) ----------------------------------


@pytest.mark.parametrize("state", [Child.RUNNING, Child.PENDING, Child.RESTARTING])
def test_a_gang_to_replace_is_stopped_and_the_job_keeps_training(state: Child) -> None:
    from trainium_operator.domain.failures import make_failure

    why = make_failure("PreflightFailed", "pod p container preflight (exit 4): preflight failed")
    obs = replace(READY, training=state, failure=why, replace_gang=True)
    d = decide(obs)
    assert d.phase is Phase.TRAINING and d.actions == (Action.STOP_TRAINING,)
    assert conds(obs)["Running"] == ("False", "Restarting")
    assert "PreflightFailed" in d.message and "preflight failed" in d.message


def test_once_stopped_the_gang_is_created_again() -> None:
    obs = replace(READY, training=Child.ABSENT, precompile=Child.SUCCEEDED)
    obs = replace(obs, previous_phase="Training")
    assert decide(obs).actions == (Action.CREATE_TRAINING,)
