"""Pure: Kueue's job framework for a running job (pkg/controller/jobframework/reconciler.go).

quota.gate holds a stage until Kueue admits its Workload; this follows the Workload after that,
as Kueue's reconciler does for the jobs it manages:
- Evicted=True (a higher priority job, a reclaimed borrow, waitForPodsReady's timeout, a
  deactivation), its admission withdrawn, or the Workload gone while the stage's gang lives: the
  gang stops the way runPolicy.suspend stops it (the Volcano job deleted: the trainer checkpoints
  on SIGTERM), the job says why with Kueue's reason, and no runPolicy.maxRetries is spent (no
  Volcano retry is counted: the job is deleted, not restarted);
- once that gang is gone, an evicted Workload still holding its reservation is requeued (its
  admission cleared, QuotaReserved=False, Requeued: manifests/workload.requeued); when Kueue admits
  it again, quota.gate lets the stage be created again and the trainer resumes from the newest
  checkpoint;
- runPolicy.suspend deactivates the Workloads (spec.active false: Kueue evicts them with
  reason Deactivated and their quota is released once requeued); the job says Suspended, no
  preemption; on resume they are activated again and wait for admission as usual;
- PodsReady follows the gang (waitForPodsReady; generatePodsReadyCondition);
- an elastic resize is a new Workload at the new size (its name carries the size); the old one
  is deleted, as the framework deletes a Workload that no longer matches its job (its pod
  set's count), so its quota comes back and its name can be used again. A grow waits, the
  gang running on under its admission, until Kueue admits the larger size's Workload;
- a job waiting for another job's compile queues its training Workload behind our admission
  gate (kueue.x-k8s.io/admission-gated-by), lifted once the graphs are Ready.
"""

from __future__ import annotations

from dataclasses import replace

from trainium_operator.domain import quota, verdicts
from trainium_operator.domain.kueuestate import Admission, Quota, Workload
from trainium_operator.domain.model import (
    TERMINAL,
    Action,
    Blocker,
    Child,
    Condition,
    Decision,
    Observed,
    Phase,
)

STAGES = ("precompile", "train")
STOPS = {"precompile": Action.STOP_PRECOMPILE, "train": Action.STOP_TRAINING}
REQUEUES = {
    "precompile": Action.REQUEUE_PRECOMPILE_WORKLOAD,
    "train": Action.REQUEUE_TRAINING_WORKLOAD,
}
READIES = {"precompile": Action.READY_PRECOMPILE_WORKLOAD, "train": Action.READY_TRAINING_WORKLOAD}
_CTYPE = {"precompile": "Precompiled", "train": "Running"}
#: Kueue's PodsReady reasons (apis/kueue/v1beta2/workload_types.go).
STARTED, RECOVERED = "Started", "Recovered"
WAIT_FOR_START, WAIT_FOR_RECOVERY = "WaitForStart", "WaitForRecovery"
#: Kueue's stop reasons when no Evicted condition says why (jobframework/stop_reason.go).
NOT_ADMITTED, NO_MATCHING_WORKLOAD = "NotAdmitted", "NoMatchingWorkload"


def gate(decision: Decision, obs: Observed) -> Decision:
    """quota.gate, and Kueue's protocol for the stages it admitted: stop an evicted gang,
    requeue its Workload once the gang is gone, PodsReady, stale elastic Workloads."""
    kueue = obs.quota
    if kueue is None:
        return decision
    stopping = decision.phase not in (*TERMINAL, Phase.SUSPENDED)  # a suspend stops its own
    unneeded = compile_unneeded(decision, obs, kueue)
    stopped = _stop(decision, obs, kueue) if stopping else None
    starts = Action.CREATE_TRAINING in (stopped or decision).actions
    gated = _growing(
        _compile_gated(quota.gate(stopped or decision, obs), obs, kueue, starts), kueue
    )
    extra = _upkeep(gated, obs, kueue, unneeded)
    return replace(gated, actions=(*gated.actions, *extra)) if extra else gated


def _compile_gated(decision: Decision, obs: Observed, kueue: Quota, starts: bool) -> Decision:
    """Compile-aware admission Kueue can see (issue 41): a job waiting for another job's
    compile owns its training Workload, queued behind our admission gate (holding nothing);
    the gate is lifted once the graphs are Ready and training may start."""
    train = kueue.train
    if starts and train.gated and train.state is Admission.PENDING:
        return replace(decision, actions=(*decision.actions, Action.UNGATE_TRAINING_WORKLOAD))
    if decision.phase is not Phase.WAITING_FOR_CACHE or kueue.blocker is not None:
        return decision
    if not quota.waits_for_compile(obs):
        return decision
    create = (Action.CREATE_TRAINING_WORKLOAD,) if train.state is Admission.ABSENT else ()
    said = (
        f"; its training Workload {train.name} waits in LocalQueue {kueue.queue!r}, gated by "
        f"{GATE} (it holds no quota) until then"
    )
    conds = tuple(
        replace(c, message=c.message + said) if c.reason == "WaitingForCache" else c
        for c in decision.conditions
    )
    return replace(
        decision,
        message=decision.message + said,
        conditions=conds,
        actions=(*decision.actions, *create),
    )


def _growing(decision: Decision, kueue: Quota) -> Decision:
    """An elastic grow waiting for Kueue (issue 41): the gang keeps its size and its admission
    until the larger size's Workload is admitted; that Workload is queued (made once), and
    the Running condition says what it waits for. A grow the quota never holds keeps the job
    at its size (its Workload stays queued, holding nothing, while the grow is due)."""
    wl = kueue.grow
    if wl is None or decision.phase is not Phase.TRAINING:
        return decision
    said = f": {wl.reason}: {wl.message}".rstrip(": ") if wl.reason else ""
    msg = (
        f"training; a grow to {kueue.grow_size} nodes waits for Kueue to admit Workload "
        f"{wl.name} in LocalQueue {kueue.queue!r}{said}; the gang keeps its size and its "
        "admission until then"
    )
    conds = tuple(
        Condition("Running", "True", GROW_WAITS, msg)
        if c.type == "Running" and c.status == "True"
        else c
        for c in decision.conditions
    )
    create = (Action.CREATE_GROW_WORKLOAD,) if wl.state is Admission.ABSENT else ()
    return replace(decision, message=msg, conditions=conds, actions=(*decision.actions, *create))


#: The Running reason of a job whose elastic grow waits for its Workload's admission.
GROW_WAITS = "GrowWaitingForQuota"
#: The gate as the Workload's annotation names it (manifests/workload.COMPILE_GATE).
GATE = "kueue.x-k8s.io/admission-gated-by=trainium.dev/compile-cache"
#: What the job says of its compile once it needs none of its own (Precompiled otherwise True).
_NO_COMPILE = ("Skipped", "WaitingForCache")


def compile_unneeded(decision: Decision, obs: Observed, kueue: Quota) -> bool:
    """A live compile Workload whose compile the job no longer needs: no compile gang, and the
    job's graphs come from the cache (a hit now) or from another job compiling them. It is
    released at once (deleted: a later need queues a new one), or it would hold quota the
    job's training waits for; a job that ends finishes it instead."""
    if kueue.precompile.state not in quota.LIVE or obs.precompile is not Child.ABSENT:
        return False
    if decision.phase in TERMINAL:
        return False
    said = next((c for c in decision.conditions if c.type == "Precompiled"), None)
    return said is not None and (said.status == "True" or said.reason in _NO_COMPILE)


def child_of(obs: Observed, stage: str) -> Child:
    """The stage's gang state."""
    return obs.precompile if stage == "precompile" else obs.training


def lost(wl: Workload) -> tuple[str, str] | None:
    """Why a live gang may not go on under this Workload (reason, what Kueue said); None: it may."""
    if wl.state is Admission.EVICTED:
        said = f": {wl.message}" if wl.message else ""
        return wl.reason, f"Kueue evicted Workload {wl.name} ({wl.reason}{said})"
    if wl.state is Admission.PENDING:
        said = f"{wl.reason}: {wl.message}" if wl.message else wl.reason
        return NOT_ADMITTED, f"Kueue no longer admits Workload {wl.name} ({said})"
    if wl.state is Admission.ABSENT:
        return NO_MATCHING_WORKLOAD, f"Workload {wl.name} is gone (deleted?); a new one is queued"
    return None


def _stop(decision: Decision, obs: Observed, kueue: Quota) -> Decision | None:
    """Stop the first live gang whose Workload lost its admission; the job says why."""
    for stage in STAGES:
        if child_of(obs, stage) not in verdicts.LIVE or STOPS[stage] in decision.actions:
            continue
        why = lost(kueue.of(stage))
        if why is None:
            continue
        reason, said = why
        then = (
            "the trainer checkpoints on SIGTERM; training resumes from the newest checkpoint"
            if stage == "train"
            else "the compile runs again"
        )
        msg = (
            f"{said}; the {stage} gang is stopped as runPolicy.suspend stops it ({then} once "
            "Kueue admits the Workload again); no runPolicy.maxRetries is spent"
        )
        ctype = _CTYPE[stage]
        conds = [c for c in decision.conditions if c.type not in (ctype, "Succeeded", "Failed")]
        conds.append(Condition(ctype, "False", reason, msg))
        kept = tuple(a for a in decision.actions if a not in _STARTS)
        return replace(
            decision,
            message=msg,
            conditions=verdicts.close(conds, running=None),
            actions=(*kept, STOPS[stage]),
            # a Warning Event naming Kueue's reason, once; none for our own deactivation (a
            # resume raced Kueue's eviction of it)
            blocker=Blocker(reason, msg, warn=reason != quota.DEACTIVATED),
        )
    return None


_STARTS = frozenset({Action.ACQUIRE_CACHE, Action.CREATE_PRECOMPILE, Action.CREATE_TRAINING})


def _upkeep(decision: Decision, obs: Observed, kueue: Quota, unneeded: bool) -> tuple[Action, ...]:
    """The Workload writes Kueue's reconciler would make in this state of the gangs."""
    out: list[Action] = [Action.RELEASE_PRECOMPILE_WORKLOAD] if unneeded else []
    stages = STAGES[1:] if unneeded else STAGES
    wants = {active_due(kueue.of(s), decision.phase) for s in stages}
    out.extend(ACTIVITY[w] for w in (False, True) if w in wants)
    for stage in stages:
        wl, child = kueue.of(stage), child_of(obs, stage)
        if requeue_due(wl, child) and decision.phase not in TERMINAL:
            out.append(REQUEUES[stage])
        elif pods_ready(wl, child) is not None and quota.FINISHES[stage] not in decision.actions:
            out.append(READIES[stage])
    if kueue.stale:
        out.append(Action.DELETE_STALE_WORKLOADS)
    return tuple(out)


ACTIVITY = {False: Action.DEACTIVATE_WORKLOADS, True: Action.ACTIVATE_WORKLOADS}


def active_due(wl: Workload, phase: Phase) -> bool | None:
    """The spec.active to write on a stage's Workload (None: none): false while the job is
    suspended (Kueue releases its quota), true again after; Kueue's own deactivations stand."""
    if wl.state in (Admission.ABSENT, Admission.FINISHED) or phase in TERMINAL:
        return None
    if phase is Phase.SUSPENDED:
        return False if wl.active else None
    if wl.active or (wl.state is Admission.EVICTED and wl.reason != quota.DEACTIVATED):
        return None
    return True


def requeue_due(wl: Workload, child: Child) -> bool:
    """An evicted Workload still reserved, its gang gone: the framework clears its admission
    (only once the job is no longer active)."""
    return wl.state is Admission.EVICTED and wl.reserved and child is Child.ABSENT


def pods_ready(wl: Workload, child: Child) -> tuple[str, str] | None:
    """The PodsReady (status, reason) to write, as generatePodsReadyCondition derives it; None:
    nothing to write. An absent condition stays absent rather than becoming WaitForStart:
    Kueue reads the two alike (admittedNotReadyWorkload), so no write is spent on it."""
    if wl.state in (Admission.ABSENT, Admission.FINISHED) or requeue_due(wl, child):
        return None
    if child in (Child.SUCCEEDED, Child.FAILED):
        return None  # the stage ended: its Workload is Finished instead
    status, reason = wl.pods_ready
    if wl.state is Admission.ADMITTED and child is Child.RUNNING:
        want = ("True", RECOVERED if reason in (WAIT_FOR_RECOVERY, RECOVERED) else STARTED)
    elif wl.state is Admission.EVICTED and wl.reserved:
        return None  # the requeue comes first (Kueue still counts it admitted until then)
    elif wl.state is Admission.ADMITTED and (status == "True" or reason == WAIT_FOR_RECOVERY):
        want = ("False", WAIT_FOR_RECOVERY)
    else:
        want = ("False", WAIT_FOR_START)
    if want == (status, reason) or (not status and want == ("False", WAIT_FOR_START)):
        return None
    return want


PODS_READY_MESSAGES = {
    STARTED: "All pods reached readiness and the workload is running",
    RECOVERED: "All pods reached readiness and the workload is running",
    WAIT_FOR_START: "Not all pods are ready or succeeded",
    WAIT_FOR_RECOVERY: "At least one pod has failed, waiting for recovery",
}
