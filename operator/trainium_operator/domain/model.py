"""The lifecycle's vocabulary: phases, child states, actions, what is observed and decided.

Pure data and tables, shared by the lifecycle (lifecycle.py), both backends and the metrics.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainium_operator.domain.blocker import Blocker
from trainium_operator.domain.budget import REASONS as BUDGET_REASONS
from trainium_operator.domain.failures import POLICIES

if TYPE_CHECKING:
    from trainium_operator.domain.budget import Exhausted
    from trainium_operator.domain.failures import Failure
    from trainium_operator.domain.kueuestate import Quota


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
    #: Take the entry's writer lease (or a stale one over): the lease says who compiles since when.
    ACQUIRE_CACHE = "AcquireCache"
    CREATE_PRECOMPILE = "CreatePrecompile"
    #: Record the entry Ready (compiled by this job's precompile); the lease is released.
    RECORD_CACHE = "RecordCache"
    #: This job's precompile failed: record the entry Failed; the lease is released.
    RECORD_CACHE_FAILED = "RecordCacheFailed"
    #: Stop the stage jobs (suspend, deadline): delete the live Volcano jobs, release the lease.
    STOP_PRECOMPILE = "StopPrecompile"
    STOP_TRAINING = "StopTraining"
    CREATE_TRAINING = "CreateTraining"
    #: Kueue (domain/quota.py): a stage's Workload, created before its gang and marked
    #: Finished when the stage ends (its quota is released at once).
    CREATE_PRECOMPILE_WORKLOAD = "CreatePrecompileWorkload"
    CREATE_TRAINING_WORKLOAD = "CreateTrainingWorkload"
    FINISH_PRECOMPILE_WORKLOAD = "FinishPrecompileWorkload"
    FINISH_TRAINING_WORKLOAD = "FinishTrainingWorkload"
    #: Kueue evicted a stage's Workload and its gang is gone: clear the admission, as Kueue's
    #: job framework does (domain/eviction.py), so Kueue can admit it again.
    REQUEUE_PRECOMPILE_WORKLOAD = "RequeuePrecompileWorkload"
    REQUEUE_TRAINING_WORKLOAD = "RequeueTrainingWorkload"
    #: Set the Workload's PodsReady condition from its gang (Kueue's waitForPodsReady).
    READY_PRECOMPILE_WORKLOAD = "ReadyPrecompileWorkload"
    READY_TRAINING_WORKLOAD = "ReadyTrainingWorkload"
    #: The compile Workload of a compile the job no longer needs (a cache hit now, or another
    #: job compiles the graphs): deleted, so it never holds quota the job's training needs.
    RELEASE_PRECOMPILE_WORKLOAD = "ReleasePrecompileWorkload"
    #: spec.elastic: a Workload of a size the gang no longer runs at is deleted (its quota back).
    DELETE_STALE_WORKLOADS = "DeleteStaleWorkloads"
    #: runPolicy.suspend on a Kueue job: its Workloads' spec.active follows it (false: Kueue
    #: evicts them and their quota is released; true again on resume: they queue again).
    DEACTIVATE_WORKLOADS = "DeactivateWorkloads"
    ACTIVATE_WORKLOADS = "ActivateWorkloads"
    #: spec.elastic under Kueue: the larger size's training Workload, queued while the gang
    #: runs on at its size (the grow is made once Kueue admits it).
    CREATE_GROW_WORKLOAD = "CreateGrowWorkload"
    #: Lift our admission gate from the training Workload: the graphs another job compiled
    #: are Ready (it was queued gated while the job waited for them).
    UNGATE_TRAINING_WORKLOAD = "UngateTrainingWorkload"


#: Codes of API rejections that will not heal by retrying the same request.
PERMANENT_CODES = frozenset({400, 405, 406, 413, 415, 422})
#: Volcano's job webhook messages (pkg/webhooks/admission/jobs/validate) for queue states that a
#: later state lifts, and the blocker reason each means.
QUEUE_REFUSALS = (
    ("unable to find job queue", "QueueNotFound"),
    ("can only submit job to queue with state", "QueueNotOpen"),
    ("can only submit job to leaf queue", "QueueNotLeaf"),
    ("can not submit job to root queue", "QueueNotLeaf"),
)


@dataclass(frozen=True)
class Rejection:
    """The API server refused an action: its code and message, as observed."""

    action: Action
    code: int
    message: str

    @property
    def permanent(self) -> bool:
        """Invalid objects (webhook denials, pod validation) fail; quota/RBAC/404 may heal.

        Volcano's webhook refuses a job to a missing, closed or non-leaf queue with a 400: the
        queue's state can change, so that refusal waits (issue 17, bug 2).
        """
        return self.code in PERMANENT_CODES and self.queue_refusal is None

    @property
    def queue_refusal(self) -> str | None:
        """The queue reason of a Volcano webhook refusal a later queue state can lift."""
        text = self.message.lower()
        return next((reason for frag, reason in QUEUE_REFUSALS if frag in text), None)

    @property
    def reason(self) -> str:
        """The condition reason: what kind of refusal this was."""
        if self.queue_refusal is not None:
            return self.queue_refusal
        if self.permanent:
            return _REJECTED[self.action]
        if self.code == 403 and "exceeded quota" in self.message:
            return "QuotaExceeded"
        return {403: "Forbidden", 404: "ApiNotFound"}.get(self.code, "ApiRejected")


@dataclass(frozen=True)
class Resize:
    """The gang goes from one size to another, and why (the Resized Event's message)."""

    old: int
    new: int
    kind: str
    message: str


@dataclass(frozen=True)
class Observed:
    """Everything the lifecycle needs to know about the world."""

    policy: str = "IfNotCached"
    storage_ready: bool = False
    storage_blocker: Blocker | None = None
    #: Our static PV is Released with a stale claimRef (an earlier job of the same name).
    storage_released: bool = False
    #: What refuses the next stage before it is submitted: the queue, or a missing PriorityClass.
    queue_blocker: Blocker | None = None
    #: An object this job does not control holds the precompile job's or the training gang's
    #: name (reads.ours): that stage waits for it to go.
    precompile_blocker: Blocker | None = None
    training_blocker: Blocker | None = None
    #: The live stage's gang cannot get its pods created (Volcano's FailedCreate Event).
    gang_blocker: Blocker | None = None
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
    #: What a Required spec.scheduling.placement asks of the gang, in words ("": none): a
    #: pending gang's condition says it, since Volcano's own words do not name the topology.
    placement: str = ""
    #: Whole-gang restarts that spent runPolicy.maxRetries, across the job's Volcano jobs.
    restarts: int = 0
    #: Whole-gang restarts after an eviction or preemption (they spend no retries).
    disruptions: int = 0
    #: retryCount of the live stage's Volcano job: its gang Pending again is restarting.
    gang_retries: int = 0
    #: runPolicy.maxRetries (or the disruption limit) is spent: the live gang must stop.
    exhausted: Exhausted | None = None
    #: The phase on status before this observation (the phase never moves back).
    previous_phase: str | None = None
    #: The conditions on status before this observation (a finished job keeps them).
    previous_conditions: tuple[Condition, ...] = ()
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
    #: The operator recreates the training gang itself (a node to keep out, a hang): `failure`
    #: says why; the live gang stops now and the next pass creates it again.
    replace_gang: bool = False
    #: An elastic job's gang changes size (elastic.py): the live gang stops now and the next
    #: pass creates it at the new size; it spends no retries.
    resize: Resize | None = None
    #: The job's Kueue Workloads (None: no kueue.x-k8s.io/queue-name label, no Kueue).
    quota: Quota | None = None

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
    #: This status goes first and the next pass, due at once, creates what follows (no event
    #: would wake it: a stage that finished before any status said it ran is not skipped).
    again: bool = False


CONDITION_TYPES = ("Validated", "StorageReady", "Precompiled", "Running", "Succeeded", "Failed")


_REJECTED = {
    Action.ACQUIRE_CACHE: "CacheRecordRejected",
    Action.RECORD_CACHE_FAILED: "CacheRecordRejected",
    Action.CREATE_STORAGE: "StorageRejected",
    Action.REPAIR_STORAGE: "StorageRejected",
    Action.CREATE_PRECOMPILE: "PrecompileRejected",
    Action.RECORD_CACHE: "CacheRecordRejected",
    Action.CREATE_TRAINING: "TrainingRejected",
    Action.CREATE_PRECOMPILE_WORKLOAD: "WorkloadRejected",
    Action.CREATE_TRAINING_WORKLOAD: "WorkloadRejected",
    Action.CREATE_GROW_WORKLOAD: "WorkloadRejected",
    Action.UNGATE_TRAINING_WORKLOAD: "WorkloadRejected",
}
#: Every reason a job fails with (its Failed condition's reason): metrics export each at 0.
FAILURE_REASONS = (
    "InvalidSpec",
    "PrecompileFailed",
    "TrainingFailed",
    "DeadlineExceeded",
    *BUDGET_REASONS,
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
    Action.CREATE_PRECOMPILE_WORKLOAD: "the precompile Kueue Workload",
    Action.CREATE_TRAINING_WORKLOAD: "the training Kueue Workload",
}
