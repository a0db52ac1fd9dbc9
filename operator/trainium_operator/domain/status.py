"""Pure rendering of a lifecycle Decision into the TrainiumJob status subresource."""

from __future__ import annotations

import datetime
from typing import Any

from trainium_operator.domain.lifecycle import TERMINAL, Condition, Decision

Json = dict[str, Any]


#: Longest message kept on status (each condition and the phase message): a rejected spec with a
#: huge env, or a long API error, must not grow the object towards etcd's 1.5 MiB limit.
MAX_MESSAGE = 4096


def clip(message: str, limit: int = MAX_MESSAGE) -> str:
    """The message, cut to limit characters with a marker when longer."""
    if len(message) <= limit:
        return message
    marker = f"... ({len(message) - limit} more characters)"
    return message[: limit - len(marker)] + marker


def now_iso() -> str:
    """RFC 3339 UTC timestamp, second precision as Kubernetes writes them."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions(decision: Decision, previous: list[Json], generation: int, now: str) -> list[Json]:
    """Conditions in Kubernetes form; lastTransitionTime moves only when status changes."""
    before = {c.get("type"): c for c in previous or []}
    out = []
    for cond in decision.conditions:
        old = before.get(cond.type, {})
        changed = old.get("status") != cond.status
        out.append(
            {
                "type": cond.type,
                "status": cond.status,
                "reason": cond.reason,
                "message": clip(cond.message),
                "lastTransitionTime": now if changed else old.get("lastTransitionTime", now),
                "observedGeneration": generation,
            }
        )
    return out


def read_conditions(previous: Json) -> tuple[Condition, ...]:
    """The conditions on a status, as the lifecycle speaks of them (malformed ones skipped)."""
    out = []
    for c in previous.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") and c.get("status"):
            out.append(
                Condition(c["type"], c["status"], c.get("reason") or "", c.get("message") or "")
            )
    return tuple(out)


#: status.cache.outcome once a stage job decided it; UNDECIDED before (the CACHE column).
OUTCOMES = ("hit", "miss")
UNDECIDED = "-"
#: Figures about the cache entry that stay on status once known.
_KEPT_CACHE_FIELDS = ("compileSeconds", "savedSeconds")


def render(
    decision: Decision,
    previous: Json,
    *,
    generation: int,
    now: str,
    cache_key: str | None,
    cache_name: str | None,
    precompile_job: str | None,
    training_job: str | None,
    cache_extra: Json | None = None,
    held: bool = False,
) -> Json:
    """The full status for this decision, keeping start/completion times once set.

    held: a graph-defining edit was refused; the cache fields keep describing what runs, not
    the edited spec's key, which nothing compiled.
    """
    status: Json = {
        "phase": decision.phase.value,
        "message": clip(decision.message),
        "observedGeneration": generation,
        "conditions": conditions(decision, previous.get("conditions", []), generation, now),
        "restarts": decision.restarts,
        "startTime": previous.get("startTime") or now,
    }
    if held and previous.get("cache"):
        status["cache"] = dict(previous["cache"])
    elif cache_key:
        cache: Json = {"key": cache_key, "name": cache_name}
        before = previous.get("cache") or {}
        decided = precompile_job or training_job or before.get("outcome") in OUTCOMES
        if decision.cache_hit is not None and decided:
            cache["hit"] = decision.cache_hit
            cache["outcome"] = "hit" if decision.cache_hit else "miss"
        elif decision.cache_hit is not None:  # no stage yet: it may still hit (the CACHE column)
            cache["outcome"] = UNDECIDED
        cache.update({k: before[k] for k in _KEPT_CACHE_FIELDS if k in before})
        cache.update(cache_extra or {})
        status["cache"] = cache
    if precompile_job:
        status["precompileJob"] = precompile_job
    if training_job:
        status["trainingJob"] = training_job
    if decision.phase in TERMINAL:
        status["completionTime"] = previous.get("completionTime") or now
    return status


def changed(previous: Json, new: Json) -> bool:
    """Whether new differs from previous in anything but timestamps that only move on change."""
    return {k: v for k, v in previous.items() if k in new} != new or not previous
