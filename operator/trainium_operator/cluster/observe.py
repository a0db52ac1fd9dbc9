"""Read what the lifecycle needs from the API (and FSx when names are missing): no decisions.

Every read here is of a named object, through the pass's `Reader` (reads.py): in the operator,
what its watches already stream; GETs elsewhere. The queue hierarchy comes in through `Views`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.cluster import fsx, gangs, k8s, reads, workloads
from trainium_operator.cluster.cacheholder import compiling_elsewhere, entry_and_holder
from trainium_operator.cluster.devicetaints import DeviceWatches
from trainium_operator.cluster.eventlooks import (
    EventLook,
    failed_create,
    look_at_events,
    next_event_look,
)
from trainium_operator.cluster.gangpods import gang_failure, gang_pods, of_instance
from trainium_operator.cluster.memory import Memory
from trainium_operator.cluster.reads import ApiReader, Kind, Reader
from trainium_operator.cluster.storage import Storage, storage_of
from trainium_operator.domain import budget, checkpoints, failures, lifecycle, unschedulable
from trainium_operator.domain.checkpoints import Checkpoint
from trainium_operator.domain.lifecycle import Blocker, Child, Observed
from trainium_operator.domain.verdicts import placement_note
from trainium_operator.manifests import cache, dra, ownership
from trainium_operator.manifests.ownership import Owner
from trainium_operator.manifests.workload import Kueue

Json = dict[str, Any]


@dataclass(frozen=True)
class Views:
    """What the operator's watches know: Volcano queues by parent (empty outside it)."""

    #: parent -> its child queues, as listed (a kopf index: filled before any pass runs).
    queue_children: Mapping[str, Iterable[Any]] = field(default_factory=dict)
    #: A pod of this job changed (failed, restarted): read the pods in this pass.
    pods_changed: bool = False
    #: This pass's time (RFC 3339), for deadlines; empty: no deadline is judged.
    now: str = ""
    #: The newest checkpoint the pod watch saw reported in this job's training pods.
    checkpoint: Checkpoint | None = None
    #: Where this pass reads objects from (and tells of its writes).
    reader: Reader = field(default_factory=ApiReader)
    #: Troubled pods as the pod watch showed them ({metadata, status}): the cause even when
    #: Volcano deleted the pod before this pass could list it.
    failed_pods: tuple[Json, ...] = ()
    #: Failed containers' log tails read when their pod's watch event came (pod uid -> lines).
    pod_logs: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: Rank 0's training pod as the pod watch last showed it (scrape.slim_rank0), if running.
    rank0_pod: Json | None = None
    #: The pod watch runs (the operator): rank0_pod is all there is to know, no list needed.
    pods_watched: bool = False
    #: Live precompile Volcano jobs by (namespace, cache entry), as watched (a kopf index);
    #: None: list them (outside the operator).
    precompiles: Mapping[tuple[str, str], Iterable[Json]] | None = None
    #: A backstop pass that heals a watch: what the index shows is listed again (a ghost).
    fresh: bool = False
    #: The object this pass is for (its uid; empty: whatever holds the name, outside the
    #: operator): a body of another uid is another job, and this one is gone.
    uid: str = ""
    #: What this job's earlier passes left for this one (its record keeps it).
    memory: Memory = field(default_factory=Memory)
    orphans: tuple[Any, Any] | None = None  #: kopf's node names, our bound pods (orphans.py)
    #: kopf's unhealthy nodes and our bound pods (cluster/nodehealth.py); None: not watched.
    health: tuple[Any, Any] | None = None
    #: Our DRA claims and Neuron's ResourceSlices, watched (cluster/devicetaints.py); None: not.
    devices: DeviceWatches | None = None
    #: The job's Kueue opt-in (its labels, manifests/workload.opt_in); None: Kueue plays no part.
    kueue: Kueue | None = None

    def has_children(self, queue: str) -> bool:
        """Whether any listed queue names this one as its parent (a non-leaf queue)."""
        for _ in range(5):
            try:
                return bool(list(self.queue_children.get(queue, ())))
            except RuntimeError:  # kopf's loop changed the index meanwhile: read again
                continue
        return bool(list(self.queue_children.get(queue, ())))


@dataclass(frozen=True)
class Seen:
    """One observation: the lifecycle's input, plus what the actions need to carry it out."""

    observed: Observed
    names: fsx.FsxNames | None = None
    #: Our static PV as read (to repair a stale claimRef against its resourceVersion).
    volume: Json | None = None
    #: The cache entry's writer lease and record as read (to take over or release them).
    lease: Json | None = None
    entry: cache.Entry | None = None
    #: Seconds left of the startup deadline of a gang still unscheduled (a look is due then).
    startup_left: float | None = None
    #: The live stage's Volcano job, for the restart budget (None: no stage job exists).
    gang: budget.Gang | None = None
    #: The newest checkpoint reported by the training pods (watched, or read in this pass).
    checkpoint: Checkpoint | None = None
    #: Seconds until a pending gang's Events are read again (nothing watches Events).
    events_look: float | None = None

    #: Nodes the job's next Volcano jobs keep out of (status.excludedNodes, and one found now).
    excluded_nodes: tuple[str, ...] = ()
    #: status.progress to write in this pass (None: leave it; {}: remove it), from scrape.py.
    progress: Json | None = None
    #: Seconds until the next read of rank 0's metrics is due (a look is due then).
    progress_in: float | None = None
    #: When rank 0's metrics were last read, for the job's record (scrape.Reading.read_at).
    metrics_read_at: float | None = None
    #: The progress the last reading made, written or not, for the job's record.
    progress_read: Json | None = None
    #: This pass's look at the gang's FailedCreate Events, for the job's record.
    events_looked: EventLook | None = None
    #: The live training gang's uid: its successor's name derives from it (naming.successor).
    train_uid: str = ""
    #: The training gang as read (a replaced one a crash left undeleted: gangs.Train.leftover).
    train: gangs.Train | None = None
    #: The live precompile job's uid (its deletes are preconditioned on it).
    pre_uid: str = ""
    #: An object of another owner holds the training gang's name (None: free, or ours).
    name_taken: gangs.Taken | None = None
    #: The job's Kueue Workloads and admitted flavors (None: not a Kueue workload).
    kueue: workloads.Held | None = None
    #: The live stage's gang pods this pass listed (none when it listed none).
    pods: tuple[Json, ...] = ()
    #: status.stragglers to write in this pass (None: leave it), and the nodes flagged now.
    stragglers: list[Json] | None = None
    straggler_flags: tuple[Json, ...] = ()


def observe(
    spec: TrainiumJobSpec, owner: Owner, views: Views, lookup: fsx.FsxLookup | None = None
) -> Seen:
    """Read the job's world: storage, queue, cache record and both Volcano jobs."""
    world = _read_world(spec, owner, views, lookup)
    train = world.gang.job
    stage, job = ("train", train) if train is not None else ("precompile", world.pre)
    left, pods, failure = _gang_now(spec, owner, views, stage, job)
    admission = _admission(spec, owner, views, world)
    dra_job = owner.name if dra.uses_dra(spec) else ""  # its looks read the pods' claims too
    looked = look_at_events(owner.namespace, job, views.now, views.memory.events_looked, dra_job)
    taken = gangs.taken(owner, world.gang, views.now) if train is None else None
    observed = _observed(spec, world, failure, admission, failed_create(looked, views.now), taken)
    held = None
    if views.kueue is not None:
        starting = train is None
        quota, held = workloads.observe(spec, owner, views.kueue, views.reader, starting=starting)
        observed = replace(observed, quota=quota)
    reported = [checkpoints.from_pod(p) for p in pods] if stage == "train" else []
    checkpoint = checkpoints.newest([views.checkpoint, *reported])
    look = next_event_look(job, views.now) if observed.gang_blocker is None else None
    storage = world.storage
    return Seen(
        observed, storage.names, storage.volume, world.lease, world.entry, left, _gang(job),
        checkpoint, look, events_looked=looked, train_uid=_uid(train), train=world.gang,
        pre_uid=_uid(world.pre), name_taken=taken, kueue=held, pods=tuple(pods),
    )  # fmt: skip


@dataclass(frozen=True)
class _World:
    """What a pass read of the job's storage, Volcano jobs and cache, before any judgement."""

    storage: Storage
    pre: Json | None
    #: The precompile job's name held by an object this job does not control.
    pre_taken: Json | None
    gang: gangs.Train
    entry: cache.Entry | None
    lease: Json | None
    #: Who compiles the entry: "self", "other" (a live job, cache_holder_job) or "none".
    holder: str
    holder_job: str


def _read_world(
    spec: TrainiumJobSpec, owner: Owner, views: Views, lookup: fsx.FsxLookup | None
) -> _World:
    """The reads of one pass: storage, both stage jobs, the cache entry and who fills it."""
    read = views.reader
    storage = storage_of(spec, owner, lookup or fsx.describe, read)
    pre_name = naming.vcjob_name(owner.name, "precompile", spec.precompile_size)
    pre, pre_taken = reads.ours(read.get(Kind.VCJOB, owner.namespace, pre_name), owner)
    gang = gangs.read_train(owner, read)  # no job while a replaced gang still stops
    ident = cache.identity(spec)
    entry, lease, holder, holder_job = entry_and_holder(ident, owner, spec.precompile.policy, read)
    about_to_compile = pre is None and gang.job is None and storage.ready
    if holder == "none" and about_to_compile and spec.precompile.policy != "Never":
        holder, holder_job = compiling_elsewhere(
            ident, owner, views.precompiles, views.fresh, spec.precompile_size
        )
    return _World(storage, pre, pre_taken, gang, entry, lease, holder, holder_job)


def _gang_now(
    spec: TrainiumJobSpec, owner: Owner, views: Views, stage: str, job: Json | None
) -> tuple[float | None, list[Json], failures.Failure | None]:
    """The live stage's startup time left, its pods read now, and how it failed (if it did)."""
    left = startup_left(job, spec.runPolicy.startupDeadlineSeconds, views.now)
    if left is not None and left <= 0:
        return left, [], stuck_failure(owner, stage, job)
    pods = with_shown(stage_pods(owner, stage, _child(job), views), views, stage)
    return left, pods, gang_failure(owner, of_instance(pods, job), views.pod_logs)


def _admission(spec: TrainiumJobSpec, owner: Owner, views: Views, world: _World) -> Blocker | None:
    """Why no stage can be submitted now: its queue, a replaced gang stopping, its priority."""
    if world.gang.job is not None:
        return None  # the training gang exists: nothing is submitted
    admission = queue_blocker(spec.scheduling.queue, views)
    if world.gang.stopping and admission is None:
        admission = gangs.gang_stopping(owner)
    if admission is None and _child(world.pre) in (Child.ABSENT, Child.SUCCEEDED):
        admission = priority_blocker(spec.scheduling.priorityClassName, views.reader)
    return admission


def _observed(
    spec: TrainiumJobSpec,
    world: _World,
    failure: failures.Failure | None,
    admission: Blocker | None,
    gang_blocker: Blocker | None,
    taken: gangs.Taken | None,
) -> Observed:
    """The lifecycle's input from what was read and judged in this pass."""
    pre, train, entry = world.pre, world.gang.job, world.entry
    pre_held = (
        None if world.pre_taken is None else gangs.name_taken("precompile job", world.pre_taken)
    )
    return Observed(
        failure=failure,
        policy=spec.precompile.policy,
        storage_ready=world.storage.ready,
        storage_blocker=world.storage.blocker,
        storage_released=world.storage.released,
        queue_blocker=admission,
        gang_blocker=gang_blocker,
        cache_recorded=entry is not None and entry.state == cache.READY,
        cache_holder=world.holder,
        cache_holder_job=world.holder_job,
        cache_seconds=entry.seconds if entry else None,
        precompile=_child(pre),
        precompile_message=_child_message(pre),
        training=_child(train),
        training_message=_child_message(train),
        placement=placement_note(spec.scheduling.placement, spec.nodes),
        gang_retries=_retries(train if train is not None else pre),
        precompile_blocker=pre_held,
        training_blocker=None if taken is None else taken.blocker,
    )


def _uid(job: Json | None) -> str:
    return str(((job or {}).get("metadata") or {}).get("uid") or "")


def _retries(job: Json | None) -> int:
    """The Volcano job's status.retryCount: whole-gang restarts of this instance."""
    return int(((job or {}).get("status") or {}).get("retryCount") or 0)


def _gang(job: Json | None) -> budget.Gang | None:
    """The live stage's Volcano job instance and its restarts, as the budget counts them."""
    if job is None:
        return None
    uid = str(job["metadata"].get("uid") or job["metadata"].get("name", ""))
    return budget.Gang(uid, _retries(job), _child(job) is Child.RESTARTING)


_READ_PODS = (Child.FAILED, Child.RESTARTING)


def stage_pods(owner: Owner, stage: str, child: Child, views: Views) -> list[Json]:
    """The live stage's gang pods when a pod failed or changed ([]: nothing to read)."""
    if child not in _READ_PODS and not (views.pods_changed and child is not Child.ABSENT):
        return []
    return gang_pods(owner, stage)


def with_shown(pods: list[Json], views: Views, stage: str) -> list[Json]:
    """The listed pods, plus the stage's troubled pods the watch showed and the list lacks.

    A pod Volcano deleted (or re-created under its name) keeps the evidence of its failure
    here; classify_gang then keeps the first failure in time as the cause.
    """
    if not pods and not views.failed_pods:
        return pods
    listed_failed = {p["metadata"]["name"]: failures.failed_container(p) is not None for p in pods}
    shown = [
        p for p in views.failed_pods
        if (p["metadata"].get("labels") or {}).get(ownership.LABEL_STAGE) == stage
        and not listed_failed.get(p["metadata"]["name"], False)
    ]  # fmt: skip
    return pods + shown


def startup_left(job: Json | None, deadline: int | None, now: str) -> float | None:
    """Seconds left before a still-unscheduled gang breaks runPolicy.startupDeadlineSeconds."""
    if job is None or deadline is None or not now or _child(job) is not Child.PENDING:
        return None
    if _retries(job):
        return None  # a restart, not a start: the restart budget governs it
    created = job["metadata"].get("creationTimestamp")
    return None if not created else deadline - cache.seconds_between(created, now)


def stuck_failure(owner: Owner, stage: str, job: Json | None = None) -> failures.Failure:
    """A gang unscheduled past its startup deadline: what the scheduler says is short."""
    found = unschedulable.unschedulable(gang_pods(owner, stage))
    if found is not None:
        return found
    if job is not None and (uid := job["metadata"].get("uid")):  # no pods: never enqueued?
        group = f"{job['metadata']['name']}-{uid}"  # Volcano's PodGroup of the job
        said = k8s.list_events(owner.namespace, group, "Unschedulable")
        said.sort(key=lambda e: str(e.get("last_timestamp") or e.get("lastTimestamp") or ""))
        found = unschedulable.not_enqueued(stage, [str(e.get("message") or "") for e in said])
        if found is not None:
            return found
    msg = f"the {stage} gang was not scheduled within runPolicy.startupDeadlineSeconds"
    return failures.make_failure("Unschedulable", msg)


def queue_blocker(name: str, views: Views) -> Blocker | None:
    """Volcano admits jobs only into an existing, Open, leaf queue: say which one is wrong."""
    queue = views.reader.get(Kind.QUEUE, "", name)
    field_ = f"Volcano queue {name!r} (spec.scheduling.queue)"
    if queue is None:
        return Blocker("QueueNotFound", f"{field_} does not exist; create it or pick another queue")
    state = ((queue.get("status") or {}).get("state")) or "Open"
    if state != "Open":
        msg = f"{field_} is {state}; Volcano only admits jobs into Open queues: reopen it"
        return Blocker("QueueNotOpen", msg)
    if views.has_children(name):
        msg = f"{field_} has child queues; Volcano only admits jobs into leaf queues"
        return Blocker("QueueNotLeaf", msg)
    return None


def priority_blocker(name: str | None, read: Reader) -> Blocker | None:
    """Volcano cannot create pods of a PriorityClass that does not exist: check before submit.

    Read from the watch (its creation wakes the job), not polled: one job waiting on a missing
    class made 82 GETs in 20 minutes (issue 26).
    """
    if not name or read.get(Kind.PRIORITY, "", name) is not None:
        return None
    msg = (
        f"PriorityClass {name!r} (spec.scheduling.priorityClassName) does not exist; the gang's "
        "pods could not be created: create it (scheduling.k8s.io/v1) or pick another"
    )
    return Blocker("PriorityClassNotFound", msg)


def _child(job: Json | None) -> Child:
    if job is None:
        return Child.ABSENT
    return lifecycle.from_volcano(((job.get("status") or {}).get("state") or {}).get("phase"))


def _child_message(job: Json | None) -> str:
    state = ((job or {}).get("status") or {}).get("state") or {}
    parts = [state.get("reason"), state.get("message")]
    return ": ".join(p for p in parts if p)
