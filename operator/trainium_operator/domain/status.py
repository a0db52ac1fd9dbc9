"""Pure: a lifecycle Decision and what a pass saw, composed into the TrainiumJob status."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.domain import (
    budget,
    checkpoints,
    cost,
    elastic,
    history,
    nodes,
    progress,
    quota,
    specdigest,
)
from trainium_operator.domain.cachekey import cache_key, cache_name, identity
from trainium_operator.domain.checkpoints import Checkpoint
from trainium_operator.domain.lifecycle import TERMINAL, Condition, Decision
from trainium_operator.domain.model import Action, Child, Observed, Phase

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


def one_line(message: str) -> str:
    """A message as `kubectl describe` can print it: its lines joined (it prints a newline as
    is, and the next line starts at column 0, outside the field it belongs to)."""
    if "\n" not in message:
        return message
    return " | ".join(line.rstrip() for line in message.splitlines() if line.strip())


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
                "message": clip(one_line(cond.message)),
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


@dataclass(frozen=True)
class Frame:
    """What the status's core is rendered from: the decision, the status before, and the names
    of the cache entry and stage jobs (both backends build one: compose from its Inputs, the
    local runner from its run)."""

    decision: Decision
    previous: Json
    generation: int
    now: str
    cache_key: str | None = None
    cache_name: str | None = None
    precompile_job: str | None = None
    training_job: str | None = None
    #: Figures about the cache entry this pass learned (compileSeconds, savedSeconds, entry).
    cache_extra: Json | None = None
    #: A graph-defining edit was refused: the cache fields keep describing what runs, not the
    #: edited spec's key, which nothing compiled.
    held: bool = False
    #: The job has started (quota.started: under Kueue, once admitted): startTime is set.
    started: bool = True


def render(frame: Frame) -> Json:
    """The core status for this decision, keeping start/completion times once set."""
    decision, previous, now = frame.decision, frame.previous, frame.now
    generation, cache_key, held = frame.generation, frame.cache_key, frame.held
    precompile_job, training_job = frame.precompile_job, frame.training_job
    status: Json = {
        "phase": decision.phase.value,
        "message": clip(one_line(decision.message)),
        "observedGeneration": generation,
        "conditions": conditions(decision, previous.get("conditions", []), generation, now),
        "restarts": decision.restarts,
    }
    start = previous.get("startTime") or (now if frame.started else None)
    if start:
        status["startTime"] = start
    if held and previous.get("cache"):
        status["cache"] = dict(previous["cache"])
    elif cache_key:
        cache: Json = {"key": cache_key, "name": frame.cache_name}
        before = previous.get("cache") or {}
        decided = precompile_job or training_job or before.get("outcome") in OUTCOMES
        if decision.cache_hit is not None and decided:
            cache["hit"] = decision.cache_hit
            cache["outcome"] = "hit" if decision.cache_hit else "miss"
        elif decision.cache_hit is not None:  # no stage yet: it may still hit (the CACHE column)
            cache["outcome"] = UNDECIDED
        cache.update({k: before[k] for k in _KEPT_CACHE_FIELDS if k in before})
        cache.update(frame.cache_extra or {})
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


#: Status objects the operator rewrites whole each pass: a key it drops must go out as null, for a
#: merge patch keeps every key it does not name (elastic.notFormedSince outlived the wait it timed).
WHOLE = ("elastic",)


def patch_body(previous: Json, new: Json) -> Json:
    """The merge patch that stores `new`: keys dropped from a WHOLE object are sent as null."""
    body = dict(new)
    for key in WHOLE:
        old, now = previous.get(key), new.get(key)
        if isinstance(old, dict) and isinstance(now, dict):
            gone = {k: None for k in old if k not in now}
            if gone:
                body[key] = {**now, **gone}
    return body


# ---- composition: the whole new status from one typed argument --------------------------------


@dataclass(frozen=True)
class Inputs:
    """Everything a pass's new status is composed from (one argument: it used to be eleven)."""

    previous: Json
    decision: Decision
    spec: TrainiumJobSpec | None
    observed: Observed
    counted: budget.Accounted
    name: str
    generation: int
    digests: Mapping[str, str]
    now: str
    checkpoint: Checkpoint | None = None
    #: {}: no gang trains any more (a merge-patch null removes status.progress).
    progress: Json | None = None
    #: status.elastic of an elastic job (elastic.py), None otherwise.
    elastic: Json | None = None
    #: status.spares of a job with spare nodes (spares.py), None otherwise.
    spares: Json | None = None
    #: The training gang's name when a replacement named it ("": the first, `<job>-train`).
    train_gang: str = ""
    #: status.stragglers to write (None: leave it; []: remove it), and the nodes flagged now.
    stragglers: list[Json] | None = None
    straggler_flags: tuple[Json, ...] = ()

    @property
    def excluded_node(self) -> str | None:
        """A node this failure newly points at (the next gang keeps out of it)."""
        obs = self.observed
        return nodes.newly_faulty(obs.failure, self.previous) if obs.replace_gang else None


def compose(inputs: Inputs) -> Json:
    """The whole new status (pure); the previous one itself when nothing changed.

    Everything a status patch carries is decided here; the pass only compares and writes.
    """
    previous, decision = inputs.previous, inputs.decision
    new = _rendered(inputs)
    if inputs.spec is not None:  # what the job started with: a later change is refused
        new.update(specdigest.fragment(previous, inputs.digests))
    new.update(budget.fragment(inputs.counted.tally))
    _add_evidence(new, inputs)
    if inputs.elastic is not None:
        new["elastic"] = inputs.elastic
    if inputs.spares is not None:
        new["spares"] = inputs.spares
    if decision.phase in TERMINAL:
        _settle(new, previous)
    pending = _gang_pending(decision, inputs.observed)
    new["history"] = history.advance(previous, new, inputs.now, gang_pending=pending)
    if not changed(previous, new):
        return previous
    _add_cost(new, inputs)
    return new


def _rendered(inputs: Inputs) -> Json:
    spec, obs, acts = inputs.spec, inputs.observed, inputs.decision.actions
    key = cache_key(spec) if spec else None
    return render(
        Frame(
            inputs.decision,
            inputs.previous,
            inputs.generation,
            inputs.now,
            cache_key=key,
            cache_name=cache_name(spec, key) if spec and key else None,
            precompile_job=_job_name(
                inputs.name,
                "precompile",
                obs.precompile,
                acts,
                spec.precompile_size if spec else None,
            ),
            training_job=_job_name(
                inputs.name, "train", obs.training, acts, None, inputs.train_gang
            ),
            cache_extra=_cache_figures(spec, inputs.decision, obs) if spec else None,
            held=bool(obs.changed_fields),
            started=quota.started(obs, inputs.decision.phase),
        )
    )


def _add_evidence(new: Json, inputs: Inputs) -> None:
    """The last failure, the excluded nodes, the newest checkpoint and the progress."""
    previous, obs = inputs.previous, inputs.observed
    last = _last_failure(obs) or previous.get("lastFailure")
    if last:
        new["lastFailure"] = last
    node = inputs.excluded_node
    if node is not None and obs.failure is not None:
        new["excludedNodes"] = nodes.record(previous, node, obs.failure.reason, inputs.now)
    if (kept := checkpoints.carried(previous, inputs.checkpoint)) is not None:
        new["lastCheckpoint"] = kept.to_status()
    if inputs.progress is not None:
        new["progress"] = inputs.progress or None
    if inputs.stragglers is not None:
        new["stragglers"] = inputs.stragglers or None


def _settle(new: Json, previous: Json) -> None:
    """A finished job's status keeps what a person reads, not the live gang's bookkeeping."""
    for key in ("restartCursor", specdigest.FIELD, specdigest.LEGACY):
        new.pop(key, None)
    new.update(budget.settled(previous))
    new.update(specdigest.settled(previous))
    shown = new["progress"] if "progress" in new else previous.get("progress")
    kept = progress.settled(shown)
    if kept is not None:
        new["progress"] = kept


def _add_cost(new: Json, inputs: Inputs) -> None:
    """The cost as of this write: the estimate moves with the status, not the clock."""
    spec = inputs.spec
    sizes = elastic.size_timeline(new.get("elastic") or {})
    job_cost = history.job_cost(spec, new["history"], inputs.now, sizes) if spec else None
    if job_cost is None or spec is None:
        return
    new["cost"] = cost.status_fragment(job_cost)
    eta = (new.get("progress") or inputs.previous.get("progress") or {}).get("etaSeconds")
    if inputs.decision.phase is Phase.TRAINING:
        new["cost"] = cost.with_projection(new["cost"], eta, spec.nodes)


def _last_failure(obs: Observed) -> Json | None:
    """The latest classified gang failure, with its evidence (kept once seen)."""
    failure = obs.failure
    if failure is None:
        return None
    out: Json = {"reason": failure.reason, "message": clip(one_line(failure.message))}
    out["retry"] = failure.retry
    if failure.log_tail:  # a list: `kubectl describe` prints each line indented under it
        out["logTail"] = list(failure.log_tail)
    return out


def _cache_figures(spec: TrainiumJobSpec, decision: Decision, obs: Observed) -> Json:
    """The entry this job uses, and the compile time it spent or a hit saved."""
    out: Json = {"entry": identity(spec).record_name}
    seconds = obs.cache_seconds
    if seconds is not None and decision.cache_hit:
        out["savedSeconds"] = seconds
    elif seconds is not None and obs.precompile is Child.SUCCEEDED and obs.cache_recorded:
        out["compileSeconds"] = seconds
    return out


def _job_name(
    owner: str, stage: str, state: Child, actions: tuple[Action, ...], size: int | None = None,
    train_gang: str = "",
) -> str | None:  # fmt: skip
    """Name a stage's job on status once it exists or is being created now."""
    create = Action.CREATE_PRECOMPILE if stage == "precompile" else Action.CREATE_TRAINING
    present = state is not Child.ABSENT
    name = naming.stage_job(owner, stage, size, train_gang)
    return name if present or create in actions else None


def _gang_pending(decision: Decision, obs: Observed) -> bool:
    """The live stage's gang exists (or is created now) but is not running yet."""
    if decision.phase is Phase.PRECOMPILING:
        state, create = obs.precompile, Action.CREATE_PRECOMPILE
    elif decision.phase is Phase.TRAINING:
        state, create = obs.training, Action.CREATE_TRAINING
    else:
        return False
    return state is Child.PENDING or (state is Child.ABSENT and create in decision.actions)
