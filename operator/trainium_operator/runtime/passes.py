"""The operator's passes: every trigger goes through one work queue; what they remember, records.

A kopf handler only calls `wake` (or `pod_event`, `finalize`, `gone`) and returns. A worker takes
the job's key, reconciles it once (reconcile.py), and sets the next look without an event: soon
after an API error (rate-limited backoff), a backoff while a refusal may lift, the TTL or the
deadline exactly, else a rare backstop. Those timed looks read with GETs (`fresh`) and heal what
a watch missed. The queue keeps one pass per job at a time, merges triggers, follows kopf's
pause (kopfpause.py), and lets `on_delete` hold the job: a finalizing job's passes create nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster import k8s
from trainium_operator.cluster.observe import Views
from trainium_operator.cluster.reads import Indices, Kind, Overlay, Reader, WatchReader
from trainium_operator.cluster.reconcile import Emit, Outcome
from trainium_operator.domain.checkpoints import Checkpoint
from trainium_operator.domain.lifecycle import TERMINAL
from trainium_operator.runtime import kopfpause, metrics
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
    #: Volcano queues by parent (a kopf index): the hierarchy as listed, never a handler's dict.
    queue_children: Mapping[str, Any] = field(default_factory=dict)
    #: Live precompile Volcano jobs by (namespace, cache entry) (a kopf index), once handed over.
    precompiles: Mapping[tuple[str, str], Any] | None = None

    def reader(self, *, fresh: bool) -> Reader | None:
        """A reader for one pass; None before the indices exist (the pass reads with GETs)."""
        if len(self.indices) < len(Kind):
            return None
        indices: Indices = self.indices
        return WatchReader(indices, self.overlay, fresh=fresh)


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
    ) -> None:
        self._reconcile, self._emit = reconcile, emit
        first, cap = backoff  # an API error: retry soon, backing off (not kopf's 60 s)
        self.queue: WorkQueue[Key] = WorkQueue(clock=clock, base_delay=first, max_delay=cap)
        self.records = Records()
        self.reads = Reads()
        self._workers = Workers(self.queue, self.run, workers, on_idle=on_idle)

    def start(self, *, follow_kopf_pause: bool = False, start_paused: bool = False) -> None:
        if follow_kopf_pause:
            kopfpause.follow(self.queue, start_paused=start_paused)
        self._workers.start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Take no more passes; wait for the running ones."""
        kopfpause.unfollow(self.queue)
        return self.queue.shut_down(timeout)

    # ---- what handlers call -----------------------------------------------------------------

    def wake(self, key: Key, rank: int = FOLLOW_UP, context: Any = None) -> None:
        """Queue a pass of the job (from a handler: in kopf's context, for its Events)."""
        if context is not None:
            self._workers.context = context
        self.queue.add(key, rank=rank)

    def job_event(
        self, key: Key, uid: str, version: str | None, *, first: bool, context: Any = None
    ) -> None:
        """The job changed: a pass, unless the event only echoes our own status patch."""
        self.records.ensure(key, uid)
        if not self.records.is_echo(key, version):
            self.wake(key, FIRST if first else FOLLOW_UP, context)

    def pod_event(
        self, key: Key, pod: Json | None = None, context: Any = None, log: tuple[str, ...] = ()
    ) -> None:
        """A pod of the job is in trouble: its next pass reads the pods (until one succeeds).

        `pod` is the pod as its watch event showed it, `log` its failed container's log tail
        read then: the cause, even when both are gone by the pass.
        """
        self.records.pod_event(key, pod, log)
        self.wake(key, context=context)

    @contextlib.contextmanager
    def finalize(self, key: Key, uid: str = "") -> Iterator[None]:
        """Hold the job for its cleanup: no pass beside it, and none after creates anything."""
        with self.queue.hold(key):
            self.records.ensure(key, uid)
            self.records.finalizing(key)
            yield

    def gone(self, key: Key) -> None:
        """The job is gone: its record, queued work, timers and metrics go, in this one place."""
        with self.records.lock:
            self.records.drop(key)
            self.queue.discard(key)

    # ---- one pass ---------------------------------------------------------------------------

    def run(self, item: Item[Key]) -> None:
        """One reconcile of one job (a worker holds its key); then set its next look."""
        key = item.key
        record = self.records.ensure(key)
        if record.finalizing:
            return  # on_delete has run or runs: nothing may be created for this job
        seen, shown = self.records.pods_to_read(record)
        views = replace(
            self._views(record, fresh=item.fresh),
            failed_pods=shown,
            pod_logs=self.records.logs_read(record),
        )
        try:
            with metrics.reconcile_timer():
                outcome = self._reconcile(key[0], key[1], self._emit, views)
        except Exception as exc:  # never crash a worker: count, log, back off, retry
            self._failed(key, record, exc)
            return
        self.queue.forget(key)
        self.records.pods_read(record, seen, shown)
        self.records.wrote(record, outcome.written_version)
        self.records.metrics_read(record, outcome.metrics_read_at)
        self.records.looked(record, outcome.events_looked)
        if outcome.phase is None:
            if not record.finalizing:
                self.gone(key)
            return
        with self.records.live(key, record) as live:
            if live:  # a job deleted meanwhile is neither counted nor looked at again
                self._count(record, outcome)
                look = self._next(record, outcome)
                if look is not None:
                    self.queue.add_after(key, look[0], fresh=look[1])

    def _views(self, record: JobRecord, *, fresh: bool) -> Views:
        checkpoint: Checkpoint | None = record.checkpoint
        views = Views(
            queue_children=self.reads.queue_children,
            pods_changed=record.pods_changed,
            checkpoint=checkpoint,
            metrics_read_at=record.metrics_read_at,
            rank0_pod=record.rank0_pod,
            events_looked=record.events_looked,
        )
        read = self.reads.reader(fresh=fresh)
        if read is None:  # before kopf handed over its indices: GETs and lists
            return views
        # The watches run: rank 0 is known from the pod watch; a fresh pass lists precompiles.
        precompiles = None if fresh else self.reads.precompiles
        return replace(views, reader=read, pods_watched=True, precompiles=precompiles)

    def _failed(self, key: Key, record: JobRecord, exc: Exception) -> None:
        kind = f"Api{exc.status}" if isinstance(exc, ApiException) else "Internal"
        kind = "Network" if isinstance(exc, k8s.NETWORK_ERRORS) else kind
        metrics.count_error(kind)
        level = logging.WARNING if k8s.transient(exc) else logging.ERROR
        log.log(level, "reconcile of %s/%s failed (%s): %s", *key, kind, exc, exc_info=level > 30)
        with self.records.live(key, record) as live:
            if live:
                self.queue.add_rate_limited(key)

    def _count(self, record: JobRecord, outcome: Outcome) -> None:
        """Metrics of this pass; the record keeps when the job entered its phase (stage seconds)."""
        now = time.monotonic()
        _count(outcome, record.phase_entered_at, now)
        if outcome.transition:
            self.records.phase_entered(record, now)

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
