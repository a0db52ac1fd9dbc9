"""One checkpoint write at a time on a background thread, so training goes on while it lands.

The caller hands over a state that no later step can change (Runtime.snapshot) and a write
closure; the next submit waits for the write in flight (one snapshot in memory at most beside the
live state). Results and errors come back on the caller's thread, in poll, submit and flush, so
events, reports and exit codes stay where the loop handles them.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from pathlib import Path

import torch

Write = Callable[[], Path]


class Writer:
    """A single-worker pool with at most one pending (step, write)."""

    def __init__(self) -> None:
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: tuple[int, concurrent.futures.Future[Path]] | None = None
        #: Host buffers Runtime.snapshot copies into, reused once the write that read them ended.
        self.buffers: dict[int, torch.Tensor] = {}

    @property
    def busy(self) -> bool:
        """Whether a write is still in flight (or finished and not yet collected)."""
        return self._pending is not None

    def submit(self, step: int, write: Write) -> list[tuple[int, Path]]:
        """Wait for the write in flight, start this one; returns what completed (or raises)."""
        done = self.flush()
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, "checkpoint-writer")
        self._pending = (step, self._pool.submit(write))
        return done

    def poll(self) -> list[tuple[int, Path]]:
        """The write that completed since the last call, if any; its error is raised here."""
        if self._pending is None or not self._pending[1].done():
            return []
        return self.flush()

    def flush(self) -> list[tuple[int, Path]]:
        """Wait for the write in flight: [(step, path)] once durable; its error is raised here."""
        if self._pending is None:
            return []
        step, future = self._pending
        self._pending = None
        return [(step, future.result())]

    def close(self) -> None:
        """Wait for the write in flight (its result is dropped), stop the thread, free buffers."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.buffers.clear()
