"""A child is ours only if its controller reference names our uid (client-go's IsControlledBy).

An old job deleted and re-applied under the same name while the garbage collector lags leaves
its Volcano jobs under the names the new job's children take: they are never read as the new
job's (a finished one made the new job `Succeeded` without training), never adopted, never
deleted by it. Every delete and metadata patch by name carries a precondition (uid or
resourceVersion), so a pass of one object never writes onto another of the same name.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from test_reads import NS, Job

from trainium_operator.api import naming, parsed
from trainium_operator.cluster import gangs, k8s
from trainium_operator.cluster.gangs import ANNOTATION_TRAIN_GANG
from trainium_operator.cluster.reads import Kind, slim
from trainium_operator.manifests.ownership import controlled_by

Json = dict[str, Any]
FIRST = naming.vcjob_name("j", "train")
PRE = naming.vcjob_name("j", "precompile")


def reference(uid: str) -> Json:
    kind = {"apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob", "name": "j"}
    return {**kind, "uid": uid, "controller": True, "blockOwnerDeletion": True}


def old_gang(name: str, phase: str, *, owner_uid: str | None = "uid-old") -> Json:
    """A Volcano job left by an earlier TrainiumJob "j" (None: orphaned, no owner left)."""
    meta: Json = {"name": name, "namespace": NS, "uid": f"uid-{name}-old"}
    if owner_uid is not None:
        meta["ownerReferences"] = [reference(owner_uid)]
    labels = {"trainium.dev/job-name": "j", "trainium.dev/stage": "train"}
    return {"metadata": {**meta, "labels": labels}, "status": {"state": {"phase": phase}}}


def reapplied(monkeypatch: pytest.MonkeyPatch, *left: Json, age: float = 0.0, **spec: Any) -> Job:
    """A new object "j" (uid-j), created `age` seconds ago, beside what an old one left."""
    monkeypatch.setattr(parsed, "_specs", {})  # (uid, generation) names one spec: not here
    monkeypatch.setattr(parsed, "_digests", {})
    j = Job(monkeypatch)
    created = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=age)
    j.body["metadata"]["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    j.body["spec"].update(spec)
    j.api.objects[(Kind.TRAINIUMJOB, "j")] = j.body
    for body in left:
        j.api.store(Kind.VCJOB, copy.deepcopy(body))
    j.api.deliver(j.idx)
    j.annotated: list[tuple[Json, str]] = []  # type: ignore[attr-defined]

    def annotate(ns: str, name: str, notes: Json, *, resource_version: str) -> Json:
        body = copy.deepcopy(j.api.objects[(Kind.TRAINIUMJOB, name)])
        if resource_version != body["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        j.annotated.append((notes, resource_version))  # type: ignore[attr-defined]
        body["metadata"].setdefault("annotations", {}).update(notes)
        return j.api.store(Kind.TRAINIUMJOB, body)

    monkeypatch.setattr(k8s, "annotate_trainiumjob", annotate)
    monkeypatch.setattr(k8s, "list_pods", lambda ns, selector: [])
    return j


def conditions(j: Job) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["reason"], c["message"]) for c in j.status().get("conditions") or []}


def gone(j: Job, name: str) -> None:
    """The garbage collector deletes an old job's child."""
    j.api.objects.pop((Kind.VCJOB, name))
    j.api.deleted.append((Kind.VCJOB, name))
    j.api.deliver(j.idx)


def test_controlled_by_is_the_controller_reference_uid_and_nothing_else() -> None:
    assert controlled_by({"ownerReferences": [reference("a")]}, "a")
    assert not controlled_by({"ownerReferences": [reference("a")]}, "b")
    assert not controlled_by({"ownerReferences": [{**reference("a"), "controller": False}]}, "a")
    assert not controlled_by({"name": "j-train"}, "a")  # an orphan is nobody's
    assert not controlled_by({"ownerReferences": [reference("a")]}, "")


def test_the_slim_index_keeps_whose_child_a_volcano_job_is() -> None:
    kept = slim(Kind.VCJOB, old_gang(FIRST, "Completed"))
    assert kept["metadata"]["ownerReferences"] == [reference("uid-old")]


def test_an_old_jobs_finished_gangs_never_make_a_new_job_succeed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The garbage collector lags: the old object's Completed gangs still hold both names."""
    j = reapplied(monkeypatch, old_gang(PRE, "Completed"), old_gang(FIRST, "Completed"))
    for _ in range(3):
        assert j.one_pass() == "Pending"
        j.api.deliver(j.idx)
    reason, message = conditions(j)["Precompiled"]
    assert reason == "NameTaken" and PRE in message and "uid-old" in message, message
    assert conditions(j)["Succeeded"][0] == "InProgress" and "TrainingCompleted" not in j.events
    assert j.api.creates == [] and j.api.deleted == []  # not adopted, not deleted
    gone(j, PRE)  # the collector catches up: the new job compiles under its own name
    assert j.one_pass() == "Precompiling"
    assert f"vcjobs/{PRE}" in j.api.creates
    made = j.api.objects[(Kind.VCJOB, PRE)]
    assert controlled_by(made["metadata"], "uid-j")


def test_an_old_jobs_running_gang_is_never_shown_as_the_new_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The new job renames its gang at once (Volcano loses a job created under the name of one
    it still cleans up: volcano-sh/volcano#3968) and waits for the old gang's pods to go."""
    old = old_gang(FIRST, "Running")
    j = reapplied(monkeypatch, old, precompile={"policy": "Never"})
    fresh = naming.successor("j", old["metadata"]["uid"])
    assert j.one_pass() == "Pending"
    assert j.annotated == [({ANNOTATION_TRAIN_GANG: fresh}, "1")]  # type: ignore[attr-defined]
    reason, message = conditions(j)["Running"]
    assert reason == "NameTaken" and FIRST in message and "uid-old" in message, message
    assert j.api.creates == [] and "trainingJob" not in j.status()
    j.api.deliver(j.idx)
    assert j.one_pass() == "Pending" and j.api.creates == []  # still there: still waiting
    gone(j, FIRST)
    j.one_pass()
    assert j.api.creates == [f"vcjobs/{fresh}"]
    assert controlled_by(j.api.objects[(Kind.VCJOB, fresh)]["metadata"], "uid-j")
    j.api.deliver(j.idx)
    assert j.one_pass() == "Training"
    assert j.status()["trainingJob"] == fresh


def test_an_orphaned_gang_gives_the_new_job_a_fresh_name_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kubectl delete --cascade=orphan`: nothing will ever delete it; no wait."""
    orphan = old_gang(FIRST, "Completed", owner_uid=None)
    j = reapplied(monkeypatch, orphan, precompile={"policy": "Never"})
    j.one_pass()
    fresh = naming.successor("j", orphan["metadata"]["uid"])
    assert j.annotated == [({ANNOTATION_TRAIN_GANG: fresh}, "1")]  # type: ignore[attr-defined]
    assert "GangRenamed" in j.events
    assert j.api.creates == [f"vcjobs/{fresh}"] and (Kind.VCJOB, FIRST) in j.api.objects
    j.api.deliver(j.idx)
    assert j.one_pass() == "Training"
    assert j.status()["trainingJob"] == fresh


@pytest.mark.parametrize(("age", "starts"), [(10.0, False), (gangs.NAME_WAIT_SECONDS + 5, True)])
def test_an_old_gang_that_stays_is_waited_for_a_bounded_time(
    monkeypatch: pytest.MonkeyPatch, age: float, starts: bool
) -> None:
    j = reapplied(monkeypatch, old_gang(FIRST, "Running"), age=age, precompile={"policy": "Never"})
    j.one_pass()
    assert len(j.annotated) == 1  # type: ignore[attr-defined]
    assert bool(j.api.creates) is starts


def test_a_stale_pass_names_no_successor_on_a_newer_version_of_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The annotation patch carries the resourceVersion read: a 409, not a blind write."""
    orphan = old_gang(FIRST, "Completed", owner_uid=None)
    j = reapplied(monkeypatch, orphan, precompile={"policy": "Never"})
    j.api.store(Kind.TRAINIUMJOB, copy.deepcopy(j.api.objects[(Kind.TRAINIUMJOB, "j")]))
    with pytest.raises(ApiException) as raised:
        j.one_pass()  # the index still shows the version before
    assert k8s.conflict(raised.value) and j.annotated == []  # type: ignore[attr-defined]


def test_a_status_write_from_a_stale_read_is_refused_and_decided_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The status patch carries the resourceVersion read: the user's suspend is not overwritten."""
    j = reapplied(monkeypatch, precompile={"policy": "Never"})
    newer = copy.deepcopy(j.api.objects[(Kind.TRAINIUMJOB, "j")])
    newer["spec"]["runPolicy"] = {"suspend": True}
    newer["metadata"]["generation"] = 2
    j.api.store(Kind.TRAINIUMJOB, newer)  # written after the index's version
    monkeypatch.setattr(k8s, "create_vcjob", lambda body: pytest.fail("acted on a stale read"))
    j.idx[Kind.QUEUE] = {}  # the old read waits on a missing queue: it writes status
    with pytest.raises(ApiException) as raised:
        j.one_pass()
    assert k8s.conflict(raised.value)
    assert "status" not in j.api.objects[(Kind.TRAINIUMJOB, "j")]
    j.api.deliver(j.idx)
    assert j.one_pass() == "Suspended"  # the fresh read decides on what the user wrote


def test_deletes_of_volcano_jobs_carry_the_uid_precondition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[Any] = []

    class Api:
        def delete_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> None:
            sent.append(kwargs["body"])

    monkeypatch.setattr(k8s, "custom", Api)
    k8s.delete_vcjob(NS, FIRST, "uid-gang", foreground=True)
    assert isinstance(sent[0], client.V1DeleteOptions)
    assert sent[0].preconditions.uid == "uid-gang"
    assert sent[0].propagation_policy == "Foreground"


def test_a_delete_refused_by_its_precondition_is_not_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Api:
        def delete_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> None:
            raise ApiException(status=409, reason="Conflict")

    monkeypatch.setattr(k8s, "custom", Api)
    k8s.delete_vcjob(NS, FIRST, "uid-gone")  # another object has the name now: not ours


def test_stopping_a_gang_deletes_the_instance_that_was_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    j = reapplied(monkeypatch, precompile={"policy": "Never"})
    deletes: list[tuple[str, str]] = []
    monkeypatch.setattr(
        k8s, "delete_vcjob", lambda ns, name, uid, foreground=False: deletes.append((name, uid))
    )
    j.one_pass()
    j.api.objects[(Kind.VCJOB, FIRST)]["metadata"]["uid"] = "uid-ours"
    j.api.objects[(Kind.VCJOB, FIRST)]["status"] = {"state": {"phase": "Running"}}
    j.api.deliver(j.idx)
    body = j.api.objects[(Kind.TRAINIUMJOB, "j")]
    body["spec"]["runPolicy"] = {"suspend": True}
    body["metadata"]["generation"] = 2
    j.api.store(Kind.TRAINIUMJOB, body)
    j.api.deliver(j.idx)
    assert j.one_pass() == "Suspended"
    assert deletes == [(FIRST, "uid-ours")]
