"""A pass's report: the status patch (guarded by the resourceVersion read) and its Events.

reconcile.py decides; this writes what was decided, once, and says so: a Warning for a new
blocker, a failure or a spent budget, a Normal or Warning Event for a phase transition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator.api import parsed
from trainium_operator.api.spec import Stragglers, TrainiumJobSpec
from trainium_operator.cluster import gangs, k8s
from trainium_operator.cluster.reads import Kind, Reader, version
from trainium_operator.domain import (
    budget,
    checkpoints,
    cost,
    elastic,
    events,
    history,
    lifecycle,
    nodes,
    status,
    stragglers,
)
from trainium_operator.domain.checkpoints import Checkpoint
from trainium_operator.domain.lifecycle import Decision
from trainium_operator.domain.model import Observed
from trainium_operator.domain.status import now_iso

Json = dict[str, Any]
#: (body, type, reason, message, action): post one Event about the job.
Emit = Callable[[Json, str, str, str, str], None]


@dataclass(frozen=True)
class Transition:
    """What one reconcile changed, for events and metrics."""

    namespace: str
    name: str
    old_phase: str | None
    new_phase: str
    reason: str
    message: str
    #: "hit" or "miss" when this pass decided the cache outcome for the first time.
    cache_outcome: str | None = None
    #: The job's final cost, on the transition into Succeeded or Failed.
    cost: cost.Cost | None = None
    #: What holds the job in its new phase (a blocker's reason: QueueNotFound), if anything.
    blocker: str | None = None


def status_of(body: Json) -> Json:
    status_now = body.get("status")
    return status_now if isinstance(status_now, dict) else {}


def inputs(body: Json, decision: Decision, spec: TrainiumJobSpec | None) -> status.Inputs:
    """What every status is composed from: the job as read, the decision, the spec, now."""
    meta, previous = body["metadata"], status_of(body)
    return status.Inputs(
        previous, decision, spec, Observed(), budget.Accounted(budget.read(previous)),
        name=meta["name"], generation=int(meta.get("generation", 1)),
        digests=parsed.digests(body) if spec is not None else {}, now=now_iso(),
        train_gang=gangs.owner_of(meta).train_gang,
    )  # fmt: skip


def write(
    body: Json, inputs: status.Inputs, emit: Emit, read: Reader
) -> tuple[Json, Transition | None, str | None]:
    """Patch status when it changed; Events on a phase transition and on a new blocker."""
    meta, previous, decision = body["metadata"], inputs.previous, inputs.decision
    new = status.compose(inputs)
    if new is previous:
        return previous, None, None
    patched = k8s.patch_trainiumjob_status(
        meta["namespace"],
        meta["name"],
        status.patch_body(previous, new),
        resource_version=meta.get("resourceVersion"),
    )
    read.wrote(Kind.TRAINIUMJOB, meta["namespace"], meta["name"], patched)
    _warn(body, inputs, emit)
    transition = announce(body, previous, new, decision, emit)
    if transition and decision.phase in lifecycle.TERMINAL and inputs.spec is not None:
        sizes = elastic.size_timeline(new.get("elastic") or {})
        job_cost = history.job_cost(inputs.spec, new["history"], inputs.now, sizes)
        transition = replace(transition, cost=job_cost)  # counted once, when the job finishes
    return new, transition, written_version(patched)


def _warn(body: Json, inputs: status.Inputs, emit: Emit) -> None:
    """Warnings a written status carries: budget spent or gone, a node kept out."""
    spec, obs = inputs.spec, inputs.observed
    max_retries = spec.runPolicy.maxRetries if spec is not None else 0
    for reason, message in budget.events(inputs.counted, max_retries):
        emit(body, "Warning", reason, message, events.RESTART)
    node = inputs.excluded_node
    if node is not None and obs.failure is not None:
        emit(body, "Warning", "NodeExcluded", nodes.event(node, obs.failure), events.RESTART)
    knobs = spec.stragglers if spec is not None else Stragglers()
    for entry in inputs.straggler_flags:  # flagged now (written with this status)
        emit(body, "Warning", "Straggler", stragglers.event(entry, knobs), events.FLAG)
    if obs.resize is not None:  # an elastic gang changes size (written with this status)
        emit(body, "Normal", "Resized", obs.resize.message, events.RESTART)


def late_checkpoint(
    body: Json, previous: Json, seen: Checkpoint | None, read: Reader
) -> str | None:
    """A finished job whose last pod reported after the final pass: add that checkpoint only.

    The pod and Volcano job watches are separate streams: the job's Completed may come first.
    """
    kept = checkpoints.carried(previous, seen)
    if kept is None or kept.to_status() == previous.get("lastCheckpoint"):
        return None
    meta = body["metadata"]
    patch = {"lastCheckpoint": kept.to_status()}
    patched = k8s.patch_trainiumjob_status(
        meta["namespace"], meta["name"], patch, resource_version=meta.get("resourceVersion")
    )
    read.wrote(Kind.TRAINIUMJOB, meta["namespace"], meta["name"], patched)
    return written_version(patched)


def written_version(patched: Json) -> str | None:
    """The resourceVersion a status patch produced (its watch event needs no new pass)."""
    return version(patched) if (patched.get("metadata") or {}).get("resourceVersion") else None


def announce(
    body: Json, previous: Json, new: Json, decision: Decision, emit: Emit
) -> Transition | None:
    """Events for a new blocker, a gang failure and a phase transition; the transition."""
    blocker = decision.blocker
    seen = {c.get("reason") for c in previous.get("conditions", []) if isinstance(c, dict)}
    if blocker and blocker.warn and blocker.reason not in seen:
        emit(body, "Warning", blocker.reason, blocker.message, events.WAIT)
    failure = new.get("lastFailure")
    if failure and failure != previous.get("lastFailure") and new["phase"] != "Failed":
        emit(body, "Warning", failure["reason"], failure["message"], events.RESTART)  # pods go
    old_phase = previous.get("phase")
    if old_phase == new["phase"]:
        return None
    reason = _reason(decision)
    kind = "Warning" if decision.phase is lifecycle.Phase.FAILED else "Normal"
    message = decision.message
    if blocker and blocker.warn and message == blocker.message:  # its Warning says it (once)
        message = f"{new['phase']}: waiting (see the {blocker.reason} Event)"
    emit(body, kind, reason, message, events.PHASE_ACTIONS.get(new["phase"], "Reconcile"))
    outcome = (new.get("cache") or {}).get("outcome")
    first = outcome if outcome != (previous.get("cache") or {}).get("outcome") else None
    meta = body["metadata"]
    return Transition(
        meta["namespace"], meta["name"], old_phase, new["phase"], reason, decision.message, first,
        blocker=blocker.reason if blocker else None,
    )  # fmt: skip


def _reason(decision: Decision) -> str:
    """The Event reason: the most specific condition reason of the new phase."""
    for cond in reversed(decision.conditions):
        if cond.status == "True" and cond.type in ("Failed", "Succeeded", "Running"):
            return cond.reason
    return decision.phase.value
