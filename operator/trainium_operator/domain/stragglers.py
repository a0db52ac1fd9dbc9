"""Pure: a node whose steps stay slower than the rest of the gang's, for a window (a straggler).

In a synchronous gang every step waits for the slowest node, so one slow node drags all the
others. The trainer reports each node's rank-local step time (the gauge
contract.METRIC_NODE_STEP_SECONDS, labelled with the node's index in the gang, which rank 0
serves for all nodes); at each progress reading the operator compares every node with the gang's
median. A node at or above spec.stragglers.threshold x the median at every reading for
spec.stragglers.windowSeconds is flagged: status.stragglers says so (a Warning Event and the
metric trainium_operator_job_straggler_nodes follow it). With spec.stragglers.replace, a flagged
node is taken out at the next checkpoint after the flag, as an unhealthy node is (health.py): the
gang stops, the node is kept out of the next gangs, no retry is spent.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from trainium_operator.api.spec import Stragglers
from trainium_operator.domain.failures import Failure, make_failure
from trainium_trainer import contract

Json = dict[str, Any]
#: The CRD's maxItems of status.stragglers.
MAX_ENTRIES = 16
#: The failure class (failures.POLICIES) of a gang stopped to leave a straggler.
REASON = "Straggler"


def parse(text: str) -> dict[int, float]:
    """Node index -> its step seconds, from the trainer's metrics text ({}: none served)."""
    out: dict[int, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name != contract.METRIC_NODE_STEP_SECONDS:
                    continue
                index = sample.labels.get(contract.NODE_STEP_LABEL, "")
                value = float(sample.value)
                if index.isdigit() and value > 0 and value != float("inf"):
                    out[int(index)] = value
    except (ValueError, TypeError, IndexError):
        return {}
    return out


@dataclass(frozen=True)
class Judged:
    """status.stragglers after one reading (None: leave it) and the nodes flagged by it."""

    entries: list[Json] | None
    flagged: tuple[Json, ...] = ()


def judge(
    times: Mapping[int, float],
    names: Mapping[int, str],
    previous: Sequence[Json],
    knobs: Stragglers,
    now: str,
    checkpoint: int | None = None,
) -> Judged:
    """Compare each node's step time with the gang's median; flag those slow for the window.

    `names`: node index -> node name (a node not bound yet is not judged); `checkpoint`: the
    newest checkpoint step seen, recorded with a flag (the replacement waits for a newer one).
    """
    known = {i: t for i, t in times.items() if i in names}
    if len(known) < 2:
        return Judged(None)
    median = statistics.median(known.values())
    kept = {(e.get("index"), e.get("node")): e for e in previous if isinstance(e, Mapping)}
    entries, flagged = [], []
    for index, seconds in sorted(known.items()):
        ratio = seconds / median if median > 0 else 0.0
        if ratio < knobs.threshold:
            continue  # back under the threshold: a later slow spell starts a new window
        old = kept.get((index, names[index]))
        entry = dict(old) if old else {"index": index, "node": names[index], "since": now}
        entry.update(ratio=round(ratio, 3), stepSeconds=round(seconds, 6))
        if "flaggedAt" not in entry and _seconds(entry["since"], now) >= knobs.windowSeconds:
            entry["flaggedAt"] = now
            if checkpoint is not None:
                entry["checkpointStep"] = checkpoint
            flagged.append(entry)
        entries.append(entry)
    entries = entries[:MAX_ENTRIES]
    if _same(previous, entries):
        return Judged(None, tuple(flagged))
    return Judged(entries, tuple(flagged))


def _same(previous: Sequence[Json], entries: Sequence[Json]) -> bool:
    """Whether status would say the same (a ratio's wobble alone is not worth a write)."""
    keys = ("index", "node", "since", "flaggedAt", "checkpointStep")
    pick = lambda es: [tuple(e.get(k) for k in keys) for e in es]  # noqa: E731
    return pick(previous) == pick(entries)


def flagged(entries: Sequence[Json]) -> list[Json]:
    """The entries flagged as stragglers."""
    return [e for e in entries if isinstance(e, Mapping) and e.get("flaggedAt")]


def to_replace(
    entries: Sequence[Json], knobs: Stragglers, checkpoint: int | None, excluded: Sequence[str]
) -> Failure | None:
    """A flagged node to take out now: spec asks for it and a checkpoint landed since the flag."""
    if not knobs.replace or checkpoint is None:
        return None
    for entry in flagged(entries):
        node = str(entry.get("node") or "")
        since = entry.get("checkpointStep")
        if not node or node in excluded or (isinstance(since, int) and checkpoint <= since):
            continue
        return replace(make_failure(REASON, event(entry, knobs, replacing=True)), node=node)
    return None


def event(entry: Mapping[str, Any], knobs: Stragglers, replacing: bool = False) -> str:
    """The Straggler Event's message: which node, how slow, what happens next."""
    then = (
        "the gang is recreated without it at this checkpoint"
        if replacing
        else "it is replaced at the next checkpoint (spec.stragglers.replace)"
        if knobs.replace
        else "set spec.stragglers.replace to take it out at the next checkpoint"
    )
    return (
        f"node {entry.get('node')} (gang index {entry.get('index')}) steps "
        f"{entry.get('ratio')}x the gang's median step time (threshold {knobs.threshold}) "
        f"since {entry.get('since')} (window {knobs.windowSeconds}s): a straggler; {then}"
    )


def _seconds(start: Any, end: str) -> float:
    """Seconds from start to end (RFC 3339); 0 when start is not a time."""
    parse_ = datetime.datetime.fromisoformat
    try:
        began = parse_(str(start).replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (parse_(end.replace("Z", "+00:00")) - began).total_seconds()
