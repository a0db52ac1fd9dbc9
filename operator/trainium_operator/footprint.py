"""The operator process's resident memory: cap glibc's per-thread malloc arenas.

glibc gives a thread that meets a locked heap its own arena, up to 8 per core; the operator's
pass threads and kopf's then each keep a partly used heap, and resident memory at 1,000 jobs
grows by ~20 MB (BENCHMARKS.md). Two arenas serve threads that mostly wait on the API.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: mallopt's parameter number for the arena cap (glibc malloc.h).
M_ARENA_MAX = -8
ARENAS = 2


def cap_malloc_arenas(limit: int = ARENAS) -> bool:
    """Cap the arenas before the threads start; False where it does not apply (not glibc)."""
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return False  # the operator's environment decides
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # musl and other C libraries: no mallopt arenas
        return False
    return bool(libc.mallopt(M_ARENA_MAX, limit))
