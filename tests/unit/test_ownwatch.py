"""Kueue's kinds, watched by our own threads (issue 41): a kind whose CRD comes later or goes
away stalls nothing and stops nothing; its index says when an absence in it is true."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster import ownwatch
from trainium_operator.cluster.ownwatch import KindIndex, OwnWatch
from trainium_operator.cluster.reads import Kind, Overlay, WatchReader, proven

Json = dict[str, Any]


def wl(name: str, rv: str, ns: str = "ns", **labels: str) -> Json:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "labels": labels}}


class Server:
    """A Kueue API that is served or not; lists and watches as scripted."""

    def __init__(self) -> None:
        self.served = False
        self.items: list[Json] = []
        self.version = "10"
        self.streams: list[list[Json] | Exception] = []
        self.lists = 0

    def lister(self) -> tuple[list[Json], str]:
        self.lists += 1
        if not self.served:
            raise ApiException(status=404, reason="Not Found")
        return list(self.items), self.version

    def watcher(self, since: str, seconds: int) -> Iterable[Json]:
        assert seconds == ownwatch.WATCH_SECONDS
        script = self.streams.pop(0) if self.streams else ApiException(status=410, reason="Gone")
        if isinstance(script, Exception):
            raise script
        return iter(script)


def watch(server: Server, seen: list[tuple[str, str]], **kw: Any) -> OwnWatch:
    index = KindIndex()
    return OwnWatch(
        "workloads.kueue.x-k8s.io", index, server.lister, server.watcher,
        lambda type, body: seen.append((type, body["metadata"]["name"])), **kw,
    )  # fmt: skip


def test_a_kind_not_served_is_unproven_and_listed_once_its_crd_appears() -> None:
    server, seen = Server(), []
    w = watch(server, seen)
    assert w.relist() is None  # 404: Kueue not installed
    assert not w.index.listed and not proven(Kind.WORKLOAD, w.index)
    server.served, server.items = True, [wl("a", "3")]
    assert w.relist() == "10"
    assert w.index.listed and proven(Kind.WORKLOAD, w.index)
    assert list(w.index.get(("ns", "a"), ())) == [wl("a", "3")]
    assert seen == [("ADDED", "a")]


def test_a_deleted_crd_empties_the_index_and_tells_every_object_gone() -> None:
    server, seen = Server(), []
    server.served, server.items = True, [wl("a", "3"), wl("b", "4")]
    w = watch(server, seen)
    w.relist()
    seen.clear()
    server.served = False  # the CRD deleted: the watch's 404, then the list's
    assert w.relist() is None
    assert len(w.index) == 0 and not w.index.listed
    assert sorted(seen) == [("DELETED", "a"), ("DELETED", "b")]


def test_a_relist_tells_only_what_changed() -> None:
    server, seen = Server(), []
    server.served, server.items = True, [wl("a", "3"), wl("b", "4")]
    w = watch(server, seen)
    w.relist()
    seen.clear()
    server.items = [wl("a", "3"), wl("b", "5"), wl("c", "6")]
    w.relist()
    assert sorted(seen) == [("ADDED", "b"), ("ADDED", "c")]


def test_events_reach_the_index_before_the_callback_and_bookmarks_move_the_version() -> None:
    server = Server()
    server.served = True
    index_at_callback: list[int] = []
    w = OwnWatch(
        "w", KindIndex(), server.lister, server.watcher,
        lambda type, body: index_at_callback.append(len(w.index)),
        wants=lambda body: body["metadata"]["labels"].get("mine") == "yes",
    )  # fmt: skip
    assert w.take({"type": "ADDED", "object": wl("a", "11", mine="yes")}) == "11"
    assert index_at_callback == [1]
    assert w.take({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}) == "20"
    w.take({"type": "MODIFIED", "object": wl("a", "21", mine="no")})  # not ours any more
    assert len(w.index) == 0 and index_at_callback == [1, 0]
    w.take({"type": "ADDED", "object": wl("b", "22", mine="yes")})
    w.take({"type": "DELETED", "object": wl("b", "23", mine="yes")})
    assert len(w.index) == 0


def test_the_thread_keeps_going_through_errors_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 410 relists at once, anything else backs off; the thread never dies; stop ends it."""
    monkeypatch.setattr(ownwatch, "FIRST_BACKOFF", 0.0)
    server, seen = Server(), []
    server.served = True
    states: list[bool] = []
    events = threading.Event()

    def stream(since: str, seconds: int) -> Iterator[Json]:
        n = server.lists
        if n < 5:
            raise ApiException(status=500, reason="boom")
        yield {"type": "ADDED", "object": wl(f"x{n}", str(100 + n))}
        events.set()
        raise ApiException(status=410, reason="Gone")

    server.watcher = stream  # type: ignore[method-assign]
    w = watch(server, seen, on_state=states.append, poll=0.0)
    w.start()
    assert events.wait(10)
    w.stop(timeout=5)
    assert states[:2] == [True, False]  # said once after 3 failures, cleared by a working watch
    assert ("ADDED", "x5") in seen


def test_an_unlisted_late_kind_is_read_with_gets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Until its watch lists it, an empty late index is not taken for "absent"."""
    from test_reads import indices

    from trainium_operator.cluster import reads

    got: list[str] = []
    monkeypatch.setattr(reads, "api_get", lambda kind, ns, name: got.append(name) or None)
    idx: dict[Kind, Any] = dict(indices())
    idx[Kind.WORKLOAD] = KindIndex()
    reader = WatchReader(idx, Overlay())
    assert reader.get(Kind.WORKLOAD, "ns", "w") is None and got == ["w"]
    assert not reader.watched(Kind.WORKLOAD)
    idx[Kind.WORKLOAD].listed = True
    assert reader.get(Kind.WORKLOAD, "ns", "w") is None and got == ["w"]
    assert reader.watched(Kind.WORKLOAD)


def test_a_kind_not_served_waits_on_a_watch_of_its_crd_not_a_poll() -> None:
    """No Kueue: one list, then a watch of the CRD (no request while idle); its CRD there but
    the kind not served yet: lists again, backing off."""
    server, seen = Server(), []
    waits: list[int] = []
    w = watch(server, seen, crd=lambda seconds: waits.append(seconds) or False, poll=0.0)
    w.once()
    assert server.lists == 1 and waits == [ownwatch.WATCH_SECONDS]
    w = watch(server, seen, crd=lambda seconds: True, poll=0.0)
    w.once()
    w.once()
    assert w._unserved == 2
