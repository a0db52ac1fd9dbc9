"""kopf registrations only: watch events of a job and its world run one level-based reconcile.

Event handlers only queue a pass (in kopf's event loop; passes run in the operator's own threads
and read what the watches stream, reads.py) and write nothing of kopf's own (no progress
annotations), so an unsettled job costs no requests between events; the scheduler's backstop
re-checks it rarely. The only finalizer is on jobs with an FSx file system: their
cluster-scoped PV must really be deleted with them.
"""

from __future__ import annotations

import contextvars
import logging
import os
import socket
import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

import kopf
from kubernetes.client.exceptions import ApiException

from trainium_operator import (
    checkpoints,
    events,
    footprint,
    k8s,
    metrics,
    naming,
    peering,
    watches,
)
from trainium_operator.builders import (
    ANNOTATION_OWNER,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_STAGE,
    MANAGED_BY,
    owner_name,
)
from trainium_operator.cache import LABEL_CACHE_ENTRY
from trainium_operator.checkpoints import Checkpoint
from trainium_operator.crd import GROUP, PLURAL, VERSION
from trainium_operator.essence import LeanDiffBase
from trainium_operator.lifecycle import TERMINAL
from trainium_operator.observe import Views
from trainium_operator.reconcile import Outcome, reconcile
from trainium_operator.scheduler import (
    BUSY,
    FIRST,
    FOLLOW_UP,
    RESYNC,
    Busy,
    Key,
    RankedPool,
    Scheduler,
    next_look,
)
from trainium_operator.status import clip

#: kopf's annotation prefix and finalizer name, decided on day one.
PREFIX = GROUP
Json = dict[str, Any]
_TERMINAL = {p.value for p in TERMINAL}
_busy_guard = threading.Lock()
_busy: set[Key] = set()
#: Triggers that came during a pass: one more pass each, fresh if any trigger was.
_again: dict[Key, bool] = {}
_attempts: defaultdict[Key, int] = defaultdict(int)
_written: dict[Key, str] = {}
_queue_parents: dict[str, str | None] = {}
_pods_changed: dict[Key, bool] = {}
#: The newest checkpoint each job's training pods reported, as the pod watch streamed it.
_checkpoints: dict[Key, Checkpoint] = {}
#: Threads for passes: enough that passes waiting on throttled requests block no others.
WORKERS = 16
#: Passes run here, not in kopf's handler threads: a handler returns at once, so kopf's
#: per-object workers drain their events (and free the bodies) while passes coalesce by job.
#: A new job's first pass goes before the follow-ups of the jobs ahead of it.
PASSES = RankedPool(WORKERS, "trainium-pass", on_idle=footprint.Trimmer().idle)
log = logging.getLogger(__name__)


def resync_seconds() -> float:
    """How often an unsettled job is re-checked when no event arrives (a backstop only)."""
    return float(os.environ.get("TRAINIUM_RESYNC_SECONDS", RESYNC))


def handle(key: Key, *, fresh: bool = False) -> float | Busy | None:
    """Reconcile one job, one pass at a time; triggers during a pass coalesce into one more.

    A trigger that finds a pass running returns BUSY at once instead of holding a worker
    thread: the running pass goes round again and sets the next look itself. A fresh pass
    reads with GETs instead of the watches (the backstop's: it heals what a watch missed).
    """
    with _busy_guard:
        if key in _busy:
            _again[key] = _again.get(key, False) or fresh
            return BUSY
        _busy.add(key)
    try:
        while True:
            delay = _pass(key, fresh)
            with _busy_guard:
                if key not in _again:
                    return delay
                fresh = _again.pop(key)
    finally:
        with _busy_guard:
            _busy.discard(key)


def _backstop(key: Key) -> float | Busy | None:
    """A look the scheduler made due (no event): read fresh."""
    return handle(key, fresh=True)


def _pass(key: Key, fresh: bool = False) -> float | None:
    """One reconcile of one job; return when to look again."""
    namespace, name = key
    with metrics.reconcile_timer():
        try:
            views = Views(
                dict(_queue_parents),
                pods_changed=_pods_changed.pop(key, False),
                checkpoint=_checkpoints.get(key),
            )
            read = watches.reader(fresh=fresh)
            views = replace(views, reader=read) if read is not None else views
            outcome = reconcile(namespace, name, _emit, views)
        except Exception as exc:  # never crash the handler: count, log, back off, retry
            return _failed_pass(key, exc)
    if outcome.written_version:
        _written[key] = outcome.written_version
    if outcome.transition:
        metrics.count_transition(outcome.transition)
        if outcome.transition.cost is not None:
            metrics.count_cost(outcome.transition.cost)
    metrics.count_compile(outcome.cache_figures)
    if outcome.phase is None:
        forget(key)
        return None
    metrics.track(namespace, name, outcome.phase)
    return _next(key, outcome)


def _failed_pass(key: Key, exc: Exception) -> float | None:
    kind = f"Api{exc.status}" if isinstance(exc, ApiException) else "Internal"
    kind = "Network" if isinstance(exc, k8s.NETWORK_ERRORS) else kind
    metrics.count_error(kind)
    level = logging.WARNING if k8s.transient(exc) else logging.ERROR
    log.log(level, "reconcile of %s/%s failed (%s): %s", *key, kind, exc, exc_info=level > 30)
    _attempts[key] += 1
    return next_look(None, errored=True, attempt=_attempts[key] - 1)


def _next(key: Key, outcome: Outcome) -> float | None:
    waiting = outcome.waiting
    _attempts[key] = _attempts[key] + 1 if waiting else 0
    delay = next_look(
        outcome.phase,
        terminal=outcome.phase in _TERMINAL,
        ttl_remaining=outcome.ttl_remaining,
        waiting=waiting,
        attempt=max(0, _attempts[key] - 1),
        resync=resync_seconds(),
    )
    if outcome.deadline_in is not None and delay is not None:
        return min(delay, outcome.deadline_in + 0.5)  # look right after the deadline
    return delay


def forget(key: Key) -> None:
    """The job is gone: drop its metrics and bookkeeping."""
    metrics.forget(*key)
    for book in (_attempts, _written, _checkpoints):
        book.pop(key, None)
    SCHEDULER.after(key, None)


SCHEDULER = Scheduler(_backstop)


def _emit(body: Json, kind: str, reason: str, message: str, action: str) -> None:
    """Our own Event, not kopf.event: that one's `action` is always "Action?"."""
    now = events.now_micro()
    k8s.post_event(events.build(body, kind, reason, clip(message), action, now_micro=now))


def _wake(key: Key, rank: int = FOLLOW_UP) -> None:
    """Queue a pass, from a handler (in kopf's context: its Events are posted from there)."""
    context = contextvars.copy_context()
    SCHEDULER.context = context  # so the backstop can post Events too
    PASSES.submit(context.run, _wake_now, key, rank=rank)


def _wake_now(key: Key) -> None:
    """Run a pass now; schedule the next look."""
    delay = handle(key)
    if delay is not BUSY:
        SCHEDULER.after(key, delay)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Our annotations, our Event source, retries that cover resets; start the backstop."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = LeanDiffBase(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "trainium-operator"
    settings.posting.reporting_instance = os.environ.get("POD_NAME") or socket.gethostname()
    settings.watching.server_timeout = 300
    # Sync handlers run in kopf's thread pool (default: cores + 4); they only queue passes,
    # but a settled job's TTL delete is a request: keep threads to spare for retries' waits.
    settings.execution.max_workers = WORKERS
    logging.getLogger("kopf.objects").addFilter(_quiet_events)
    if settings.peering.mandatory:
        settings.peering.priority = peering.distinct_priority(settings.peering.priority)
        log.warning("peering %r with priority %d: the highest-priority peer acts, the others "
                    "stand by", settings.peering.name, settings.peering.priority)  # fmt: skip
        peering.ensure(settings.peering.name, clusterwide=settings.peering.clusterwide)
    metrics.start_from_env()
    SCHEDULER.start()


def _quiet_events(record: logging.LogRecord) -> bool:
    """Every watch event runs a handler: its routine "succeeded" line is DEBUG, not INFO."""
    if record.levelno == logging.INFO and record.getMessage().endswith("succeeded."):
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger("kopf.objects").isEnabledFor(logging.DEBUG)
    return True


@kopf.on.cleanup()
def shutdown(**_: Any) -> None:
    """Stop the backstop thread and the passes with the operator."""
    SCHEDULER.stop()
    PASSES.shutdown()


@kopf.index(GROUP, VERSION, PLURAL)
async def tj_wakers(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Key]:
    """Jobs by what wakes them: the claim they mount, their Volcano queue, their cache entry.

    One index, not three: kopf runs every index function on every event of every job.
    """
    key: Key = (namespace or "", name)
    claim = _field(body, "storage", "claimName") or naming.claim_name(name)
    out: dict[Any, Key] = {
        ("claim", namespace, claim): key,
        ("queue", _field(body, "scheduling", "queue") or "default"): key,
    }
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
        _wake(key)


def _wake_cache_users(namespace: str, body: kopf.Body, kwargs: Mapping[str, Any]) -> None:
    entry = _entry(body)
    if entry:
        _wake_entry_users(namespace, entry, kwargs)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_job(
    type: str, body: kopf.Body, namespace: str | None, name: str, **kwargs: Any
) -> None:
    """The job changed (or was listed at start-up): a pass (a finished job's only ages out)."""
    if namespace is None:
        return
    key = (namespace, name)
    if type == "DELETED":
        forget(key)
        _wake_cache_users(namespace, body, kwargs)  # a writer gone mid-compile frees its entry
        return
    if _written.get(key) == body.metadata.get("resourceVersion"):
        return  # the echo of our own status patch
    _wake(key, FOLLOW_UP if _phase(body) else FIRST)


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
    type: str, namespace: str | None, meta: kopf.Meta, labels: Mapping[str, str], **_: Any
) -> None:
    """A Volcano job of ours changed: re-derive its owner's status right away."""
    if type is None or namespace is None:  # the initial listing: the job listing covers it
        return
    _wake((namespace, owner_name(meta)))


@kopf.on.event("", "v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def on_pod(
    type: str, meta: kopf.Meta, status: kopf.Status, labels: Mapping[str, str], **_: Any
) -> None:
    """A gang pod failed or cannot start: read why while the pod (and its log) still exists.

    A training pod whose container ended with a newer checkpoint report wakes its job too (the
    initial listing only remembers it, so a restarted operator keeps what the pods say).
    """
    key = _owner_key(meta)
    if key is None:
        return
    newer = _remember_checkpoint(key, labels, status)
    if type is None:
        return
    troubled = _troubled(dict(status))
    if troubled:
        _pods_changed[key] = True
    if troubled or newer:
        _wake(key)


def _remember_checkpoint(key: Key, labels: Mapping[str, str], status: kopf.Status) -> bool:
    """Keep the newest checkpoint a training pod reported; whether it is newer than the last."""
    if labels.get(LABEL_STAGE) != "train":
        return False
    found = checkpoints.from_pod({"status": dict(status)})
    known = _checkpoints.get(key)
    if found is None or checkpoints.newest([known, found]) is known:
        return False
    _checkpoints[key] = found
    return True


def _owner_key(meta: kopf.Meta) -> Key | None:
    """(namespace, name) of the job a cluster-wide or pod child belongs to (its annotation)."""
    ns, _sep, name = ((meta.annotations or {}).get(ANNOTATION_OWNER) or "").partition("/")
    return (ns, name) if ns and name else None


def _troubled(status: Json) -> bool:
    """A container terminated non-zero or stuck waiting on an error; or the pod failed."""
    if status.get("phase") == "Failed" or status.get("reason") == "Evicted":
        return True
    for cs in status.get("containerStatuses") or []:
        for key in ("state", "lastState"):
            term = (cs.get(key) or {}).get("terminated") or {}
            if term.get("exitCode") not in (None, 0):
                return True
        waiting = ((cs.get("state") or {}).get("waiting") or {}).get("reason") or ""
        if waiting and waiting not in ("ContainerCreating", "PodInitializing"):
            return True
    return False


@kopf.on.event("", "v1", "persistentvolumeclaims")
async def on_claim(type: str, namespace: str | None, name: str, **kwargs: Any) -> None:
    """A claim changed (created, bound, lost): wake the jobs that mount it."""
    if type is None or namespace is None:
        return
    for key in _waiting_on(kwargs, "claim", namespace, name):
        _wake(key)


@kopf.on.event("", "v1", "persistentvolumes", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def on_volume(type: str, meta: kopf.Meta, **_: Any) -> None:
    """Our static PV changed (bound, released, gone): wake the job that wants it."""
    key = _owner_key(meta)
    if type is not None and key is not None:
        _wake(key)


@kopf.on.event("scheduling.volcano.sh", "v1beta1", "queues")
async def on_queue(type: str, name: str, body: kopf.Body, **kwargs: Any) -> None:
    """Keep the queue hierarchy (leaf check); a queue created or opened wakes its jobs."""
    if type == "DELETED":
        _queue_parents.pop(name, None)
    else:
        _queue_parents[name] = _field(body, "parent")
    if type is None:
        return
    for key in _waiting_on(kwargs, "queue", name):
        _wake(key)


def _field(body: kopf.Body, *path: str) -> Any:
    """spec.<path> of a job whatever its shape (kopf's Spec view raises on a non-dict)."""
    value: Any = body.get("spec")
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _uses_fsx(body: kopf.Body, **_: Any) -> bool:
    return bool(_field(body, "storage", "fsx"))


@kopf.on.delete(GROUP, VERSION, PLURAL, when=_uses_fsx)
def on_delete(namespace: str | None, name: str, **_: Any) -> None:
    """FSx jobs only (a finalizer holds them): delete the cluster-scoped PV we created.

    The PV's protection finalizer keeps it until its claim (owned by the job) is gone, so the
    data is never cut off from running pods; the FSx file system itself is never touched.
    """
    if namespace is None:
        return
    k8s.delete_volume(naming.volume_name(namespace, name))


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
