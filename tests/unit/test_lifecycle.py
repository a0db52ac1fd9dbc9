"""The pure lifecycle, table-driven: every observation gives one phase, conditions and actions."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from trainium_operator.domain.lifecycle import (
    CONDITION_TYPES,
    Action,
    Blocker,
    Child,
    Condition,
    Decision,
    Observed,
    Phase,
    decide,
    from_volcano,
    invalid,
)

CLAIM_MISSING = Blocker("ClaimNotFound", "PersistentVolumeClaim fsx-claim not found in team-a")
QUEUE_MISSING = Blocker("QueueNotFound", "Volcano queue test not found; create it first")


@dataclass(frozen=True)
class Case:
    id: str
    obs: Observed
    phase: Phase
    actions: tuple[Action, ...]
    #: condition type -> (status, reason) that must be present.
    conditions: dict[str, tuple[str, str]]
    hit: bool | None = None


CASES = [
    Case(
        "claim-not-found",
        Observed(storage_blocker=CLAIM_MISSING),
        Phase.PENDING,
        (),
        {"StorageReady": ("False", "ClaimNotFound"), "Validated": ("True", "SpecValid")},
        hit=False,
    ),
    Case(
        "fsx-volume-to-create",
        Observed(),
        Phase.PENDING,
        (Action.CREATE_STORAGE,),
        {"StorageReady": ("False", "Creating")},
        hit=False,
    ),
    Case(
        "queue-missing-before-precompile",
        Observed(storage_ready=True, queue_blocker=QUEUE_MISSING),
        Phase.PENDING,
        (),
        {"StorageReady": ("True", "StorageReady"), "Precompiled": ("False", "QueueNotFound")},
        hit=False,
    ),
    Case(
        "queue-missing-before-training",
        Observed(storage_ready=True, policy="Never", queue_blocker=QUEUE_MISSING),
        Phase.PENDING,
        (),
        {"Running": ("False", "QueueNotFound"), "Precompiled": ("False", "Skipped")},
        hit=None,
    ),
    Case(
        "if-not-cached-without-record-precompiles",
        Observed(storage_ready=True),
        Phase.PRECOMPILING,
        (Action.ACQUIRE_CACHE, Action.CREATE_PRECOMPILE),
        {"Precompiled": ("False", "Compiling"), "Running": ("False", "NotStarted")},
        hit=False,
    ),
    Case(
        "if-not-cached-with-record-skips",
        Observed(storage_ready=True, cache_recorded=True),
        Phase.PENDING,
        (Action.CREATE_TRAINING,),
        {"Precompiled": ("True", "CacheHit")},
        hit=True,
    ),
    Case(
        "always-without-record-precompiles",
        Observed(storage_ready=True, policy="Always"),
        Phase.PRECOMPILING,
        (Action.ACQUIRE_CACHE, Action.CREATE_PRECOMPILE),
        {"Precompiled": ("False", "Compiling")},
        hit=False,
    ),
    Case(
        "always-with-record-precompiles",
        Observed(storage_ready=True, policy="Always", cache_recorded=True),
        Phase.PRECOMPILING,
        (Action.ACQUIRE_CACHE, Action.CREATE_PRECOMPILE),
        {"Precompiled": ("False", "Compiling")},
        hit=False,
    ),
    Case(
        "never-without-record-trains",
        Observed(storage_ready=True, policy="Never"),
        Phase.PENDING,
        (Action.CREATE_TRAINING,),
        {"Precompiled": ("False", "Skipped")},
        hit=None,
    ),
    Case(
        "never-with-record-trains",
        Observed(storage_ready=True, policy="Never", cache_recorded=True),
        Phase.PENDING,
        (Action.CREATE_TRAINING,),
        {"Precompiled": ("False", "Skipped")},
        hit=None,
    ),
    Case(
        "precompile-pending",
        Observed(storage_ready=True, precompile=Child.PENDING),
        Phase.PRECOMPILING,
        (),
        {"Precompiled": ("False", "Compiling")},
        hit=False,
    ),
    Case(
        "precompile-running",
        Observed(storage_ready=True, precompile=Child.RUNNING),
        Phase.PRECOMPILING,
        (),
        {"Precompiled": ("False", "Compiling"), "Running": ("False", "NotStarted")},
        hit=False,
    ),
    Case(
        "precompile-restarting",
        Observed(storage_ready=True, precompile=Child.RESTARTING, restarts=1),
        Phase.PRECOMPILING,
        (),
        {"Precompiled": ("False", "Compiling")},
        hit=False,
    ),
    Case(
        "precompile-running-with-queue-gone",
        Observed(storage_ready=True, precompile=Child.RUNNING, queue_blocker=QUEUE_MISSING),
        Phase.PRECOMPILING,
        (),
        {"Precompiled": ("False", "Compiling")},
        hit=False,
    ),
    Case(
        "precompile-failed",
        Observed(storage_ready=True, precompile=Child.FAILED, precompile_message="graph 3 failed"),
        Phase.FAILED,
        (),
        {
            "Precompiled": ("False", "PrecompileFailed"),
            "Failed": ("True", "PrecompileFailed"),
            "Succeeded": ("False", "PrecompileFailed"),
        },
        hit=False,
    ),
    Case(
        "precompile-succeeded-records-then-trains",
        Observed(storage_ready=True, precompile=Child.SUCCEEDED, previous_phase="Precompiling"),
        Phase.TRAINING,
        (Action.RECORD_CACHE, Action.CREATE_TRAINING),
        {"Precompiled": ("True", "Compiled")},
        hit=False,
    ),
    Case(
        "precompile-succeeded-already-recorded",
        Observed(
            storage_ready=True,
            precompile=Child.SUCCEEDED,
            cache_recorded=True,
            previous_phase="Precompiling",
        ),
        Phase.TRAINING,
        (Action.CREATE_TRAINING,),
        {"Precompiled": ("True", "Compiled")},
        hit=False,
    ),
    Case(  # its echo pass came late: Precompiling is said before the training job is created
        "precompile-succeeded-before-any-status-said-it-ran",
        Observed(storage_ready=True, precompile=Child.SUCCEEDED),
        Phase.PRECOMPILING,
        (Action.RECORD_CACHE,),
        {"Precompiled": ("True", "Compiled"), "Running": ("False", "NotStarted")},
        hit=False,
    ),
    Case(
        "precompile-succeeded-while-the-status-said-pending",
        Observed(
            storage_ready=True,
            precompile=Child.SUCCEEDED,
            cache_recorded=True,
            previous_phase="Pending",
        ),
        Phase.PRECOMPILING,
        (),
        {"Precompiled": ("True", "Compiled")},
        hit=False,
    ),
    Case(  # a status that said the compile finished (Pending on a queue since) is not said again
        "precompile-succeeded-said-before",
        Observed(
            storage_ready=True,
            precompile=Child.SUCCEEDED,
            cache_recorded=True,
            previous_phase="Pending",
            previous_conditions=(Condition("Precompiled", "True", "Compiled", ""),),
        ),
        Phase.TRAINING,
        (Action.CREATE_TRAINING,),
        {"Precompiled": ("True", "Compiled")},
        hit=False,
    ),
    Case(
        "precompile-succeeded-queue-missing-still-records",
        Observed(storage_ready=True, precompile=Child.SUCCEEDED, queue_blocker=QUEUE_MISSING),
        Phase.PENDING,  # no training job exists, nor can one be created: not Training
        (Action.RECORD_CACHE,),
        {"Running": ("False", "QueueNotFound")},
        hit=False,
    ),
    Case(
        "training-pending",
        Observed(storage_ready=True, cache_recorded=True, training=Child.PENDING),
        Phase.TRAINING,
        (),
        {"Running": ("False", "GangPending"), "Precompiled": ("True", "CacheHit")},
        hit=True,
    ),
    Case(
        "training-running-after-compile",
        Observed(
            storage_ready=True,
            precompile=Child.SUCCEEDED,
            cache_recorded=True,
            training=Child.RUNNING,
        ),
        Phase.TRAINING,
        (),
        {"Running": ("True", "GangRunning"), "Precompiled": ("True", "Compiled")},
        hit=False,
    ),
    Case(
        "training-restarting",
        Observed(storage_ready=True, cache_recorded=True, training=Child.RESTARTING, restarts=2),
        Phase.TRAINING,
        (),
        {"Running": ("False", "Restarting")},
        hit=True,
    ),
    Case(
        "training-succeeded",
        Observed(storage_ready=True, cache_recorded=True, training=Child.SUCCEEDED),
        Phase.SUCCEEDED,
        (),
        {
            "Succeeded": ("True", "TrainingCompleted"),
            "Failed": ("False", "TrainingCompleted"),
            "Running": ("False", "Completed"),
        },
        hit=True,
    ),
    Case(
        "training-failed",
        Observed(
            storage_ready=True, cache_recorded=True, training=Child.FAILED, training_message="OOM"
        ),
        Phase.FAILED,
        (),
        {"Failed": ("True", "TrainingFailed"), "Running": ("False", "TrainingFailed")},
        hit=True,
    ),
    Case(
        "training-failed-unrecorded-precompile-still-records",
        Observed(storage_ready=True, precompile=Child.SUCCEEDED, training=Child.FAILED),
        Phase.FAILED,
        (Action.RECORD_CACHE,),
        {"Failed": ("True", "TrainingFailed")},
        hit=False,
    ),
    Case(
        "claim-deleted-after-the-gang-completed",  # kubectl wait must not hang on it
        Observed(storage_blocker=CLAIM_MISSING, cache_recorded=True, training=Child.SUCCEEDED),
        Phase.SUCCEEDED,
        (),
        {"Succeeded": ("True", "TrainingCompleted"), "StorageReady": ("False", "ClaimNotFound")},
        hit=True,
    ),
    Case(
        "claim-deleted-after-the-gang-failed",
        Observed(storage_blocker=CLAIM_MISSING, cache_recorded=True, training=Child.FAILED),
        Phase.FAILED,
        (),
        {"Failed": ("True", "TrainingFailed"), "StorageReady": ("False", "ClaimNotFound")},
        hit=True,
    ),
    Case(
        "fsx-claim-gone-after-the-gang-completed",  # nothing is created for a finished job
        Observed(cache_recorded=True, training=Child.SUCCEEDED),
        Phase.SUCCEEDED,
        (),
        {"Succeeded": ("True", "TrainingCompleted"), "StorageReady": ("False", "StorageGone")},
        hit=True,
    ),
    Case(
        "training-never-policy",
        Observed(storage_ready=True, policy="Never", training=Child.RUNNING),
        Phase.TRAINING,
        (),
        {"Precompiled": ("False", "Skipped"), "Running": ("True", "GangRunning")},
        hit=None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decide(case: Case) -> None:
    d = decide(case.obs)
    assert d.phase is case.phase
    assert d.actions == case.actions
    got = {c.type: (c.status, c.reason) for c in d.conditions}
    for ctype, expected in case.conditions.items():
        assert got.get(ctype) == expected, f"{ctype}: {got.get(ctype)}"
    assert d.cache_hit is case.hit
    assert d.restarts == case.obs.restarts


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_conditions_are_well_formed(case: Case) -> None:
    d = decide(case.obs)
    types = [c.type for c in d.conditions]
    assert len(types) == len(set(types)), types
    expected = set(CONDITION_TYPES)
    finished = case.obs.training in (Child.SUCCEEDED, Child.FAILED)
    if not case.obs.storage_ready and not finished:
        expected.discard("Precompiled")  # unknown until the volume is there
    assert set(types) == expected
    assert all(c.status in ("True", "False", "Unknown") for c in d.conditions)
    assert all(c.reason and c.reason[0].isupper() and " " not in c.reason for c in d.conditions)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_terminal_phase_matches_the_terminal_conditions(case: Case) -> None:
    d = decide(case.obs)
    status = {c.type: c.status for c in d.conditions}
    assert (status["Succeeded"] == "True") == (d.phase is Phase.SUCCEEDED)
    assert (status["Failed"] == "True") == (d.phase is Phase.FAILED)
    if d.phase in (Phase.SUCCEEDED, Phase.FAILED):
        assert Action.CREATE_TRAINING not in d.actions
        assert Action.CREATE_PRECOMPILE not in d.actions


def test_blockers_name_what_is_missing_in_the_message() -> None:
    assert decide(Observed(storage_blocker=CLAIM_MISSING)).message == CLAIM_MISSING.message
    d = decide(Observed(storage_ready=True, queue_blocker=QUEUE_MISSING))
    assert "queue test" in d.message
    assert any(c.reason == "QueueNotFound" and "test" in c.message for c in d.conditions)


def test_failure_messages_are_passed_on() -> None:
    d = decide(
        Observed(storage_ready=True, precompile=Child.FAILED, precompile_message="graph 3 failed")
    )
    assert d.message == "graph 3 failed"
    d = decide(Observed(storage_ready=True, precompile=Child.FAILED))
    assert d.message  # a default message, never empty


def test_invalid_spec_fails_without_actions() -> None:
    d: Decision = invalid(["spec.nodes: 0 is less than the minimum of 1"])
    assert d.phase is Phase.FAILED
    assert d.actions == ()
    got = {c.type: (c.status, c.reason) for c in d.conditions}
    assert got["Validated"] == ("False", "InvalidSpec")
    assert got["Failed"] == ("True", "InvalidSpec")
    assert "spec.nodes" in d.message


# --- Volcano phases ------------------------------------------------------------------------------

VOLCANO = {
    "Pending": Child.PENDING,
    "Running": Child.RUNNING,
    "Completing": Child.RUNNING,
    "Restarting": Child.RESTARTING,
    "Completed": Child.SUCCEEDED,
    "Failed": Child.FAILED,
    "Aborting": Child.ABORTED,
    "Aborted": Child.ABORTED,
    "Terminating": Child.TERMINATING,
    "Terminated": Child.FAILED,
}


@pytest.mark.parametrize(("phase", "child"), VOLCANO.items())
def test_from_volcano(phase: str, child: Child) -> None:
    assert from_volcano(phase) is child


@pytest.mark.parametrize("phase", [None, "", "SomethingNew"])
def test_unknown_or_missing_volcano_phase_is_pending(phase: str | None) -> None:
    assert from_volcano(phase) is Child.PENDING
