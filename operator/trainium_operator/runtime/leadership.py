"""One active replica, inside a term it holds: a Lease election with a fence, as client-go's.

Modelled on client-go's `tools/leaderelection` (the Go operators' standard): a
`coordination.k8s.io/v1` Lease names its holder; the holder renews every `retry` seconds; a
candidate takes the Lease only when it has seen no renewal for `duration` seconds (measured on
its own clock from when it saw the last change, so clocks need not agree); and a holder that has
not renewed within `deadline` (< duration) stops acting before anyone else may start. Every
write the operator sends asks the fence first (cluster/k8s.py): after a SIGSTOP, a GC pause or a
frozen VM, the woken holder's clock shows its term over and the write is refused, before any
request leaves. The clock is CLOCK_BOOTTIME where there is one: it counts a suspended VM too.

Renewals must not starve behind the replica's own work (issue 32 item 5): they run in their own
thread with their own HTTP client (cluster/election.py), a holder renews with one PUT of the
Lease it last wrote (client-go's optimistic renewal; a GET only when that fails), and the
defaults are client-go's (15 s / 10 s / 2 s). A holder that lost its term only to a late renewal
and takes its own Lease back (no one held it meanwhile) continues: nothing was written by anyone
else in between, so its passes need not re-read every job (`on_start(continued=True)`).

Why not a library's: kopf's peering is presence, not a fence (a paused replica still writes
from its view); the kubernetes client's `leaderelection` (37.0.1 ships a Lease lock too) uses
the wall clock and has no fence a write can ask. Both were read, neither fits.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)
Json = dict[str, Any]
#: The Lease's name (`trainium operator --leader-elect=NAME` sets it); unset: no election.
LEASE_ENV = "TRAINIUM_LEASE_NAME"
#: The three durations (seconds), for the chart: duration, renew deadline, retry period.
DURATION_ENV = "TRAINIUM_LEASE_DURATION_SECONDS"
#: The chart's `peering.lifetimeSeconds` (its name from kopf peering's days): the duration, when
#: DURATION_ENV is unset; the renew deadline and retry period then follow from it in client-go's
#: proportions (10/15 and 2/15 of it).
LIFETIME_ENV = "TRAINIUM_PEERING_LIFETIME_SECONDS"
DEADLINE_ENV = "TRAINIUM_LEASE_RENEW_DEADLINE_SECONDS"
RETRY_ENV = "TRAINIUM_LEASE_RETRY_SECONDS"


def boottime() -> float:
    """Seconds on a clock that keeps counting through SIGSTOP and a suspended VM."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)  # type: ignore[attr-defined,unused-ignore]
    except (AttributeError, OSError):  # not Linux
        return time.monotonic()


class NotLeader(RuntimeError):
    """A write was asked for outside a term this replica holds: it is not sent."""


@dataclass(frozen=True)
class Timing:
    """client-go's three durations (seconds), and its defaults: duration > deadline > retry."""

    duration: float = 15.0
    deadline: float = 10.0
    retry: float = 2.0

    def __post_init__(self) -> None:
        if not self.duration > self.deadline > self.retry > 0:
            raise ValueError(f"lease timing needs duration > deadline > retry > 0: {self}")


def timing_from(environ: Mapping[str, str] = os.environ) -> Timing:
    """The chart's durations, else client-go's (a standby takes over within ~17 s)."""

    def read(name: str, fallback: float) -> float:
        text = environ.get(name, "").strip()
        return float(text) if text else fallback

    duration = read(DURATION_ENV, read(LIFETIME_ENV, Timing.duration))
    return Timing(
        duration,
        read(DEADLINE_ENV, round(duration * 2 / 3, 3)),
        read(RETRY_ENV, round(duration * 2 / 15, 3)),
    )


def identity(environ: Mapping[str, str] = os.environ) -> str:
    """This process among the candidates: its pod, and a nonce (a restarted pod is new)."""
    who = environ.get("POD_NAME") or socket.gethostname()
    return f"{who}_{uuid.uuid4().hex[:8]}"


class LeaseApi(Protocol):
    """The three calls an election makes (cluster/k8s.py's, or a test's)."""

    def get(self) -> Json | None: ...

    def create(self, body: Json) -> Json: ...

    def replace(self, body: Json) -> Json: ...


class Fence:
    """Whether this replica may write now: inside a term, before its renew deadline."""

    def __init__(self, clock: Callable[[], float] = boottime) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._valid_until: float | None = None
        self.term = 0

    def open_until(self, until: float, *, new_term: bool) -> None:
        with self._lock:
            self._valid_until = until
            self.term += int(new_term)

    def close(self) -> None:
        with self._lock:
            self._valid_until = None

    def holds(self) -> bool:
        with self._lock:
            return self._valid_until is not None and self._clock() < self._valid_until

    def check(self) -> None:
        """Raise NotLeader unless a write may go out now."""
        if not self.holds():
            raise NotLeader("this replica does not hold the operator's Lease now")


#: The fence writes consult when no election runs (one operator, `--standalone`): always open.
class OpenFence(Fence):
    def holds(self) -> bool:
        return True


@dataclass
class _Seen:
    """The Lease as last seen, and when (our clock): a candidate waits `duration` from then."""

    record: tuple[Any, ...] | None = None
    at: float = 0.0


@dataclass(frozen=True)
class Candidate:
    """Who stands for which Lease, and what starts and stops with a term.

    `on_start(continued)`: continued is True when this replica takes back its own Lease that no
    one else held since its last term (a late renewal, not a takeover).
    """

    identity: str
    name: str
    namespace: str
    on_start: Callable[[bool], None] = lambda continued: None
    on_stop: Callable[[], None] = lambda: None


class Election:
    """Acquire, renew, and give up one Lease; the candidate's callbacks start and stop acting."""

    def __init__(
        self,
        api: LeaseApi,
        candidate: Candidate,
        timing: Timing = Timing(),
        clock: Callable[[], float] = boottime,
    ) -> None:
        self.api, self.candidate, self.timing, self._clock = api, candidate, timing, clock
        self.identity, self.name, self.namespace = (
            candidate.identity, candidate.name, candidate.namespace
        )  # fmt: skip
        self.fence = Fence(clock)
        self._seen = _Seen()
        self.leading = False
        #: The Lease as our last write left it: the next renewal is one PUT of it.
        self._held: Json | None = None
        #: leaseTransitions as our last write left it: the same, with us holding, means no one
        #: else held the Lease since (a takeover counts one).
        self._transitions: int | None = None
        self._continued = False
        #: Renewals that missed the renew deadline (a lost term, or a late renewal: the fence
        #: was closed meanwhile); the benchmark counts them from the log.
        self.lost_terms = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- one step (what the loop repeats; tests call it with a fake clock) ------------------

    def step(self) -> bool:
        """Try to acquire or renew once; stop acting when the term ran out. Whether we lead."""
        sent = self._clock()
        try:
            renewed = self._try_acquire_or_renew(sent)
        except Exception as exc:  # an unreachable API server: the deadline decides
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            renewed = False
        if renewed:
            first = not self.leading
            if not first and not self.fence.holds():  # a renewal that came late (starved, or
                self.lost_terms += 1  # a pause): no one else wrote (its PUT was guarded)
                log.warning("lease %s/%s renewed past the renew deadline by %s: writes were "
                            "refused meanwhile; the term goes on",
                            self.namespace, self.name, self.identity)  # fmt: skip
            self.fence.open_until(sent + self.timing.deadline, new_term=first)
            if first:
                self.leading = True
                # INFO: a replica taking over is the election working (a start-up, a rollout);
                # losing a term stops a working leader, and says so as a WARNING (_lose).
                log.info("lease %s/%s acquired by %s: this replica acts%s",
                         self.namespace, self.name, self.identity,
                         " (its own, held by no one since: continued)" if self._continued else "",
                         )  # fmt: skip
                self.candidate.on_start(self._continued)
        elif self.leading and not self.fence.holds():
            self.lost_terms += 1
            self._lose(f"could not renew within {self.timing.deadline:.0f} s")
        return self.leading

    def _lose(self, why: str, level: int = logging.WARNING) -> None:
        self.leading = False
        self.fence.close()
        log.log(level, "lease %s/%s lost by %s (%s): this replica stops acting",
                self.namespace, self.name, self.identity, why)  # fmt: skip
        self.candidate.on_stop()

    def _try_acquire_or_renew(self, now: float) -> bool:
        if self.leading and self._held is not None and self.fence.holds():
            try:  # client-go's optimistic renewal: one PUT; a 409 means someone wrote it
                return self._wrote(self.api.replace(self._body(self._held, now)))
            except Exception as exc:
                log.info("lease %s/%s: renewal without a read failed (%s); reading it",
                         self.namespace, self.name, exc)  # fmt: skip
                self._held = None
        current = self.api.get()
        if current is None:
            self._continued = False
            return self._wrote(self.api.create(self._body(None, now)))
        spec = current.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"),
                  current["metadata"].get("resourceVersion"))  # fmt: skip
        if record != self._seen.record:
            self._seen = _Seen(record, now)
        holder = spec.get("holderIdentity") or ""
        if holder != self.identity:
            if self.leading:  # someone took it: our term is over whatever the clock says
                self._lose(f"now held by {holder}")
            if holder and now < self._seen.at + self.timing.duration:
                return False
        transitions = int(spec.get("leaseTransitions") or 0)
        self._continued = holder == self.identity and transitions == self._transitions
        return self._wrote(self.api.replace(self._body(current, now)))

    def _wrote(self, lease: Json) -> bool:
        """Keep the Lease our write left (a renewal PUTs it next time); the write succeeded."""
        spec = lease.get("spec") or {}
        written = bool(spec) and "resourceVersion" in (lease.get("metadata") or {})
        self._held = lease if written and spec.get("holderIdentity") == self.identity else None
        if self._held is not None:
            self._transitions = int(spec.get("leaseTransitions") or 0)
        return True

    def _body(self, current: Json | None, now: float) -> Json:
        """The Lease with us as holder: renewed, or taken over (new acquireTime, +1 transition)."""
        stamp = _micro()
        spec = dict((current or {}).get("spec") or {})
        ours = spec.get("holderIdentity") == self.identity
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=int(self.timing.duration),
            renewTime=stamp,
            acquireTime=spec.get("acquireTime") if ours and current else stamp,
            leaseTransitions=int(spec.get("leaseTransitions") or 0)
            + int(not ours and bool(current)),
        )
        metadata: Json = {"name": self.name, "namespace": self.namespace}
        if current is not None:
            metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": metadata, "spec": spec}  # fmt: skip

    # ---- the loop ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="trainium-lease", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.timing.retry)

    def stop(self, *, release: bool = True) -> None:
        """Stop; a leader that stops gives the Lease up, so a standby takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timing.retry + 5)
        if self.leading:
            self._lose("shutting down", logging.INFO)  # asked to: nothing went wrong
            if release:
                self._release()

    def _release(self) -> None:
        try:
            current = self.api.get()
            if current and (current.get("spec") or {}).get("holderIdentity") == self.identity:
                body = self._body(current, self._clock())
                body["spec"].update(holderIdentity="", leaseDurationSeconds=1)
                self.api.replace(body)
        except Exception as exc:  # the standby takes over after `duration` anyway
            log.warning("lease %s/%s not released: %s", self.namespace, self.name, exc)


def _micro() -> str:
    """A MicroTime as the API server writes it."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
