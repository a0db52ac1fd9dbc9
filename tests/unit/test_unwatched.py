"""Kueue installed while the operator runs: kopf may never watch Workloads (issue 33).

kopf re-reads discovery only on a CRD event, and the API server may list the Workload kind only
after its CRD's last event: kopf's Workload index then stays empty for good. A pass must not
take that empty index for "absent": it reads Kueue's kinds with GETs, says so once, and looks
again at its Kueue jobs every few seconds, since no Workload event will wake them.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from support import job
from test_reads import NS, FakeApi, indices, obj

from trainium_operator.cluster import kueueio, reads
from trainium_operator.cluster.observe import Views
from trainium_operator.cluster.reads import (
    UNWATCHED_LOOK,
    WATCH_GRACE,
    Kind,
    Overlay,
    Unwatched,
    WatchReader,
    slim,
)
from trainium_operator.cluster.reconcile import reconcile
from trainium_operator.domain import quota
from trainium_operator.domain.model import Blocker, Decision, Phase
from trainium_operator.manifests import workload
from trainium_operator.manifests.builders import Owner

Json = dict[str, Any]
WL = "trainiumjob-j-train"
#: The Workload the operator names for KueueJob's job (its uid in the name).
JOB_WL = workload.name_for(Owner("j", NS, "uid-kueue-j"), "train")


def said() -> tuple[list[tuple[Kind, bool]], Unwatched]:
    changes: list[tuple[Kind, bool]] = []
    return changes, Unwatched(lambda kind, unwatched: changes.append((kind, unwatched)))


def test_an_empty_workload_index_is_not_taken_for_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API has our Workload, the index never showed it: the pass sees it (a GET)."""
    served = {WL: obj(WL, "7", status={"conditions": [{"type": "Admitted", "status": "True"}]})}
    monkeypatch.setattr(kueueio, "get_workload", lambda ns, name: served.get(name))
    changes, unwatched = said()
    reader = WatchReader(indices(), Overlay(), unwatched=unwatched)
    assert reader.get(Kind.WORKLOAD, NS, WL) == served[WL]
    assert reader.get(Kind.WORKLOAD, NS, "trainiumjob-j-pre") is None
    assert not reader.watched(Kind.WORKLOAD) and reader.watched(Kind.VCJOB)
    reader.get(Kind.WORKLOAD, NS, WL)
    assert changes == [(Kind.WORKLOAD, True)]  # said once
    assert Kind.WORKLOAD in unwatched


def test_our_own_fresh_write_is_not_evidence_until_the_grace_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A working watch may still be bringing our create: no WARNING for that, only later."""
    now = [0.0]
    overlay = Overlay(clock=lambda: now[0])
    made = obj(WL, "7")
    monkeypatch.setattr(kueueio, "get_workload", lambda ns, name: copy.deepcopy(made))
    changes, unwatched = said()
    WatchReader(indices(), overlay, unwatched=unwatched).wrote(Kind.WORKLOAD, NS, WL, made)
    now[0] = WATCH_GRACE - 1
    assert WatchReader(indices(), overlay, unwatched=unwatched).get(Kind.WORKLOAD, NS, WL)
    assert changes == []
    now[0] = WATCH_GRACE
    WatchReader(indices(), overlay, unwatched=unwatched).get(Kind.WORKLOAD, NS, WL)
    assert changes == [(Kind.WORKLOAD, True)]


def test_a_watched_late_kind_is_read_from_its_index_and_clears_the_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once the index holds an object kopf watches the kind: an absence is trusted again."""

    def no_get(*_: Any) -> None:
        raise AssertionError("a watched kind read with a GET")

    monkeypatch.setattr(reads, "api_get", no_get)
    changes, unwatched = said()
    unwatched.update(Kind.FLAVOR, True)
    flavor = {"metadata": {"name": "trn1", "resourceVersion": "3"}}
    idx = indices(workload=[obj("other", "5")], flavor=[flavor])
    reader = WatchReader(idx, Overlay(), unwatched=unwatched)
    assert reader.get(Kind.WORKLOAD, NS, WL) is None
    assert reader.get(Kind.FLAVOR, "", "trn1") == flavor
    assert reader.watched(Kind.WORKLOAD) and Kind.FLAVOR not in unwatched
    assert changes == [(Kind.FLAVOR, True), (Kind.FLAVOR, False)]


def test_an_unwatched_kueue_job_is_looked_at_soon_unless_kueue_is_missing() -> None:
    waiting = Decision(Phase.PENDING, "", [], blocker=Blocker("WaitingForQuota", "", warn=False))
    missing = Decision(Phase.PENDING, "", [], blocker=Blocker(quota.NOT_INSTALLED, ""))
    assert quota.unwatched_look(waiting, False, 5.0) == 5.0
    assert quota.unwatched_look(waiting, True, 5.0) is None
    assert quota.unwatched_look(missing, False, 5.0) is None


class KueueJob:
    """A Kueue job on the fake API whose Workload index kopf never fills."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.api = FakeApi(monkeypatch)
        self.body = job("j", scheduling={"queue": "q"}, precompile={"policy": "Never"})
        self.body["metadata"].update(
            uid="uid-kueue-j", resourceVersion="1", generation=1,
            labels={"kueue.x-k8s.io/queue-name": "team-a"},
        )  # fmt: skip
        self.api.objects[(Kind.TRAINIUMJOB, "j")] = self.body
        self.workload_creates = itertools.count()
        monkeypatch.setattr(kueueio, "create_workload", self._create_workload)
        monkeypatch.setattr(kueueio, "get_workload", self._get(Kind.WORKLOAD))
        monkeypatch.setattr(kueueio, "get_local_queue", lambda ns, name: obj(name, "1"))
        self.idx = indices(
            claim=[obj("fsx-claim", "2", status={"phase": "Bound"})],
            queue=[{"metadata": {"name": "q", "resourceVersion": "3"}, "status": {}}],
        )
        self.overlay, self.unwatched = Overlay(), Unwatched()

    def _create_workload(self, body: Json) -> Json | None:
        next(self.workload_creates)
        return self.api._creator(Kind.WORKLOAD)(body)  # type: ignore[no-any-return]

    def _get(self, kind: Kind) -> Any:
        def get(namespace: str, name: str) -> Json | None:
            found = self.api.objects.get((kind, name))
            return copy.deepcopy(found) if found is not None else None

        return get

    def one_pass(self) -> tuple[str | None, float | None]:
        """A pass with the watches delivering everything but Workloads (never watched)."""
        for (kind, name), body in self.api.objects.items():
            if kind is not Kind.WORKLOAD:
                self.idx[kind][(NS, name)] = [slim(kind, copy.deepcopy(body))]
        reader = WatchReader(self.idx, self.overlay, unwatched=self.unwatched)
        outcome = reconcile(NS, "j", lambda *_: None, Views(reader=reader))
        return outcome.phase, outcome.deadline_in

    def kueue_admits(self) -> None:
        wl = self.api.objects[(Kind.WORKLOAD, JOB_WL)]
        wl["status"] = {
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                {"type": "Admitted", "status": "True", "reason": "Admitted"},
            ]
        }
        self.api.store(Kind.WORKLOAD, wl)


def test_a_job_admitted_while_workloads_are_unwatched_starts_on_the_next_timed_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before the fix the job stayed WaitingForQuota, and each pass's create answered 409."""
    j = KueueJob(monkeypatch)
    assert j.one_pass() == ("Pending", UNWATCHED_LOOK)  # created its Workload; look again soon
    assert next(j.workload_creates) == 1
    assert j.one_pass() == ("Pending", UNWATCHED_LOOK)  # Kueue has not admitted it: wait
    j.kueue_admits()  # no watch event: the timed look finds it
    _phase, look = j.one_pass()
    assert "vcjobs/j-train" in j.api.creates
    assert next(j.workload_creates) == 2, "the Workload was created again (409 AlreadyExists)"
    assert look == UNWATCHED_LOOK  # a running job's Workload may be evicted: keep looking
