"""One per-key work queue with client-go's workqueue semantics, beside kopf's event loop.

Guarantees (k8s.io/client-go/util/workqueue, the queue every Go controller runs on):
- a key is handed to one worker at a time: `get()` marks it processing until `done()`;
- `add()` of a queued key merges into the queued entry (one pass for any number of triggers);
  `add()` of a key being processed marks it dirty, and `done()` re-queues it in the same critical
  section (no trigger lost between "anything more?" and "not busy");
- `add_after()` queues a key later (the earliest pending time wins); a key handed out drops its
  pending time: the pass about to run decides the next one;
- `add_rate_limited()` backs a key off exponentially until `forget()`;
- `pause()` stops handing keys out (what is queued waits); `resume()` goes on;
- `shut_down()` takes no more work, drops what waits and returns when running passes are done.

Two additions: ranks (a new job's first pass goes before the follow-ups of jobs already
started) and `fresh` (a timer's pass reads with GETs; merged by "or"). The clock is injected.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
#: Ranks: lower goes first; a job's first look before the follow-ups of jobs already started.
FIRST, FOLLOW_UP = 0, 1


@dataclass(frozen=True)
class Item(Generic[K]):
    """A key handed to a worker, and whether any trigger merged into it asked for GETs."""

    key: K
    fresh: bool = False


@dataclass
class _Queued:
    rank: int
    seq: int
    fresh: bool


class WorkQueue(Generic[K]):
    """Per-key queue: dirty (waiting) and processing sets, timers, backoff, pause."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        base_delay: float = 1.0,
        max_delay: float = 60.0,
    ) -> None:
        self._clock, self._base, self._max = clock, base_delay, max_delay
        lock = threading.Lock()
        self._cv = threading.Condition(lock)  # workers wait on it for keys
        self._freed = threading.Condition(lock)  # wait_idle() waits on it
        self._seq = itertools.count()
        self._ready: list[tuple[int, int, K]] = []  # (rank, seq, key); stale entries skipped
        self._dirty: dict[K, _Queued] = {}
        self._processing: set[K] = set()
        self._timers: dict[K, tuple[float, bool]] = {}
        self._timer_heap: list[tuple[float, int, K]] = []
        self._failures: dict[K, int] = {}
        self._paused = False
        self._closed = False

    # ---- adding ---------------------------------------------------------------------------

    def add(self, key: K, *, rank: int = FOLLOW_UP, fresh: bool = False) -> None:
        """Queue key now (merged with a queued or running entry of the same key)."""
        with self._cv:
            if not self._closed:
                self._mark(key, rank, fresh)

    def add_after(self, key: K, delay: float, *, fresh: bool = True) -> None:
        """Queue key after delay seconds; an earlier pending time for the key is kept."""
        with self._cv:
            if self._closed:
                return
            if delay <= 0:
                self._mark(key, FOLLOW_UP, fresh)
                return
            when = self._clock() + delay
            old = self._timers.get(key)
            if old is not None and old[0] <= when:
                self._timers[key] = (old[0], old[1] or fresh)
                return
            self._timers[key] = (when, fresh)
            sooner = not self._timer_heap or when < self._timer_heap[0][0]
            heapq.heappush(self._timer_heap, (when, next(self._seq), key))
            if sooner:  # a waiting worker sleeps until the soonest time: a later one needs no wake
                self._cv.notify()

    def add_rate_limited(self, key: K) -> float:
        """Queue key after its backoff (base, 2*base, ... up to max); return the delay."""
        with self._cv:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = float(min(self._max, self._base * 2 ** min(failures, 30)))
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Reset key's backoff (its pass succeeded)."""
        with self._cv:
            self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        """How many times key was backed off since its last forget()."""
        with self._cv:
            return self._failures.get(key, 0)

    def discard(self, key: K) -> None:
        """The key is gone: drop its queued entry, timer and backoff (a running pass ends)."""
        with self._cv:
            self._dirty.pop(key, None)
            self._timers.pop(key, None)
            self._failures.pop(key, None)

    def _mark(self, key: K, rank: int, fresh: bool) -> None:
        queued = self._dirty.get(key)
        if queued is not None:
            queued.fresh = queued.fresh or fresh
            if rank >= queued.rank:
                return
            queued.rank = rank  # promoted: queue it again at the new rank
        else:
            queued = self._dirty[key] = _Queued(rank, -1, fresh)
        if key not in self._processing:
            self._push(key, queued)

    def _push(self, key: K, queued: _Queued) -> None:
        queued.seq = next(self._seq)
        heapq.heappush(self._ready, (queued.rank, queued.seq, key))
        self._cv.notify()

    # ---- taking ---------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> Item[K] | None:
        """The next key to process (marked processing); None on shutdown or timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while not self._closed:
                self._fire_timers(self._clock())
                item = None if self._paused else self._pop_ready()
                if item is not None:
                    return item
                wait = self._wait_for(deadline)
                if wait is not None and wait <= 0:
                    return None
                self._cv.wait(wait)
            return None

    def _pop_ready(self) -> Item[K] | None:
        while self._ready:
            _rank, seq, key = heapq.heappop(self._ready)
            queued = self._dirty.get(key)
            if queued is None or queued.seq != seq or key in self._processing:
                continue  # replaced, promoted, discarded or already taken
            del self._dirty[key]
            self._timers.pop(key, None)  # the pass about to run decides the next look
            self._processing.add(key)
            return Item(key, queued.fresh)
        return None

    def _fire_timers(self, now: float) -> None:
        while self._timer_heap and self._timer_heap[0][0] <= now:
            when, _seq, key = heapq.heappop(self._timer_heap)
            timer = self._timers.get(key)
            if timer is not None and timer[0] == when:
                del self._timers[key]
                self._mark(key, FOLLOW_UP, timer[1])

    def _wait_for(self, deadline: float | None) -> float | None:
        """Seconds to sleep: until the next timer, the caller's deadline, or a notify."""
        waits = []
        while self._timer_heap:
            when, _seq, key = self._timer_heap[0]
            timer = self._timers.get(key)
            if timer is not None and timer[0] == when:
                waits.append(max(0.001, when - self._clock()))
                break
            heapq.heappop(self._timer_heap)  # a replaced or discarded time
        if deadline is not None:
            waits.append(deadline - time.monotonic())
        return min(waits) if waits else None

    def done(self, key: K) -> None:
        """The key's pass ended: if it was added meanwhile, queue it again (atomically)."""
        with self._cv:
            self._processing.discard(key)
            queued = self._dirty.get(key)
            if queued is not None and not self._closed:
                self._push(key, queued)  # wakes one worker, not all of them
            self._freed.notify_all()  # wait_idle() (rarely anyone)

    # ---- pause and shutdown -------------------------------------------------------------------

    def pause(self) -> None:
        """Hand out no key until resume() (running passes finish; see wait_idle)."""
        with self._cv:
            self._paused = True

    def resume(self) -> None:
        """Hand keys out again."""
        with self._cv:
            self._paused = False
            self._cv.notify_all()

    @property
    def paused(self) -> bool:
        with self._cv:
            return self._paused

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no key is being processed; whether that happened in time."""
        with self._cv:
            return self._freed.wait_for(lambda: not self._processing, timeout)

    def shut_down(self, timeout: float | None = None) -> bool:
        """Take no more work, drop what waits; wait for the running passes (drain)."""
        with self._cv:
            self._closed = True
            self._ready.clear()
            self._dirty.clear()
            self._timers.clear()
            self._timer_heap.clear()
            self._cv.notify_all()
        return self.wait_idle(timeout)

    # ---- inspection ---------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys waiting to be processed (not the running or delayed ones)."""
        with self._cv:
            return sum(1 for k in self._dirty if k not in self._processing)

    def drained(self) -> bool:
        """Nothing ready to hand out (cheap: a stale entry may say otherwise for a moment)."""
        with self._cv:
            return not self._ready

    def is_processing(self, key: K) -> bool:
        with self._cv:
            return key in self._processing

    def pending_after(self, key: K) -> float | None:
        """Seconds until key's timer fires, if it has one."""
        with self._cv:
            timer = self._timers.get(key)
            return None if timer is None else timer[0] - self._clock()

    def pending_fresh(self, key: K) -> bool | None:
        """Whether key's timed pass reads with GETs, if it has a timer."""
        with self._cv:
            timer = self._timers.get(key)
            return None if timer is None else timer[1]
