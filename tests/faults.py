"""API faults for the reliability suite: a seeded share of requests answered 500, 429, 409 or reset.

The emulator (tests/emulator.py) asks `pick()` about every resource request and, when a fault is
picked, lets `respond()` answer instead; watch streams live at most `watch_lifetime()`. Every
decision is a hash of (seed, request, how many times that request was seen), so a run is
repeatable whatever the interleaving of the operator's threads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import socket
import struct
from collections import Counter
from collections.abc import Awaitable, Callable

import aiohttp.web
import kmock

from emulator import aiohttp_request
from k8s_semantics import ApiRequest

KINDS = ("500", "429", "409", "reset")
Answer = Callable[[kmock.Request], Awaitable[aiohttp.web.StreamResponse]]
Render = Callable[[Exception], Awaitable[aiohttp.web.StreamResponse]]


@dataclasses.dataclass(frozen=True)
class FaultPlan:
    """What to inject: the share of faulty requests, their kinds, how long watches live."""

    rate: float = 0.0
    seed: int = 0
    kinds: tuple[str, ...] = KINDS
    retry_after: int = 1
    #: watch streams of faulted clients end after 0.5-1.5x this many seconds (None: never).
    watch_drop_seconds: float | None = None
    #: only these clients (ApiRequest.client) see faults: the operator, not the test's kubectl.
    clients: frozenset[str] = frozenset({"kopf", "trainium-operator"})

    def __post_init__(self) -> None:
        if not 0 <= self.rate <= 1:
            raise ValueError(f"rate: {self.rate} is not within [0, 1]")
        if unknown := set(self.kinds) - set(KINDS):
            raise ValueError(f"kinds: unknown {sorted(unknown)}; expected some of {KINDS}")


class FaultInjector:
    """Decides and renders the faults of one plan; counts what it injected."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.injected: Counter[str] = Counter()
        self._seen: Counter[tuple[object, ...]] = Counter()
        self._short_watches: set[int] = set()

    def _draw(self, *key: object) -> float:
        """A uniform [0, 1) draw fixed by the seed and the key's occurrence number."""
        n = self._seen[key]
        self._seen[key] += 1
        digest = hashlib.blake2b(repr((self.plan.seed, key, n)).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def pick(self, record: ApiRequest) -> str | None:
        """The fault for this request, or None to answer it normally (watches are dropped)."""
        plan = self.plan
        if plan.rate <= 0 or record.verb == "watch" or record.client not in plan.clients:
            return None
        key = (record.verb, record.api_group, record.resource, record.subresource)
        u = self._draw(*key, record.namespace, record.name)
        if u >= plan.rate:
            return None
        kind = plan.kinds[int(u / plan.rate * len(plan.kinds))]
        if kind == "409" and record.verb not in ("create", "patch", "update"):
            kind = "500"  # a read or delete is never answered 409 by a real API server
        return kind

    async def respond(
        self,
        kind: str,
        request: kmock.Request,
        record: ApiRequest,
        answer: Answer,
        render: Render,
    ) -> aiohttp.web.StreamResponse:
        """Render one fault; nothing changes in the store except for a create's 409."""
        self.injected[kind] += 1
        record.fault = kind
        if kind == "reset":
            _reset(request)
            return aiohttp.web.Response(status=500)  # never sent: the connection is gone
        if kind == "429":
            response = await render(_status(429, "TooManyRequests", "injected: slow down"))
            response.headers["Retry-After"] = str(self.plan.retry_after)
            return response
        if kind == "409" and record.verb == "create":
            # The create is committed and the answer lost, as when a client retries a POST whose
            # first attempt went through: the retry sees AlreadyExists for its own object.
            done = await answer(request)
            if done.status >= 300:
                return done
            return await render(_status(409, "AlreadyExists", "injected: already exists"))
        if kind == "409":
            return await render(_status(409, "Conflict", "injected: the object has been modified"))
        return await render(_status(500, "InternalError", "injected: internal error"))

    def watch_lifetime(self, request: kmock.Request, timeout: float | None) -> float | None:
        """The watch's timeout, shortened to a seeded few seconds for faulted clients."""
        every = self.plan.watch_drop_seconds
        agent = next((v for k, v in request.headers.items() if k.lower() == "user-agent"), "")
        client = ApiRequest("watch", "", "", user_agent=agent).client
        if every is None or client not in self.plan.clients:
            return timeout
        lifetime = every * (0.5 + self._draw("watch", str(request.url.path)))
        if timeout is not None and timeout <= lifetime:
            return timeout
        self._short_watches.add(id(request))
        return lifetime

    def drop_watch(self, request: kmock.Request) -> None:
        """End a shortened watch abruptly (a reset), not as a clean end of stream."""
        if id(request) in self._short_watches:
            self._short_watches.discard(id(request))
            self.injected["watch-drop"] += 1
            _reset(request)


def _status(code: int, reason: str, message: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=code, reason=reason, message=message, details={})


def _reset(request: kmock.Request) -> None:
    """Close the connection with a TCP RST (SO_LINGER 0): the client sees 'connection reset'."""
    raw = aiohttp_request(request)
    transport = None if raw is None else raw.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class KillSwitch(FaultInjector):
    """Kills the operator once, at the nth request matching `match`: before or after answering.

    "After" is a crash right after a write went through (the operator never saw the answer);
    "before" is a crash during the request (the write never happens).
    """

    def __init__(
        self,
        match: Callable[[ApiRequest], bool],
        kill: Callable[[], None],
        *,
        after: bool,
        nth: int = 1,
    ) -> None:
        super().__init__(FaultPlan())
        self.match, self.kill, self.after, self.nth = match, kill, after, nth
        self.fired = False

    def pick(self, record: ApiRequest) -> str | None:
        if self.fired or record.client not in self.plan.clients or not self.match(record):
            return None
        self.nth -= 1
        if self.nth > 0:
            return None
        self.fired = True
        return "kill"

    async def respond(
        self,
        kind: str,
        request: kmock.Request,
        record: ApiRequest,
        answer: Answer,
        render: Render,
    ) -> aiohttp.web.StreamResponse:
        record.fault = f"kill-{'after' if self.after else 'before'}"
        if self.after:
            response = await answer(request)
            self.kill()
            return response
        self.kill()
        _reset(request)
        return aiohttp.web.Response(status=500)  # never sent
