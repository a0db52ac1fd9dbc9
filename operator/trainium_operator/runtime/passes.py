"""The operator's passes: every trigger goes through one work queue; what they remember, records.

A kopf handler only calls `wake` (or `job_event`, `pod_event`, `sweep_volume`, `gone`) and returns.
Every key is a job's uid. A worker takes it, reconciles the object once (reconcile.py), and sets
the next look without an event: soon after an API error (rate-limited backoff), a backoff while
a refusal may lift, the TTL or the deadline exactly, else a rare backstop. Those timed looks read
with GETs (`fresh`) and heal what a watch missed. The queue keeps one pass per job at a time,
merges triggers and runs only inside a leadership term (leadership.py: `start_term`/`end_term`).
The FSx PV of a job that is gone is deleted by a sweep in the same queue (storage.sweep_volume):
behind the fence, so a standby writes nothing, and with no finalizer for kopf to write.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster import inuse, k8s, reads, storage
from trainium_operator.cluster.devicetaints import DeviceWatches
from trainium_operator.cluster.observe import Views
from trainium_operator.cluster.reads import Indices, Kind, Overlay, Reader, Unwatched, WatchReader
from trainium_operator.cluster.reconcile import Emit, Outcome, StaleRead
from trainium_operator.domain.checkpoints import Checkpoint
from trainium_operator.domain.lifecycle import TERMINAL
from trainium_operator.runtime import metrics, oplog
from trainium_operator.runtime.leadership import NotLeader
from trainium_operator.runtime.queue import FIRST, FOLLOW_UP, Item, WorkQueue
from trainium_operator.runtime.records import JobRecord, Key, Records
from trainium_operator.runtime.workers import Workers

__all__ = ["FIRST", "FOLLOW_UP", "Passes", "backoff", "next_look"]
Reconcile = Callable[[str, str, Emit, Views], Outcome]
Json = dict[str, Any]
#: The rare re-check of an unsettled job without an event (seconds).
RESYNC = 1800.0
#: Threads for passes: enough that passes waiting on throttled requests block no others.
WORKERS = 16
#: A new term's re-reads (2 GETs each) are spread at this many jobs a second: a takeover at
#: 1,000 jobs costs 2,000 GETs over 50 s, not at once (a job with an event reads at once).
TERM_READS_PER_SECOND = 20.0
#: Queue keys of PV sweeps: this, the PV's name, ":" and its owner's uid as the PV showed it
#: (a uid and a PV name have no colon).
VOLUME_KEY = "volume:"
#: Queue keys of Workload finalizer sweeps (cluster/inuse.py): this and namespace/name.
WORKLOAD_KEY = "workload:"
#: Seconds between looks at a deleted Workload whose gang still runs (no event says it ended).
WORKLOAD_RECHECK = 2.0
_TERMINAL = {p.value for p in TERMINAL}
log = logging.getLogger(__name__)


def backoff(attempt: int, first: float, cap: float) -> float:
    """Exponential backoff: first, 2*first, ... up to cap."""
    return float(min(cap, first * 2 ** min(max(0, attempt), 30)))


def next_look(
    phase: str | None,
    *,
    terminal: bool = False,
    ttl_remaining: float | None = None,
    waiting: bool = False,
    attempt: int = 0,
    resync: float = RESYNC,
) -> float | None:
    """Seconds until a job is looked at again without an event; None: only on an event.

    A gone or finished job (without TTL) needs nothing; a TTL is waited out exactly; a refusal
    or a missing prerequisite backs off (its events also wake the job); anything else waits for
    events, with a rare backstop. (API errors back off in the queue: add_rate_limited.)
    """
    if phase is None:
        return None
    if terminal:
        return None if ttl_remaining is None else max(1.0, ttl_remaining)
    if waiting:  # a refusal (quota, RBAC): nothing tells us when it lifts, so look again soon
        return backoff(attempt, 10.0, min(resync, 60.0))
    return resync


def resync_seconds() -> float:
    """How often an unsettled job is re-checked when no event arrives (a backstop only)."""
    return float(os.environ.get("TRAINIUM_RESYNC_SECONDS", RESYNC))


@dataclass
class Reads:
    """Where passes read from: kopf's indices (once handed over) under our writes' overlay."""

    indices: dict[Kind, Mapping[Any, Any]] = field(default_factory=dict)
    overlay: Overlay = field(default_factory=Overlay)
    #: Kueue's kinds whose own watch keeps failing (runtime/kueuewatch.py): said once.
    unwatched: Unwatched = field(default_factory=lambda: Unwatched(_unwatched_metric))
    #: Volcano queues by parent (a kopf index): the hierarchy as listed, never a handler's dict.
    queue_children: Mapping[str, Any] = field(default_factory=dict)
    #: Live precompile Volcano jobs by (namespace, cache entry) (a kopf index), once handed over.
    precompiles: Mapping[tuple[str, str], Any] | None = None
    #: Node names and our bound gang pods (kopf indices, watches.py), once handed over.
    nodes: Mapping[Any, Any] | None = None
    gang_pods: Mapping[Any, Any] | None = None
    #: Unhealthy nodes and why (a kopf index, watches.node_health), once handed over.
    node_health: Mapping[Any, Any] | None = None
    #: DRA claims and slices, watched once a DRA job needs them (cluster/devicetaints.py).
    devices: DeviceWatches | None = None

    def reader(self, *, fresh: bool) -> Reader | None:
        """A reader for one pass; None before the indices exist (the pass reads with GETs)."""
        if len(self.indices) < len(Kind):
            return None
        indices: Indices = self.indices
        return WatchReader(indices, self.overlay, fresh=fresh)


def _unwatched_metric(kind: Kind, unwatched: bool) -> None:
    metrics.set_unwatched(reads.resource(kind), unwatched)


class Passes:
    """One work queue, its workers and the per-job records: the whole pass runtime."""

    def __init__(
        self,
        reconcile: Reconcile,
        emit: Emit,
        *,
        workers: int = WORKERS,
        clock: Callable[[], float] = time.monotonic,
        on_idle: Callable[[], None] | None = None,
        backoff: tuple[float, float] = (1.0, 60.0),
        sweep: Callable[[str], bool] = storage.sweep_volume,
        release: Callable[[str, str], bool] = inuse.sweep,
        term_reads_per_second: float = TERM_READS_PER_SECOND,
    ) -> None:
        self._reconcile, self._emit, self._sweep = reconcile, emit, sweep
        self._release = release
        self._term_pace = term_reads_per_second
        first, cap = backoff  # an API error: retry soon, backing off (not kopf's 60 s)
        self.queue: WorkQueue[Key] = WorkQueue(clock=clock, base_delay=first, max_delay=cap)
        self.records = Records()
        self.reads = Reads()
        self._workers = Workers(self.queue, self.run, workers, on_idle=on_idle)

    def start(self, *, paused: bool = False) -> None:
        """Start the workers; `paused`: no pass runs before `start_term` (an election runs)."""
        if paused:
            self.queue.pause()
        self._workers.start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Take no more passes; wait for the running ones."""
        return self.queue.shut_down(timeout)

    # ---- leadership -------------------------------------------------------------------------

    def start_term(self, *, continued: bool = False) -> None:
        """This replica leads now, and passes run. After a takeover each job's next pass reads
        with GETs (the watches may still show the world from before a pause) and every job gets
        one, paced; `continued` (our own Lease back, no one held it since): no one else wrote
        meanwhile, so what we knew holds and queued work just goes on."""
        if not continued:
            self.records.new_term()
            for i, key in enumerate(self.records.uids()):
                self.queue.add_after(key, i / self._term_pace, fresh=True)
        self.queue.resume()

    def end_term(self) -> None:
        """This replica's term ended: no new pass starts (a running one's writes are fenced)."""
        self.queue.pause()

    # ---- what handlers call -----------------------------------------------------------------

    def wake(self, key: Key, rank: int = FOLLOW_UP, context: Any = None) -> None:
        """Queue a pass of the job (from a handler: in kopf's context, for its Events)."""
        if context is not None:
            self._workers.context = context
        self.queue.add(key, rank=rank)

    def job_event(
        self, key: Key, where: tuple[str, str], version: str | None, *, first: bool,
        context: Any = None,
    ) -> None:  # fmt: skip
        """The object changed: bind its uid to its name; a pass, unless it echoes our patch."""
        self.records.named(key, *where)
        if not self.records.is_echo(key, version):
            self.wake(key, FIRST if first else FOLLOW_UP, context)

    def pod_event(
        self,
        key: Key,
        pod: Json | None = None,
        context: Any = None,
        log: tuple[str, ...] = (),
        gone: bool = False,
    ) -> None:
        """A pod of the job is in trouble: its next pass reads the pods (until one succeeds).

        `pod` is the pod as its watch event showed it, `log` its failed container's log tail
        read then: the cause, even when both are gone by the pass (`gone`: it was deleted).
        """
        if not self.records.known(key):
            return  # a forgotten object's late pod
        self.records.pod_event(key, pod, log, gone)
        self.wake(key, context=context)

    def sweep_volume(self, volume: str, owner: Key | None = None) -> None:
        """Delete our FSx PV if its job is gone, in the next term of ours (its own queue key).

        `owner`: the job's uid as the PV shows it; if a record of it exists by the sweep (a PV
        listed before its job), the job lives and the sweep costs no request.
        """
        self.queue.add(f"{VOLUME_KEY}{volume}:{owner or ''}")

    def sweep_workload(self, namespace: str, name: str) -> None:
        """Remove the resource-in-use finalizer of a Workload of ours being deleted once its
        gang is gone (cluster/inuse.py), in a term of ours (its own queue key)."""
        self.queue.add(f"{WORKLOAD_KEY}{namespace}/{name}")

    def gone(self, key: Key) -> None:
        """The object is gone: its record, queued work, timers and metrics go, in this one place."""
        with self.records.lock:
            self.records.drop(key)
            self.queue.discard(key)

    # ---- one pass ---------------------------------------------------------------------------

    def run(self, item: Item[Key]) -> None:
        """One reconcile of one job (a worker holds its key); any error backs off, never lost."""
        if item.key.startswith(VOLUME_KEY):
            self._sweep_volume(item.key)
            return
        if item.key.startswith(WORKLOAD_KEY):
            self._sweep_workload(item.key)
            return
        record = self.records.get(item.key)
        if record is None or not record.name:
            return  # forgotten, or not yet seen by its own watch
        try:
            self._pass(record, fresh=item.fresh or record.stale)
        except Exception as exc:  # never crash a worker: count, log, back off, retry
            self._failed(item.key, record, exc)

    def _pass(self, record: JobRecord, *, fresh: bool) -> None:
        key = record.uid
        seen, shown = self.records.pods_to_read(record)
        views = replace(
            self._views(record, fresh=fresh),
            failed_pods=shown,
            pod_logs=self.records.logs_read(record),
        )
        with metrics.reconcile_timer():
            outcome = self._reconcile(record.namespace, record.name, self._emit, views)
        self.queue.forget(key)
        if fresh:  # this term's read with GETs is done
            with self.records.lock:
                record.stale = False
        self._keep(record, outcome, seen, shown)
        if outcome.phase is None:
            self.gone(key)
            return
        with self.records.live(key, record) as live:
            if live:  # a job deleted meanwhile is neither counted nor looked at again
                self._count(record, outcome)
                look = self._next(record, outcome)
                if look is not None:
                    self.queue.add_after(key, look[0], fresh=look[1])

    def _sweep_volume(self, key: Key) -> None:
        """One sweep; an error (NotLeader too) retries later, in a term of ours."""
        name, _sep, owner = key.removeprefix(VOLUME_KEY).partition(":")
        try:
            if owner and self.records.get(owner) is not None:
                pass  # its job is known and not deleted: nothing to read
            elif self._sweep(name):
                log.info("deleted PersistentVolume %s: its job is gone", name)
            self.queue.forget(key)
        except Exception as exc:
            quiet = isinstance(exc, NotLeader) or k8s.conflict(exc)  # outside a term; a new PV
            level = logging.INFO if quiet else logging.WARNING
            log.log(level, "sweep of PersistentVolume %s: %s", name, exc)
            self.queue.add_rate_limited(key)

    def _sweep_workload(self, key: Key) -> None:
        """One look at a deleted Workload; its gang still running, another in a moment."""
        namespace, _sep, name = key.removeprefix(WORKLOAD_KEY).partition("/")
        try:
            done = self._release(namespace, name)
            self.queue.forget(key)
            if not done:
                self.queue.add_after(key, WORKLOAD_RECHECK)
        except Exception as exc:
            quiet = isinstance(exc, NotLeader) or k8s.conflict(exc)
            level = logging.INFO if quiet else logging.WARNING
            log.log(level, "finalizer sweep of Workload %s/%s: %s", namespace, name, exc)
            self.queue.add_rate_limited(key)

    def _keep(
        self, record: JobRecord, outcome: Outcome, seen: int, shown: tuple[Json, ...]
    ) -> None:
        """What the pass leaves in the job's record for the next one."""
        self.records.pods_read(record, seen, shown)
        if outcome.memory is not None:
            self.records.remember(record, outcome.memory)

    def _views(self, record: JobRecord, *, fresh: bool) -> Views:
        checkpoint: Checkpoint | None = record.checkpoint
        views = Views(
            uid=record.uid,
            memory=record.memory,
            queue_children=self.reads.queue_children,
            pods_changed=record.pods_changed,
            checkpoint=checkpoint,
            rank0_pod=record.rank0_pod,
        )
        read = self.reads.reader(fresh=fresh)
        if read is None:  # before kopf handed over its indices: GETs and lists
            return views
        # The watches run: rank 0 is known from the pod watch; a fresh pass checks precompiles.
        precompiles, nodes, pods = self.reads.precompiles, self.reads.nodes, self.reads.gang_pods
        bound = (nodes, pods) if nodes is not None and pods is not None else None
        sick = self.reads.node_health
        health = (sick, pods) if sick is not None and pods is not None else None
        return replace(
            views, reader=read, pods_watched=True, precompiles=precompiles, fresh=fresh,
            orphans=bound, health=health, devices=self.reads.devices,
        )  # fmt: skip

    def _failed(self, key: Key, record: JobRecord, exc: Exception) -> None:
        """Back off and look again: with GETs after a lost race, quietly outside our term."""
        if isinstance(exc, NotLeader):
            log.info("pass of %s/%s stopped: %s", record.namespace, record.name, exc)
        elif isinstance(exc, StaleRead) or k8s.conflict(exc):  # routine: one line, no headers
            why = f"{exc.status} {k8s.api_message(exc)}" if isinstance(exc, ApiException) else exc
            log.debug("pass of %s/%s read again: %s", record.namespace, record.name, why)
        else:
            kind = f"Api{exc.status}" if isinstance(exc, ApiException) else "Internal"
            kind = "Network" if isinstance(exc, k8s.NETWORK_ERRORS) else kind
            metrics.count_error(kind)
            level = logging.WARNING if k8s.transient(exc) else logging.ERROR
            log.log(level, "reconcile of %s/%s failed (%s): %s", record.namespace, record.name,
                    kind, exc, exc_info=level > 30)  # fmt: skip
        with self.records.live(key, record) as live:
            if live:
                self.queue.add_rate_limited(key)  # a timed look: it reads with GETs

    def _count(self, record: JobRecord, outcome: Outcome) -> None:
        """Metrics of this pass; the record keeps when the job entered its phase (stage seconds)."""
        now = time.monotonic()
        _count(outcome, record.phase_entered_at, now)
        if outcome.transition:
            self.records.phase_entered(record, now)
            oplog.transition(record.uid, outcome.transition)

    def _next(self, record: JobRecord, outcome: Outcome) -> tuple[float, bool] | None:
        """When to look again, and whether with GETs: a backstop or backoff heals what a watch
        missed; a look at a time the job set (a deadline, an Event look, a metrics read) needs
        only the watches (at 1000 jobs those looks made 2.6 GET passes per job)."""
        attempt = self.records.waited(record, outcome.waiting)
        delay = next_look(
            outcome.phase,
            terminal=outcome.phase in _TERMINAL,
            ttl_remaining=outcome.ttl_remaining,
            waiting=outcome.waiting,
            attempt=attempt,
            resync=resync_seconds(),
        )
        if delay is None:
            return None
        if outcome.deadline_in is not None and outcome.deadline_in + 0.5 < delay:
            return outcome.deadline_in + 0.5, False  # look right after the deadline
        return delay, True


def _count(outcome: Outcome, entered: float | None, now: float) -> None:
    """Metrics a pass moves: its transition (its old phase began at `entered`), cost, compiles."""
    if outcome.transition:
        metrics.count_transition(outcome.transition, entered, now)
        if outcome.transition.cost is not None:
            metrics.count_cost(outcome.transition.cost)
    metrics.count_compile(outcome.cache_figures)
