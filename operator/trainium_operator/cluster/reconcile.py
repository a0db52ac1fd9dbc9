"""The cluster backend: observe a TrainiumJob's children, let the lifecycle decide, act, report.

Level-based and idempotent: any number of calls, from any trigger, in any order, converge on the
same children and status. Creates tolerate "already exists", so a restarted operator adopts what
exists; what the API server refuses is an observation fed back to the lifecycle, never lost.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator.api import parsed
from trainium_operator.api.spec import SpecError, TrainiumJobSpec
from trainium_operator.cluster import (
    actions,
    elasticio,
    fsx,
    gangs,
    judge,
    k8s,
    lookagain,
    orphans,
    report,
    workloads,
    workloadwrites,
)
from trainium_operator.cluster.memory import Memory
from trainium_operator.cluster.observe import Seen, Views, observe
from trainium_operator.cluster.reads import ApiReader, Kind, Reader
from trainium_operator.cluster.report import Emit, Transition
from trainium_operator.domain import (
    elastic,
    lifecycle,
    quota,
)
from trainium_operator.domain.lifecycle import Action, Decision, Observed, Phase
from trainium_operator.domain.model import Rejection
from trainium_operator.domain.orphans import Orphan, explain
from trainium_operator.domain.status import now_iso
from trainium_operator.manifests import workload
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]
#: Waits whose end arrives as a watch event (the claim, the queue, our PV): no polling for them.
WATCHED = frozenset(
    {"ClaimNotFound", "ClaimPending", "ClaimLost", "QueueNotFound", "QueueNotOpen",
     "QueueNotLeaf", "VolumeTerminating", "GangStopping", "PriorityClassNotFound",
     "WaitingForQuota", workloads.QUEUE_NAME_REMOVED}
)  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """What one pass left behind: the phase, the transition made, when to come back."""

    phase: str | None
    transition: Transition | None = None
    #: A finished job with ttlSecondsAfterFinished: seconds until it is deleted.
    ttl_remaining: float | None = None
    #: The job waits on something that may heal (a prerequisite, a quota, a 5xx): back off.
    waiting: bool = False
    #: Seconds until runPolicy.activeDeadlineSeconds passes (a look is due then).
    deadline_in: float | None = None
    #: Cache figures that appeared on status in this pass (compileSeconds, savedSeconds).
    cache_figures: tuple[tuple[str, float], ...] = ()
    #: The job is finished for good (Succeeded, or Failed after it was admitted).
    final: bool = False
    #: What the next pass of this job starts from (None: the job is gone, nothing to keep).
    memory: Memory | None = None


class StaleRead(Exception):
    """The pass read an older status than this object's passes wrote: read again, later."""


def reconcile(
    namespace: str,
    name: str,
    emit: Emit,
    views: Views | None = None,
    lookup: fsx.FsxLookup | None = None,
) -> Outcome:
    """One pass over one TrainiumJob: derive, act, report; a finished job only ages out."""
    views = views or Views()
    read = views.reader
    body = read.get(Kind.TRAINIUMJOB, namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp") or _another(body, views.uid):
        return Outcome(None)  # this object is gone (the name may hold a new one: not ours)
    previous, memory = report.status_of(body), views.memory
    if memory.finished and not lifecycle.is_final(previous):
        raise StaleRead(f"{namespace}/{name}: read a status older than our finished one")
    if settled(previous, int(body["metadata"].get("generation", 1))):
        workloadwrites.settle(body, read)  # Kueue: until its Workloads are Finished (issue 41)
        rv = report.late_checkpoint(body, previous, views.checkpoint, read)
        return _kept(expire(body, previous, reader=read), memory, rv)
    try:
        spec = parsed.spec(body)
    except SpecError as exc:
        inputs = report.inputs(body, lifecycle.invalid(exc.problems), None)
        new, transition, rv = report.write(body, inputs, emit, read)
        return _kept(Outcome(new.get("phase"), transition), memory, rv)
    kueue = workload.opt_in(body["metadata"].get("labels"))  # None: no Kueue, nothing changes
    if kueue is None:  # unless it lost the label after it had a Workload (issue 41)
        kueue = workloads.kept(spec, gangs.owner_of(body["metadata"]), body, read)
    if kueue is not None and spec.elastic is not None:  # a Workload per size (kueuejob.py)
        kueue = replace(kueue, sizes=elastic.allowed_sizes(spec))
    return _run(body, spec, emit, replace(views, now=now_iso(), kueue=kueue), lookup)


def _run(
    body: Json, spec: TrainiumJobSpec, emit: Emit, views: Views, lookup: fsx.FsxLookup | None
) -> Outcome:
    """A valid, unfinished job: observe, decide, act; report unless a created child will."""
    read = views.reader
    body, looked = _look(body, spec, emit, views, lookup)
    owner, spec = looked.owner, looked.spec
    seen, observed, counted = judge.judge(body, spec, looked.seen, views)
    seen, observed, sized, shrink_in = _elastic(looked, seen, observed, views.now)
    spared = judge.spares_status(body, spec, owner, seen, views, emit, looked.lost, observed)
    decision = _decided(observed, looked, read)
    if Action.STOP_TRAINING in decision.actions and _replacing(observed) and seen.train_uid:
        size = elastic.named(sized or {}, observed.resize) if observed.resize else None
        body, _ = gangs.name_successor(body, owner, seen.train_uid, read, size)  # before the delete
    gangs.finish_replacing(owner, seen.train)
    rejections = actions.perform(decision.actions, spec, owner, seen, read)
    soonest = lookagain.next_look(spec, looked.previous, seen, shrink_in, decision)
    if rejections:  # what the API server refused is observed, and decided on, in this pass
        decision = _redecided(decision, observed, rejections, looked, seen, read)
    if views.kueue is not None:  # no watch of Workloads: look again soon (issue 33)
        soonest = lookagain.soonest(soonest, lookagain.unwatched(decision, read))
    if not rejections and _ECHOED.intersection(decision.actions):
        # The child just created wakes this job when its watch event arrives: that pass sees
        # it and reports. A status written now would say what existed before, and be redone.
        return Outcome(decision.phase.value, deadline_in=soonest, memory=_learnt(views, seen))
    inputs = replace(
        report.inputs(body, decision, spec),
        observed=observed, counted=counted, checkpoint=seen.checkpoint, progress=seen.progress,
        elastic=sized, spares=spared, stragglers=seen.stragglers,
        straggler_flags=seen.straggler_flags,
    )  # fmt: skip
    new, transition, rv = report.write(body, inputs, emit, read)
    outcome = replace(
        expire(body, new, spec, reader=read),
        transition=transition,
        waiting=_waiting(decision, rejections),
        cache_figures=_new_figures(report.status_of(body), new),
        deadline_in=soonest,
    )
    return _kept(outcome, _learnt(views, seen), rv)


@dataclass(frozen=True)
class _Looked:
    """One pass's first reads of a job: whose it is, its spec now, and what was seen."""

    owner: Owner
    #: The job's spec, and the one this pass observes and builds (an elastic stage's size).
    full: TrainiumJobSpec
    spec: TrainiumJobSpec
    previous: Json
    #: A resize's size saved with the training gang's name (gangs.named_size).
    named: elastic.Named | None
    seen: Seen
    #: Nodes whose pods this pass removed (a Node deleted): a spare may take their place.
    lost: tuple[str, ...] = ()


def _look(
    body: Json, spec: TrainiumJobSpec, emit: Emit, views: Views, lookup: fsx.FsxLookup | None
) -> tuple[Json, _Looked]:
    """Observe the job (again under a fresh gang name if another owner's object holds its own)."""
    md, read = body["metadata"], views.reader
    owner, named = gangs.owner_of(md), gangs.named_size(md)
    previous = report.status_of(body)
    gone: list[Orphan] = []  # a Node deleted: pods go now, not PodGC's 40 s
    orphans.reap(body, views.orphans, emit, read, gone)
    staged = elasticio.stage_spec(spec, owner, previous, read, named)  # its size now
    seen = observe(staged, owner, views, lookup)
    if seen.name_taken is not None and seen.name_taken.rename:  # never that name: a fresh one
        body = gangs.take_fresh_name(body, seen.name_taken.holder, read, emit)
        owner = gangs.owner_of(body["metadata"])
        seen = observe(staged, owner, views, lookup)
    if gone:  # its restart is a disruption, even if Volcano deleted the pod before we saw it
        failure = explain(seen.observed.failure, gone)
        seen = replace(seen, observed=replace(seen.observed, failure=failure))
    lost = tuple(o.node for o in gone)
    return body, _Looked(owner, spec, staged, previous, named, seen, lost)


def _elastic(
    looked: _Looked, seen: Seen, observed: Observed, now: str
) -> tuple[Seen, Observed, Json | None, float | None]:
    """An elastic job's look: any resize due, status.elastic, seconds until a shrink is due;
    under Kueue a grow waits for its Workload (the Workloads held are the size's now)."""
    sight = elasticio.Sighting(
        observed, seen.checkpoint, now, seen.progress_read, looked.named, looked.owner, seen.kueue
    )
    observed, sized, shrink_in = elasticio.look(looked.full, looked.previous, sight)
    if seen.kueue is not None and observed.quota is not None:
        seen = replace(seen, kueue=elasticio.matching(seen.kueue, observed.quota))
    return seen, observed, sized, shrink_in


def _decided(observed: Observed, looked: _Looked, read: Reader) -> Decision:
    """The lifecycle's decision; an elastic job's next precompile size goes before training."""
    decision = lifecycle.decide(observed)
    if Action.CREATE_TRAINING in decision.actions and elasticio.hold_training(
        looked.full, looked.spec, looked.owner, looked.previous, read, looked.named
    ):  # the next precompile size goes first: its pass starts when this record is written
        acts = _without(decision.actions, Action.CREATE_TRAINING)
        msg = "filling the Neuron compile cache: the next elastic size (spec.elastic)"
        decision = replace(decision, phase=Phase.PRECOMPILING, message=msg, actions=acts)
    return decision


def _redecided(
    decision: Decision,
    observed: Observed,
    rejections: tuple[Rejection, ...],
    looked: _Looked,
    seen: Seen,
    read: Reader,
) -> Decision:
    """Decide again on what the API server refused; carry out the finishes not yet made."""
    done = decision.actions  # finishes come first: those asked before were carried out
    decision = lifecycle.decide(replace(observed, rejections=rejections))
    # a refusal that ends the job releases its quota in this pass (issue 41)
    left = tuple(a for a in quota.finishes(decision) if a not in done)
    actions.perform(left, looked.spec, looked.owner, seen, read)
    return decision


def _replacing(observed: Observed) -> bool:
    """The training gang is stopped to be replaced (a fault, a hang, a resize), not for good."""
    return observed.replace_gang or observed.resize is not None


def _without(acts: tuple[Action, ...], action: Action) -> tuple[Action, ...]:
    return tuple(a for a in acts if a is not action)


def _learnt(views: Views, seen: Seen) -> Memory:
    """What this pass's look adds to the job's memory: its metrics read and what it made,
    its Event look."""
    return replace(
        views.memory,
        metrics_read_at=seen.metrics_read_at,
        events_looked=seen.events_looked,
        progress=seen.progress_read,
    )


def _kept(outcome: Outcome, memory: Memory, written: str | None) -> Outcome:
    """The outcome with the memory the next pass starts from: our write, a finished job."""
    memory = replace(
        memory,
        written_version=written or memory.written_version,
        finished=memory.finished or outcome.final,
    )
    return replace(outcome, memory=memory)


def _another(body: Json, uid: str) -> bool:
    """Whether the name now holds another object than the one this pass is for."""
    return bool(uid) and body["metadata"].get("uid") != uid


def _waiting(decision: Decision, rejections: tuple[Rejection, ...]) -> bool:
    """Back off: a blocker no watch event ends, or a refusal (the refuser may see otherwise)."""
    blocker = decision.blocker
    return blocker is not None and (blocker.reason not in WATCHED or bool(rejections))


#: Creates whose child's watch event wakes the job (handlers.on_vcjob, on_volume): the pass
#: that creates leaves the status to that pass, so `decide` runs once per pass (twice only in a
#: pass whose writes the API server refused) and a lifecycle writes no status twice.
_ECHOED = frozenset({Action.CREATE_STORAGE, Action.CREATE_PRECOMPILE, Action.CREATE_TRAINING})


def _new_figures(previous: Json, new: Json) -> tuple[tuple[str, float], ...]:
    """Compile seconds spent or saved that this pass put on status for the first time."""
    before, after = previous.get("cache") or {}, new.get("cache") or {}
    return tuple(
        (k, float(after[k]))
        for k in ("compileSeconds", "savedSeconds")
        if k in after and k not in before
    )


def expire(
    body: Json,
    status_now: Json,
    spec: TrainiumJobSpec | None = None,
    *,
    reader: Reader | None = None,
) -> Outcome:
    """Delete a finished job once ttlSecondsAfterFinished has passed (children go with it).

    An invalid job is never deleted by its TTL: nobody would see why it failed.
    """
    phase = status_now.get("phase")
    if phase not in {p.value for p in lifecycle.TERMINAL}:
        return Outcome(phase)
    final = lifecycle.is_final(status_now)
    if spec is None:
        spec = _valid_spec(body, status_now)
    ttl = spec.runPolicy.ttlSecondsAfterFinished if spec else None
    now = datetime.datetime.now(datetime.timezone.utc)
    remaining = lifecycle.ttl_remaining(status_now.get("completionTime"), ttl, now)
    if remaining is not None and remaining <= 0:
        meta = body["metadata"]
        k8s.delete_trainiumjob(meta["namespace"], meta["name"], meta.get("uid"))
        (reader or ApiReader()).deleted(Kind.TRAINIUMJOB, meta["namespace"], meta["name"])
        return Outcome(phase, final=final)
    return Outcome(phase, ttl_remaining=remaining, final=final)


def _valid_spec(body: Json, status_now: Json) -> TrainiumJobSpec | None:
    """The job's spec when it is valid; None for one that failed validation."""
    conditions = status_now.get("conditions") or []
    if any(c.get("reason") == "InvalidSpec" for c in conditions if isinstance(c, dict)):
        return None
    try:
        return parsed.spec(body)
    except SpecError:
        return None


def settled(previous: Json, generation: int) -> bool:
    """A finished job stays finished (and untouched) until its spec changes."""
    done = previous.get("phase") in {p.value for p in lifecycle.TERMINAL}
    return done and previous.get("observedGeneration") == generation
