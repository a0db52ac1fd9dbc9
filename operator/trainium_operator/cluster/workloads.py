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

from trainium_operator.api import naming, parsed
from trainium_operator.api.spec import SpecError, TrainiumJobSpec
from trainium_operator.cluster import inuse, k8s, kueueio, reads
from trainium_operator.cluster.reads import Kind, Reader
from trainium_operator.domain import elastic, kueuejob
from trainium_operator.domain.kueuestate import Admission, Quota, Workload, workload_state
from trainium_operator.domain.model import Action, Blocker, Child, Observed, Phase
from trainium_operator.domain.quota import FINISHES, LIVE, waits_for_compile
from trainium_operator.domain.status import now_iso
from trainium_operator.manifests import builders, dra, ownership, workload
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
    blocker, priority = None, None
    if not starting:
        quiet = Quota(kueue.queue, states["precompile"], states["train"], stale=names)
        return quiet, Held(kueue, bodies, flavors, stale=stale)
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
    quota = Quota(kueue.queue, states["precompile"], states["train"], blocker, names)
    return quota, Held(kueue, bodies, flavors, priority, stale)


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
    for name in _every_name(spec, owner):
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


_CREATE = {
    Action.CREATE_PRECOMPILE_WORKLOAD: "precompile",
    Action.CREATE_TRAINING_WORKLOAD: "train",
}
_FINISH = {action: stage for stage, action in FINISHES.items()}
_REQUEUE = {action: stage for stage, action in kueuejob.REQUEUES.items()}
_READY = {action: stage for stage, action in kueuejob.READIES.items()}
_ACTIVITY = {action: want for want, action in kueuejob.ACTIVITY.items()}
ACTIONS = frozenset(
    {*_CREATE, *_FINISH, *_REQUEUE, *_READY, *_ACTIVITY, Action.DELETE_STALE_WORKLOADS,
     Action.RELEASE_PRECOMPILE_WORKLOAD, Action.CREATE_GROW_WORKLOAD,
     Action.UNGATE_TRAINING_WORKLOAD}
)  # fmt: skip


@dataclass(frozen=True)
class Acting:
    """What a Workload write needs of its pass: the job, its Workloads, its gangs."""

    spec: TrainiumJobSpec
    owner: Owner
    held: Held
    observed: Observed
    #: Nodes the job's gangs keep out of (a Workload's pod set is read from the gang as built).
    excluded: tuple[str, ...] = ()


def act(action: Action, job: Acting, read: Reader) -> None:
    """Create a stage's Workload (from its gang as built), mark it Finished, requeue it, set
    its PodsReady or spec.active; delete an elastic job's Workloads of other sizes."""
    if action in _REQUEUE:
        stage = _REQUEUE[action]
        if not _gang_may_run(job.owner, stage):
            _requeue(workload.workload_name(job.owner, job.spec, stage), job.owner, read)
    elif action in _READY:
        _ready(_READY[action], job.held, job.observed, read)
    elif action in _ACTIVITY:
        _activity(_ACTIVITY[action], job.held, read)
    elif action is Action.DELETE_STALE_WORKLOADS:
        for body in job.held.stale:
            _delete(body, read)
    elif action is Action.RELEASE_PRECOMPILE_WORKLOAD:
        found = job.held.workloads.get("precompile")
        if found is not None:
            _delete(found, read)
    elif action in _CREATE or action is Action.CREATE_GROW_WORKLOAD:
        _create(_CREATE.get(action, "train"), job, read)
    elif action is Action.UNGATE_TRAINING_WORKLOAD:
        _ungate(job.held.workloads.get("train"), read)
    else:
        _finish(_FINISH[action], job, read)


def _create(stage: str, job: Acting, read: Reader) -> None:
    """Create the stage's Workload, its pod set read from the stage's gang as built (a grow's
    at its new size; gated: behind our compile gate)."""
    owner, held = job.owner, job.held
    if not held.grow and inuse.deleting(held.workloads.get(stage)):
        return  # the name is free once its finalizer goes (inuse.sweep): made again then
    spec = elastic.at_size(job.spec, held.grow) if held.grow else job.spec
    gated = stage == "train" and waits_for_compile(job.observed)
    vcjob = builders.build_vcjob(spec, owner, stage, job.excluded)
    body = workload.build_workload(spec, owner, stage, held.kueue, vcjob, held.priority, gated)
    if dra.uses_dra(spec):  # Kueue counts the devices its claims ask for: it goes first
        k8s.create_claim_template(builders.build_claim_template(spec, owner))
    name = body["metadata"]["name"]
    read.wrote(Kind.WORKLOAD, owner.namespace, name, kueueio.create_workload(body))


def _finish(stage: str, job: Acting, read: Reader) -> None:
    """Mark the stage's Workload Finished (Succeeded when its gang did): its quota released."""
    found = job.held.workloads.get(stage)
    if found is None:
        return
    ok = kueuejob.child_of(job.observed, stage) is Child.SUCCEEDED
    said = f"the {stage} stage {'succeeded' if ok else 'ended without success'}"
    written = kueueio.finish_workload(found, _finished(ok, said))
    read.wrote(Kind.WORKLOAD, job.owner.namespace, found["metadata"]["name"], written)
    inuse.release(written, read)  # Finished: its quota is released, as is its finalizer


def _ungate(found: Json | None, read: Reader) -> None:
    """Lift our compile gate from the training Workload: the graphs are Ready (issue 41)."""
    if found is None or not workload.gated(found):
        return
    md = found["metadata"]
    written = kueueio.ungate_workload(found, workload.ungated(found))
    read.wrote(Kind.WORKLOAD, md["namespace"], md["name"], written)


def growing(
    spec: TrainiumJobSpec, owner: Owner, kueue: Quota, held: Held, size: int
) -> tuple[Quota, bool]:
    """An elastic grow to `size` under Kueue: the Quota with that size's training Workload out
    of the stale ones while it waits, and whether Kueue admitted it (the grow may go on)."""
    name = workload.workload_name(owner, elastic.at_size(spec, size), "train")
    body = next((b for b in held.stale if b["metadata"]["name"] == name), None)
    wl = workload_state(name, body)
    if wl.state is Admission.ADMITTED and wl.active:
        return replace(kueue, stale=tuple(n for n in kueue.stale if n != name)), True
    if wl.state in (Admission.EVICTED, Admission.FINISHED):  # deleted: made again next pass
        return replace(kueue, grow=wl, grow_size=size), False
    kept = tuple(n for n in kueue.stale if n != name)
    return replace(kueue, stale=kept, grow=wl, grow_size=size), False


def matching(held: Held, kueue: Quota) -> Held:
    """The Held a pass acts with once the elastic look decided: only the stale Workloads the
    Quota still names are deleted, and a grow's Workload is made at its size."""
    stale = tuple(b for b in held.stale if b["metadata"]["name"] in kueue.stale)
    return replace(held, stale=stale, grow=kueue.grow_size if kueue.grow is not None else 0)


def _delete(body: Json, read: Reader) -> None:
    """Delete a Workload of ours, the one read (its uid): Kueue releases what it held (the job
    no longer needs it: its finalizer goes first)."""
    md = body["metadata"]
    inuse.release(body, read)
    kueueio.delete_workload(md["namespace"], md["name"], str(md.get("uid") or ""))
    read.deleted(Kind.WORKLOAD, md["namespace"], md["name"])


def settle(body: Json, read: Reader) -> None:
    """A finished job's Workloads still live are finished, on every pass until they are (as
    Kueue's reconciler finishes a finished job's Workload): whatever path ended the job, its
    quota is released."""
    md = body["metadata"]
    if workload.opt_in(md.get("labels")) is None and not read.watched(Kind.WORKLOAD):
        return  # no label (removed, maybe: kept): looked for in the index only, no GETs
    try:
        spec = parsed.spec(body)
    except SpecError:  # an invalid job never made a Workload
        return
    owner = Owner(md["name"], md["namespace"], str(md.get("uid") or ""))
    ok = (body.get("status") or {}).get("phase") == Phase.SUCCEEDED.value
    for name in _every_name(spec, owner):
        found, _other = reads.ours(read.get(Kind.WORKLOAD, owner.namespace, name), owner)
        if found is not None and workload_state(name, found).state in LIVE:
            said = "succeeded" if ok else "failed"
            found = kueueio.finish_workload(found, _finished(ok, f"the job {said}"))
            read.wrote(Kind.WORKLOAD, owner.namespace, name, found)
        if found is not None:
            inuse.release(found, read)  # Finished (or being deleted): its quota is released


def _every_name(spec: TrainiumJobSpec, owner: Owner) -> list[str]:
    """The names of every Workload the job may have made (each stage, each elastic size)."""
    specs = [spec]
    if spec.elastic is not None:
        specs += [elastic.at_size(spec, n) for n in elastic.allowed_sizes(spec)]
    names = (workload.workload_name(owner, s, stage) for s in specs for stage in STAGES)
    return list(dict.fromkeys(names))


def _finished(ok: bool, message: str) -> Json:
    """Kueue's Finished condition (reason Succeeded or Failed, as its job framework writes)."""
    return {
        "type": "Finished",
        "status": "True",
        "reason": "Succeeded" if ok else "Failed",
        "message": message,
        "lastTransitionTime": now_iso(),
    }


def _gang_may_run(owner: Owner, stage: str) -> bool:
    """Whether the API server still has a Volcano job of ours for the stage (running or being
    deleted): a requeue waits for it, whatever a lagging watch (a new leader's) shows."""
    selector = (
        f"{ownership.LABEL_JOB}={naming.label_value(owner.name)},{ownership.LABEL_STAGE}={stage}"
    )
    gangs = k8s.list_vcjobs(owner.namespace, selector)
    return any(
        reads.ours(gang, owner)[0]
        and gang["metadata"].get("labels", {}).get(ownership.LABEL_STAGE) == stage
        for gang in gangs
    )


def _requeue(name: str, owner: Owner, read: Reader) -> None:
    """Clear an evicted Workload's admission, read whole first: the apply carries every status
    field Kueue's admission apply owns (the watch keeps only the conditions and admission)."""
    found, _other = reads.ours(kueueio.get_workload(owner.namespace, name), owner)
    body = None if found is None else workload.requeued(found, now_iso())
    if body is not None:
        written = kueueio.apply_workload_status(body, workload.ADMISSION_MANAGER)
        read.wrote(Kind.WORKLOAD, owner.namespace, name, written)


def _activity(want: bool, held: Held, read: Reader) -> None:
    """Set spec.active to `want` on each Workload whose state calls for it (kueuejob.active_due)."""
    phase = Phase.PENDING if want else Phase.SUSPENDED
    for found in held.workloads.values():
        if found is None:
            continue
        md = found["metadata"]
        if read.get(Kind.WORKLOAD, md["namespace"], md["name"]) is None:
            continue  # released in this pass (kueuejob.compile_unneeded)
        if kueuejob.active_due(workload_state(md["name"], found), phase) is want:
            read.wrote(Kind.WORKLOAD, md["namespace"], md["name"], kueueio.set_active(found, want))


def _ready(stage: str, held: Held, observed: Observed, read: Reader) -> None:
    """Write the PodsReady condition the stage's gang calls for (kueuejob.pods_ready)."""
    found = held.workloads.get(stage)
    if found is None:
        return
    name = found["metadata"]["name"]
    want = kueuejob.pods_ready(workload_state(name, found), kueuejob.child_of(observed, stage))
    if want is None:
        return
    message = kueuejob.PODS_READY_MESSAGES[want[1]]
    body = workload.pods_ready(found, want, message, now_iso())
    written = kueueio.apply_workload_status(body, workload.PODS_READY_MANAGER)
    read.wrote(Kind.WORKLOAD, found["metadata"]["namespace"], name, written)


def admitted(vcjob: Json, held: Held | None, stage: str) -> Json:
    """The stage's Volcano job with its admission's flavors and its admission checks'
    podSetUpdates on its pods (as built: no Kueue)."""
    if held is None:
        return vcjob
    if held.flavors.get(stage):
        vcjob = workload.with_flavors(vcjob, held.flavors[stage])
    found = held.workloads.get(stage)
    if found is None:
        return vcjob
    md = found["metadata"]  # read whole: the index keeps no admission checks
    whole = kueueio.get_workload(md["namespace"], md["name"])
    updates = workload.pod_set_updates(whole, naming.STAGE_SUFFIX[stage])
    return workload.with_updates(vcjob, updates)
