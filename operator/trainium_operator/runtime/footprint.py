"""The operator process's resident memory: glibc's per-thread arenas, and memory freed by a burst.

glibc gives a thread that meets a locked heap its own arena, up to 8 per core; the operator's
pass threads and kopf's then each keep a partly used heap, and resident memory at 1,000 jobs
grows by ~20 MB (BENCHMARKS.md). Two arenas serve threads that mostly wait on the API. And glibc
keeps what a burst of passes freed mapped until told otherwise: the passes going idle tell it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
import time
from collections.abc import Callable

#: mallopt's parameter number for the arena cap (glibc malloc.h).
M_ARENA_MAX = -8
ARENAS = 2


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """glibc, where the process runs on it (musl and other C libraries: None)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def cap_malloc_arenas(limit: int = ARENAS) -> bool:
    """Cap the arenas before the threads start; False where it does not apply (not glibc)."""
    libc = _glibc()
    if libc is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False  # the operator's environment decides
    return bool(libc.mallopt(M_ARENA_MAX, limit))


#: Seconds between two trims at least (a trim walks the heap: cheap, not free).
TRIM_EVERY = 10.0


class Trimmer:
    """Hands memory freed by a burst back to the system when the work goes idle, rarely.

    At most one trim per `every` seconds; an idle moment inside that window gets one trim at
    its end, so the memory freed by the last passes of a burst is returned too.
    """

    def __init__(
        self,
        every: float = TRIM_EVERY,
        clock: Callable[[], float] = time.monotonic,
        later: Callable[[float, Callable[[], None]], None] | None = None,
    ) -> None:
        self._every, self._clock, self._later = every, clock, later or _timer
        self._last = -every
        self._pending = False
        self._lock = threading.Lock()
        self.trims = 0

    def idle(self) -> None:
        """The work queue ran empty: trim now, or once the window since the last trim ends."""
        with self._lock:
            wait = self._last + self._every - self._clock()
            if wait > 0:
                if not self._pending:
                    self._pending = True
                    self._later(wait, self._trim)
                return
            self._last = self._clock()
        self._trim_now()

    def _trim(self) -> None:
        with self._lock:
            self._pending = False
            self._last = self._clock()
        self._trim_now()

    def _trim_now(self) -> None:
        libc = _glibc()
        if libc is not None:
            libc.malloc_trim(0)
            self.trims += 1


def _timer(delay: float, fn: Callable[[], None]) -> None:
    """Run fn once after delay seconds, on a daemon thread."""
    timer = threading.Timer(delay, fn)
    timer.daemon = True
    timer.start()
