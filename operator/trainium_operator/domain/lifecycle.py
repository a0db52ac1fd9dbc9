"""The pure lifecycle: (what was observed) -> phase, conditions and the next actions.

Both backends use it: the operator observes Kubernetes children, the local runner observes TorchX
local apps and folders. Nothing here does I/O, so every path is a table-driven unit test. Its
vocabulary (phases, child states, actions, Observed, Decision) lives in model.py.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from trainium_operator.domain import cachestate, kueuejob, quota, verdicts
from trainium_operator.domain.model import (
    _PHASES,
    _RANK,
    _WHAT,
    CONDITION_TYPES,
    FAILURE_REASONS,
    PERMANENT_CODES,
    TERMINAL,
    VOLCANO_PHASES,
    Action,
    Blocker,
    Child,
    Condition,
    Decision,
    Observed,
    Phase,
    Rejection,
    from_volcano,
)

__all__ = [
    "CONDITION_TYPES",
    "FAILURE_REASONS",
    "PERMANENT_CODES",
    "TERMINAL",
    "VOLCANO_PHASES",
    "Action",
    "Blocker",
    "Child",
    "Condition",
    "Decision",
    "Observed",
    "Phase",
    "Rejection",
    "decide",
    "from_volcano",
    "invalid",
    "ttl_remaining",
]


def invalid(problems: list[str]) -> Decision:
    """A spec the schema rejects: Failed, nothing created."""
    message = "; ".join(problems)
    return Decision(
        phase=Phase.FAILED,
        message=message,
        conditions=(
            Condition("Validated", "False", "InvalidSpec", message),
            Condition("Failed", "True", "InvalidSpec", message),
        ),
    )


def decide(obs: Observed) -> Decision:
    """Derive phase, conditions and actions from one observation; the phase never moves back."""
    if _finished(obs):
        return quota.finished(_stays_finished(obs), obs)
    decision = kueuejob.gate(_decide(obs), obs)
    if obs.changed_fields:
        decision = _hold(decision, obs.changed_fields)
    before = _RANK.get(Phase(obs.previous_phase)) if obs.previous_phase in _PHASES else None
    now = _RANK.get(decision.phase)
    if before is not None and now is not None and before > now and not _idle_blocked(decision, obs):
        return replace(decision, phase=Phase(obs.previous_phase))
    return decision


def is_final(status: Mapping[str, Any]) -> bool:
    """A status that no spec change runs again: finished after the job was admitted."""
    if status.get("phase") not in {p.value for p in TERMINAL}:
        return False
    conditions = status.get("conditions") or []
    return not any(isinstance(c, Mapping) and c.get("reason") == "InvalidSpec" for c in conditions)


def _finished(obs: Observed) -> bool:
    """Succeeded or Failed after it was admitted: final (a fixed invalid spec may still run)."""
    if obs.previous_phase not in {p.value for p in TERMINAL}:
        return False
    return not any(c.reason == "InvalidSpec" for c in obs.previous_conditions)


def _stays_finished(obs: Observed) -> Decision:
    """A finished job keeps its outcome: a spec change (suspend, resume) never runs it again."""
    phase = Phase(obs.previous_phase)
    conds = [c for c in obs.previous_conditions if c.type != "Suspended"]
    ended = next((c for c in conds if c.type == phase.value and c.status == "True"), None)
    message = ended.message if ended and ended.message else f"the job {phase.value}"
    if obs.suspend:
        msg = (
            f"runPolicy.suspend is ignored: the job already {phase.value}; nothing is stopped "
            "or run again (create a new TrainiumJob to run it again)"
        )
        conds.append(Condition("Suspended", "False", "JobFinished", msg))
    return Decision(phase, message, tuple(conds), (), cachestate.cache_hit(obs), obs.restarts)


def _idle_blocked(decision: Decision, obs: Observed) -> bool:
    """Pending on a missing prerequisite with no stage job alive: no later phase is true."""
    return (
        decision.phase is Phase.PENDING
        and decision.blocker is not None
        and obs.training is Child.ABSENT
        and obs.precompile not in verdicts.LIVE
    )


def _hold(decision: Decision, fields: tuple[str, ...]) -> Decision:
    """A graph-defining field changed on a live job: act on nothing, record nothing, say so."""
    names = ", ".join(f"spec.{f}" for f in fields)
    names = names if len(fields) == 1 else f"one or more of {names}"
    msg = (
        f"{names} changed after the job started: graph-defining fields are immutable (the CRD's "
        "rules refuse this where the API server enforces them); the job goes on with what it "
        "started with; revert the change or create a new TrainiumJob"
    )
    refused = Condition("Validated", "False", "ImmutableFieldChanged", msg)
    conds = tuple(refused if c.type == "Validated" else c for c in decision.conditions)
    blocker = Blocker("ImmutableFieldChanged", msg)
    return replace(decision, conditions=conds, actions=(), blocker=blocker, message=msg)


def _decide(obs: Observed) -> Decision:
    conds = [Condition("Validated", "True", "SpecValid", "spec accepted")]
    hit = cachestate.cache_hit(obs)
    if obs.deadline_exceeded or obs.suspend:
        return _stopped(obs, conds, hit)
    if not obs.storage_ready and obs.training in (Child.SUCCEEDED, Child.FAILED):
        conds.append(_storage_gone(obs))  # the finished gang decides; the claim is reported
    else:
        storage = _storage(obs, conds, hit)
        if storage is not None:
            return storage
        conds.append(Condition("StorageReady", "True", "StorageReady", "claim bound to its volume"))
    decision = _after_storage(obs, conds, hit)
    if obs.precompile is Child.SUCCEEDED and (not obs.cache_recorded or obs.cache_holder == "self"):
        rejection = obs.rejected(Action.RECORD_CACHE)
        if rejection is not None:
            return _refused(decision, rejection, "Precompiled", obs)
        # Record before anything else: a crash after training starts must not lose the entry.
        return replace(decision, actions=(Action.RECORD_CACHE, *decision.actions))
    return decision


def _storage_gone(obs: Observed) -> Condition:
    """The claim went after the training gang finished (deleted with its pods): say so only."""
    after = "after training finished; its outcome stands"
    if obs.storage_blocker:
        reason, msg = verdicts.said(obs.storage_blocker)
        return Condition("StorageReady", "False", reason, f"{msg.split(';')[0]} {after}")
    return Condition("StorageReady", "False", "StorageGone", f"the job's claim is gone {after}")


def _storage(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision | None:
    """The storage part: None when the claim is bound, else the decision that waits or acts."""
    if obs.storage_ready:
        return None
    for action in (Action.CREATE_STORAGE, Action.REPAIR_STORAGE):
        if (rejection := obs.rejected(action)) is not None:
            waiting = verdicts.pending(list(conds), None, (), hit, obs)
            return _refused(waiting, rejection, "StorageReady", obs)
    if obs.storage_released:
        msg = "PersistentVolume is Released with a stale claimRef; clearing it for the new claim"
        conds.append(Condition("StorageReady", "False", "VolumeReleased", msg))
        return verdicts.pending(conds, None, (Action.REPAIR_STORAGE,), hit, obs)
    if obs.storage_blocker:
        conds.append(Condition("StorageReady", "False", *verdicts.said(obs.storage_blocker)))
        return verdicts.pending(conds, obs.storage_blocker, (), hit, obs)
    conds.append(Condition("StorageReady", "False", "Creating", "creating the FSx volume"))
    return verdicts.pending(conds, None, (Action.CREATE_STORAGE,), hit, obs)


def _stop_actions(obs: Observed) -> tuple[Action, ...]:
    """Delete the stage jobs still alive; a finished precompile stays (its graphs count)."""
    out = []
    if obs.precompile in verdicts.LIVE:
        out.append(Action.STOP_PRECOMPILE)
    if obs.training in verdicts.LIVE:
        out.append(Action.STOP_TRAINING)
    return tuple(out)


def _stopped(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision:
    """Deadline passed: fail and stop. Suspended: stop, keep state, resume when unset."""
    stop = _stop_actions(obs)
    if obs.deadline_exceeded:
        msg = "runPolicy.activeDeadlineSeconds passed; the job's Volcano jobs were stopped"
        conds.append(Condition("Running", "False", "DeadlineExceeded", msg))
        return replace(verdicts.failed(conds, "DeadlineExceeded", msg, hit, obs), actions=stop)
    msg = (
        "suspended (runPolicy.suspend): its Volcano jobs are removed, checkpoints and the "
        "compile cache stay; set suspend to false to resume"
    )
    conds.append(Condition("Running", "False", "Suspended", msg))
    return Decision(
        Phase.SUSPENDED, msg, verdicts.close(conds, running=None), stop, hit, obs.restarts
    )


def _refused(decision: Decision, rejection: Rejection, ctype: str, obs: Observed) -> Decision:
    """Map a refused action: an invalid object fails the job, a quota or RBAC refusal waits."""
    what = _WHAT[rejection.action]
    message = f"the API server refused {what} ({rejection.code}): {rejection.message}"
    reason = rejection.reason
    conds = [c for c in decision.conditions if c.type not in (ctype, "Succeeded", "Failed")]
    conds.append(Condition(ctype, "False", reason, message))
    if rejection.permanent:
        return verdicts.failed(conds, reason, message, decision.cache_hit, obs)
    blocker = Blocker(reason, message + "; retrying with backoff")
    return replace(
        decision,
        message=blocker.message,
        conditions=verdicts.close(conds, running=None),
        actions=(),
        blocker=blocker,
        again=False,  # waits with backoff: nothing follows at once
    )


def _after_storage(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision:
    if obs.training is not Child.ABSENT:
        conds.append(cachestate.precompiled_condition(obs, hit))
        return _training(obs, conds, hit)
    if cachestate.needs_precompile(obs):
        return _precompiling(obs, conds, hit)
    conds.append(cachestate.precompiled_condition(obs, hit))
    if held := obs.queue_blocker or obs.training_blocker:
        return verdicts.pending(conds, held, (), hit, obs)
    if (rejection := obs.rejected(Action.CREATE_TRAINING)) is not None:
        return _refused(verdicts.pending(conds, None, (), hit, obs), rejection, "Running", obs)
    if cachestate.compile_unreported(obs):
        msg = "precompile job completed; the training job is created next"
        return Decision(
            Phase.PRECOMPILING, msg, verdicts.close(conds, running=False), (), hit, obs.restarts,
            again=True,
        )  # fmt: skip
    return verdicts.pending(conds, None, (Action.CREATE_TRAINING,), hit, obs)


def _precompiling(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision:
    failed = _precompile_failed(obs, conds, hit)
    if failed is not None:
        return failed
    if obs.precompile is Child.ABSENT and obs.cache_holder == "other":
        return _waiting_for_cache(obs, conds, hit)
    held = obs.queue_blocker or obs.precompile_blocker
    if obs.precompile is Child.ABSENT and held:
        conds.append(Condition("Precompiled", "False", *verdicts.said(held)))
        return verdicts.pending(conds, held, (), hit, obs)
    reason, msg, stuck = _compile_wait(obs)
    conds.append(Condition("Precompiled", "False", reason, msg))
    actions: tuple[Action, ...] = ()
    if obs.precompile is Child.ABSENT:
        take = () if obs.cache_holder == "self" else (Action.ACQUIRE_CACHE,)
        actions = (*take, Action.CREATE_PRECOMPILE)
    decision = Decision(
        phase=Phase.PRECOMPILING,
        message="filling the Neuron compile cache" if reason == "Compiling" else msg,
        conditions=verdicts.close(conds, running=False),
        actions=actions,
        cache_hit=hit,
        restarts=obs.restarts,
        blocker=stuck,
    )
    for action in (Action.ACQUIRE_CACHE, Action.CREATE_PRECOMPILE):
        if (rejection := obs.rejected(action)) is not None:
            return _refused(decision, rejection, "Precompiled", obs)
    return decision


def _precompile_failed(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision | None:
    """The precompile stage ended badly: Failed, and the entry marked Failed if it is ours."""
    end = verdicts.ends(
        obs, obs.precompile, "PrecompileFailed", obs.precompile_message, "precompile"
    )
    if end is None:
        return None
    reason, msg, stop_now = end
    conds.append(Condition("Precompiled", "False", reason, msg))
    failed = verdicts.failed(conds, reason, msg, hit, obs)
    stop = (Action.STOP_PRECOMPILE,) if stop_now else ()
    if obs.cache_holder == "self":  # the entry says Failed; the next job retries once
        return replace(failed, actions=(*stop, Action.RECORD_CACHE_FAILED))
    return replace(failed, actions=stop)


def _compile_wait(obs: Observed) -> tuple[str, str, Blocker | None]:
    """What the precompile stage waits on now: (reason, message, a stuck gang's blocker)."""
    reason, msg = verdicts.STAGE_WAIT.get(
        obs.precompile, ("Compiling", "neuron_parallel_compile running")
    )
    if obs.precompile is Child.PENDING and obs.placement:
        reason, msg = "GangPending", verdicts.gang_pending("precompile", obs)
    stuck = obs.gang_blocker if obs.precompile is Child.PENDING else None
    if stuck is not None:
        reason, msg = verdicts.said(stuck)
    return reason, msg, stuck


def _waiting_for_cache(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision:
    """One writer per entry: follow the job compiling the same graphs instead of competing."""
    msg = (
        f"job {obs.cache_holder_job} is compiling the same graphs into this cache; "
        "training starts when they are Ready"
    )
    conds.append(Condition("Precompiled", "False", "WaitingForCache", msg))
    return Decision(
        Phase.WAITING_FOR_CACHE, msg, verdicts.close(conds, running=False), (), hit, obs.restarts
    )


def _training(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision:
    state = obs.training
    if state is Child.SUCCEEDED:
        conds.append(Condition("Running", "False", "Completed", "training job completed"))
        conds.append(Condition("Succeeded", "True", "TrainingCompleted", "training completed"))
        conds.append(Condition("Failed", "False", "TrainingCompleted", ""))
        return Decision(Phase.SUCCEEDED, "training completed", tuple(conds), (), hit, obs.restarts)
    end = verdicts.ends(obs, state, "TrainingFailed", obs.training_message, "training")
    if end is not None:
        reason, msg, stop_now = end
        conds.append(Condition("Running", "False", reason, msg))
        stop = (Action.STOP_TRAINING,) if stop_now else ()
        return replace(verdicts.failed(conds, reason, msg, hit, obs), actions=stop)
    if obs.resize is not None and state in verdicts.LIVE:
        msg = f"resizing the training gang {obs.resize.message}"
        conds.append(Condition("Running", "False", "Resizing", msg))
        stop = (Action.STOP_TRAINING,)
        return Decision(
            Phase.TRAINING, msg, verdicts.close(conds, running=None), stop, hit, obs.restarts
        )
    if obs.replace_gang and state in verdicts.LIVE:
        why = obs.failure.reason if obs.failure else "Unknown"
        detail = f": {obs.failure.message}" if obs.failure else ""
        msg = f"recreating the training gang ({why}){detail}"
        conds.append(Condition("Running", "False", "Restarting", msg))
        stop = (Action.STOP_TRAINING,)
        return Decision(
            Phase.TRAINING, msg, verdicts.close(conds, running=None), stop, hit, obs.restarts
        )
    status, reason, msg = verdicts.running(obs)
    conds.append(Condition("Running", status, reason, msg))
    stuck = obs.gang_blocker if state is Child.PENDING else None
    conditions = verdicts.close(conds, running=None)
    return Decision(Phase.TRAINING, msg, conditions, (), hit, obs.restarts, stuck)


def ttl_remaining(
    completion_time: str | None, ttl: int | None, now: datetime.datetime
) -> float | None:
    """Seconds until a finished job may be deleted (ttlSecondsAfterFinished); None without TTL."""
    if ttl is None or not completion_time:
        return None
    done = datetime.datetime.strptime(completion_time, "%Y-%m-%dT%H:%M:%SZ")
    expiry = done.replace(tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=ttl)
    return (expiry - now).total_seconds()
