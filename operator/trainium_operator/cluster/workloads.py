"""A Kueue job's Workloads: read them (and what admits them), create them, mark them Finished.

Only for jobs with the `kueue.x-k8s.io/queue-name` label (manifests/workload.opt_in); the
decisions are domain/quota.py's. Workloads and ResourceFlavors are read from the watches (with
GETs until their own watch has listed them: reads.LATE); the LocalQueue and the
WorkloadPriorityClass with a GET, and only while a stage waits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.cluster import inuse, kueueio, reads
from trainium_operator.cluster.reads import Kind, Reader
from trainium_operator.domain import elastic
from trainium_operator.domain.kueuestate import Admission, Quota, Workload, workload_state
from trainium_operator.domain.model import Blocker
from trainium_operator.manifests import dra, workload
from trainium_operator.manifests.ownership import Owner
from trainium_operator.manifests.workload import Kueue

Json = dict[str, Any]
STAGES = ("precompile", "train")


@dataclass(frozen=True)
class Held:
    """What the actions need: the opt-in, each stage's Workload and admitted flavors."""

    kueue: Kueue
    workloads: Mapping[str, Json | None] = field(default_factory=dict)
    flavors: Mapping[str, tuple[Json, ...]] = field(default_factory=dict)
    #: The WorkloadPriorityClass's value (None: no class named, or not found).
    priority: int | None = None
    #: spec.elastic: this job's training Workloads of sizes its gang no longer runs at.
    stale: tuple[Json, ...] = ()
    #: spec.elastic: the size of a grow waiting for its Workload's admission (0: none).
    grow: int = 0


def observe(
    spec: TrainiumJobSpec, owner: Owner, kueue: Kueue, read: Reader, *, starting: bool
) -> tuple[Quota, Held]:
    """Each stage's Workload (ours only), its admitted flavors, and, while a stage may still
    start (`starting`: no training gang yet), what blocks admission (GETs)."""
    bodies: dict[str, Json | None] = {}
    flavors: dict[str, tuple[Json, ...]] = {}
    for stage in STAGES:
        name = workload.workload_name(owner, spec, stage)
        body, _other = reads.ours(read.get(Kind.WORKLOAD, owner.namespace, name), owner)
        bodies[stage] = body
        found = (read.get(Kind.FLAVOR, "", f) for f in workload.admitted_flavors(body))
        flavors[stage] = tuple(f for f in found if f is not None)
    # One being deleted is gone for the decisions (its gang stops, as Kueue's reconciler
    # stops a job whose Workload is deleted); its finalizer keeps its quota until then.
    states = {s: _state(workload.workload_name(owner, spec, s), _live(bodies[s])) for s in STAGES}
    stale = _stale(spec, owner, kueue, read) + _moved(kueue, states, bodies)
    names = tuple(str(b["metadata"]["name"]) for b in stale)
    if not starting:
        quiet = Quota(kueue.queue, states["precompile"], states["train"], stale=names)
        return quiet, Held(kueue, bodies, flavors, stale=stale)
    blocker, priority = _blocker(spec, owner, kueue, states, bodies)
    quota = Quota(kueue.queue, states["precompile"], states["train"], blocker, names)
    return quota, Held(kueue, bodies, flavors, priority, stale)


def _blocker(
    spec: TrainiumJobSpec,
    owner: Owner,
    kueue: Kueue,
    states: dict[str, Workload],
    bodies: dict[str, Json | None],
) -> tuple[Blocker | None, int | None]:
    """What keeps a stage from Kueue's admission at all, and the priority its Workload gets."""
    blocker, priority = None, None
    if kueue.priority_class and any(w.state is Admission.ABSENT for w in states.values()):
        wpc = kueueio.get_priority_class(kueue.priority_class)
        priority = None if wpc is None else int(wpc.get("value") or 0)
        if wpc is None:
            blocker = Blocker(
                "WorkloadPriorityClassNotFound",
                f"WorkloadPriorityClass {kueue.priority_class!r} (label {workload.LABEL_PRIORITY})"
                " does not exist (or Kueue is not installed): create it or remove the label",
            )
    uncounted = _uncounted(spec, states, bodies)  # before the Quota: it may hold a stage
    blocker = blocker or uncounted
    waits = any(w.state is Admission.PENDING for w in states.values())
    if blocker is None and waits and kueueio.get_local_queue(owner.namespace, kueue.queue) is None:
        blocker = Blocker(
            "LocalQueueNotFound",
            f"LocalQueue {kueue.queue!r} (label {workload.LABEL_QUEUE}) does not exist in "
            f"namespace {owner.namespace}: create it or name another; the job waits",
        )
    if blocker is None and kueue.kept:
        blocker = _kept_blocker(kueue, states)
    return blocker, priority


def _state(name: str, body: Json | None) -> Workload:
    """workload_state, and whether our compile gate holds it (its annotation)."""
    return replace(workload_state(name, body), gated=workload.gated(body))


#: The reason a job says it stays in its LocalQueue though its queue-name label was removed.
QUEUE_NAME_REMOVED = "QueueNameRemoved"


def kept(spec: TrainiumJobSpec, owner: Owner, job: Json, read: Reader) -> Kueue | None:
    """A job without the queue-name label that has a Workload of ours stays in the LocalQueue
    its Workload names (issue 41): it lost the label while it waited (or between stages), and
    its gang never starts outside the quota it waited for, as if the chart's policy had refused
    the removal. Without a Workload (never made, or deleted by whoever may) it is not Kueue's.
    Index reads only, but for a job that waited for quota (no startTime) while the watch lists."""
    status = job.get("status") or {}
    if not read.watched(Kind.WORKLOAD) and (status.get("startTime") or not status.get("phase")):
        return None
    for name in every_name(spec, owner):
        found, _other = reads.ours(read.get(Kind.WORKLOAD, owner.namespace, name), owner)
        queue = str(((found or {}).get("spec") or {}).get("queueName") or "")
        if queue:
            priority = str((job["metadata"].get("labels") or {}).get(workload.LABEL_PRIORITY) or "")
            return Kueue(queue, priority, kept=True)
    return None


def _kept_blocker(kueue: Kueue, states: Mapping[str, Workload]) -> Blocker | None:
    """What a kept job (kept) says while a Workload of it waits: why it still waits."""
    waiting = next((w for w in states.values() if w.state is Admission.PENDING), None)
    if waiting is None:
        return None
    said = f"{waiting.reason}: {waiting.message}".rstrip(": ")
    return Blocker(
        QUEUE_NAME_REMOVED,
        f"the {workload.LABEL_QUEUE} label was removed while the job waited for quota: it stays "
        f"in LocalQueue {kueue.queue!r}, where Workload {waiting.name} waits ({said}), and no "
        "gang starts outside the quota; delete the job, or its Workloads, to take it out of Kueue",
    )


def _live(body: Json | None) -> Json | None:
    """The Workload, or None while it is being deleted (cluster/inuse.py releases it)."""
    return None if inuse.deleting(body) else body


def _uncounted(
    spec: TrainiumJobSpec, states: dict[str, Workload], bodies: Mapping[str, Json | None]
) -> Blocker | None:
    """A DRA gang's Workload admitted without its Neuron devices counted is not started on
    EFA alone (issue 41): it waits (as Pending), saying how to make Kueue count them."""
    if not dra.uses_dra(spec):
        return None
    for stage, wl in states.items():
        if wl.state is Admission.ADMITTED and not workload.counts_devices(bodies[stage]):
            states[stage] = replace(wl, state=Admission.PENDING)
            return Blocker(
                "NeuronDevicesNotCounted",
                f"Kueue admitted Workload {wl.name} without counting the Neuron devices its "
                f"pods claim (devices: dra): map DeviceClass {dra.DEVICE_CLASS} to "
                "aws.amazon.com/neuron in Kueue's resources.deviceClassMappings, then delete the "
                "Workload (it is made again); the gang is not started outside the quota",
            )
    return None


def _moved(
    kueue: Kueue, states: Mapping[str, Workload], bodies: Mapping[str, Json | None]
) -> tuple[Json, ...]:
    """Workloads in another LocalQueue than the label names, holding no quota: the label was
    changed while the job waited. Deleted (DELETE_STALE_WORKLOADS), each is made again in the
    new queue, as Kueue's job framework moves a waiting job's Workload; an admitted one stays
    (the chart's admission policy refuses that change, as Kueue's webhook does)."""
    waiting = {s for s, wl in states.items() if wl.state is Admission.PENDING and not wl.reserved}
    return tuple(
        body
        for stage, body in bodies.items()
        if body is not None
        and stage in waiting
        and ((body.get("spec") or {}).get("queueName") or kueue.queue) != kueue.queue
    )


def _stale(spec: TrainiumJobSpec, owner: Owner, kueue: Kueue, read: Reader) -> tuple[Json, ...]:
    """An elastic job's training Workloads of other sizes than the one it runs at now (ours)."""
    if spec.elastic is None:
        return ()
    found = []
    for size in kueue.sizes:
        if size == spec.nodes:
            continue
        name = workload.workload_name(owner, elastic.at_size(spec, size), "train")
        body, _other = reads.ours(read.get(Kind.WORKLOAD, owner.namespace, name), owner)
        if body is not None:
            found.append(body)
    return tuple(found)


def every_name(spec: TrainiumJobSpec, owner: Owner) -> list[str]:
    """The names of every Workload the job may have made (each stage, each elastic size)."""
    specs = [spec]
    if spec.elastic is not None:
        specs += [elastic.at_size(spec, n) for n in elastic.allowed_sizes(spec)]
    names = (workload.workload_name(owner, s, stage) for s in specs for stage in STAGES)
    return list(dict.fromkeys(names))
