"""What a Kueue job's Workloads are told: created from the gang as built, marked Finished,
requeued, ungated, made ready or inactive, deleted (workloads.py reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainium_operator.api import naming, parsed
from trainium_operator.api.spec import SpecError, TrainiumJobSpec
from trainium_operator.cluster import inuse, k8s, kueueio, reads, workloads
from trainium_operator.cluster.reads import Kind, Reader
from trainium_operator.domain import elastic, kueuejob
from trainium_operator.domain.kueuestate import workload_state
from trainium_operator.domain.model import Action, Child, Observed, Phase
from trainium_operator.domain.quota import FINISHES, LIVE, waits_for_compile
from trainium_operator.domain.status import now_iso
from trainium_operator.manifests import builders, dra, ownership, workload
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]


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
    held: workloads.Held
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
    for name in workloads.every_name(spec, owner):
        found, _other = reads.ours(read.get(Kind.WORKLOAD, owner.namespace, name), owner)
        if found is not None and workload_state(name, found).state in LIVE:
            said = "succeeded" if ok else "failed"
            found = kueueio.finish_workload(found, _finished(ok, f"the job {said}"))
            read.wrote(Kind.WORKLOAD, owner.namespace, name, found)
        if found is not None:
            inuse.release(found, read)  # Finished (or being deleted): its quota is released


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


def _activity(want: bool, held: workloads.Held, read: Reader) -> None:
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


def _ready(stage: str, held: workloads.Held, observed: Observed, read: Reader) -> None:
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


def admitted(vcjob: Json, held: workloads.Held | None, stage: str) -> Json:
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
