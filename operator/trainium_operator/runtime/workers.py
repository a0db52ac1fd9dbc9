"""Threads that take keys from the work queue and run one pass each, in kopf's context."""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from trainium_operator.runtime.queue import Item, WorkQueue

K = TypeVar("K", bound=Hashable)
log = logging.getLogger(__name__)


class Workers(Generic[K]):
    """N threads: get a key, run work(item), done(key); on_idle when the queue runs dry.

    A pass posts Events through kopf, which reads its context variables: the context of the
    latest handler that queued work is the one passes run in (every handler's is alike).
    """

    def __init__(
        self,
        queue: WorkQueue[K],
        work: Callable[[Item[K]], None],
        workers: int,
        name: str = "trainium-pass",
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self._queue, self._work, self._on_idle = queue, work, on_idle
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}_{i}", daemon=True)
            for i in range(workers)
        ]
        self.context: contextvars.Context | None = None

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            context = self.context.copy() if self.context else contextvars.copy_context()
            try:
                context.run(self._work, item)
            except Exception:  # a worker outlives any pass
                log.exception("pass of %r failed", item.key)
            finally:
                self._queue.done(item.key)
            if self._on_idle is not None and self._queue.drained():
                try:
                    self._on_idle()
                except Exception:
                    log.exception("idle hook failed")
