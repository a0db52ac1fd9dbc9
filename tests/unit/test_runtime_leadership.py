"""The Lease election and its fence, on a fake clock and a fake Lease API (every interleaving)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster import k8s
from trainium_operator.runtime.leadership import Candidate, Election, NotLeader, Timing, timing_from

Json = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class LeaseServer:
    """One Lease as the API server keeps it: PUT is refused (409) on a stale resourceVersion."""

    def __init__(self) -> None:
        self.lease: Json | None = None
        self.version = 0
        self.down = False
        self.calls: list[str] = []

    def api(self) -> Any:
        server = self

        class Api:
            def get(self) -> Json | None:
                server.check("get")
                return copy.deepcopy(server.lease)

            def create(self, body: Json) -> Json:
                server.check("create")
                if server.lease is not None:
                    raise ApiException(status=409, reason="AlreadyExists")
                return server.store(body)

            def replace(self, body: Json) -> Json:
                server.check("replace")
                assert server.lease is not None
                if (
                    body["metadata"]["resourceVersion"]
                    != server.lease["metadata"]["resourceVersion"]
                ):
                    raise ApiException(status=409, reason="Conflict")
                return server.store(body)

        return Api()

    def check(self, call: str) -> None:
        self.calls.append(call)
        if self.down:
            raise ApiException(status=503)

    def store(self, body: Json) -> Json:
        self.version += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)

    @property
    def holder(self) -> str | None:
        return None if self.lease is None else self.lease["spec"]["holderIdentity"]


TIMING = Timing(duration=10, deadline=7, retry=2)


def candidate(server: LeaseServer, clock: Clock, name: str, log: list[str]) -> Election:
    who = Candidate(
        name, "trainium", "ops",
        on_start=lambda continued: log.append(f"{name} {'continues' if continued else 'starts'}"),
        on_stop=lambda: log.append(f"{name} stops"),
    )  # fmt: skip
    return Election(server.api(), who, TIMING, clock)


def test_one_leader_and_a_standby_that_waits_the_lease_duration() -> None:
    server, clock, log = LeaseServer(), Clock(), []
    a, b = candidate(server, clock, "a", log), candidate(server, clock, "b", log)
    assert a.step() and not b.step()
    assert server.holder == "a" and log == ["a starts"]
    clock.now += 9  # a is silent (killed): b must wait `duration` from when it saw the change
    assert not b.step()
    clock.now += 1.5
    assert b.step() and server.holder == "b"
    assert server.lease is not None and server.lease["spec"]["leaseTransitions"] == 1


def test_a_leader_that_cannot_renew_stops_before_anyone_may_take_over() -> None:
    server, clock, log = LeaseServer(), Clock(), []
    a, b = candidate(server, clock, "a", log), candidate(server, clock, "b", log)
    assert a.step() and not b.step()
    server.down = True  # a cannot renew
    clock.now += 6.9
    assert a.step() and a.fence.holds()
    clock.now += 0.2  # past the renew deadline (7 s): a stops, and its writes are refused
    assert not a.step() and not a.fence.holds()
    with pytest.raises(NotLeader):
        a.fence.check()
    assert log == ["a starts", "a stops"]
    server.down = False
    clock.now += 2.5  # 9.6 s after b saw a's last renewal: b still waits
    assert not b.step()
    clock.now += 0.5
    assert b.step()


def test_a_paused_leader_wakes_fenced_and_stands_by() -> None:
    """SIGSTOP past the lease: the clock moved; the woken replica writes nothing and yields."""
    server, clock, log = LeaseServer(), Clock(), []
    a, b = candidate(server, clock, "a", log), candidate(server, clock, "b", log)
    assert a.step() and not b.step()
    clock.now += 30  # a is stopped; b takes over meanwhile
    assert b.step()
    assert not a.fence.holds()  # the first thing a's workers meet on waking: no write goes out
    assert not a.step()  # its election sees b holding: it stops acting
    assert log == ["a starts", "b starts", "a stops"] and server.holder == "b"


def test_renewals_keep_the_term_and_a_stop_releases_for_a_fast_takeover() -> None:
    server, clock, log = LeaseServer(), Clock(), []
    a, b = candidate(server, clock, "a", log), candidate(server, clock, "b", log)
    for _ in range(10):
        assert a.step() and not b.step()
        clock.now += 2
    term = a.fence.term
    assert term == 1
    a.leading = True
    a.stop(release=True)
    assert server.holder == "" and log[-1] == "a stops"
    assert b.step()  # released: no need to wait the duration


def test_writes_ask_the_fence_and_reads_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def create_namespaced_thing(*_: Any, **__: Any) -> None:
        calls.append("create")

    def read_namespaced_thing(*_: Any, **__: Any) -> None:
        calls.append("read")

    def closed() -> None:
        raise NotLeader("not ours")

    monkeypatch.setattr(k8s, "fence", closed)
    k8s.request(read_namespaced_thing)
    with pytest.raises(NotLeader):
        k8s.request(create_namespaced_thing)
    assert calls == ["read"]


def test_timing_must_let_a_leader_stop_before_a_standby_starts() -> None:
    with pytest.raises(ValueError):
        Timing(duration=10, deadline=10, retry=2)


# ---- issue 32 item 5: renewals that hold under load -------------------------------------------


def test_the_defaults_are_client_gos_and_a_lifetime_keeps_their_proportions() -> None:
    assert Timing() == Timing(duration=15, deadline=10, retry=2)
    assert timing_from({}) == Timing()
    assert timing_from({"TRAINIUM_PEERING_LIFETIME_SECONDS": "30"}) == Timing(30, 20, 4)


def test_a_holder_renews_with_one_put_and_reads_only_when_it_fails() -> None:
    """client-go's optimistic renewal: half the requests, and none of them a read to wait on."""
    server, clock, log = LeaseServer(), Clock(), []
    a, b = candidate(server, clock, "a", log), candidate(server, clock, "b", log)
    assert a.step()
    server.calls.clear()
    for _ in range(5):
        clock.now += 2
        assert a.step()
    assert server.calls == ["replace"] * 5
    clock.now += 30  # a paused; b sees the Lease unchanged for the duration, takes over
    assert not b.step()
    clock.now += 16
    assert b.step() and server.holder == "b"
    server.calls.clear()
    assert not a.step() and not a.fence.holds()
    assert server.calls == ["get"] and log[-1] == "a stops"  # the fence was closed: no PUT sent


def test_a_late_renewal_of_its_own_lease_continues_the_term() -> None:
    """A lone replica's renewal came after its deadline (starved): it stopped, and takes its own
    Lease back; no one held it since, so its passes need not re-read every job."""
    server, clock, log = LeaseServer(), Clock(), []
    a = candidate(server, clock, "a", log)
    assert a.step()
    server.down = True
    clock.now += 10.5  # past the deadline without a renewal
    assert not a.step() and a.lost_terms == 1
    server.down = False
    clock.now += 1
    assert a.step() and log == ["a starts", "a stops", "a continues"]
    assert a.fence.term == 2


def test_taking_back_a_lease_someone_else_held_is_a_new_term() -> None:
    server, clock, log = LeaseServer(), Clock(), []
    a, b = candidate(server, clock, "a", log), candidate(server, clock, "b", log)
    assert a.step() and not b.step()
    clock.now += 20  # a starved; b takes over, then stops and releases
    assert b.step()
    b.stop(release=True)
    assert a.step()  # a sees the Lease released by b: its term ended; it takes it anew
    assert log == ["a starts", "b starts", "b stops", "a stops", "a starts"]


def test_a_renewal_past_the_deadline_goes_on_fenced_meanwhile_and_is_counted() -> None:
    """Woken 12 s after its last renewal (deadline 10, lease 15): writes were refused; its
    guarded PUT shows no one took over, so the term goes on without a stop and a restart."""
    server, clock, log = LeaseServer(), Clock(), []
    a = candidate(server, clock, "a", log)
    assert a.step()
    clock.now += 12
    assert not a.fence.holds()
    assert a.step() and a.fence.holds() and a.lost_terms == 1
    assert log == ["a starts"] and a.fence.term == 1
