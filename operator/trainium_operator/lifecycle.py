"""The pure lifecycle: (what was observed) -> phase, conditions and the next actions.

Both backends use it: the operator observes Kubernetes children, the local runner observes TorchX
local apps and folders. Nothing here does I/O, so every path is a table-driven unit test.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass, replace


class Phase(str, enum.Enum):
    """TrainiumJob status.phase values."""

    PENDING = "Pending"
    PRECOMPILING = "Precompiling"
    TRAINING = "Training"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


TERMINAL = (Phase.SUCCEEDED, Phase.FAILED)


class Child(str, enum.Enum):
    """State of a stage job, whatever backend runs it."""

    ABSENT = "Absent"
    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


#: Volcano Job status.state.phase -> Child (unknown phases count as pending).
VOLCANO_PHASES = {
    "Pending": Child.PENDING,
    "Running": Child.RUNNING,
    "Completing": Child.RUNNING,
    "Restarting": Child.RESTARTING,
    "Completed": Child.SUCCEEDED,
    "Failed": Child.FAILED,
    "Aborting": Child.FAILED,
    "Aborted": Child.FAILED,
    "Terminating": Child.FAILED,
    "Terminated": Child.FAILED,
}


def from_volcano(phase: str | None) -> Child:
    """Map a Volcano job phase; a job without status yet is pending."""
    return VOLCANO_PHASES.get(phase or "Pending", Child.PENDING)


class Action(str, enum.Enum):
    """What the backend must do next, in order; each is idempotent."""

    CREATE_STORAGE = "CreateStorage"
    CREATE_PRECOMPILE = "CreatePrecompile"
    RECORD_CACHE = "RecordCache"
    CREATE_TRAINING = "CreateTraining"


@dataclass(frozen=True)
class Blocker:
    """A prerequisite that is not there yet: retried, with a reason naming what is missing."""

    reason: str
    message: str


@dataclass(frozen=True)
class Observed:
    """Everything the lifecycle needs to know about the world."""

    policy: str = "IfNotCached"
    storage_ready: bool = False
    storage_blocker: Blocker | None = None
    queue_blocker: Blocker | None = None
    cache_recorded: bool = False
    precompile: Child = Child.ABSENT
    precompile_message: str = ""
    training: Child = Child.ABSENT
    training_message: str = ""
    restarts: int = 0


@dataclass(frozen=True)
class Condition:
    """One Kubernetes-style condition, before timestamps are attached."""

    type: str
    status: str
    reason: str
    message: str = ""


@dataclass(frozen=True)
class Decision:
    """The derived status and the actions to take now."""

    phase: Phase
    message: str
    conditions: tuple[Condition, ...]
    actions: tuple[Action, ...] = ()
    cache_hit: bool | None = None
    restarts: int = 0
    #: The missing prerequisite that holds the job in Pending, if any (a Warning Event).
    blocker: Blocker | None = None


CONDITION_TYPES = ("Validated", "StorageReady", "Precompiled", "Running", "Succeeded", "Failed")


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
    """Derive phase, conditions and actions from one observation."""
    conds = [Condition("Validated", "True", "SpecValid", "spec accepted")]
    hit = _cache_hit(obs)
    if obs.storage_blocker:
        conds.append(Condition("StorageReady", "False", *_b(obs.storage_blocker)))
        return _pending(conds, obs.storage_blocker, (), hit, obs)
    if not obs.storage_ready:
        conds.append(Condition("StorageReady", "False", "Creating", "creating the FSx volume"))
        return _pending(conds, None, (Action.CREATE_STORAGE,), hit, obs)
    conds.append(Condition("StorageReady", "True", "StorageReady", "volume available"))
    decision = _after_storage(obs, conds, hit)
    if obs.precompile is Child.SUCCEEDED and not obs.cache_recorded:
        # Record before anything else: a crash after training starts must not lose the entry.
        return replace(decision, actions=(Action.RECORD_CACHE, *decision.actions))
    return decision


def _after_storage(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision:
    if obs.training is not Child.ABSENT:
        conds.append(_precompiled_condition(obs, hit))
        return _training(obs, conds, hit)
    if _needs_precompile(obs):
        return _precompiling(obs, conds, hit)
    conds.append(_precompiled_condition(obs, hit))
    if obs.queue_blocker:
        return _pending(conds, obs.queue_blocker, (), hit, obs)
    return _pending(conds, None, (Action.CREATE_TRAINING,), hit, obs)


def _needs_precompile(obs: Observed) -> bool:
    if obs.policy == "Never" or obs.precompile is Child.SUCCEEDED:
        return False
    if obs.precompile is not Child.ABSENT:
        return True
    return obs.policy == "Always" or not obs.cache_recorded


def _cache_hit(obs: Observed) -> bool | None:
    """Hit when graphs came from the cache, miss when we compiled, None when not applicable."""
    if obs.policy == "Never":
        return None
    if obs.precompile is not Child.ABSENT:
        return False
    return obs.policy == "IfNotCached" and obs.cache_recorded


def _precompiled_condition(obs: Observed, hit: bool | None) -> Condition:
    if obs.policy == "Never":
        return Condition("Precompiled", "False", "Skipped", "precompile.policy is Never")
    if hit:
        return Condition("Precompiled", "True", "CacheHit", "graphs found in the compile cache")
    return Condition("Precompiled", "True", "Compiled", "precompile job completed")


def _precompiling(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision:
    if obs.precompile is Child.FAILED:
        msg = obs.precompile_message or "the precompile job failed"
        conds.append(Condition("Precompiled", "False", "PrecompileFailed", msg))
        return _failed(conds, "PrecompileFailed", msg, hit, obs)
    if obs.precompile is Child.ABSENT and obs.queue_blocker:
        conds.append(Condition("Precompiled", "False", *_b(obs.queue_blocker)))
        return _pending(conds, obs.queue_blocker, (), hit, obs)
    conds.append(Condition("Precompiled", "False", "Compiling", "neuron_parallel_compile running"))
    actions = (Action.CREATE_PRECOMPILE,) if obs.precompile is Child.ABSENT else ()
    return Decision(
        phase=Phase.PRECOMPILING,
        message="filling the Neuron compile cache",
        conditions=_close(conds, running=False),
        actions=actions,
        cache_hit=hit,
        restarts=obs.restarts,
    )


def _training(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision:
    state = obs.training
    if state is Child.SUCCEEDED:
        conds.append(Condition("Running", "False", "Completed", "training job completed"))
        conds.append(Condition("Succeeded", "True", "TrainingCompleted", "training completed"))
        conds.append(Condition("Failed", "False", "TrainingCompleted", ""))
        return Decision(Phase.SUCCEEDED, "training completed", tuple(conds), (), hit, obs.restarts)
    if state is Child.FAILED:
        msg = obs.training_message or "the training job failed"
        conds.append(Condition("Running", "False", "TrainingFailed", msg))
        return _failed(conds, "TrainingFailed", msg, hit, obs)
    if state is Child.PENDING:
        conds.append(Condition("Running", "False", "GangPending", "waiting for all pods"))
        msg = "training job waiting for the gang to be scheduled"
        return Decision(Phase.PENDING, msg, _close(conds, running=None), (), hit, obs.restarts)
    reason = "Restarting" if state is Child.RESTARTING else "GangRunning"
    conds.append(Condition("Running", "True", reason, "training job running"))
    msg = "training" if state is Child.RUNNING else "restarting the gang"
    return Decision(Phase.TRAINING, msg, _close(conds, running=None), (), hit, obs.restarts)


def _b(blocker: Blocker) -> tuple[str, str]:
    return blocker.reason, blocker.message


def _close(conds: list[Condition], running: bool | None) -> tuple[Condition, ...]:
    """Add the conditions every non-terminal status carries."""
    if running is False:
        conds.append(Condition("Running", "False", "NotStarted", "training not started"))
    conds.append(Condition("Succeeded", "False", "InProgress", ""))
    conds.append(Condition("Failed", "False", "InProgress", ""))
    return tuple(conds)


def _pending(
    conds: list[Condition],
    blocker: Blocker | None,
    actions: tuple[Action, ...],
    hit: bool | None,
    obs: Observed,
) -> Decision:
    message = blocker.message if blocker else "creating the next stage"
    if blocker and not any(c.reason == blocker.reason for c in conds):
        conds.append(Condition("Running", "False", blocker.reason, blocker.message))
    elif not any(c.type == "Running" for c in conds):
        conds.append(Condition("Running", "False", "NotStarted", "training not started"))
    return Decision(
        Phase.PENDING, message, _close(conds, running=None), actions, hit, obs.restarts, blocker
    )


def _failed(
    conds: list[Condition], reason: str, msg: str, hit: bool | None, obs: Observed
) -> Decision:
    if not any(c.type == "Running" for c in conds):
        conds.append(Condition("Running", "False", reason, msg))
    conds.append(Condition("Succeeded", "False", reason, msg))
    conds.append(Condition("Failed", "True", reason, msg))
    return Decision(Phase.FAILED, msg, tuple(conds), (), hit, obs.restarts)


def ttl_remaining(
    completion_time: str | None, ttl: int | None, now: datetime.datetime
) -> float | None:
    """Seconds until a finished job may be deleted (ttlSecondsAfterFinished); None without TTL."""
    if ttl is None or not completion_time:
        return None
    done = datetime.datetime.strptime(completion_time, "%Y-%m-%dT%H:%M:%SZ")
    expiry = done.replace(tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=ttl)
    return (expiry - now).total_seconds()
