"""Quota through Kueue, pure: a stage's gang starts only once Kueue admitted its Workload.

A job with the `kueue.x-k8s.io/queue-name` label owns one Workload per stage. The lifecycle
decides as if Kueue were not there; `gate` then holds the stage's create until its Workload is
Admitted (creating the Workload first), and adds the Finished marks that release the quota as
soon as a stage ends. Without the label `Observed.quota` is None and nothing here applies.
"""

from __future__ import annotations

from dataclasses import replace

from trainium_operator.domain import verdicts
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
    Rejection,
)

#: (the stage's create, its stage, the create of its Workload, the condition it holds)
_CREATES = (
    (Action.CREATE_PRECOMPILE, "precompile", Action.CREATE_PRECOMPILE_WORKLOAD, "Precompiled"),
    (Action.CREATE_TRAINING, "train", Action.CREATE_TRAINING_WORKLOAD, "Running"),
)
FINISHES = {
    "precompile": Action.FINISH_PRECOMPILE_WORKLOAD,
    "train": Action.FINISH_TRAINING_WORKLOAD,
}
#: Kueue's Evicted reason for a Workload whose spec.active was set false (ours: the job is
#: suspended); Kueue's own deactivations say "DeactivatedDueTo<cause>" and stand.
DEACTIVATED = "Deactivated"
#: A Workload's create answered 404: the kueue.x-k8s.io API is not served.
NOT_INSTALLED = "KueueNotInstalled"


def unwatched_look(decision: Decision, watched: bool, every: float) -> float | None:
    """When to look again at a Kueue job whose Workloads no watch streams (issue 33): every
    few seconds, as no event will say that Kueue admitted or evicted them; None when they are
    watched, or when Kueue is not installed (that blocker backs off on its own)."""
    if watched or (decision.blocker is not None and decision.blocker.reason == NOT_INSTALLED):
        return None
    return every


def gate(decision: Decision, obs: Observed) -> Decision:
    """Hold a stage's create until its Workload is Admitted; finish the Workloads of ended
    stages first (quota released at once)."""
    quota = obs.quota
    if quota is None:
        return decision
    for create, stage, admit, ctype in _CREATES:
        wl = quota.of(stage)
        if create in decision.actions and not (wl.state is Admission.ADMITTED and wl.active):
            decision = _wait(decision, obs, quota, stage, (create, admit, ctype))
            break
    done = _finishing(decision, obs, quota)
    return replace(decision, actions=(*done, *decision.actions)) if done else decision


def finished(decision: Decision, obs: Observed) -> Decision:
    """A finished job's decision with the finishes of its Workloads still live (Kueue's
    reconciler finishes the Workload of a finished job on every pass until it is)."""
    quota = obs.quota
    done = () if quota is None else _finishing(decision, obs, quota)
    return replace(decision, actions=(*done, *decision.actions)) if done else decision


def finishes(decision: Decision) -> tuple[Action, ...]:
    """The Workload finishes a decision asks for (the pass carries them out even when a
    refusal ended the job: its quota is released at once)."""
    return tuple(a for a in decision.actions if a in FINISHES.values())


LIVE = (Admission.PENDING, Admission.ADMITTED, Admission.EVICTED)


def waits_for_compile(obs: Observed) -> bool:
    """Another job compiles this job's graphs and it has no compile of its own: its training
    Workload is made behind our admission gate (compile-aware admission, issue 41)."""
    return obs.precompile is Child.ABSENT and obs.cache_holder == "other"


def started(obs: Observed, phase: Phase) -> bool:
    """Whether the job has started, as status.startTime says (activeDeadlineSeconds counts
    from it): under Kueue once one of its Workloads was admitted, as Kueue's own batch Jobs
    start when admitted; at once otherwise."""
    quota = obs.quota
    if quota is None or phase in TERMINAL:
        return True
    if obs.precompile is not Child.ABSENT or obs.training is not Child.ABSENT:
        return True
    seen = (Admission.ADMITTED, Admission.EVICTED, Admission.FINISHED)
    return any(quota.of(s).state in seen for s in ("precompile", "train"))


def _finishing(decision: Decision, obs: Observed, quota: Quota) -> tuple[Action, ...]:
    """The precompile's Workload once its gang succeeded; every Workload when the job ends."""
    live = LIVE
    out = []
    for stage in ("precompile", "train"):
        ended = decision.phase in TERMINAL or (
            stage == "precompile" and obs.precompile is Child.SUCCEEDED
        )
        if ended and quota.of(stage).state in live:
            out.append(FINISHES[stage])
    return tuple(out)


def _wait(
    decision: Decision,
    obs: Observed,
    quota: Quota,
    stage: str,
    acts: tuple[Action, Action, str],
) -> Decision:
    """The stage waits for Kueue: its Workload is created (once), or Kueue's reason is shown."""
    create, admit, ctype = acts
    actions = tuple(a for a in decision.actions if a is not create)
    rejection = obs.rejected(admit)
    if rejection is not None and rejection.code != 404 and rejection.permanent:
        return _refused(decision, obs, ctype, _refusal(rejection, stage))
    if rejection is not None:
        blocker = _refusal(rejection, stage)
        if rejection.code == 404:
            actions = tuple(a for a in actions if a is not admit)
    elif quota.blocker is not None:
        blocker = quota.blocker
    else:
        wl = quota.of(stage)
        if wl.state is Admission.ABSENT:
            actions = (*actions, admit)
        blocker = _waiting(wl, stage, quota.queue)
    conds = [c for c in decision.conditions if c.type not in (ctype, "Succeeded", "Failed")]
    conds.append(Condition(ctype, "False", blocker.reason, blocker.message))
    return replace(
        decision,
        phase=Phase.PENDING,
        message=blocker.message,
        conditions=verdicts.close(conds, running=None),
        actions=actions,
        blocker=blocker,
    )


def _refusal(rejection: Rejection, stage: str) -> Blocker:
    """What the API server's refusal of the stage's Workload create means (404: no Kueue)."""
    if rejection.code == 404:
        msg = (
            f"the Workload API (kueue.x-k8s.io/v1beta2) is not served: Kueue is not installed; "
            f"install Kueue or remove the kueue.x-k8s.io/queue-name label: the {stage} gang is "
            "not started outside the quota"
        )
        return Blocker(NOT_INSTALLED, msg)
    msg = f"the API server refused the {stage} Workload ({rejection.code}): {rejection.message}"
    if rejection.permanent:
        return Blocker("WorkloadRejected", msg)
    return Blocker("WorkloadRejected", msg + "; retrying with backoff")


def _refused(decision: Decision, obs: Observed, ctype: str, blocker: Blocker) -> Decision:
    """A Workload refused for good fails the job, naming the refusal; nothing is created."""
    conds = [c for c in decision.conditions if c.type not in (ctype, "Succeeded", "Failed")]
    conds.append(Condition(ctype, "False", blocker.reason, blocker.message))
    failed = verdicts.failed(conds, blocker.reason, blocker.message, decision.cache_hit, obs)
    return replace(failed, actions=())


def _waiting(wl: Workload, stage: str, queue: str) -> Blocker:
    """Why the stage's Workload is not admitted yet, in Kueue's words where it gave any."""
    where = f"LocalQueue {queue!r} (label kueue.x-k8s.io/queue-name)"
    if wl.state is Admission.ABSENT:
        msg = f"creating Kueue Workload {wl.name} in {where}; the {stage} gang waits for admission"
        return Blocker("WaitingForQuota", msg, warn=False)
    if wl.state is Admission.EVICTED:
        return _evicted(wl, stage, where)
    if wl.state is Admission.FINISHED:
        msg = (
            f"Kueue Workload {wl.name} is Finished but the {stage} gang has not run: delete "
            "the Workload to queue the stage again"
        )
        return Blocker("WorkloadFinished", msg)
    if not wl.active:  # still admitted: the gang waits until it is active again
        msg = (
            f"Workload {wl.name} was deactivated while the job was suspended: activating it; "
            f"the {stage} gang starts once Kueue admits it active"
        )
        return Blocker("WaitingForQuota", msg, warn=False)
    gate = "; lifting its compile gate (the graphs are Ready)" if wl.gated else ""
    msg = (
        f"waiting for Kueue to admit Workload {wl.name} ({where}): "
        f"{wl.reason}: {wl.message}".rstrip(": ")
    )
    return Blocker("WaitingForQuota", msg + gate, warn=False)


def _evicted(wl: Workload, stage: str, where: str) -> Blocker:
    """An evicted stage waits: its Workload requeued first (Kueue's reason said, once), then
    admitted again."""
    said = f": {wl.message}" if wl.message else ""
    then = "training resumes from the newest checkpoint" if stage == "train" else "it compiles"
    head = f"Kueue evicted Workload {wl.name} ({wl.reason}{said}); the {stage} gang is gone"
    if wl.reason == DEACTIVATED:  # our own, for runPolicy.suspend: no preemption to warn of
        msg = (
            f"Workload {wl.name} was deactivated while the job was suspended; reactivated, it "
            f"waits for Kueue to admit it again ({where}); {then} then"
        )
        return Blocker("WaitingForQuota", msg, warn=False)
    if wl.reserved:
        msg = f"{head}, no retry spent: requeueing the Workload; {then} once Kueue admits it again"
        return Blocker(wl.reason, msg)
    msg = f"{head}, no retry spent; waiting for Kueue to admit it again ({where}); {then} then"
    return Blocker("WaitingForQuota", msg, warn=False)
