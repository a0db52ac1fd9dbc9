"""Reads from the watches: the overlay rules for our own writes; passes over a lagging watch."""

from __future__ import annotations

import asyncio
import copy
import itertools
import types
from typing import Any

import kopf
import pytest
from kubernetes.client.exceptions import ApiException
from support import job

from trainium_operator.api import naming
from trainium_operator.api.spec import parse
from trainium_operator.cluster import cacheio, k8s, reads, watches
from trainium_operator.cluster.observe import Views, observe
from trainium_operator.cluster.reads import ApiReader, Kind, Overlay, WatchReader, slim
from trainium_operator.cluster.reconcile import Outcome, reconcile
from trainium_operator.domain import lifecycle
from trainium_operator.manifests import cache
from trainium_operator.manifests.ownership import Owner
from trainium_operator.runtime import kueuewatch
from trainium_operator.runtime.passes import Passes

Json = dict[str, Any]
NS = "default"


def obj(name: str, rv: str, **fields: Any) -> Json:
    return {"metadata": {"name": name, "namespace": NS, "resourceVersion": rv}, **fields}


class Listed(dict[tuple[str, str], list[Json]]):
    """A late kind's index once its own watch has listed the kind (cluster/ownwatch.py)."""

    listed = True


def indices(**found: list[Json]) -> dict[Kind, dict[tuple[str, str], list[Json]]]:
    """Empty indices of every kind (late ones listed); `found` fills one kind's index (by its
    name, lower case)."""
    out: dict[Kind, dict[tuple[str, str], list[Json]]] = {
        kind: Listed() if kind in reads.LATE else {} for kind in Kind
    }
    for kind_name, bodies in found.items():
        for body in bodies:
            md = body["metadata"]
            out[Kind[kind_name.upper()]].setdefault((md.get("namespace", ""), md["name"]), [])
            out[Kind[kind_name.upper()]][(md.get("namespace", ""), md["name"])].append(body)
    return out


def show(idx: dict[Kind, Any], kind: Kind, body: Json | None, name: str = "x") -> None:
    """The watch delivers a version of object `name` (None: its deletion)."""
    idx[kind][(NS, name)] = [body] if body is not None else []


def rv_of(body: Json | None) -> str | None:
    return None if body is None else body["metadata"]["resourceVersion"]


# ---- the overlay's rules ------------------------------------------------------------------------


def test_a_create_is_served_until_the_index_shows_the_object_in_any_version() -> None:
    idx, overlay = indices(), Overlay()
    first = WatchReader(idx, overlay)
    assert first.get(Kind.VCJOB, NS, "x") is None
    first.wrote(Kind.VCJOB, NS, "x", obj("x", "5"))
    later = WatchReader(idx, overlay)
    assert rv_of(later.get(Kind.VCJOB, NS, "x")) == "5"  # the watch has not caught up yet
    show(idx, Kind.VCJOB, obj("x", "7"))  # Volcano moved it on before our ADDED came in
    assert rv_of(WatchReader(idx, overlay).get(Kind.VCJOB, NS, "x")) == "7"
    assert len(overlay) == 0


def test_a_patch_is_served_while_the_index_shows_the_version_it_was_based_on() -> None:
    idx, overlay = indices(trainiumjob=[obj("x", "1", status={"phase": "Pending"})]), Overlay()
    first = WatchReader(idx, overlay)
    assert first.get(Kind.TRAINIUMJOB, NS, "x")["status"]["phase"] == "Pending"  # type: ignore[index]
    first.wrote(Kind.TRAINIUMJOB, NS, "x", obj("x", "2", status={"phase": "Precompiling"}))
    again = WatchReader(idx, overlay).get(Kind.TRAINIUMJOB, NS, "x")
    assert again is not None and again["status"]["phase"] == "Precompiling"
    show(idx, Kind.TRAINIUMJOB, obj("x", "2", status={"phase": "Precompiling"}))
    assert rv_of(WatchReader(idx, overlay).get(Kind.TRAINIUMJOB, NS, "x")) == "2"
    assert len(overlay) == 0


def test_a_relist_that_skips_our_version_ends_the_overlay() -> None:
    """Versions are opaque: any version other than the ones we superseded is newer than ours."""
    idx, overlay = indices(trainiumjob=[obj("x", "1")]), Overlay()
    first = WatchReader(idx, overlay)
    first.get(Kind.TRAINIUMJOB, NS, "x")
    first.wrote(Kind.TRAINIUMJOB, NS, "x", obj("x", "2"))
    show(idx, Kind.TRAINIUMJOB, obj("x", "9"))  # a relist: 2..8 were never streamed to us
    assert rv_of(WatchReader(idx, overlay).get(Kind.TRAINIUMJOB, NS, "x")) == "9"


def test_a_write_by_someone_else_before_ours_does_not_end_the_overlay() -> None:
    """kopf adds its finalizer (version 2) while our pass, which read 1, writes status (3)."""
    idx, overlay = indices(trainiumjob=[obj("x", "1")]), Overlay()
    reader = WatchReader(idx, overlay)
    reader.get(Kind.TRAINIUMJOB, NS, "x")
    reader.wrote(Kind.TRAINIUMJOB, NS, "x", obj("x", "3", status={"phase": "Pending"}))
    show(idx, Kind.TRAINIUMJOB, obj("x", "2"))  # the finalizer's version, without our status
    assert rv_of(WatchReader(idx, overlay).get(Kind.TRAINIUMJOB, NS, "x")) == "3"


def test_opaque_versions_are_only_compared_for_equality() -> None:
    idx, overlay = indices(trainiumjob=[obj("x", "a")]), Overlay()
    reader = WatchReader(idx, overlay)
    reader.get(Kind.TRAINIUMJOB, NS, "x")
    reader.wrote(Kind.TRAINIUMJOB, NS, "x", obj("x", "c"))
    assert rv_of(WatchReader(idx, overlay).get(Kind.TRAINIUMJOB, NS, "x")) == "c"
    show(idx, Kind.TRAINIUMJOB, obj("x", "b"))  # not known to be older: the index wins
    assert rv_of(WatchReader(idx, overlay).get(Kind.TRAINIUMJOB, NS, "x")) == "b"


def test_writes_in_a_row_supersede_every_version_before_them() -> None:
    idx, overlay = indices(trainiumjob=[obj("x", "1")]), Overlay()
    for written in ("2", "3"):  # each pass reads the last write from the overlay, writes again
        reader = WatchReader(idx, overlay)
        reader.get(Kind.TRAINIUMJOB, NS, "x")
        reader.wrote(Kind.TRAINIUMJOB, NS, "x", obj("x", written))
    for lagging in ("1", "2"):  # the watch delivers the older versions one by one
        show(idx, Kind.TRAINIUMJOB, obj("x", lagging))
        assert rv_of(WatchReader(idx, overlay).get(Kind.TRAINIUMJOB, NS, "x")) == "3"
    show(idx, Kind.TRAINIUMJOB, obj("x", "3"))
    assert rv_of(WatchReader(idx, overlay).get(Kind.TRAINIUMJOB, NS, "x")) == "3"
    assert len(overlay) == 0


def test_a_delete_hides_the_object_until_the_index_changes() -> None:
    idx, overlay = indices(lease=[obj("x", "4")]), Overlay()
    first = WatchReader(idx, overlay)
    assert first.get(Kind.LEASE, NS, "x") is not None
    first.deleted(Kind.LEASE, NS, "x")
    assert WatchReader(idx, overlay).get(Kind.LEASE, NS, "x") is None  # DELETED not seen yet
    show(idx, Kind.LEASE, obj("x", "8"))  # someone else's lease of the same name, since
    assert rv_of(WatchReader(idx, overlay).get(Kind.LEASE, NS, "x")) == "8"


def test_a_create_after_our_delete_supersedes_the_tombstone() -> None:
    idx, overlay = indices(vcjob=[obj("x", "4")]), Overlay()
    reader = WatchReader(idx, overlay)
    reader.get(Kind.VCJOB, NS, "x")
    reader.deleted(Kind.VCJOB, NS, "x")
    reader = WatchReader(idx, overlay)
    assert reader.get(Kind.VCJOB, NS, "x") is None
    reader.wrote(Kind.VCJOB, NS, "x", obj("x", "6"))
    for lagging in (obj("x", "4"), None):  # the old one, then its deletion, stream in late
        show(idx, Kind.VCJOB, lagging)
        assert rv_of(WatchReader(idx, overlay).get(Kind.VCJOB, NS, "x")) == "6"


def test_already_exists_drops_what_we_thought_and_trusts_the_index() -> None:
    idx, overlay = indices(), Overlay()
    reader = WatchReader(idx, overlay)
    reader.get(Kind.VCJOB, NS, "x")
    reader.deleted(Kind.VCJOB, NS, "x")
    reader.wrote(Kind.VCJOB, NS, "x", None)  # a create answered 409 AlreadyExists
    assert len(overlay) == 0


def test_a_write_to_an_object_the_pass_never_read_is_not_kept() -> None:
    """Nothing is known to be older than it, so nothing the index shows is hidden by it."""
    idx, overlay = indices(), Overlay()
    WatchReader(idx, overlay).wrote(Kind.RECORD, NS, "x", obj("x", "3"))
    assert WatchReader(idx, overlay).get(Kind.RECORD, NS, "x") is None


def test_writes_are_forgotten_after_the_ttl() -> None:
    """A watch that never delivers (broken; kopf restarts it) does not keep writes forever."""
    clock = [0.0]
    idx, overlay = indices(), Overlay(clock=lambda: clock[0])
    for name, at in (("old", 0.0), ("new", Overlay.TTL + 1)):
        clock[0] = at
        reader = WatchReader(idx, overlay)
        reader.get(Kind.VCJOB, NS, name)
        reader.wrote(Kind.VCJOB, NS, name, obj(name, "1"))
    assert len(overlay) == 1
    assert WatchReader(idx, overlay).get(Kind.VCJOB, NS, "old") is None
    assert WatchReader(idx, overlay).get(Kind.VCJOB, NS, "new") is not None


def test_the_watch_showing_our_write_lets_it_go_without_a_read() -> None:
    """A settled job is never read again: its last patch must not wait for a sweep."""
    idx, overlay = indices(trainiumjob=[obj("x", "1")]), Overlay()
    reader = WatchReader(idx, overlay)
    reader.get(Kind.TRAINIUMJOB, NS, "x")
    reader.wrote(Kind.TRAINIUMJOB, NS, "x", obj("x", "3", status={"phase": "Succeeded"}))
    overlay.shown((Kind.TRAINIUMJOB, NS, "x"), obj("x", "2"))  # older: still ours to serve
    assert len(overlay) == 1
    overlay.shown((Kind.TRAINIUMJOB, NS, "x"), obj("x", "3"))
    assert len(overlay) == 0
    show(idx, Kind.TRAINIUMJOB, obj("x", "3", status={"phase": "Succeeded"}))
    assert rv_of(WatchReader(idx, overlay).get(Kind.TRAINIUMJOB, NS, "x")) == "3"


def test_every_index_function_tells_the_overlay_what_the_watch_showed() -> None:
    """kopf calls the index functions on each watch event: that is where writes are let go."""
    functions = {
        Kind.TRAINIUMJOB: watches.read_trainiumjobs, Kind.VCJOB: watches.read_vcjobs,
        Kind.CLAIM: watches.read_claims, Kind.VOLUME: watches.read_volumes,
        Kind.RECORD: watches.read_records, Kind.LEASE: watches.read_leases,
        Kind.QUEUE: watches.read_queues, Kind.PRIORITY: watches.read_priorityclasses,
    }  # fmt: skip
    assert set(functions) | reads.LATE == set(Kind)
    passes = Passes(lambda *_: Outcome(None), lambda *_: None, workers=0)
    memo = types.SimpleNamespace(passes=passes)
    overlay = passes.reads.overlay
    for kind in reads.LATE:  # our own watches' events (runtime/kueuewatch.py)
        ns = NS if kind is Kind.WORKLOAD else ""
        reader = WatchReader(indices(**{kind.name.lower(): [obj("x", "4")]}), overlay)
        reader.get(kind, ns, "x")
        reader.wrote(kind, ns, "x", obj("x", "5"))
        assert len(overlay) == 1
        kueuewatch.on_event(passes, kind)("MODIFIED", {**obj("x", "5"), "metadata": {
            **obj("x", "5")["metadata"], "namespace": ns}})  # fmt: skip
        assert len(overlay) == 0, kind
    for kind, function in functions.items():
        scoped = kind not in (Kind.VOLUME, Kind.QUEUE, Kind.PRIORITY, Kind.FLAVOR)
        ns = NS if scoped else ""
        reader = WatchReader(indices(**{kind.name.lower(): [obj("x", "4")]}), overlay)
        reader.get(kind, ns, "x")
        reader.wrote(kind, ns, "x", obj("x", "5"))
        assert len(overlay) == 1
        body = kopf.Body(obj("x", "5"))
        kwargs = {"namespace": NS, "name": "x"} if scoped else {"name": "x"}
        entry = asyncio.run(function(body=body, memo=memo, **kwargs))  # type: ignore[operator]
        assert list(entry) == [(ns, "x")]
        assert len(overlay) == 0, kind


def test_fresh_and_ambiguous_reads_get_and_supersede_what_the_index_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served = {"x": obj("x", "5"), "y": obj("y", "9")}
    monkeypatch.setattr(cacheio, "get_configmap", lambda ns, name: served[name])
    idx = indices(record=[obj("x", "3"), obj("y", "8"), {**obj("y", "2"), "old": True}])
    overlay = Overlay()
    fresh = WatchReader(idx, overlay, fresh=True)
    assert rv_of(fresh.get(Kind.RECORD, NS, "x")) == "5"
    fresh.wrote(Kind.RECORD, NS, "x", obj("x", "6"))
    assert rv_of(WatchReader(idx, overlay).get(Kind.RECORD, NS, "x")) == "6"  # index: 3
    ambiguous = WatchReader(idx, overlay)  # an old "y" whose deletion is not processed yet
    assert rv_of(ambiguous.get(Kind.RECORD, NS, "y")) == "9"


def test_a_fresh_read_trusts_an_absence_and_serves_our_pending_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 26: a backstop GETs what the index shows (a ghost), not what it says is absent."""
    got: list[str] = []
    monkeypatch.setattr(cacheio, "get_configmap", lambda ns, name: got.append(name))
    idx, overlay = indices(record=[]), Overlay()
    assert WatchReader(idx, overlay, fresh=True).get(Kind.RECORD, NS, "x") is None
    writer = WatchReader(idx, overlay)
    assert writer.get(Kind.RECORD, NS, "x") is None
    writer.wrote(Kind.RECORD, NS, "x", obj("x", "4"))  # created: its event is still to come
    assert rv_of(WatchReader(idx, overlay, fresh=True).get(Kind.RECORD, NS, "x")) == "4"
    assert got == []


def test_the_api_reader_gets_and_keeps_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(k8s, "get_queue", lambda name: obj(name, "1"))
    reader = ApiReader()
    assert rv_of(reader.get(Kind.QUEUE, "", "q")) == "1"
    reader.wrote(Kind.QUEUE, "", "q", obj("q", "2"))
    assert rv_of(reader.get(Kind.QUEUE, "", "q")) == "1"


# ---- what the indices keep is all observe reads ------------------------------------------------


def test_a_trainiumjob_is_kept_whole_but_for_managed_fields() -> None:
    body = obj("j", "1", spec={"image": "i"}, status={"phase": "Training"})
    body["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    kept = slim(Kind.TRAINIUMJOB, body)
    assert kept["spec"] is body["spec"] and kept["status"] is body["status"]  # no copies
    assert "managedFields" not in kept["metadata"] and "managedFields" in body["metadata"]


def full_world(owner: Owner, record: str) -> dict[Kind, list[Json]]:
    """Full objects, as a GET returns them, of a job that is precompiling as the cache writer."""
    meta = {"uid": "u", "creationTimestamp": "2026-11-22T00:00:00Z", "labels": {"a": "b"},
            "managedFields": [{"manager": "kubectl"}], "annotations": {"x": "y"}}  # fmt: skip
    pre = naming.vcjob_name(owner.name, "precompile")
    state = {"phase": "Running", "reason": "r", "message": "m", "lastTransitionTime": "t"}
    vc_status = {"state": state, "retryCount": 1, "running": 2, "conditions": [{"status": "x"}]}
    holder = f"{owner.namespace}/{owner.name}/{owner.uid}"
    return {
        Kind.VCJOB: [obj(pre, "11", spec={"tasks": [{"x": 1}]}, status=vc_status)],
        Kind.CLAIM: [obj("fsx-claim", "12", spec={"volumeName": "v"}, status={"phase": "Bound"})],
        Kind.RECORD: [obj(record, "13", data={"state": "Compiling", "startedAt": "s"})],
        Kind.LEASE: [obj(record, "14", spec={"holderIdentity": holder, "leaseTransitions": 2})],
        Kind.QUEUE: [{"metadata": {"name": "q", "resourceVersion": "15", **meta},
                      "spec": {"weight": 1}, "status": {"state": "Open", "running": 3}}],
        Kind.TRAINIUMJOB: [],
    }  # fmt: skip


def test_observe_over_the_slim_indices_sees_what_it_sees_with_gets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = job("j", scheduling={"queue": "q"})
    spec, owner = parse(body), Owner("j", NS, "uid-j")
    world = full_world(owner, cache.identity(spec).record_name)
    for bodies in world.values():
        for b in bodies:
            b["metadata"].update(uid="u", creationTimestamp="2026-11-22T00:00:00Z")

    def get(kind: Kind, namespace: str, name: str) -> Json | None:
        found = [b for b in world[kind] if b["metadata"]["name"] == name]
        return copy.deepcopy(found[0]) if found else None

    monkeypatch.setattr(reads, "api_get", get)
    slim_idx = indices()
    for kind, bodies in world.items():
        for b in bodies:
            slim_idx[kind][(b["metadata"].get("namespace", ""), b["metadata"]["name"])] = [
                slim(kind, b)
            ]
    now = "2026-11-22T00:01:00Z"
    with_gets = observe(spec, owner, Views(now=now, reader=ApiReader()))
    from_watch = observe(spec, owner, Views(now=now, reader=WatchReader(slim_idx, Overlay())))
    assert from_watch.observed == with_gets.observed
    assert from_watch.entry == with_gets.entry and from_watch.observed.cache_holder == "self"
    assert from_watch.lease is not None and with_gets.lease is not None
    assert from_watch.lease["spec"] == with_gets.lease["spec"]
    assert set(from_watch.lease["metadata"]) >= {"name", "namespace", "uid", "resourceVersion"}


# ---- whole passes over a watch that lags behind our writes -------------------------------------


class FakeApi:
    """Stores what the operator writes, with resourceVersions; the watch delivers it on demand."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rv = itertools.count(100)
        self.creates: list[str] = []
        self.patches = 0
        self.deleted: list[tuple[Kind, str]] = []
        self.objects: dict[tuple[Kind, str], Json] = {}
        monkeypatch.setattr(k8s, "create_vcjob", self._creator(Kind.VCJOB))
        monkeypatch.setattr(cacheio, "create_lease", self._creator(Kind.LEASE))
        monkeypatch.setattr(cacheio, "put_configmap", self._creator(Kind.RECORD, upsert=True))
        monkeypatch.setattr(k8s, "patch_trainiumjob_status", self.patch_status)
        monkeypatch.setattr(cacheio, "delete_lease", self.delete)
        monkeypatch.setattr(k8s, "list_vcjobs", self.list_vcjobs)

    def list_vcjobs(self, namespace: str, selector: str) -> list[Json]:
        wanted = dict(term.split("=", 1) for term in selector.split(","))
        return [
            copy.deepcopy(body)
            for (kind, _), body in self.objects.items()
            if kind is Kind.VCJOB and wanted.items() <= body["metadata"]["labels"].items()
        ]

    def _creator(self, kind: Kind, upsert: bool = False) -> Any:
        def create(body: Json, **_: Any) -> Json | None:
            name = body["metadata"]["name"]
            if (kind, name) in self.objects and not upsert:
                return None  # AlreadyExists
            self.creates.append(f"{kind.value}/{name}")
            return self.store(kind, copy.deepcopy(body))

        return create

    def store(self, kind: Kind, body: Json) -> Json:
        body["metadata"]["resourceVersion"] = str(next(self.rv))
        self.objects[(kind, body["metadata"]["name"])] = body
        return copy.deepcopy(body)

    def delete(self, observed: Json) -> None:
        del self.objects[(Kind.LEASE, observed["metadata"]["name"])]
        self.deleted.append((Kind.LEASE, observed["metadata"]["name"]))

    def patch_status(
        self, namespace: str, name: str, status: Json, *, resource_version: str | None = None
    ) -> Json:
        self.patches += 1
        body = copy.deepcopy(self.objects[(Kind.TRAINIUMJOB, name)])
        if resource_version and resource_version != body["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")  # as the API server answers
        body["status"] = {**(body.get("status") or {}), **status}
        return self.store(Kind.TRAINIUMJOB, body)

    def deliver(self, idx: dict[Kind, Any]) -> None:
        """The watches catch up with everything stored (and every deletion)."""
        for kind, name in self.deleted:
            idx[kind].pop((NS, name), None)
        for (kind, name), body in self.objects.items():
            idx[kind][(NS, name)] = [slim(kind, copy.deepcopy(body))]


class Job:
    """One TrainiumJob on the fake API, reconciled pass by pass over lagging indices."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.api = FakeApi(monkeypatch)
        self.body = job("j", scheduling={"queue": "q"})
        self.body["metadata"].update(uid="uid-j", resourceVersion="1", generation=1)
        self.api.objects[(Kind.TRAINIUMJOB, "j")] = self.body
        self.idx = indices(
            claim=[obj("fsx-claim", "2", status={"phase": "Bound"})],
            queue=[{"metadata": {"name": "q", "resourceVersion": "3"}, "status": {}}],
            trainiumjob=[copy.deepcopy(self.body)],
        )
        self.events: list[str] = []
        self.overlay = Overlay()
        self.outcome = Outcome(None)

    def one_pass(self) -> str | None:
        emit = lambda _b, _t, reason, _m, _a: self.events.append(reason)  # noqa: E731
        views = Views(reader=WatchReader(self.idx, self.overlay))
        self.outcome = reconcile(NS, "j", emit, views)
        return self.outcome.phase

    def status(self) -> Json:
        return dict(self.api.objects[(Kind.TRAINIUMJOB, "j")]["status"])


def test_passes_before_the_watch_catches_up_create_nothing_twice_and_announce_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    j = Job(monkeypatch)
    assert j.one_pass() == "Precompiling"
    entry = cache.identity(parse(j.body)).record_name
    pre = naming.vcjob_name("j", "precompile")
    made = [f"leases/{entry}", f"vcjobs/{pre}"]
    assert j.api.creates == made  # the lease and the precompile job (the record: when it ends)
    for _ in range(3):  # child events wake the job before any watch delivered our writes
        assert j.one_pass() == "Precompiling"
    assert j.api.creates == made, "a pass acted on the watch's older picture"
    assert j.events.count("Precompiling") == 1, j.events
    j.api.deliver(j.idx)
    assert j.one_pass() == "Precompiling" and j.api.creates == made
    assert j.events.count("Precompiling") == 1 and len(j.overlay) == 0


@pytest.mark.parametrize("echo", ["late", "refused"])
def test_a_compile_done_before_any_status_said_so_is_reported_before_training(
    monkeypatch: pytest.MonkeyPatch, echo: str
) -> None:
    """The precompile job's echo pass ran only once it had Completed (a loaded operator), or
    its Precompiling write was refused (409: the job changed meanwhile) and the retry found it
    Completed: the job still says Precompiling, before its training gang is created, so its
    phases, status.history and Events show the compile (it went New -> Training before)."""
    j = Job(monkeypatch)
    j.one_pass()  # creates the lease and the precompile job; the status is its echo's to write
    pre = naming.vcjob_name("j", "precompile")
    if echo == "refused":
        j.api.store(Kind.TRAINIUMJOB, j.api.objects[(Kind.TRAINIUMJOB, "j")])  # kubectl label
        with pytest.raises(ApiException):
            j.one_pass()
        assert "status" not in j.api.objects[(Kind.TRAINIUMJOB, "j")]
    j.api.objects[(Kind.VCJOB, pre)]["status"] = {"state": {"phase": "Completed"}}
    j.api.deliver(j.idx)
    assert j.one_pass() == "Precompiling"
    train = f"vcjobs/{naming.vcjob_name('j', 'train')}"
    assert train not in j.api.creates  # the status goes first
    assert j.outcome.deadline_in is not None and j.outcome.deadline_in <= 1  # no event follows
    assert j.one_pass() == "Training" and j.api.creates[-1] == train  # that look, at once
    j.one_pass()  # woken by the training job's ADDED
    assert [h["phase"] for h in j.status()["history"]] == ["Precompiling", "Training"]
    assert j.events.count("Precompiling") == 1 and j.events.count("Training") == 1


def test_the_pass_that_creates_a_stage_leaves_the_report_to_its_echo_and_decides_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    j = Job(monkeypatch)
    decides = []
    real_decide = lifecycle.decide

    def counting_decide(observed: Any) -> Any:
        decides.append(1)
        return real_decide(observed)

    monkeypatch.setattr(lifecycle, "decide", counting_decide)
    j.one_pass()  # creates the lease and the precompile job
    assert j.api.patches == 0, "the status is the pass its ADDED wakes to write"
    assert j.one_pass() == "Precompiling" and j.api.patches == 1
    pre = naming.vcjob_name("j", "precompile")
    j.api.objects[(Kind.VCJOB, pre)]["status"] = {"state": {"phase": "Completed"}}
    j.api.deliver(j.idx)  # the precompile job completed; the watches are up to date
    patches = j.api.patches
    assert j.one_pass() == "Training"
    assert j.api.creates[-1] == f"vcjobs/{naming.vcjob_name('j', 'train')}"
    assert j.api.patches == patches
    j.one_pass()  # woken by the training job's ADDED, before any watch delivered it
    running = {c["type"]: c["reason"] for c in j.status()["conditions"]}["Running"]
    assert running == "GangPending"  # what exists now, not "about to be created"
    assert j.status()["cache"]["compileSeconds"] is not None  # the record written before
    assert j.api.patches == patches + 1
    j.api.deliver(j.idx)
    j.one_pass()  # and after
    assert j.api.patches == patches + 1 and j.events.count("Training") == 1
    assert len(decides) == 5  # one per pass
