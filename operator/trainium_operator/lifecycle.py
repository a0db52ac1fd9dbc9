"""The pure lifecycle: (what was observed) -> phase, conditions and the next actions.

Both backends use it: the operator observes Kubernetes children, the local runner observes TorchX
local apps and folders. Nothing here does I/O, so every path is a table-driven unit test.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from trainium_operator.failures import POLICIES

if TYPE_CHECKING:
    from trainium_operator.failures import Failure


class Phase(str, enum.Enum):
    """TrainiumJob status.phase values, in the order a job moves through them."""

    PENDING = "Pending"
    #: Another job holds the writer's lease of this cache entry: training follows its graphs.
    WAITING_FOR_CACHE = "WaitingForCache"
    PRECOMPILING = "Precompiling"
    TRAINING = "Training"
    #: runPolicy.suspend: the Volcano jobs are removed (checkpoints stay) until it is false.
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


TERMINAL = (Phase.SUCCEEDED, Phase.FAILED)
#: A job never moves back to an earlier phase (a gang restart is not "Pending" again).
_RANK = {Phase.PENDING: 0, Phase.WAITING_FOR_CACHE: 1, Phase.PRECOMPILING: 1, Phase.TRAINING: 2}
_PHASES = frozenset(p.value for p in Phase)


class Child(str, enum.Enum):
    """State of a stage job, whatever backend runs it."""

    ABSENT = "Absent"
    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    #: Aborting/Aborted: suspended (`vcctl job suspend`), resumable, not a failure.
    ABORTED = "Aborted"
    #: Terminating: Volcano is stopping the pods; what follows decides.
    TERMINATING = "Terminating"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


#: Volcano Job status.state.phase -> Child (unknown phases count as pending). Only Completed,
#: Failed and Terminated are final in Volcano's job state machine; the rest can still move on.
VOLCANO_PHASES = {
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


def from_volcano(phase: str | None) -> Child:
    """Map a Volcano job phase; a job without status yet is pending."""
    return VOLCANO_PHASES.get(phase or "Pending", Child.PENDING)


class Action(str, enum.Enum):
    """What the backend must do next, in order; each is idempotent."""

    CREATE_STORAGE = "CreateStorage"
    #: A Released static PV of ours: clear its stale claimRef so the new claim can bind.
    REPAIR_STORAGE = "RepairStorage"
    #: Take the entry's writer lease (or a stale one over) and mark the entry Compiling.
    ACQUIRE_CACHE = "AcquireCache"
    CREATE_PRECOMPILE = "CreatePrecompile"
    #: The entry is Ready (compiled by this job's precompile); the lease is released.
    RECORD_CACHE = "RecordCache"
    #: This job's precompile failed: the entry is Failed; the lease is released.
    RECORD_CACHE_FAILED = "RecordCacheFailed"
    #: Stop the stage jobs (suspend, deadline): delete the live Volcano jobs, release the lease.
    STOP_PRECOMPILE = "StopPrecompile"
    STOP_TRAINING = "StopTraining"
    CREATE_TRAINING = "CreateTraining"


@dataclass(frozen=True)
class Blocker:
    """A prerequisite that is not there yet: retried, with a reason naming what is missing."""

    reason: str
    message: str
    #: Post a Warning Event (once); routine waits such as a static claim binding do not.
    warn: bool = True


#: Codes of API rejections that will not heal by retrying the same request.
PERMANENT_CODES = frozenset({400, 405, 406, 413, 415, 422})


@dataclass(frozen=True)
class Rejection:
    """The API server refused an action: its code and message, as observed."""

    action: Action
    code: int
    message: str

    @property
    def permanent(self) -> bool:
        """Invalid objects (webhook denials, pod validation) fail; quota/RBAC/404 may heal."""
        return self.code in PERMANENT_CODES

    @property
    def reason(self) -> str:
        """The condition reason: what kind of refusal this was."""
        if self.permanent:
            return _REJECTED[self.action]
        if self.code == 403 and "exceeded quota" in self.message:
            return "QuotaExceeded"
        return {403: "Forbidden", 404: "ApiNotFound"}.get(self.code, "ApiRejected")


@dataclass(frozen=True)
class Observed:
    """Everything the lifecycle needs to know about the world."""

    policy: str = "IfNotCached"
    storage_ready: bool = False
    storage_blocker: Blocker | None = None
    #: Our static PV is Released with a stale claimRef (an earlier job of the same name).
    storage_released: bool = False
    queue_blocker: Blocker | None = None
    #: The cache entry is Ready (its graphs compiled for this exact identity).
    cache_recorded: bool = False
    #: Who holds the entry's writer lease: "none" (free or stale), "self" or "other".
    cache_holder: str = "none"
    #: The other holder (namespace/name), for messages.
    cache_holder_job: str = ""
    #: How long the entry's graphs took to compile (what a hit saves).
    cache_seconds: float | None = None
    precompile: Child = Child.ABSENT
    precompile_message: str = ""
    training: Child = Child.ABSENT
    training_message: str = ""
    restarts: int = 0
    #: The phase on status before this observation (the phase never moves back).
    previous_phase: str | None = None
    #: Why the live stage's gang failed, classified from its pods (None: no pod failed).
    failure: Failure | None = None
    #: Immutable spec fields changed since the job started (an API server without CEL let it).
    changed_fields: tuple[str, ...] = ()
    #: runPolicy.suspend is set.
    suspend: bool = False
    #: runPolicy.activeDeadlineSeconds has passed since the job started.
    deadline_exceeded: bool = False
    #: Actions the API server refused in this pass (fed back after acting).
    rejections: tuple[Rejection, ...] = ()

    def rejected(self, action: Action) -> Rejection | None:
        """The refusal of one action in this pass, if any."""
        return next((r for r in self.rejections if r.action is action), None)


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


_REJECTED = {
    Action.ACQUIRE_CACHE: "CacheRecordRejected",
    Action.RECORD_CACHE_FAILED: "CacheRecordRejected",
    Action.CREATE_STORAGE: "StorageRejected",
    Action.REPAIR_STORAGE: "StorageRejected",
    Action.CREATE_PRECOMPILE: "PrecompileRejected",
    Action.RECORD_CACHE: "CacheRecordRejected",
    Action.CREATE_TRAINING: "TrainingRejected",
}
#: Every reason a job fails with (its Failed condition's reason): metrics export each at 0.
FAILURE_REASONS = (
    "InvalidSpec",
    "PrecompileFailed",
    "TrainingFailed",
    "DeadlineExceeded",
    *sorted(set(_REJECTED.values())),
    *POLICIES,  # a gang failure classified from its pods fails with its class
)
_WHAT = {
    Action.ACQUIRE_CACHE: "the compile-cache lease or record",
    Action.RECORD_CACHE_FAILED: "the compile-cache record",
    Action.CREATE_STORAGE: "the FSx PersistentVolume or claim",
    Action.REPAIR_STORAGE: "the FSx PersistentVolume's claimRef",
    Action.CREATE_PRECOMPILE: "the precompile Volcano job",
    Action.RECORD_CACHE: "the compile-cache record",
    Action.CREATE_TRAINING: "the training Volcano job",
}


def decide(obs: Observed) -> Decision:
    """Derive phase, conditions and actions from one observation; the phase never moves back."""
    decision = _decide(obs)
    if obs.changed_fields:
        decision = _hold(decision, obs.changed_fields)
    before = _RANK.get(Phase(obs.previous_phase)) if obs.previous_phase in _PHASES else None
    now = _RANK.get(decision.phase)
    if before is not None and now is not None and before > now:
        return replace(decision, phase=Phase(obs.previous_phase))
    return decision


def _hold(decision: Decision, fields: tuple[str, ...]) -> Decision:
    """A graph-defining field changed on a live job: act on nothing, record nothing, say so."""
    names = ", ".join(f"spec.{f}" for f in fields)
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
    hit = _cache_hit(obs)
    if obs.deadline_exceeded or obs.suspend:
        return _stopped(obs, conds, hit)
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


def _storage(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision | None:
    """The storage part: None when the claim is bound, else the decision that waits or acts."""
    if obs.storage_ready:
        return None
    for action in (Action.CREATE_STORAGE, Action.REPAIR_STORAGE):
        if (rejection := obs.rejected(action)) is not None:
            waiting = _pending(list(conds), None, (), hit, obs)
            return _refused(waiting, rejection, "StorageReady", obs)
    if obs.storage_released:
        msg = "PersistentVolume is Released with a stale claimRef; clearing it for the new claim"
        conds.append(Condition("StorageReady", "False", "VolumeReleased", msg))
        return _pending(conds, None, (Action.REPAIR_STORAGE,), hit, obs)
    if obs.storage_blocker:
        conds.append(Condition("StorageReady", "False", *_b(obs.storage_blocker)))
        return _pending(conds, obs.storage_blocker, (), hit, obs)
    conds.append(Condition("StorageReady", "False", "Creating", "creating the FSx volume"))
    return _pending(conds, None, (Action.CREATE_STORAGE,), hit, obs)


_LIVE = (Child.PENDING, Child.RUNNING, Child.RESTARTING, Child.ABORTED, Child.TERMINATING)


def _stop_actions(obs: Observed) -> tuple[Action, ...]:
    """Delete the stage jobs still alive; a finished precompile stays (its graphs count)."""
    out = []
    if obs.precompile in _LIVE:
        out.append(Action.STOP_PRECOMPILE)
    if obs.training in _LIVE:
        out.append(Action.STOP_TRAINING)
    return tuple(out)


def _stopped(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision:
    """Deadline passed: fail and stop. Suspended: stop, keep state, resume when unset."""
    stop = _stop_actions(obs)
    if obs.deadline_exceeded:
        msg = "runPolicy.activeDeadlineSeconds passed; the job's Volcano jobs were stopped"
        conds.append(Condition("Running", "False", "DeadlineExceeded", msg))
        return replace(_failed(conds, "DeadlineExceeded", msg, hit, obs), actions=stop)
    msg = (
        "suspended (runPolicy.suspend): its Volcano jobs are removed, checkpoints and the "
        "compile cache stay; set suspend to false to resume"
    )
    conds.append(Condition("Running", "False", "Suspended", msg))
    return Decision(Phase.SUSPENDED, msg, _close(conds, running=None), stop, hit, obs.restarts)


def _refused(decision: Decision, rejection: Rejection, ctype: str, obs: Observed) -> Decision:
    """Map a refused action: an invalid object fails the job, a quota or RBAC refusal waits."""
    what = _WHAT[rejection.action]
    message = f"the API server refused {what} ({rejection.code}): {rejection.message}"
    reason = rejection.reason
    conds = [c for c in decision.conditions if c.type not in (ctype, "Succeeded", "Failed")]
    conds.append(Condition(ctype, "False", reason, message))
    if rejection.permanent:
        return _failed(conds, reason, message, decision.cache_hit, obs)
    blocker = Blocker(reason, message + "; retrying with backoff")
    return replace(
        decision,
        message=blocker.message,
        conditions=_close(conds, running=None),
        actions=(),
        blocker=blocker,
    )


def _after_storage(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision:
    if obs.training is not Child.ABSENT:
        conds.append(_precompiled_condition(obs, hit))
        return _training(obs, conds, hit)
    if _needs_precompile(obs):
        return _precompiling(obs, conds, hit)
    conds.append(_precompiled_condition(obs, hit))
    if obs.queue_blocker:
        return _pending(conds, obs.queue_blocker, (), hit, obs)
    if (rejection := obs.rejected(Action.CREATE_TRAINING)) is not None:
        return _refused(_pending(conds, None, (), hit, obs), rejection, "Running", obs)
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
    fast = _fails_fast(obs, obs.precompile)
    if obs.precompile is Child.FAILED or fast:
        reason, msg = _why(obs, "PrecompileFailed", obs.precompile_message, "precompile")
        conds.append(Condition("Precompiled", "False", reason, msg))
        failed = _failed(conds, reason, msg, hit, obs)
        stop = (Action.STOP_PRECOMPILE,) if fast else ()
        if obs.cache_holder == "self":  # the entry says Failed; the next job retries once
            return replace(failed, actions=(*stop, Action.RECORD_CACHE_FAILED))
        return replace(failed, actions=stop)
    if obs.precompile is Child.ABSENT and obs.cache_holder == "other":
        return _waiting_for_cache(obs, conds, hit)
    if obs.precompile is Child.ABSENT and obs.queue_blocker:
        conds.append(Condition("Precompiled", "False", *_b(obs.queue_blocker)))
        return _pending(conds, obs.queue_blocker, (), hit, obs)
    reason, msg = _STAGE_WAIT.get(obs.precompile, ("Compiling", "neuron_parallel_compile running"))
    conds.append(Condition("Precompiled", "False", reason, msg))
    actions: tuple[Action, ...] = ()
    if obs.precompile is Child.ABSENT:
        take = () if obs.cache_holder == "self" else (Action.ACQUIRE_CACHE,)
        actions = (*take, Action.CREATE_PRECOMPILE)
    decision = Decision(
        phase=Phase.PRECOMPILING,
        message="filling the Neuron compile cache" if reason == "Compiling" else msg,
        conditions=_close(conds, running=False),
        actions=actions,
        cache_hit=hit,
        restarts=obs.restarts,
    )
    for action in (Action.ACQUIRE_CACHE, Action.CREATE_PRECOMPILE):
        if (rejection := obs.rejected(action)) is not None:
            return _refused(decision, rejection, "Precompiled", obs)
    return decision


def _waiting_for_cache(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision:
    """One writer per entry: follow the job compiling the same graphs instead of competing."""
    msg = (
        f"job {obs.cache_holder_job} is compiling the same graphs into this cache; "
        "training starts when they are Ready"
    )
    conds.append(Condition("Precompiled", "False", "WaitingForCache", msg))
    return Decision(
        Phase.WAITING_FOR_CACHE, msg, _close(conds, running=False), (), hit, obs.restarts
    )


#: Child states that hold a stage without failing it: (condition reason, message).
_STAGE_WAIT = {
    Child.ABORTED: (
        "Aborted",
        "the Volcano job is aborted (vcctl job suspend); `vcctl job resume` continues it",
    ),
    Child.TERMINATING: ("Terminating", "Volcano is terminating the job's pods"),
}


def _training(obs: Observed, conds: list[Condition], hit: bool | None) -> Decision:
    state = obs.training
    if state is Child.SUCCEEDED:
        conds.append(Condition("Running", "False", "Completed", "training job completed"))
        conds.append(Condition("Succeeded", "True", "TrainingCompleted", "training completed"))
        conds.append(Condition("Failed", "False", "TrainingCompleted", ""))
        return Decision(Phase.SUCCEEDED, "training completed", tuple(conds), (), hit, obs.restarts)
    fast = _fails_fast(obs, state)
    if state is Child.FAILED or fast:
        reason, msg = _why(obs, "TrainingFailed", obs.training_message, "training")
        conds.append(Condition("Running", "False", reason, msg))
        stop = (Action.STOP_TRAINING,) if fast else ()
        return replace(_failed(conds, reason, msg, hit, obs), actions=stop)
    status, reason, msg = _running(obs)
    conds.append(Condition("Running", status, reason, msg))
    return Decision(Phase.TRAINING, msg, _close(conds, running=None), (), hit, obs.restarts)


def _fails_fast(obs: Observed, state: Child) -> bool:
    """A live gang whose failure a restart cannot fix (bad image, compiler error, OOM...)."""
    return state in _LIVE and obs.failure is not None and not obs.failure.retry


def _why(obs: Observed, default: str, volcano: str, stage: str) -> tuple[str, str]:
    """The failure's class and evidence (pod, reason, log tail), else Volcano's own words."""
    failure = obs.failure
    if failure is None:
        return default, volcano or f"the {stage} job failed"
    msg = failure.message
    if failure.log_tail:
        msg += "\nlast log lines:\n" + "\n".join(failure.log_tail)
    return failure.reason, msg


def _running(obs: Observed) -> tuple[str, str, str]:
    """The Running condition of a live training job: one phase (Training) for all of them."""
    state = obs.training
    if state in _STAGE_WAIT:
        return ("False", *_STAGE_WAIT[state])
    if state is Child.RESTARTING or (state is Child.PENDING and obs.restarts):
        return "False", "Restarting", f"restarting the gang (restart {obs.restarts})"
    if state is Child.PENDING:
        return "False", "GangPending", "training job waiting for the gang to be scheduled"
    return "True", "GangRunning", "training"


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
    phase = Phase.PENDING
    if obs.precompile is Child.SUCCEEDED and obs.storage_ready:  # compiled: training is next
        phase = Phase.TRAINING
        message = blocker.message if blocker else "creating the training job"
    conditions = _close(conds, running=None)
    return Decision(phase, message, conditions, actions, hit, obs.restarts, blocker)


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
