"""Pure: the conditions and decisions a stage ends or waits with (the lifecycle's sentences).

lifecycle.py decides which stage a job is in; this says why in the words status carries.
"""

from __future__ import annotations

from trainium_operator.api.spec import PLACEMENT_REQUIRED, Placement
from trainium_operator.domain.model import (
    Action,
    Blocker,
    Child,
    Condition,
    Decision,
    Observed,
    Phase,
)

#: Child states in which a stage's gang is alive (stopped before the job may finish).
LIVE = (Child.PENDING, Child.RUNNING, Child.RESTARTING, Child.ABORTED, Child.TERMINATING)


#: Child states that hold a stage without failing it: (condition reason, message).
STAGE_WAIT = {
    Child.ABORTED: (
        "Aborted",
        "the Volcano job is aborted (vcctl job suspend); `vcctl job resume` continues it",
    ),
    Child.TERMINATING: ("Terminating", "Volcano is terminating the job's pods"),
}


def ends(
    obs: Observed, state: Child, default: str, volcano: str, stage: str
) -> tuple[str, str, bool] | None:
    """Why a stage ends now, if it does, and whether its live gang must be stopped.

    Volcano failed it; or a restart cannot fix its failure; or the restart budget is spent
    (the operator, not Volcano, keeps runPolicy.maxRetries: see budget.py).
    """
    fast = fails_fast(obs, state)
    if state is Child.FAILED or fast:
        return (*why(obs, default, volcano, stage), fast)
    if obs.exhausted is not None and state in LIVE:
        spent = obs.exhausted
        msg = f"{spent.message}; the {stage} gang was stopped"
        if obs.failure is not None:
            msg += "; " + why(obs, default, volcano, stage)[1]
        return spent.reason, msg, True
    return None


def fails_fast(obs: Observed, state: Child) -> bool:
    """A live gang whose failure a restart cannot fix (bad image, compiler error, OOM...)."""
    return state in LIVE and obs.failure is not None and not obs.failure.retry


def why(obs: Observed, default: str, volcano: str, stage: str) -> tuple[str, str]:
    """The failure's class and evidence (pod, reason, log tail), else Volcano's own words."""
    failure = obs.failure
    if failure is None:
        return default, volcano or f"the {stage} job failed"
    return failure.reason, with_tail(failure.message, failure.log_tail)


#: Characters of a message with its log tail: an Event's note holds 1024 (the newest lines
#: stay; status.lastFailure.logTail keeps them all).
WITH_TAIL = 1000


def with_tail(message: str, tail: tuple[str, ...]) -> str:
    """The message and the log's last lines, on one line (`kubectl describe` and the Events
    table print a message as is: a newline broke their indentation)."""
    if not tail:
        return message
    kept: list[str] = []
    size = len(message) + 24
    for line in reversed(tail):
        if kept and size + len(line) + 3 > WITH_TAIL:
            break
        kept.insert(0, line)
        size += len(line) + 3
    more = "... | " if len(kept) < len(tail) else ""
    return f"{message}; last log lines: {more}{' | '.join(kept)}"


def running(obs: Observed) -> tuple[str, str, str]:
    """The Running condition of a live training job: one phase (Training) for all of them."""
    state = obs.training
    if state in STAGE_WAIT:
        return ("False", *STAGE_WAIT[state])
    if state is Child.PENDING and obs.gang_blocker is not None:
        return ("False", *said(obs.gang_blocker))  # Volcano cannot create its pods
    if state is Child.RESTARTING or (state is Child.PENDING and obs.gang_retries):
        counts = f"restarts: {obs.restarts}, disruptions: {obs.disruptions}"
        return "False", "Restarting", f"restarting the gang ({counts})"
    if state is Child.PENDING:
        return "False", "GangPending", gang_pending("training", obs)
    return "True", "GangRunning", "training"


def said(blocker: Blocker) -> tuple[str, str]:
    return blocker.reason, blocker.message


def close(conds: list[Condition], running: bool | None) -> tuple[Condition, ...]:
    """Add the conditions every non-terminal status carries."""
    if running is False:
        conds.append(Condition("Running", "False", "NotStarted", "training not started"))
    conds.append(Condition("Succeeded", "False", "InProgress", ""))
    conds.append(Condition("Failed", "False", "InProgress", ""))
    return tuple(conds)


def pending(
    conds: list[Condition],
    blocker: Blocker | None,
    actions: tuple[Action, ...],
    hit: bool | None,
    obs: Observed,
) -> Decision:
    message = blocker.message if blocker else "creating the next stage"
    if blocker and not any(c.reason == blocker.reason for c in conds):
        conds.append(Condition("Running", "False", blocker.reason, blocker.message))
    elif not any(c.type == "Running" for c in conds):
        conds.append(Condition("Running", "False", "NotStarted", "training not started"))
    phase = Phase.PENDING
    if obs.precompile is Child.SUCCEEDED and obs.storage_ready and blocker is None:
        phase = Phase.TRAINING  # compiled, nothing missing: the training job is created now
        message = "creating the training job"
    conditions = close(conds, running=None)
    return Decision(phase, message, conditions, actions, hit, obs.restarts, blocker)


def failed(
    conds: list[Condition], reason: str, msg: str, hit: bool | None, obs: Observed
) -> Decision:
    if not any(c.type == "Running" for c in conds):
        conds.append(Condition("Running", "False", reason, msg))
    conds.append(Condition("Succeeded", "False", reason, msg))
    conds.append(Condition("Failed", "True", reason, msg))
    return Decision(Phase.FAILED, msg, tuple(conds), (), hit, obs.restarts)


def placement_note(placement: Placement | None, nodes: int) -> str:
    """What a Required placement holds a pending gang to ("" without one, or Preferred).

    Volcano's own words for such a gang (pod condition, PodGroup Event) are its gang summary,
    "pod group is not ready, 2 Pending, 2 minAvailable; Pending: 2 Unschedulable" (seen on the
    tier), which names no topology.
    """
    if placement is None or placement.mode != PLACEMENT_REQUIRED:
        return ""
    return (
        f"spec.scheduling.placement (Required) wants all {nodes} node(s) under one "
        f"network-node-layer-{placement.networkNodeLayer} network node: Volcano keeps the gang "
        "Pending, never split, until one has room for all of it"
    )


def gang_pending(stage: str, obs: Observed) -> str:
    """The message of a stage whose gang waits for Volcano to schedule it."""
    said = f"{stage} job waiting for the gang to be scheduled"
    return f"{said}; {obs.placement}" if obs.placement else said
