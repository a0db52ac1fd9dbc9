"""Follow kopf's pause (peering) in our work queue: when kopf stops acting, so do our passes.

Why a private hook: kopf 1.45 has no public way to observe that it paused. Its pause state is
`operator_paused`, a ToggleSet local to `kopf._core.reactor.running.spawn_tasks`, handed only to
the orchestrator (which stops the watch streams) and the daemon killer; handlers and indices
are just not called while it is on. Our passes run beside kopf (timers, backoffs, TTL,
deadlines), so they must see the same state, not re-derive it from the peering object (two
judges of one question would disagree during a hand-over). This module is the one place that
touches kopf's internals: it wraps `kopf._core.reactor.orchestration.orchestrator` (the call
that receives the ToggleSet) before `kopf run` spawns its tasks, and mirrors the toggle into
every queue that follows it. tests/unit/test_runtime_pause.py fails when kopf changes this.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Pausable(Protocol):
    def pause(self) -> None: ...

    def resume(self) -> None: ...


class _Followers:
    """Queues that follow kopf's pause, and whether the hook is in place."""

    def __init__(self) -> None:
        self.queues: list[Pausable] = []
        self.installed = False
        self.paused = False


FOLLOWERS = _Followers()


def install() -> bool:
    """Wrap kopf's orchestrator once; False (and an ERROR) when kopf no longer looks as known."""
    if FOLLOWERS.installed:
        return True
    try:
        from kopf._core.reactor import orchestration
    except ImportError:
        orchestration = None  # type: ignore[assignment]
    original = getattr(orchestration, "orchestrator", None)
    if original is None or "operator_paused" not in inspect.signature(original).parameters:
        log.error("cannot follow kopf's pause (kopf changed): with peering, a paused replica's "
                  "timers would still act; pin kopf or update runtime/kopfpause.py")  # fmt: skip
        return False
    orchestration.orchestrator = _wrap(original)  # type: ignore[assignment]
    FOLLOWERS.installed = True
    return True


def follow(queue: Pausable, *, start_paused: bool) -> None:
    """Mirror kopf's pause into queue (paused until kopf says otherwise, with peering)."""
    if start_paused and FOLLOWERS.installed:
        queue.pause()
    FOLLOWERS.queues.append(queue)


def unfollow(queue: Pausable) -> None:
    if queue in FOLLOWERS.queues:
        FOLLOWERS.queues.remove(queue)


def _wrap(original: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def orchestrator(*args: Any, operator_paused: Any, **kwargs: Any) -> None:
        mirror = asyncio.create_task(_mirror(operator_paused), name="trainium pause mirror")
        try:
            await original(*args, operator_paused=operator_paused, **kwargs)
        finally:
            mirror.cancel()

    return orchestrator


async def _mirror(toggles: Any) -> None:
    """Pause our queues whenever kopf's pause toggles are on; resume when they all go off."""
    while True:
        paused = bool(toggles.is_on())
        _set(paused)
        await toggles.wait_for(not paused)


def _set(paused: bool) -> None:
    if paused != FOLLOWERS.paused:
        log.warning("kopf %s: our passes %s", "paused" if paused else "resumed",
                    "stop" if paused else "go on")  # fmt: skip
    FOLLOWERS.paused = paused
    for queue in list(FOLLOWERS.queues):
        queue.pause() if paused else queue.resume()
