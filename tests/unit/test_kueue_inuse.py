"""Issue 41 (4, 7): Kueue's resource-in-use finalizer on our Workloads, and a job that lost its
queue-name label after it had a Workload (it stays in that LocalQueue)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_kueue_writes import FRESH, NAME, NS, STALE, Workloads, refused
from test_runtime_passes import step

from trainium_operator.api import parsed
from trainium_operator.cluster import inuse, k8s, kueueio, workloads, workloadwrites
from trainium_operator.cluster.reads import Kind
from trainium_operator.cluster.reconcile import Outcome
from trainium_operator.manifests import workload
from trainium_operator.manifests.ownership import ANNOTATION_OWNER_UID, Owner
from trainium_operator.runtime import kueuewatch
from trainium_operator.runtime.passes import WORKLOAD_KEY, Passes

Json = dict[str, Any]
JOB_UID = "uid-job"


class Index:
    """A reader over a dict of Workloads by name, watched (or not), counting its reads."""

    def __init__(self, found: dict[str, Json], watched: bool = True) -> None:
        self.found, self.is_watched, self.reads = found, watched, 0
        self.released: list[str] = []

    def get(self, kind: Kind, namespace: str, name: str) -> Json | None:
        self.reads += 1
        return self.found.get(name)

    def wrote(self, *_: Any) -> None:
        pass

    def deleted(self, kind: Kind, namespace: str, name: str) -> None:
        self.released.append(name)

    def watched(self, kind: Kind) -> bool:
        return self.is_watched


def job_body(**status: Any) -> Json:
    body: Json = {
        "apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob",
        "metadata": {"name": "bert", "namespace": NS, "uid": JOB_UID, "labels": {}},
        "spec": {"image": "i", "instanceType": "trn1.32xlarge", "nodes": 1,
                 "storage": {"claimName": "c"}, "precompile": {"policy": "Never"}},
        "status": status,
    }  # fmt: skip
    return body


def ours(name: str, queue: str = "team-a") -> Json:
    owner = Owner("bert", NS, JOB_UID)
    return {"metadata": {"name": name, "namespace": NS, "uid": "w",
                         "ownerReferences": [owner.reference()]},
            "spec": {"queueName": queue}}  # fmt: skip


def test_a_workload_is_made_with_kueues_finalizer() -> None:
    body = job_body()
    spec, owner = parsed.spec(body), Owner("bert", NS, JOB_UID)
    vcjob = {"spec": {"tasks": [{"replicas": 1, "template": {"spec": {"containers": []}}}]}}
    made = workload.build_workload(spec, owner, "train", workload.Kueue("q"), vcjob)
    assert made["metadata"]["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]


def test_the_finalizer_is_dropped_only_over_what_was_read(api: Workloads) -> None:
    refused(lambda: kueueio.drop_finalizer(STALE, workload.RESOURCE_IN_USE))
    kueueio.drop_finalizer(FRESH, workload.RESOURCE_IN_USE)  # the version read: accepted


def test_a_job_that_lost_the_label_stays_in_its_workloads_queue() -> None:
    body = job_body(phase="Pending")
    spec, owner = parsed.spec(body), Owner("bert", NS, JOB_UID)
    name = workload.workload_name(owner, spec, "train")
    kept = workloads.kept(spec, owner, body, Index({name: ours(name)}))
    assert kept == workload.Kueue("team-a", kept=True)
    assert workloads.kept(spec, owner, body, Index({})) is None  # no Workload: not Kueue's
    other = ours(name)
    other["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    assert workloads.kept(spec, owner, body, Index({name: other})) is None


def test_a_plain_job_costs_no_request_while_workloads_are_not_watched() -> None:
    """Kueue not installed (or its watch not listed yet): a job that started is not looked
    up with GETs; one that waited for quota (a phase, no startTime) is."""
    spec, owner = parsed.spec(job_body()), Owner("bert", NS, JOB_UID)
    for status, reads in (({}, 0), ({"phase": "Training", "startTime": "t"}, 0),
                          ({"phase": "Pending"}, 1)):  # fmt: skip
        index = Index({}, watched=False)
        workloads.kept(spec, owner, job_body(**status), index)
        assert (index.reads > 0) == bool(reads), status


def test_the_kept_job_says_why_it_still_waits() -> None:
    kueue = workload.Kueue("team-a", kept=True)
    pending = workloads.Workload("wl", workloads.Admission.PENDING, "Pending", "no quota")
    blocker = workloads._kept_blocker(kueue, {"train": pending})
    assert blocker is not None and blocker.reason == "QueueNameRemoved"
    assert "LocalQueue 'team-a'" in blocker.message and "no quota" in blocker.message
    admitted = workloads.Workload("wl", workloads.Admission.ADMITTED)
    assert workloads._kept_blocker(kueue, {"train": admitted}) is None


def deleted_workload(finished: bool = False) -> Json:
    body = copy.deepcopy(FRESH)
    md = body["metadata"]
    md["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    md["finalizers"] = [workload.RESOURCE_IN_USE]
    md["annotations"] = {ANNOTATION_OWNER_UID: JOB_UID}
    md["labels"] = {"trainium.dev/job-name": "bert", "trainium.dev/stage": "train"}
    if finished:
        body["status"]["conditions"].append({"type": "Finished", "status": "True"})
    return body


@pytest.mark.parametrize("left", ["vcjob", "pod", "another job's pod", ""])
def test_a_deleted_workload_keeps_its_finalizer_while_its_gang_lives(
    monkeypatch: pytest.MonkeyPatch, left: str
) -> None:
    """Kueue counts a deleted Workload's quota until the finalizer goes: it goes only once no
    Volcano job or pod of the job's stage is left (terminating ones count)."""
    dropped: list[Json] = []
    mine = {"metadata": {"annotations": {ANNOTATION_OWNER_UID: JOB_UID}}}
    theirs = {"metadata": {"annotations": {ANNOTATION_OWNER_UID: "other"}}}
    monkeypatch.setattr(kueueio, "get_workload", lambda ns, name: deleted_workload())
    monkeypatch.setattr(kueueio, "drop_finalizer", lambda b, f: dropped.append(b) or b)
    monkeypatch.setattr(k8s, "list_vcjobs", lambda ns, sel: [mine] if left == "vcjob" else [])
    pods = {"pod": [mine], "another job's pod": [theirs]}.get(left, [])
    monkeypatch.setattr(k8s, "list_pods", lambda ns, sel: pods)
    done = inuse.sweep(NS, NAME)
    assert done is (left in ("", "another job's pod"))
    assert len(dropped) == int(done)


def test_a_finished_or_live_workload_is_left_to_its_jobs_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dropped: list[Json] = []
    monkeypatch.setattr(kueueio, "drop_finalizer", lambda b, f: dropped.append(b) or b)
    monkeypatch.setattr(k8s, "list_vcjobs", lambda ns, sel: [{"metadata": {}}])
    live = deleted_workload()
    del live["metadata"]["deletionTimestamp"]
    monkeypatch.setattr(kueueio, "get_workload", lambda ns, name: live)
    assert inuse.sweep(NS, NAME) and dropped == []
    monkeypatch.setattr(kueueio, "get_workload", lambda ns, name: deleted_workload(True))
    assert inuse.sweep(NS, NAME) and len(dropped) == 1  # Finished: its quota is released


def test_our_own_delete_drops_the_finalizer_first(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(kueueio, "drop_finalizer", lambda b, f: calls.append("drop") or b)
    monkeypatch.setattr(kueueio, "delete_workload", lambda ns, n, uid: calls.append("delete"))
    body = deleted_workload()
    del body["metadata"]["deletionTimestamp"]
    workloadwrites._delete(body, Index({}))
    assert calls == ["drop", "delete"]


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Workloads:
    fake = Workloads(FRESH)
    monkeypatch.setattr(k8s, "custom", lambda: fake)
    monkeypatch.setattr(k8s, "sleep", lambda _s: None)
    return fake


def test_a_deleted_workloads_event_queues_a_sweep_retried_while_its_gang_runs() -> None:
    """The Workload watch (also its first list: a job deleted while the operator was down)
    queues the sweep of a deleted Workload of ours; one whose gang runs is looked at again."""
    answers = [False, True]
    looked: list[tuple[str, str]] = []

    def release(namespace: str, name: str) -> bool:
        looked.append((namespace, name))
        return answers.pop(0)

    passes = Passes(lambda *_: Outcome(None), lambda *_: None, workers=0,
                    clock=lambda: 1000.0, release=release)  # fmt: skip
    kueuewatch.on_event(passes, Kind.WORKLOAD)("ADDED", deleted_workload())
    live = deleted_workload()
    del live["metadata"]["deletionTimestamp"]
    kueuewatch.on_event(passes, Kind.WORKLOAD)("MODIFIED", live)  # no sweep for a live one
    while step(passes):  # the owner's wake (a job not known: nothing), then the sweep
        pass
    assert looked == [(NS, NAME)]
    key = f"{WORKLOAD_KEY}{NS}/{NAME}"
    assert passes.queue.pending_after(key) is not None  # its gang runs: again in a moment
