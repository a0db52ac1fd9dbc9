"""Pure: the job's phase history on status, and the cost estimate computed from it.

status.history lists when each phase began and the gang's restarts (the Running condition's
reason `Restarting`, since/until); a phase's entry also lists, as `waitedForGang`, the spans its
stage's gang was created but not running yet ("since/until" intervals: nodes launching, images
pulling), so the cost of a job can be told after the fact and after an operator restart:
nothing lives only in the operator's memory, and `kubectl describe` shows the transitions.
`kubectl describe` prints each entry's keys sorted, with nothing between entries: the spans'
key sorts after `phase` and `since`, so every entry starts at its Phase line (as `gangPending`
they printed first and read as part of the entry before; issue 43).
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.domain import cost

Json = dict[str, Any]
RESTARTING = "Restarting"
#: Before issue 34, GangPending spans were entries of their own: read, moved into their phase.
GANG_PENDING = "GangPending"
#: History entries that are spans (since/until) inside a phase, not phases.
SPANS = frozenset({RESTARTING, GANG_PENDING})
MAX_ENTRIES = 100
#: A phase entry's list of gang-pending spans, "since/until" ("since/" while open).
PENDING = "waitedForGang"
#: The same list as an operator before issue 43 named it: read, renamed at the next write.
LEGACY_PENDING = "gangPending"
#: Spans kept per phase (each replaced or resized gang waits anew): the latest ones.
MAX_PENDING = 20
log = logging.getLogger(__name__)


def _running_reason(status: Json) -> str | None:
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Running":
            return cond.get("reason")
    return None


def advance(previous: Json, new: Json, now: str, *, gang_pending: bool = False) -> list[Json]:
    """The history with this pass's phase change and span starts/ends appended.

    A pending-gang span belongs to one stage: a phase change closes it (the next stage's gang
    opens its own).
    """
    entries = upgraded(previous.get("history"))
    if new.get("phase") != previous.get("phase"):
        _pend(entries, False, now)
        entries.append({"phase": new["phase"], "since": now})
    was = _running_reason(previous) == RESTARTING
    _track(entries, RESTARTING, was, _running_reason(new) == RESTARTING, now)
    _pend(entries, gang_pending, now)
    return entries[-MAX_ENTRIES:]


def upgraded(history: Any) -> list[Json]:
    """A copy of status.history in this form: GangPending entries an older operator wrote move
    into the phase entry before them, as spans; its gangPending lists become waitedForGang."""
    entries: list[Json] = []
    for entry in history if isinstance(history, list) else ():
        if not isinstance(entry, dict) or not isinstance(entry.get("since"), str):
            continue
        if entry.get("phase") != GANG_PENDING:
            entries.append(_renamed(entry))
            continue
        owner = _phase_entry(entries)
        if owner is not None:
            spans = [*(owner.get(PENDING) or ()), f"{entry['since']}/{entry.get('until') or ''}"]
            owner[PENDING] = spans[-MAX_PENDING:]
    return entries


def _renamed(entry: Json) -> Json:
    """A copy of a phase entry with an older operator's gangPending spans as waitedForGang."""
    out = dict(entry)
    legacy = out.pop(LEGACY_PENDING, None)
    if legacy and PENDING not in out:
        out[PENDING] = list(legacy)[-MAX_PENDING:]
    return out


def _phase_entry(entries: list[Json]) -> Json | None:
    """The entry of the phase the job is in (the last that is not a span)."""
    return next((e for e in reversed(entries) if e.get("phase") not in SPANS), None)


def _pend(entries: list[Json], pending: bool, now: str) -> None:
    """Open or close the current phase's gang-pending span."""
    owner = _phase_entry(entries)
    if owner is None:
        return
    spans = list(owner.get(PENDING) or ())
    is_open = bool(spans) and spans[-1].endswith("/")
    if pending and not is_open:
        spans.append(f"{now}/")
    elif is_open and not pending:
        spans[-1] += now
    else:
        return
    owner[PENDING] = spans[-MAX_PENDING:]


def _track(entries: list[Json], kind: str, was: bool, is_now: bool, now: str) -> None:
    if is_now and not was:
        entries.append({"phase": kind, "since": now})
    elif was and not is_now:
        _close(entries, kind, now)


def _close(entries: list[Json], kind: str, now: str) -> None:
    for entry in reversed(entries):
        if entry["phase"] == kind and "until" not in entry:
            entry["until"] = now
            break


def job_cost(
    spec: TrainiumJobSpec, entries: list[Json], now: str, sizes: list[tuple[str, int]] | None = None
) -> cost.Cost:
    """The job's cost from the history, as of now (the last phase runs until now).

    sizes: an elastic job's gang sizes over time (elastic.size_timeline).
    """
    entries = upgraded(entries)
    phases = [e for e in entries if e["phase"] not in SPANS]
    intervals = [
        (e["phase"], *_forward(e["since"], phases[i + 1]["since"] if i + 1 < len(phases) else None))
        for i, e in enumerate(phases)
    ]
    return cost.compute(
        spec.instanceType, spec.nodes, intervals, now=cost.to_datetime(now), prices=prices(),
        restarts=_spans(entries, RESTARTING), gang_pending=pending_spans(entries),
        sizes=sizes or (),
    )  # fmt: skip


def _forward(since: str, until: str | None) -> cost.Interval:
    """An interval that never ends before it starts: a clock that stepped back counts 0 s.

    The history is written by whichever operator process ran each pass (its own clock).
    """
    if until is not None and cost.to_datetime(until) < cost.to_datetime(since):
        return since, since
    return since, until


def _spans(entries: list[Json], kind: str) -> list[cost.Interval]:
    return [_forward(e["since"], e.get("until")) for e in entries if e["phase"] == kind]


def pending_spans(entries: list[Json]) -> list[cost.Interval]:
    """Every phase's gang-pending spans, as intervals (an open one runs until now)."""
    out = []
    for entry in entries:
        for span in entry.get(PENDING) or ():
            since, _sep, until = str(span).partition("/")
            out.append(_forward(since, until or None))
    return out


@functools.cache
def prices() -> dict[str, Any]:
    """The price table: built-in defaults with the chart's `prices` (TRAINIUM_PRICES) applied."""
    table, error = cost.effective_prices(os.environ.get(cost.PRICES_ENV))
    if error:
        log.error("%s", error)
    return table
