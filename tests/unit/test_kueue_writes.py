"""Issue 41 (9): every Workload write is guarded by what was read (resourceVersion or uid).

Kueue writes the same Workloads: a write made from a stale read must be refused (409) and
decided again after a fresh read, never land over Kueue's newer state. The fake API below
enforces the preconditions the way the API server does, so a write that loses its guard
(a mutant dropping it) lands here and its test fails.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from test_k8s_retries import api_error

from trainium_operator.cluster import k8s, kueueio, workloadwrites
from trainium_operator.manifests import workload

Json = dict[str, Any]
NS, NAME = "team-a", "trainiumjob-bert-0c4a1-train"


class Workloads:
    """One namespace's Workloads, with the API server's optimistic concurrency: a body's
    metadata.resourceVersion (or uid) that is not the stored one is a 409 Conflict, as is a
    delete whose preconditions do not match."""

    def __init__(self, body: Json) -> None:
        self.stored = copy.deepcopy(body)
        self.deleted = False

    def _guard(self, meta: Json) -> None:
        now = self.stored["metadata"]
        for key in ("resourceVersion", "uid"):
            if meta.get(key) is not None and meta[key] != now[key]:
                raise api_error(409, "Conflict")

    def _write(self, name: str, body: Json) -> Json:
        assert name == self.stored["metadata"]["name"] and not self.deleted
        self._guard(body.get("metadata") or {})
        for part in ("spec", "status"):
            if part in body:
                self.stored.setdefault(part, {}).update(copy.deepcopy(body[part]))
        meta = self.stored["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        return copy.deepcopy(self.stored)

    def patch_namespaced_custom_object(self, g: str, v: str, ns: str, p: str, name: str,
                                       body: Json, **_: Any) -> Json:  # fmt: skip
        return self._write(name, body)

    def patch_namespaced_custom_object_status(self, g: str, v: str, ns: str, p: str, name: str,
                                              body: Json, **_: Any) -> Json:  # fmt: skip
        return self._write(name, body)

    def delete_namespaced_custom_object(
        self, g: str, v: str, ns: str, p: str, name: str, body: client.V1DeleteOptions, **_: Any
    ) -> Json:
        pre = body.preconditions
        self._guard({"uid": pre.uid, "resourceVersion": pre.resource_version} if pre else {})
        self.deleted = True
        return {}


def stored(rv: str = "7", uid: str = "uid-now") -> Json:
    return {
        "apiVersion": workload.API_VERSION,
        "kind": "Workload",
        "metadata": {"name": NAME, "namespace": NS, "uid": uid, "resourceVersion": rv,
                     "generation": 1},
        "spec": {"active": True, "queueName": "q"},
        "status": {"conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"},
            {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "m"},
        ], "admission": {"clusterQueue": "cq"}},
    }  # fmt: skip


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Workloads:
    fake = Workloads(stored())
    monkeypatch.setattr(k8s, "custom", lambda: fake)
    monkeypatch.setattr(k8s, "sleep", lambda _s: None)
    return fake


STALE = stored(rv="6")  # read before Kueue's last write
FRESH = stored(rv="7")
FINISHED = {"type": "Finished", "status": "True", "reason": "Failed", "message": "m"}


def refused(write: Any) -> None:
    with pytest.raises(ApiException) as caught:
        write()
    assert caught.value.status == 409


def test_finished_is_written_only_over_what_was_read(api: Workloads) -> None:
    refused(lambda: kueueio.finish_workload(STALE, FINISHED))
    assert "Finished" not in str(api.stored["status"])
    kueueio.finish_workload(FRESH, FINISHED)
    assert FINISHED in api.stored["status"]["conditions"]


@pytest.mark.parametrize("active", [False, True])
def test_spec_active_is_written_only_over_what_was_read(api: Workloads, active: bool) -> None:
    api.stored["spec"]["active"] = not active
    refused(lambda: kueueio.set_active(STALE, active))
    assert api.stored["spec"]["active"] is not active
    kueueio.set_active(FRESH, active)
    assert api.stored["spec"]["active"] is active


def test_a_stale_workload_is_deleted_only_if_it_is_still_the_one_read(api: Workloads) -> None:
    kueueio.delete_workload(NS, NAME, "uid-before")  # another object holds the name now: fine
    assert not api.deleted
    kueueio.delete_workload(NS, NAME, "uid-now")
    assert api.deleted


def test_the_requeue_and_pods_ready_applies_are_guarded(api: Workloads) -> None:
    now = "2026-11-29T00:00:00Z"
    for body in (workload.requeued(STALE, now), workload.pods_ready(STALE, ("True", "Started"),
                                                                     "m", now)):  # fmt: skip
        assert body is not None
        refused(lambda body=body: kueueio.apply_workload_status(body, "m"))
    assert "Requeued" not in str(api.stored["status"])
    body = workload.requeued(FRESH, now)
    assert body is not None
    kueueio.apply_workload_status(body, workload.ADMISSION_MANAGER)
    assert "Requeued" in str(api.stored["status"])


# --- no requeue while a gang of the job may still run ---------------------------------------


class NoIndex:
    """A new leader's reader whose Volcano job index has not listed the gang yet."""

    def get(self, kind: Any, namespace: str, name: str) -> None:
        return None

    def wrote(self, *_: Any) -> None:
        pass

    def deleted(self, *_: Any) -> None:
        pass

    def watched(self, kind: Any) -> bool:
        return True


def test_no_requeue_while_a_gang_of_the_job_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a takeover the Volcano job index may lag: the pass sees no gang (Child.ABSENT)
    while it runs. Requeued then, Kueue could admit the Workload again (elsewhere) with the old
    gang still holding its nodes: the requeue asks the API server first."""
    from support import job

    from trainium_operator.api import parsed
    from trainium_operator.cluster import workloads
    from trainium_operator.domain.lifecycle import Action, Observed
    from trainium_operator.manifests.ownership import Owner

    owner = Owner("bert", NS, "uid-job")
    body = job()
    body["metadata"] = {"name": "bert", "namespace": NS, "uid": "uid-job"}
    spec = parsed.spec(body)
    evicted = stored()
    evicted["metadata"]["ownerReferences"] = [owner.reference()]
    applied: list[Json] = []
    gang = {"metadata": {"name": "bert-train", "namespace": NS, "uid": "uid-gang",
                         "labels": {"trainium.dev/stage": "train"},
                         "ownerReferences": [owner.reference()]},
            "status": {"state": {"phase": "Running"}}}  # fmt: skip
    live: list[Json] = [gang]
    monkeypatch.setattr(kueueio, "get_workload", lambda ns, name: copy.deepcopy(evicted))
    monkeypatch.setattr(kueueio, "apply_workload_status", lambda b, m: applied.append(b) or b)
    monkeypatch.setattr(k8s, "list_vcjobs", lambda ns, selector: list(live))
    held = workloads.Held(workload.Kueue("q"))
    act = Action.REQUEUE_TRAINING_WORKLOAD
    workloadwrites.act(act, workloadwrites.Acting(spec, owner, held, Observed()), NoIndex())
    assert applied == []  # the gang runs: no requeue
    live.clear()
    workloadwrites.act(act, workloadwrites.Acting(spec, owner, held, Observed()), NoIndex())
    assert len(applied) == 1  # gone for the API server too: requeued
