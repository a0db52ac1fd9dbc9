"""The cluster backend: observe a TrainiumJob's children, let the lifecycle decide, act, report.

Level-based and idempotent: any number of calls, from any trigger, in any order, converge on the
same children and status. Creates tolerate 409, so a restarted operator adopts what exists.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from trainium_operator import builders, fsx, k8s, lifecycle, naming, status
from trainium_operator.builders import Owner
from trainium_operator.cachekey import cache_key, cache_name
from trainium_operator.lifecycle import Action, Blocker, Child, Decision, Observed
from trainium_operator.spec import SpecError, TrainiumJobSpec, parse

Json = dict[str, Any]
Emit = Callable[[Json, str, str, str], None]
FsxLookup = Callable[[str], fsx.FsxNames]


@dataclass(frozen=True)
class Transition:
    """What one reconcile changed, for events and metrics."""

    namespace: str
    name: str
    old_phase: str | None
    new_phase: str
    reason: str
    message: str
    #: "hit" or "miss" when this pass decided the cache outcome for the first time.
    cache_outcome: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What one pass left behind: the phase, the transition made, when to come back."""

    phase: str | None
    transition: Transition | None = None
    #: A finished job with ttlSecondsAfterFinished: seconds until it is deleted.
    ttl_remaining: float | None = None


def now_iso() -> str:
    """RFC 3339 UTC timestamp, second precision as Kubernetes writes them."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def reconcile(namespace: str, name: str, emit: Emit, lookup: FsxLookup = fsx.describe) -> Outcome:
    """One pass over one TrainiumJob: derive, act, report; a finished job only ages out."""
    body = k8s.get_trainiumjob(namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return Outcome(None)
    previous: Json = body.get("status") or {}
    generation = int(body["metadata"].get("generation", 1))
    if _settled(previous, generation):
        return _expire(body, previous)
    try:
        spec = parse(body)
    except SpecError as exc:
        new, transition = _report(body, lifecycle.invalid(exc.problems), None, emit)
    else:
        owner = Owner(name, namespace, body["metadata"].get("uid", ""))
        observed, names = observe(spec, owner, lookup)
        decision = lifecycle.decide(observed)
        _act(decision.actions, spec, owner, names)
        new, transition = _report(body, decision, spec, emit, observed)
    return replace(_expire(body, new), transition=transition)


def _expire(body: Json, status_now: Json) -> Outcome:
    """Delete a finished job once ttlSecondsAfterFinished has passed (children go with it)."""
    phase = status_now.get("phase")
    if phase not in {p.value for p in lifecycle.TERMINAL}:
        return Outcome(phase)
    ttl = ((body.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished")
    now = datetime.datetime.now(datetime.timezone.utc)
    ttl_int = ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None
    remaining = lifecycle.ttl_remaining(status_now.get("completionTime"), ttl_int, now)
    if remaining is not None and remaining <= 0:
        meta = body["metadata"]
        k8s.delete_trainiumjob(meta["namespace"], meta["name"])
        return Outcome(phase)
    return Outcome(phase, ttl_remaining=remaining)


def _settled(previous: Json, generation: int) -> bool:
    """A finished job stays finished (and untouched) until its spec changes."""
    done = previous.get("phase") in {p.value for p in lifecycle.TERMINAL}
    return done and previous.get("observedGeneration") == generation


def observe(
    spec: TrainiumJobSpec, owner: Owner, lookup: FsxLookup
) -> tuple[Observed, fsx.FsxNames | None]:
    """Read everything the lifecycle needs from the API (and FSx when names are missing)."""
    ready, blocker, names = _observe_storage(spec, owner, lookup)
    key = cache_key(spec)
    pre = k8s.get_vcjob(owner.namespace, naming.vcjob_name(owner.name, "precompile"))
    train = k8s.get_vcjob(owner.namespace, naming.vcjob_name(owner.name, "train"))
    record = naming.cache_record_name(cache_name(spec, key), key)
    queue_blocker = None
    if train is None and not k8s.queue_exists(spec.scheduling.queue):
        queue_blocker = Blocker(
            "QueueNotFound",
            f"Volcano queue {spec.scheduling.queue!r} (spec.scheduling.queue) does not exist; "
            "create it or pick another queue",
        )
    observed = Observed(
        policy=spec.precompile.policy,
        storage_ready=ready,
        storage_blocker=blocker,
        queue_blocker=queue_blocker,
        cache_recorded=k8s.get_configmap(owner.namespace, record) is not None,
        precompile=_child(pre),
        precompile_message=_child_message(pre),
        training=_child(train),
        training_message=_child_message(train),
        restarts=int(((train or {}).get("status") or {}).get("retryCount", 0)),
    )
    return observed, names


def _observe_storage(
    spec: TrainiumJobSpec, owner: Owner, lookup: FsxLookup
) -> tuple[bool, Blocker | None, fsx.FsxNames | None]:
    if spec.storage.claimName:
        if k8s.get_claim(owner.namespace, spec.storage.claimName) is None:
            msg = (
                f"PersistentVolumeClaim {spec.storage.claimName!r} (spec.storage.claimName) "
                f"not found in namespace {owner.namespace!r}; waiting for it to be created"
            )
            return False, Blocker("ClaimNotFound", msg), None
        return True, None, None
    claim = k8s.get_claim(owner.namespace, naming.claim_name(owner.name))
    volume = k8s.get_volume(naming.volume_name(owner.namespace, owner.name))
    if claim is not None and volume is not None:
        return True, None, None
    fs = spec.storage.fsx
    assert fs is not None
    if fs.dnsName and fs.mountName:
        return False, None, fsx.FsxNames(fs.dnsName, fs.mountName)
    try:
        found = lookup(fs.fileSystemId)
    except fsx.FsxLookupError as exc:
        return False, Blocker(exc.reason, str(exc)), None
    return False, None, fsx.FsxNames(fs.dnsName or found.dns_name, fs.mountName or found.mount_name)


def _child(job: Json | None) -> Child:
    if job is None:
        return Child.ABSENT
    return lifecycle.from_volcano(((job.get("status") or {}).get("state") or {}).get("phase"))


def _child_message(job: Json | None) -> str:
    state = ((job or {}).get("status") or {}).get("state") or {}
    parts = [state.get("reason"), state.get("message")]
    return ": ".join(p for p in parts if p)


def _act(
    actions: tuple[Action, ...], spec: TrainiumJobSpec, owner: Owner, names: fsx.FsxNames | None
) -> None:
    """Carry out the lifecycle's actions in order; each create tolerates 'already exists'."""
    for action in actions:
        if action is Action.CREATE_STORAGE:
            assert names is not None
            k8s.create_volume(
                builders.build_fsx_volume(spec, owner, names.dns_name, names.mount_name)
            )
            k8s.create_claim(builders.build_fsx_claim(spec, owner))
        elif action is Action.CREATE_PRECOMPILE:
            k8s.create_vcjob(builders.build_vcjob(spec, owner, "precompile"))
        elif action is Action.RECORD_CACHE:
            k8s.create_configmap(builders.build_cache_record(spec, owner, now_iso()))
        elif action is Action.CREATE_TRAINING:
            k8s.create_vcjob(builders.build_vcjob(spec, owner, "train"))


def _report(
    body: Json,
    decision: Decision,
    spec: TrainiumJobSpec | None,
    emit: Emit,
    obs: Observed | None = None,
) -> tuple[Json, Transition | None]:
    """Patch status when it changed; Events on a phase transition and on a new blocker."""
    obs = obs or Observed()
    acts = decision.actions
    meta = body["metadata"]
    previous: Json = body.get("status") or {}
    key = cache_key(spec) if spec else None
    owner_name = meta["name"]
    new = status.render(
        decision,
        previous,
        generation=int(meta.get("generation", 1)),
        now=now_iso(),
        cache_key=key,
        cache_name=cache_name(spec, key) if spec and key else None,
        precompile_job=_job_name(
            owner_name, "precompile", obs.precompile is not Child.ABSENT, acts
        ),
        training_job=_job_name(owner_name, "train", obs.training is not Child.ABSENT, acts),
    )
    if not status.changed(previous, new):
        return previous, None
    k8s.patch_trainiumjob_status(meta["namespace"], owner_name, new)
    return new, _announce(body, previous, new, decision, emit)


def _announce(
    body: Json, previous: Json, new: Json, decision: Decision, emit: Emit
) -> Transition | None:
    """Events for a new blocker and for a phase transition; the transition for metrics."""
    blocker = decision.blocker
    if blocker and blocker.reason not in {c.get("reason") for c in previous.get("conditions", [])}:
        emit(body, "Warning", blocker.reason, blocker.message)
    old_phase = previous.get("phase")
    if old_phase == new["phase"]:
        return None
    reason = _reason(decision)
    kind = "Warning" if decision.phase is lifecycle.Phase.FAILED else "Normal"
    emit(body, kind, reason, decision.message)
    outcome = (new.get("cache") or {}).get("outcome")
    first = outcome if outcome != (previous.get("cache") or {}).get("outcome") else None
    meta = body["metadata"]
    return Transition(
        meta["namespace"], meta["name"], old_phase, new["phase"], reason, decision.message, first
    )


def _job_name(owner: str, stage: str, present: bool, actions: tuple[Action, ...]) -> str | None:
    """Name a stage's job on status once it exists or is being created now."""
    create = Action.CREATE_PRECOMPILE if stage == "precompile" else Action.CREATE_TRAINING
    return naming.vcjob_name(owner, stage) if present or create in actions else None


def _reason(decision: Decision) -> str:
    """The Event reason: the most specific condition reason of the new phase."""
    for cond in reversed(decision.conditions):
        if cond.status == "True" and cond.type in ("Failed", "Succeeded", "Running"):
            return cond.reason
    return decision.phase.value
