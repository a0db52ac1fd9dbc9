"""When to look at a job again without an event: one due time per job, one thread to keep them.

Watch events drive progress; this is the backstop (a rare re-check of unsettled jobs, TTL
expiry, backoff after a refusal or an API error). It issues no request itself: a due job is
handed to `work`, which returns the delay until the next look (None: not again unless an
event comes). The clock is injected, so the timing is unit-tested without sleeping. The passes
that events queue run in a RankedPool: a new job's first pass before the follow-ups.
"""

from __future__ import annotations

import contextvars
import enum
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

Key = tuple[str, str]


class Busy(enum.Enum):
    """A pass of this key is already running: it runs again after, and sets the next look."""

    BUSY = "busy"


BUSY = Busy.BUSY
Work = Callable[[Key], "float | Busy | None"]
#: Defaults of the re-check policy (seconds).
RESYNC = 1800.0


class Due:
    """The pure part: each key's next due time; the earliest first."""

    def __init__(self) -> None:
        self._at: dict[Key, float] = {}
        self._heap: list[tuple[float, Key]] = []

    def set(self, key: Key, when: float) -> None:
        """Replace the key's due time (the latest decision about it wins)."""
        self._at[key] = when
        heapq.heappush(self._heap, (when, key))

    def cancel(self, key: Key) -> None:
        """Forget the key (the job is gone or settled)."""
        self._at.pop(key, None)

    def pop_due(self, now: float) -> list[Key]:
        """Keys due at `now`, removed; stale heap entries of replaced times are skipped."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            when, key = heapq.heappop(self._heap)
            if self._at.get(key) == when:
                del self._at[key]
                out.append(key)
        return out

    def next_time(self) -> float | None:
        """When the earliest live entry is due, if any."""
        while self._heap and self._at.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def __contains__(self, key: Key) -> bool:
        return key in self._at


def backoff(attempt: int, first: float, cap: float) -> float:
    """Exponential backoff: first, 2*first, ... up to cap."""
    return float(min(cap, first * 2 ** min(max(0, attempt), 30)))


def next_look(
    phase: str | None,
    *,
    errored: bool = False,
    terminal: bool = False,
    ttl_remaining: float | None = None,
    waiting: bool = False,
    attempt: int = 0,
    resync: float = RESYNC,
) -> float | None:
    """Seconds until a job is looked at again without an event; None: only on an event.

    An API error retries soon, backing off; a gone or finished job (without TTL) needs nothing;
    a TTL is waited out exactly; a refusal or a missing prerequisite backs off (its events also
    wake the job); anything else waits for events, with a rare backstop.
    """
    if errored:
        return backoff(attempt, 1.0, 60.0)
    if phase is None:
        return None
    if terminal:
        return None if ttl_remaining is None else max(1.0, ttl_remaining)
    if waiting:  # a refusal (quota, RBAC): nothing tells us when it lifts, so look again soon
        return backoff(attempt, 10.0, min(resync, 60.0))
    return resync


class Scheduler:
    """A thread that hands due jobs to a small worker pool, in the context it was given."""

    def __init__(self, work: Work, clock: Callable[[], float] = time.monotonic) -> None:
        self._work, self._clock = work, clock
        self._due = Due()
        self._cv = threading.Condition()
        self._stopped = False
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="trainium-recheck")
        self._thread = threading.Thread(target=self._loop, name="trainium-scheduler", daemon=True)
        #: kopf's context (settings, Event queue): captured from a handler, used by workers.
        self.context: contextvars.Context | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def after(self, key: Key, delay: float | None) -> None:
        """Look at key again after delay seconds; None cancels."""
        with self._cv:
            if delay is None:
                self._due.cancel(key)
            else:
                self._due.set(key, self._clock() + max(0.0, delay))
            self._cv.notify()

    def _loop(self) -> None:
        while True:
            with self._cv:
                if self._stopped:
                    return
                keys = self._due.pop_due(self._clock())
                if not keys:
                    nxt = self._due.next_time()
                    self._cv.wait(None if nxt is None else max(0.01, nxt - self._clock()))
                    continue
            for key in keys:
                self._pool.submit(self._run, key)

    def _run(self, key: Key) -> None:
        ctx = self.context.copy() if self.context is not None else contextvars.copy_context()
        delay = ctx.run(self._work, key)
        if delay is not BUSY:
            self.after(key, delay)


#: Ranks of queued passes: a job's first look goes before the follow-ups of jobs already started.
FIRST, FOLLOW_UP = 0, 1


class RankedPool:
    """Worker threads taking queued calls by rank, then in arrival order.

    A burst of new jobs is acknowledged (storage, cache, precompile job) before the events of the
    jobs ahead of it (their children turning Pending, Running, Completed) are worked through:
    those follow-ups re-derive state from what is current, so running them later loses nothing.
    """

    def __init__(self, workers: int, name: str, on_idle: Callable[[], None] | None = None) -> None:
        self._workers, self._name, self._on_idle = workers, name, on_idle
        self._heap: list[tuple[int, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._stopped = False

    def submit(self, fn: Callable[..., Any], *args: Any, rank: int = FOLLOW_UP) -> None:
        """Queue fn(*args); lower ranks run first."""
        with self._cv:
            if self._stopped:
                return
            heapq.heappush(self._heap, (rank, next(self._seq), fn, args))
            if len(self._threads) < self._workers:
                self._start_one()
            self._cv.notify()

    def shutdown(self) -> None:
        """Drop what is queued; running calls finish, then the threads end."""
        with self._cv:
            self._stopped = True
            self._heap.clear()
            self._cv.notify_all()

    def _start_one(self) -> None:
        name = f"{self._name}_{len(self._threads)}"
        thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._heap and not self._stopped:
                    self._cv.wait()
                if self._stopped:
                    return
                _rank, _seq, fn, args = heapq.heappop(self._heap)
                drained = not self._heap
            self._call(fn, args)
            if drained and self._on_idle is not None:
                self._call(self._on_idle, ())

    @staticmethod
    def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except Exception:  # a worker outlives any call
            logging.getLogger(__name__).exception("queued call %r failed", fn)
