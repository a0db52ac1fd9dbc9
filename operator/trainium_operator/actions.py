"""Carry out the lifecycle's actions against the API; a refusal is returned, not raised.

Each action is idempotent ("already exists" is success). A 4xx refusal becomes a Rejection the
lifecycle decides on in the same pass; throttling, 5xx and network errors propagate as transient.
"""

from __future__ import annotations

import datetime

from kubernetes.client.exceptions import ApiException

from trainium_operator import builders, cache, k8s, naming
from trainium_operator.builders import Owner
from trainium_operator.lifecycle import Action, Rejection
from trainium_operator.observe import Seen
from trainium_operator.spec import TrainiumJobSpec
from trainium_operator.status import now_iso


def perform(
    actions: tuple[Action, ...], spec: TrainiumJobSpec, owner: Owner, seen: Seen
) -> tuple[Rejection, ...]:
    """Run the actions in order; stop at the first one the API server refuses."""
    for action in actions:
        try:
            _one(action, spec, owner, seen)
        except ApiException as exc:
            if k8s.transient(exc):
                raise
            return (Rejection(action, exc.status, k8s.api_message(exc)),)
    return ()


def _one(action: Action, spec: TrainiumJobSpec, owner: Owner, seen: Seen) -> None:
    if action is Action.CREATE_STORAGE:
        if seen.volume is None:
            assert seen.names is not None
            names = seen.names
            k8s.create_volume(
                builders.build_fsx_volume(spec, owner, names.dns_name, names.mount_name)
            )
        k8s.create_claim(builders.build_fsx_claim(spec, owner))
    elif action is Action.REPAIR_STORAGE:
        assert seen.volume is not None
        k8s.release_claim_ref(seen.volume)
    elif action is Action.CREATE_PRECOMPILE:
        k8s.create_vcjob(builders.build_vcjob(spec, owner, "precompile"))
    elif action in _CACHE_ACTIONS:
        _cache_action(action, spec, owner, seen)
    elif action is Action.CREATE_TRAINING:
        k8s.create_vcjob(builders.build_vcjob(spec, owner, "train"))
    elif action is Action.STOP_TRAINING:
        k8s.delete_vcjob(owner.namespace, naming.vcjob_name(owner.name, "train"))
    elif action is Action.STOP_PRECOMPILE:
        k8s.delete_vcjob(owner.namespace, naming.vcjob_name(owner.name, "precompile"))
        _release(seen, owner)  # another job may compile these graphs meanwhile


_CACHE_ACTIONS = (Action.ACQUIRE_CACHE, Action.RECORD_CACHE, Action.RECORD_CACHE_FAILED)


def _cache_action(action: Action, spec: TrainiumJobSpec, owner: Owner, seen: Seen) -> None:
    """Take the entry's lease and mark it Compiling; or record the outcome and release."""
    ident, now = cache.identity(spec), now_iso()
    if action is Action.ACQUIRE_CACHE:
        micro = _micro_now()
        if seen.lease is None:
            k8s.create_lease(cache.lease(ident, owner, micro))
        else:  # stale: its holder is gone or finished
            k8s.take_lease(seen.lease, cache.holder(owner), micro)
        k8s.put_configmap(
            cache.record(ident, spec, owner, cache.COMPILING, started_at=now, now=now)
        )
        return
    state = cache.READY if action is Action.RECORD_CACHE else cache.FAILED
    started = seen.entry.started_at if seen.entry else ""
    k8s.put_configmap(cache.record(ident, spec, owner, state, started_at=started, now=now))
    _release(seen, owner)


def _release(seen: Seen, owner: Owner) -> None:
    """Give up the entry's writer lease if this job holds it."""
    if seen.lease is not None and cache.read_holder(seen.lease) == cache.holder(owner):
        k8s.delete_lease(seen.lease)


def _micro_now() -> str:
    """MicroTime, as Lease fields want it."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
