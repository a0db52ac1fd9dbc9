"""Pure: the job's phase history on status, and the cost estimate computed from it.

status.history lists when each phase began, plus two kinds of span: the gang restarting (the
Running condition's reason `Restarting`) and a stage's gang created but not yet running
(`GangPending`: nodes launching, images pulling), so the cost of a job can be told after the
fact and after an operator restart: nothing lives only in the operator's memory.
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
GANG_PENDING = "GangPending"
#: History entries that are spans (since/until) inside a phase, not phases.
SPANS = frozenset({RESTARTING, GANG_PENDING})
MAX_ENTRIES = 100
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
    entries = [dict(e) for e in previous.get("history") or [] if isinstance(e, dict)]
    if new.get("phase") != previous.get("phase"):
        _close(entries, GANG_PENDING, now)
        entries.append({"phase": new["phase"], "since": now})
    was = _running_reason(previous) == RESTARTING
    _track(entries, RESTARTING, was, _running_reason(new) == RESTARTING, now)
    _track(entries, GANG_PENDING, _open(entries, GANG_PENDING), gang_pending, now)
    return entries[-MAX_ENTRIES:]


def _track(entries: list[Json], kind: str, was: bool, is_now: bool, now: str) -> None:
    if is_now and not was:
        entries.append({"phase": kind, "since": now})
    elif was and not is_now:
        _close(entries, kind, now)


def _open(entries: list[Json], kind: str) -> bool:
    return any(e["phase"] == kind and "until" not in e for e in entries)


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
    phases = [e for e in entries if e["phase"] not in SPANS]
    intervals = [
        (e["phase"], *_forward(e["since"], phases[i + 1]["since"] if i + 1 < len(phases) else None))
        for i, e in enumerate(phases)
    ]
    return cost.compute(
        spec.instanceType, spec.nodes, intervals, now=cost.to_datetime(now), prices=prices(),
        restarts=_spans(entries, RESTARTING), gang_pending=_spans(entries, GANG_PENDING),
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


@functools.cache
def prices() -> dict[str, Any]:
    """The price table: built-in defaults with the chart's `prices` (TRAINIUM_PRICES) applied."""
    table, error = cost.effective_prices(os.environ.get(cost.PRICES_ENV))
    if error:
        log.error("%s", error)
    return table
