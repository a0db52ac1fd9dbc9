"""Carry out the lifecycle's actions against the API; a refusal is returned, not raised.

Each action is idempotent ("already exists" is success). A 4xx refusal becomes a Rejection the
lifecycle decides on in the same pass; throttling, 5xx and network errors propagate as transient.
Every write's outcome is told to the pass's reader, so the next pass does not act on a watch
that has not caught up with it yet.
"""

from __future__ import annotations

import datetime

from kubernetes.client.exceptions import ApiException

from trainium_operator.api import naming
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.cluster import cacheio, k8s, volumes, workloadwrites
from trainium_operator.cluster.observe import Seen
from trainium_operator.cluster.reads import ApiReader, Kind, Reader
from trainium_operator.domain.lifecycle import Action, Rejection
from trainium_operator.domain.status import now_iso
from trainium_operator.manifests import builders, cache, dra
from trainium_operator.manifests.ownership import Owner


def perform(
    actions: tuple[Action, ...],
    spec: TrainiumJobSpec,
    owner: Owner,
    seen: Seen,
    reader: Reader | None = None,
) -> tuple[Rejection, ...]:
    """Run the actions in order; stop at the first one the API server refuses."""
    for action in actions:
        try:
            _one(action, spec, owner, seen, reader or ApiReader())
        except ApiException as exc:
            if k8s.transient(exc):
                raise
            return (Rejection(action, exc.status, k8s.api_message(exc)),)
    return ()


def _one(action: Action, spec: TrainiumJobSpec, owner: Owner, seen: Seen, read: Reader) -> None:
    if action in (Action.CREATE_STORAGE, Action.REPAIR_STORAGE):
        _storage(action, spec, owner, seen, read)
    elif action in (Action.CREATE_PRECOMPILE, Action.CREATE_TRAINING):
        _create_stage(action, spec, owner, seen, read)
    elif action in workloadwrites.ACTIONS:
        assert seen.kueue is not None
        acting = workloadwrites.Acting(spec, owner, seen.kueue, seen.observed, seen.excluded_nodes)
        workloadwrites.act(action, acting, read)
    elif action in _CACHE_ACTIONS:
        _cache_action(action, spec, owner, seen, read)
    elif action in (Action.STOP_TRAINING, Action.STOP_PRECOMPILE):
        _stop_stage(action, spec, owner, seen, read)


def _storage(action: Action, spec: TrainiumJobSpec, owner: Owner, seen: Seen, read: Reader) -> None:
    """The job's static FSx volume and its claim: created, or the volume's stale claimRef freed."""
    if action is Action.REPAIR_STORAGE:
        assert seen.volume is not None
        pv_name = seen.volume["metadata"]["name"]
        read.wrote(Kind.VOLUME, "", pv_name, volumes.release_claim_ref(seen.volume))
        return
    if seen.volume is None:
        assert seen.names is not None
        names = seen.names
        pv = builders.build_fsx_volume(spec, owner, names.dns_name, names.mount_name)
        read.wrote(Kind.VOLUME, "", pv["metadata"]["name"], volumes.create_volume(pv))
    claim = builders.build_fsx_claim(spec, owner)
    read.wrote(Kind.CLAIM, owner.namespace, claim["metadata"]["name"], volumes.create_claim(claim))


def _create_stage(
    action: Action, spec: TrainiumJobSpec, owner: Owner, seen: Seen, read: Reader
) -> None:
    """One stage's Volcano job (its DRA claim template first), on Kueue's admitted flavor."""
    stage = "precompile" if action is Action.CREATE_PRECOMPILE else "train"
    if dra.uses_dra(spec):  # the pods' claims come from it: it goes first (409 = there)
        k8s.create_claim_template(builders.build_claim_template(spec, owner))
    job = builders.build_vcjob(spec, owner, stage, seen.excluded_nodes)
    job = workloadwrites.admitted(job, seen.kueue, stage)  # Kueue's flavor: its node labels
    read.wrote(Kind.VCJOB, owner.namespace, job["metadata"]["name"], k8s.create_vcjob(job))


def _stop_stage(
    action: Action, spec: TrainiumJobSpec, owner: Owner, seen: Seen, read: Reader
) -> None:
    """Delete one stage's Volcano job; a replaced gang's in the foreground (its successor waits)."""
    ns = owner.namespace
    stage = "train" if action is Action.STOP_TRAINING else "precompile"
    name = naming.stage_job(owner.name, stage, spec.precompile_size, owner.train_gang)
    uid = seen.train_uid if action is Action.STOP_TRAINING else seen.pre_uid
    replaced = seen.observed.replace_gang or seen.observed.resize is not None
    if replaced and action is Action.STOP_TRAINING:
        # Its successor (named on the job first: gangs.name_successor) waits for its nodes:
        # the old one goes first, pods and all (observe waits while it has a deletionTimestamp).
        k8s.delete_vcjob(ns, name, uid, foreground=True)
    else:
        k8s.delete_vcjob(ns, name, uid)
        read.deleted(Kind.VCJOB, ns, name)
    if action is Action.STOP_PRECOMPILE:
        _release(seen, read)  # another job may compile these graphs meanwhile


_CACHE_ACTIONS = (Action.ACQUIRE_CACHE, Action.RECORD_CACHE, Action.RECORD_CACHE_FAILED)


def _cache_action(
    action: Action, spec: TrainiumJobSpec, owner: Owner, seen: Seen, read: Reader
) -> None:
    """Take the entry's lease (the compile's start); or record the outcome and release."""
    ident, ns = cache.identity(spec), owner.namespace
    name = ident.record_name
    if action is Action.ACQUIRE_CACHE:
        micro = _micro_now()
        if seen.lease is None:
            taken = cacheio.create_lease(cache.lease(ident, owner, micro))
        else:  # stale: its holder is gone or finished
            taken = cacheio.take_lease(seen.lease, cache.holder(owner), micro)
        read.wrote(Kind.LEASE, ns, name, taken)
        return
    state = cache.READY if action is Action.RECORD_CACHE else cache.FAILED
    ours = seen.observed.cache_holder == "self"
    started = cache.acquired_at(seen.lease) if ours else ""
    done = cache.record(ident, spec, owner, state, started_at=started, now=now_iso())
    written = cacheio.put_configmap(done, exists=seen.entry is not None)
    read.wrote(Kind.RECORD, ns, name, written)
    _release(seen, read)


def _release(seen: Seen, read: Reader) -> None:
    """Give up the entry's writer lease if this job holds it."""
    if seen.lease is not None and seen.observed.cache_holder == "self":
        cacheio.delete_lease(seen.lease)
        md = seen.lease["metadata"]
        read.deleted(Kind.LEASE, md["namespace"], md["name"])


def _micro_now() -> str:
    """MicroTime, as Lease fields want it."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
