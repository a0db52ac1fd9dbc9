"""kopf registrations only: watch events of a job and its world run one level-based reconcile.

Event handlers only queue a pass (in kopf's event loop) into the runtime (runtime/passes.py: one
work queue, its workers and the per-job records, kept in kopf's memo), keyed by the job's uid;
passes read what the watches stream (reads.py) and write nothing of kopf's own (no progress
annotations), so an unsettled job costs no requests between events; a timed look re-checks it
rarely. Kueue's kinds are watched by our own threads (runtime/kueuewatch.py), outside kopf's
index barrier. Every replica watches; only the one holding the Lease runs passes and writes
(runtime/leadership.py). No handler here is a changing one (on.create/update/delete/resume):
kopf then writes nothing of its own (no diff-base annotation, no progress, no finalizer), so a
standby sends no write at all. The FSx PV of a deleted job goes by a sweep in the passes' queue.
"""

from __future__ import annotations

import contextvars
import logging
import os
import socket
from collections.abc import Mapping
from typing import Any, cast

import kopf

from trainium_operator.api import naming
from trainium_operator.api.crd import GROUP, PLURAL, VERSION
from trainium_operator.cluster import devicetaints, k8s, watches
from trainium_operator.cluster import election as lease_io
from trainium_operator.cluster.reconcile import reconcile
from trainium_operator.domain import events, health
from trainium_operator.domain.status import clip, one_line
from trainium_operator.manifests.cache import LABEL_CACHE_ENTRY
from trainium_operator.manifests.ownership import LABEL_JOB, LABEL_MANAGED_BY, MANAGED_BY, owner_uid
from trainium_operator.runtime import essence, footprint, kueuewatch, leadership, metrics, pods
from trainium_operator.runtime.passes import WORKERS, Passes
from trainium_operator.runtime.records import Key

#: kopf's annotation prefix and finalizer name, decided on day one.
PREFIX = GROUP
Json = dict[str, Any]
log = logging.getLogger(__name__)


def _emit(body: Json, kind: str, reason: str, message: str, action: str) -> None:
    """Our own Event, not kopf.event: that one's `action` is always "Action?"."""
    now = events.now_micro()
    message = clip(one_line(message))  # one line in `kubectl describe`'s Events table
    k8s.post_event(events.build(body, kind, reason, message, action, now_micro=now))


def _passes(memo: Any) -> Passes:
    """The operator's pass runtime (kopf's memo holds it: no module state here)."""
    return cast(Passes, memo.passes)


def _wake(memo: Any, key: Key) -> None:
    """Queue a pass, from a handler (in kopf's context: its Events are posted from there)."""
    _passes(memo).wake(key, context=contextvars.copy_context())


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    """Our annotations, our Event source, retries that cover resets; start the passes."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = essence.diffbase(PREFIX, "last-handled-configuration")
    # No handler adds it any more; kopf removes it from jobs an older operator gave it.
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "trainium-operator"
    settings.posting.reporting_instance = os.environ.get("POD_NAME") or socket.gethostname()
    settings.watching.server_timeout = 300
    # Sync handlers run in kopf's thread pool (default: cores + 4); they only queue passes,
    # but a settled job's TTL delete is a request: keep threads to spare for retries' waits.
    settings.execution.max_workers = WORKERS
    logging.getLogger("kopf.objects").addFilter(_quiet_events)
    k8s.api_client()  # the client (and its API modules) load at start, not in the first pass
    passes = Passes(reconcile, _emit, on_idle=footprint.Trimmer().idle)
    passes.reads.indices.update(watches.indices(kwargs))
    passes.reads.queue_children = kwargs["queue_children"]
    passes.reads.precompiles = kwargs["precompiles"]
    passes.reads.nodes, passes.reads.gang_pods = kwargs["node_names"], kwargs["gang_pods"]
    passes.reads.node_health = kwargs["node_health"]
    passes.reads.devices = _device_watches(passes, kwargs["gang_pods"])
    memo.kueue_watches = kueuewatch.start(passes)  # ours, not kopf's: outside its barrier
    lease = os.environ.get(leadership.LEASE_ENV)
    passes.start(paused=bool(lease))
    memo.passes = passes
    if lease:
        settings.posting.enabled = False  # kopf's own Events (a handler's error): in a term only
        memo.election = _elect(lease, passes, settings)


def _device_watches(passes: Passes, bound: kopf.Index[Any, Key]) -> devicetaints.DeviceWatches:
    """DRA claims and slices, watched from the first DRA job's pass on (none before)."""

    def wake_node(node: str) -> None:
        for key in set(bound.get(("node", node), ())):
            passes.wake(key)

    return devicetaints.DeviceWatches(passes.wake, wake_node)


def _elect(lease: str, passes: Passes, settings: kopf.OperatorSettings) -> leadership.Election:
    """Stand for the Lease: passes run inside our terms; every write asks the fence first."""
    namespace = os.environ.get("POD_NAMESPACE") or lease_io.current_namespace()

    def start(continued: bool) -> None:
        settings.posting.enabled = True
        passes.start_term(continued=continued)

    def stop() -> None:
        settings.posting.enabled = False
        passes.end_term()

    candidate = leadership.Candidate(leadership.identity(), lease, namespace, start, stop)
    api = lease_io.ElectionLease(namespace, lease)
    election = leadership.Election(api, candidate, leadership.timing_from())
    k8s.fence = election.fence.check
    log.info("standing for the Lease %s/%s as %s: the holder acts, the others stand by",
             namespace, lease, election.identity)  # fmt: skip
    election.start()
    return election


def _quiet_events(record: logging.LogRecord) -> bool:
    """Every watch event runs a handler: its routine "succeeded" line is DEBUG, not INFO."""
    if record.levelno == logging.INFO and record.getMessage().endswith("succeeded."):
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger("kopf.objects").isEnabledFor(logging.DEBUG)
    return True


@kopf.on.cleanup()
def shutdown(memo: kopf.Memo, **_: Any) -> None:
    """No more passes; the running ones finish (the queue drains them)."""
    for watch in getattr(memo, "kueue_watches", ()):
        watch.stop(timeout=0)  # daemon threads: a watch request ends with the process
    passes = getattr(memo, "passes", None)
    if passes is not None:
        if passes.reads.devices is not None:
            passes.reads.devices.stop()
        passes.stop()
    election = getattr(memo, "election", None)
    if election is not None:  # after the passes: they wrote inside our term until now
        election.stop(release=True)


@kopf.index(GROUP, VERSION, PLURAL)
async def tj_wakers(
    namespace: str | None, name: str, uid: str | None, body: kopf.Body, **_: Any
) -> dict[Any, Key]:
    """Jobs (uids) by what wakes them: the claim they mount, their queue, their cache entry.

    One index, not three: kopf runs every index function on every event of every job.
    """
    key: Key = uid or ""
    claim = _field(body, "storage", "claimName") or naming.claim_name(name)
    out: dict[Any, Key] = {
        ("claim", namespace, claim): key,
        ("queue", _field(body, "scheduling", "queue") or "default"): key,
    }
    priority = _field(body, "scheduling", "priorityClassName")
    if priority:
        out[("priority", priority)] = key
    entry = _entry(body)
    if entry:
        out[("entry", namespace, entry)] = key
    return out


def _waiting_on(kwargs: Mapping[str, Any], *what: Any) -> list[Key]:
    """The jobs a claim, queue or cache entry wakes."""
    return list(cast(kopf.Index[Any, Key], kwargs["tj_wakers"]).get(what, []))


def _entry(body: kopf.Body) -> str | None:
    """The cache entry a job's status names, whatever the status's shape."""
    status = body.get("status")
    return (status.get("cache") or {}).get("entry") if isinstance(status, Mapping) else None


@kopf.on.event("", "v1", "configmaps", labels={LABEL_CACHE_ENTRY: kopf.PRESENT})
@kopf.on.event("coordination.k8s.io", "v1", "leases", labels={LABEL_CACHE_ENTRY: kopf.PRESENT})
async def on_cache_entry(
    type: str, namespace: str | None, labels: Mapping[str, str], **kwargs: Any
) -> None:
    """An entry turned Ready or Failed, or its writer let go: wake the jobs that use it."""
    if type is None or namespace is None:
        return
    _wake_entry_users(namespace, labels[LABEL_CACHE_ENTRY], kwargs)


def _wake_entry_users(namespace: str, entry: str, kwargs: Mapping[str, Any]) -> None:
    for key in _waiting_on(kwargs, "entry", namespace, entry):
        _wake(kwargs["memo"], key)


def _wake_cache_users(namespace: str, body: kopf.Body, kwargs: Mapping[str, Any]) -> None:
    entry = _entry(body)
    if entry:
        _wake_entry_users(namespace, entry, kwargs)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_job(
    type: str, body: kopf.Body, namespace: str | None, name: str, **kwargs: Any
) -> None:
    """The job changed (or was listed at start-up): a pass (a finished job's only ages out).

    Its uid is its key: a DELETED event forgets that object only, never a new one of the name.
    """
    uid = body.metadata.get("uid")
    if namespace is None or not uid:
        return
    passes = _passes(kwargs["memo"])
    if type == "DELETED":
        passes.gone(uid)
        _wake_cache_users(namespace, body, kwargs)  # a writer gone mid-compile frees its entry
        if _field(body, "storage", "fsx"):  # its PV is cluster-scoped: no owner deletes it
            passes.sweep_volume(naming.volume_name(namespace, name), uid)
        return
    version = body.metadata.get("resourceVersion")
    context = contextvars.copy_context()
    passes.job_event(uid, (namespace, name), version, first=not _phase(body), context=context)


def _phase(body: kopf.Body) -> str | None:
    """status.phase of a job whatever the status's shape (None: never reported on)."""
    status = body.get("status")
    return status.get("phase") if isinstance(status, Mapping) else None


@kopf.on.event(
    "batch.volcano.sh",
    "v1alpha1",
    "jobs",
    labels={LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB: kopf.PRESENT},
)
async def on_vcjob(
    type: str,
    namespace: str | None,
    meta: kopf.Meta,
    labels: Mapping[str, str],
    **kwargs: Any,
) -> None:
    """A Volcano job of ours changed: re-derive its owner's status right away.

    A precompile that goes also wakes the jobs of its cache entry: one that found it compiling
    without a lease (observe.compiling_elsewhere, read from the watches) waits on it. One that
    completes does not: its job's record (a ConfigMap event) wakes them once it says Ready.
    """
    if type is None or namespace is None:  # the initial listing: the job listing covers it
        return
    owner = pods.owner_key(meta, _passes(kwargs["memo"]))
    if owner is not None:
        _wake(kwargs["memo"], owner)
    holder = pods.name_holder(namespace, meta, _passes(kwargs["memo"]))
    if holder is not None and holder != owner:  # an earlier object's child: the name may free
        _wake(kwargs["memo"], holder)
    entry = labels.get(LABEL_CACHE_ENTRY)
    if entry and (type == "DELETED" or meta.get("deletionTimestamp")):
        _wake_entry_users(namespace, entry, kwargs)


@kopf.on.event("", "v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def on_pod(
    type: str,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    labels: Mapping[str, str],
    memo: Any,
    **_: Any,
) -> None:
    """A gang pod changed: pods.changed keeps what its event shows and wakes its job."""
    shown = {"metadata": dict(meta), "spec": dict(spec), "status": dict(status)}
    await pods.changed(_passes(memo), type, shown, dict(labels), contextvars.copy_context())


@kopf.on.event("", "v1", "nodes")
async def on_node(type: str, name: str, memo: Any, body: kopf.Body, **kwargs: Any) -> None:
    """A Node deleted wakes the jobs with pods bound to it: their pass removes those pods
    (cluster/orphans.py) instead of PodGC 40+ s later. NotReady is not gone: it may come back.
    A Node that says it is unhealthy (domain/health.py) wakes them too: they leave it now."""
    if type != "DELETED" and health.node_verdict(body) is None:
        return
    index = cast(kopf.Index[Any, Key], kwargs["gang_pods"])
    for key in set(index.get(("node", name), ())):
        _wake(memo, key)


@kopf.on.event("", "v1", "persistentvolumeclaims")
async def on_claim(type: str, namespace: str | None, name: str, **kwargs: Any) -> None:
    """A claim changed (created, bound, lost): wake the jobs that mount it."""
    if type is None or namespace is None:
        return
    for key in _waiting_on(kwargs, "claim", namespace, name):
        _wake(kwargs["memo"], key)


@kopf.on.event("", "v1", "persistentvolumes", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def on_volume(type: str, name: str, meta: kopf.Meta, memo: Any, **_: Any) -> None:
    """Our static PV changed (bound, released, gone): wake the job that wants it; one whose job
    this replica does not know (listed at start, or made by a pass racing the job's deletion)
    gets a sweep, which deletes it if the job is really gone."""
    passes = _passes(memo)
    key = pods.owner_key(meta, passes)
    if key is not None and passes.records.get(key) is not None:
        if type is not None:
            _wake(memo, key)
    elif type != "DELETED" and not meta.get("deletionTimestamp"):
        passes.sweep_volume(name, owner_uid(meta))


@kopf.on.event("scheduling.volcano.sh", "v1beta1", "queues")
async def on_queue(type: str, name: str, body: kopf.Body, **kwargs: Any) -> None:
    """A queue created, opened or given a child: wake its jobs and its parent's (leaf check).

    The hierarchy itself is read from the queue index (watches.queue_children), which kopf
    fills from its listing before any handler runs: never from what handlers have seen so far.
    """
    if type is None:
        return
    for queue in {name, _field(body, "parent")} - {None}:
        for key in _waiting_on(kwargs, "queue", queue):
            _wake(kwargs["memo"], key)


@kopf.on.event("scheduling.k8s.io", "v1", "priorityclasses")
async def on_priority_class(type: str, name: str, **kwargs: Any) -> None:
    """A PriorityClass created (or gone): wake the jobs that name it."""
    if type is None:
        return
    for key in _waiting_on(kwargs, "priority", name):
        _wake(kwargs["memo"], key)


def _field(body: kopf.Body, *path: str) -> Any:
    """spec.<path> of a job whatever its shape (kopf's Spec view raises on a non-dict)."""
    value: Any = body.get("spec")
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


# ---- Per-job state metrics (issue 11): a kopf index of statuses, read at scrape time ----------


@kopf.index(GROUP, VERSION, PLURAL)
async def trainiumjob_statuses(
    namespace: str | None, name: str, status: kopf.Status, **_: Any
) -> dict[tuple[str, str], Json]:
    """Each job's status by (namespace, name); kopf drops the entry when the job is deleted."""
    return {(namespace or "", name): metrics.indexed_status(status)}


@kopf.on.startup()
def serve_job_states(**kwargs: Any) -> None:
    """Metrics read the live index at each scrape (kopf hands indices to startup handlers)."""
    metrics.watch_jobs(kwargs["trainiumjob_statuses"])
