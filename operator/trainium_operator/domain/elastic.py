"""Pure: elastic training, which sizes a job may run at and when its gang changes size.

A size is a node count. Only sizes that keep the global batch are ever run: G must be a multiple
of size x processes per node x micro batch, so the trainer's gradient accumulation
G / (B x world size) is a whole number and every optimizer step sees G samples at every size
(the CRD refuses spec.nodes, minNodes and listed precompile sizes that cannot; sizes between
them that cannot are skipped). A shrink replaces a gang that has not formed for
shrinkAfterSeconds with one at the largest allowed size the schedulable nodes hold, down to
minNodes; a grow waits, once the nodes for a larger size are there, for the next checkpoint,
so it loses at most the steps since that checkpoint (the trainer also checkpoints on the
SIGTERM that stops the old gang). Neither spends runPolicy.maxRetries: status.elastic.resizes
counts them.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.domain.model import Child, Resize

Json = dict[str, Any]
SHRINK, GROW = "Shrink", "Grow"
#: The CRD's maxItems of status.elastic.sizes: the oldest goes first past it.
MAX_SIZES = 100
#: A gang in these states exists but has not formed (pods pending, or restarting).
NOT_FORMED = frozenset({Child.PENDING, Child.RESTARTING})


def keeps_batch(spec: TrainiumJobSpec, size: int) -> bool:
    """Whether the global batch is a whole number of micro batches of every process at size."""
    e = spec.elastic
    if e is None:
        return size == spec.nodes
    return e.globalBatchSize % (size * spec.procs_per_node * e.batchSizePerProcess) == 0


def allowed_sizes(spec: TrainiumJobSpec) -> tuple[int, ...]:
    """Sizes the job may run at, largest first: minNodes..nodes that keep the global batch."""
    low = spec.elastic.minNodes if spec.elastic else spec.nodes
    return tuple(n for n in range(spec.nodes, low - 1, -1) if keeps_batch(spec, n))


def precompile_sizes(spec: TrainiumJobSpec) -> tuple[int, ...]:
    """Sizes the precompile stage compiles, largest first: listed, else nodes and the next one."""
    if spec.elastic is None:
        return (spec.nodes,)
    if spec.elastic.precompileSizes:
        return tuple(sorted(set(spec.elastic.precompileSizes), reverse=True))
    return allowed_sizes(spec)[:2]


def accumulation(spec: TrainiumJobSpec, size: int) -> int | None:
    """Gradient accumulation steps the trainer derives at size (None: not elastic)."""
    e = spec.elastic
    if e is None:
        return None
    return e.globalBatchSize // (size * spec.procs_per_node * e.batchSizePerProcess)


def at_size(spec: TrainiumJobSpec, size: int) -> TrainiumJobSpec:
    """The spec a gang of `size` nodes is built from (its world size, cache entry, names)."""
    return spec if size == spec.nodes else replace(spec, nodes=size)


def fitting(spec: TrainiumJobSpec, schedulable: int) -> int:
    """The largest allowed size the schedulable nodes hold; minNodes when none fits."""
    sizes = allowed_sizes(spec)
    return next((n for n in sizes if n <= schedulable), sizes[-1])


def current(spec: TrainiumJobSpec, state: Mapping[str, Any], named: Named | None = None) -> int:
    """The size of the job's gang now (or next): the size of a resize named but not yet
    recorded, else status.elastic.currentNodes, else spec.nodes."""
    allowed = allowed_sizes(spec)
    if named is not None and unrecorded(state, named) and named.nodes in allowed:
        return named.nodes
    size = state.get("currentNodes")
    return size if isinstance(size, int) and size in allowed else spec.nodes


@dataclass(frozen=True)
class Named:
    """A resize's size, saved with its successor gang's name before the old gang is deleted.

    A leader that stops between that and its status write leaves status.elastic at the old
    size: the next pass builds the successor at this one, and records the resize then.
    """

    nodes: int
    #: Which resize it is: status.elastic.resizes once recorded.
    resize: int


def unrecorded(state: Mapping[str, Any], named: Named) -> bool:
    """Whether status.elastic has not yet recorded the named resize (its write was lost)."""
    return named.resize > int(state.get("resizes") or 0)


def named(state: Mapping[str, Any], resize: Resize) -> Named:
    """What to save with the successor's name: the resize made, state being after it."""
    return Named(resize.new, int(state.get("resizes") or 0))


def caught_up(spec: TrainiumJobSpec, state: Json, saved: Named | None, now: str) -> Json:
    """status.elastic with a resize whose successor was named but whose record was lost."""
    old, new = current(spec, state), current(spec, state, saved)
    if new == old:
        return state
    message = (
        f"from {old} to {new} nodes, as decided by a pass that named the successor gang at "
        "that size and stopped before recording it"
    )
    return resized(spec, state, Resize(old, new, SHRINK if new < old else GROW, message), now)


@dataclass(frozen=True)
class Look:
    """What the elastic decision sees in one pass."""

    training: Child
    now: str
    #: Ready, schedulable nodes this job's pods could land on (None: not counted this pass).
    schedulable: int | None = None
    #: The newest complete checkpoint's time (status.lastCheckpoint) and the live one's step.
    checkpoint_time: str | None = None
    checkpoint_step: int | None = None


def newest_step(*steps: int | None) -> int | None:
    """The newest checkpoint step of those seen (status, the latest reading, the pod watch)."""
    known = [s for s in steps if s is not None]
    return max(known) if known else None


def needs_count(spec: TrainiumJobSpec, state: Mapping[str, Any], look: Look) -> bool:
    """Whether this pass must count the schedulable nodes (a shrink or a grow may be due)."""
    if spec.elastic is None:
        return False
    size = current(spec, state)
    if look.training is Child.RUNNING:
        return size < spec.nodes
    return (
        look.training in NOT_FORMED
        and size > min(allowed_sizes(spec))
        and overdue(spec, state, look.now)
    )


def overdue(spec: TrainiumJobSpec, state: Mapping[str, Any], now: str) -> bool:
    """The gang has not formed for shrinkAfterSeconds."""
    left = shrink_in(spec, state, now)
    return left is not None and left <= 0


def shrink_in(spec: TrainiumJobSpec, state: Mapping[str, Any], now: str) -> float | None:
    """Seconds until a gang that has not formed is due a shrink (None: no gang is waiting)."""
    since = state.get("notFormedSince")
    if spec.elastic is None or not isinstance(since, str):
        return None
    return spec.elastic.shrinkAfterSeconds - _seconds(since, now)


def step(spec: TrainiumJobSpec, state: Mapping[str, Any], look: Look) -> tuple[Json, Resize | None]:
    """status.elastic after this pass, and the resize to make now (None: the size stays)."""
    size = current(spec, state)
    new: Json = {k: v for k, v in state.items() if k in _KEPT}
    new.update(currentNodes=size, wantedNodes=spec.nodes, display=f"{size}/{spec.nodes}")
    new.setdefault("resizes", 0)
    if look.training is not Child.ABSENT:  # the training gang's sizes, not a precompile stage's
        new.setdefault("sizes", [{"nodes": size, "since": look.now}])
    _track_formation(new, look)
    resize = _shrink(spec, new, look, size) or _grow(spec, new, look, size)
    if resize is None:
        return new, None
    return resized(spec, new, resize, look.now), resize


_KEPT = ("notFormedSince", "capacitySeenAt", "capacityCheckpointStep", "resizes", "lastResize",
         "sizes")  # fmt: skip


def _track_formation(new: Json, look: Look) -> None:
    """notFormedSince: when the gang was last seen not formed, kept until it runs."""
    if look.training in NOT_FORMED:
        new.setdefault("notFormedSince", look.now)
    else:
        new.pop("notFormedSince", None)


def _shrink(spec: TrainiumJobSpec, new: Json, look: Look, size: int) -> Resize | None:
    if look.training not in NOT_FORMED or look.schedulable is None:
        return None
    if not overdue(spec, new, look.now) or look.schedulable >= size:
        return None
    target = fitting(spec, look.schedulable)
    if target >= size:
        return None
    assert spec.elastic is not None
    message = (
        f"from {size} to {target} nodes because the training gang could not be formed again "
        f"at {size} for {spec.elastic.shrinkAfterSeconds}s (spec.elastic.shrinkAfterSeconds) "
        f"and {look.schedulable} schedulable node(s) can hold it; resuming from the newest "
        "checkpoint with the same global batch"
    )
    return Resize(size, target, SHRINK, message)


def _grow(spec: TrainiumJobSpec, new: Json, look: Look, size: int) -> Resize | None:
    if look.training is not Child.RUNNING or look.schedulable is None or size >= spec.nodes:
        return None
    target = fitting(spec, look.schedulable)
    if target <= size:
        for key in ("capacitySeenAt", "capacityCheckpointStep"):
            new.pop(key, None)
        return None
    seen = new.setdefault("capacitySeenAt", look.now)
    if "capacityCheckpointStep" not in new and look.checkpoint_step is not None:
        new["capacityCheckpointStep"] = look.checkpoint_step
        return None  # the step when capacity was seen: the next one is the boundary
    newer_step = look.checkpoint_step is not None and look.checkpoint_step > int(
        new.get("capacityCheckpointStep", look.checkpoint_step)
    )
    newer_time = look.checkpoint_time is not None and _seconds(seen, look.checkpoint_time) > 0
    if not (newer_step or newer_time):
        return None
    message = (
        f"from {size} to {target} nodes because {look.schedulable} schedulable node(s) are "
        f"there again (since {seen}); replaced at the checkpoint after that"
    )
    return Resize(size, target, GROW, message)


def resized(spec: TrainiumJobSpec, state: Json, resize: Resize, now: str) -> Json:
    """status.elastic once the gang is replaced at its new size."""
    out = {k: v for k, v in state.items() if k not in _RESET}
    sizes = [*state.get("sizes", []), {"nodes": resize.new, "since": now}][-MAX_SIZES:]
    out.update(
        currentNodes=resize.new,
        display=f"{resize.new}/{spec.nodes}",
        resizes=int(state.get("resizes", 0)) + 1,
        sizes=sizes,
        lastResize={
            "from": resize.old, "to": resize.new, "kind": resize.kind,
            "message": resize.message, "time": now,
        },
    )  # fmt: skip
    return out


_RESET = ("notFormedSince", "capacitySeenAt", "capacityCheckpointStep")


def size_timeline(state: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(since, nodes) of each size the job ran at, oldest first (cost counts node-hours by it)."""
    out = []
    for entry in state.get("sizes") or ():
        if isinstance(entry, dict) and isinstance(entry.get("since"), str):
            nodes = entry.get("nodes")
            if isinstance(nodes, int) and nodes > 0:
                out.append((entry["since"], nodes))
    return out


def _seconds(start: str, end: str) -> float:
    parse = datetime.datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()
