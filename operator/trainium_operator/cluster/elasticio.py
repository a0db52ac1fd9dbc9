"""An elastic job's reads: which size each stage is built at, and the nodes that could hold it.

The decisions are elastic.py's (pure); this picks the spec a pass observes and builds with (the
precompile stage walks through spec.elastic's precompile sizes, one cache entry each, before
training starts), and counts the schedulable nodes only when a shrink or a grow may be due.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.instances import INSTANCE_TYPE_LABEL
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.cluster import k8s, workloads
from trainium_operator.cluster.reads import Kind, Reader
from trainium_operator.domain import capacity, checkpoints, elastic, nodes
from trainium_operator.domain.kueuestate import Admission, Quota, workload_state
from trainium_operator.domain.lifecycle import Observed
from trainium_operator.manifests import cache, workload
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]
#: Phases before the training gang first exists: the precompile sizes are compiled then.
_BEFORE_TRAINING = frozenset({None, "Pending", "WaitingForCache", "Precompiling"})


def state_of(previous: Mapping[str, Any]) -> Json:
    """status.elastic as written ({} when absent or malformed)."""
    found = previous.get("elastic")
    return dict(found) if isinstance(found, dict) else {}


def stage_spec(spec: TrainiumJobSpec, owner: Owner, previous: Mapping[str, Any],
               read: Reader, named: elastic.Named | None = None) -> TrainiumJobSpec:  # fmt: skip
    """The spec this pass observes and builds: the next precompile size still to compile
    before training starts, else the gang's current size (named: a resize's, gangs.py)."""
    if spec.elastic is None:
        return spec
    todo = to_compile(spec, owner, previous, read)
    size = todo[0] if todo else elastic.current(spec, state_of(previous), named)
    return elastic.at_size(spec, size)


def to_compile(spec: TrainiumJobSpec, owner: Owner, previous: Mapping[str, Any],
               read: Reader) -> list[int]:  # fmt: skip
    """The precompile sizes still to compile before training starts, largest first."""
    if spec.elastic is None or spec.precompile.policy == "Never":
        return []
    if previous.get("trainingJob") or previous.get("phase") not in _BEFORE_TRAINING:
        return []  # training started: a later size compiles when a resize needs it
    sizes = elastic.precompile_sizes(spec)
    return [n for n in sizes if not _compiled(elastic.at_size(spec, n), owner, read)]


def hold_training(spec: TrainiumJobSpec, stage: TrainiumJobSpec, owner: Owner,
                  previous: Mapping[str, Any], read: Reader,
                  named: elastic.Named | None = None) -> bool:  # fmt: skip
    """Another precompile size is still to compile, or this one is not the size training starts
    at: training waits (the pass after the last record builds it at the current size)."""
    todo = to_compile(spec, owner, previous, read)
    current = elastic.current(spec, state_of(previous), named)
    return bool(todo) and (any(n != stage.nodes for n in todo) or stage.nodes != current)


def _compiled(spec: TrainiumJobSpec, owner: Owner, read: Reader) -> bool:
    """The size's cache entry is Ready (IfNotCached), or its own precompile job finished."""
    ident = cache.identity(spec)
    entry = cache.read_entry(read.get(Kind.RECORD, owner.namespace, ident.record_name), ident)
    if spec.precompile.policy == "Always":
        return False if entry is None else _own_compile_done(spec, owner, read)
    return entry is not None and entry.state == cache.READY


def _own_compile_done(spec: TrainiumJobSpec, owner: Owner, read: Reader) -> bool:
    """precompile.policy Always: this job's precompile job of that size exists (and recorded)."""
    name = naming.vcjob_name(owner.name, "precompile", spec.precompile_size)
    return read.get(Kind.VCJOB, owner.namespace, name) is not None


@dataclass(frozen=True)
class Sighting:
    """What a pass saw that the elastic decision reads besides status."""

    observed: Observed
    #: The newest checkpoint the training pods reported (the pod watch, or read in this pass).
    checkpoint: checkpoints.Checkpoint | None
    now: str
    #: The progress of rank 0's latest reading, written to status or not (it is every
    #: progressWriteSeconds; a reading is every progressIntervalSeconds).
    progress: Mapping[str, Any] | None = None
    #: A resize's size saved with the training gang's name (gangs.named_size).
    named: elastic.Named | None = None
    #: Kueue: the job (its Workloads' names) and its Workloads as read (a grow waits for one).
    owner: Owner | None = None
    held: workloads.Held | None = None


def look(
    spec: TrainiumJobSpec, previous: Mapping[str, Any], sight: Sighting
) -> tuple[Observed, Json | None, float | None]:
    """(the observation with any resize, status.elastic to write, seconds until a shrink is due)."""
    observed, now = sight.observed, sight.now
    if spec.elastic is None:
        return observed, None, None
    state = elastic.caught_up(spec, state_of(previous), sight.named, now)
    checkpoint = sight.checkpoint
    seen = elastic.Look(
        observed.training, now,
        checkpoint_time=checkpoint.time if checkpoint else None,
        checkpoint_step=elastic.newest_step(
            _checkpoint_step(previous.get("progress")), _checkpoint_step(sight.progress),
            checkpoint.step if checkpoint else None,
        ),
    )  # fmt: skip
    if elastic.needs_count(spec, state, seen):
        selector = f"{INSTANCE_TYPE_LABEL}={spec.instanceType}"
        count = capacity.schedulable(k8s.list_nodes(selector), spec, nodes.names(previous))
        seen = replace(seen, schedulable=count)
    new, resize = elastic.step(spec, state, seen)
    kueue, held = observed.quota, sight.held
    if resize is not None and resize.kind == elastic.GROW and kueue and held and sight.owner:
        # Kueue: the gang keeps its size and its admission until the larger size's Workload is
        # admitted (issue 41), as Kueue's own elastic jobs replace a slice only then.
        kueue, admitted = growing(spec, sight.owner, kueue, held, resize.new)
        observed = replace(observed, quota=kueue)
        if not admitted:
            new, resize = elastic.step(spec, state, replace(seen, schedulable=None))
    if resize is not None:
        observed = replace(observed, resize=resize)
    return observed, new, elastic.shrink_in(spec, new, now)


def _checkpoint_step(progress: Any) -> int | None:
    """The checkpoint step rank 0 served, as a progress (status.progress, a reading) holds it."""
    step = progress.get("checkpointStep") if isinstance(progress, Mapping) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def growing(
    spec: TrainiumJobSpec, owner: Owner, kueue: Quota, held: workloads.Held, size: int
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


def matching(held: workloads.Held, kueue: Quota) -> workloads.Held:
    """The Held a pass acts with once the elastic look decided: only the stale Workloads the
    Quota still names are deleted, and a grow's Workload is made at its size."""
    stale = tuple(b for b in held.stale if b["metadata"]["name"] in kueue.stale)
    return replace(held, stale=stale, grow=kueue.grow_size if kueue.grow is not None else 0)
