"""Pure: the job's phase history on status, and the cost estimate computed from it.

status.history lists when each phase began, plus the spans the gang spent restarting (the
Running condition's reason `Restarting`), so the cost of a job can be told after the fact and
after an operator restart: nothing lives only in the operator's memory.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

from trainium_operator import cost
from trainium_operator.spec import TrainiumJobSpec

Json = dict[str, Any]
RESTARTING = "Restarting"
MAX_ENTRIES = 100
log = logging.getLogger(__name__)


def _running_reason(status: Json) -> str | None:
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Running":
            return cond.get("reason")
    return None


def advance(previous: Json, new: Json, now: str) -> list[Json]:
    """The history with this pass's phase change and restart span start/end appended."""
    entries = [dict(e) for e in previous.get("history") or [] if isinstance(e, dict)]
    if new.get("phase") != previous.get("phase"):
        entries.append({"phase": new["phase"], "since": now})
    was = _running_reason(previous) == RESTARTING
    is_now = _running_reason(new) == RESTARTING
    if is_now and not was:
        entries.append({"phase": RESTARTING, "since": now})
    elif was and not is_now:
        for entry in reversed(entries):
            if entry["phase"] == RESTARTING and "until" not in entry:
                entry["until"] = now
                break
    return entries[-MAX_ENTRIES:]


def job_cost(spec: TrainiumJobSpec, entries: list[Json], now: str) -> cost.Cost:
    """The job's cost from the history, as of now (the last phase runs until now)."""
    phases = [e for e in entries if e["phase"] != RESTARTING]
    intervals = [
        (e["phase"], e["since"], phases[i + 1]["since"] if i + 1 < len(phases) else None)
        for i, e in enumerate(phases)
    ]
    restarts = [(e["since"], e.get("until")) for e in entries if e["phase"] == RESTARTING]
    when = cost.to_datetime(now)
    return cost.compute(
        spec.instanceType, spec.nodes, intervals, now=when, prices=prices(), restarts=restarts
    )


@functools.cache
def prices() -> dict[str, Any]:
    """The price table: built-in defaults with the chart's `prices` (TRAINIUM_PRICES) applied."""
    table, error = cost.effective_prices(os.environ.get(cost.PRICES_ENV))
    if error:
        log.error("%s", error)
    return table
