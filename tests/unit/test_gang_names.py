"""A replaced training gang never gives its name to its successor, even across a crash.

Volcano 1.16 loses a job created under the name of one it still cleans up (volcano-sh/volcano
#3968): the replacement exists but its pods never come. These passes run over the fake API of
test_reads.py, with the operator restarted (a fresh overlay) between the delete and the create.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_reads import NS, Job

from trainium_operator.api import naming
from trainium_operator.cluster import gangs, judge, k8s, reconcile
from trainium_operator.cluster.gangs import ANNOTATION_REPLACED_GANG, ANNOTATION_TRAIN_GANG
from trainium_operator.cluster.reads import Kind, Overlay
from trainium_operator.domain import elastic, failures

Json = dict[str, Any]
FIRST = naming.vcjob_name("j", "train")


class Crash(Exception):
    """The operator process dies here."""


def training(monkeypatch: pytest.MonkeyPatch) -> Job:
    """A job whose first training gang runs, every watch caught up."""
    j = Job(monkeypatch)
    monkeypatch.setattr(k8s, "annotate_trainiumjob", lambda _ns, _n, notes, **_: annotate(j, notes))
    monkeypatch.setattr(k8s, "delete_vcjob", lambda ns, name, *_, **__: going(j, name))
    monkeypatch.setattr(k8s, "list_pods", lambda ns, selector: [])
    j.one_pass()
    assert j.one_pass() == "Precompiling"  # the precompile job's echo
    pre = naming.vcjob_name("j", "precompile")
    j.api.objects[(Kind.VCJOB, pre)]["status"] = {"state": {"phase": "Completed"}}
    j.api.deliver(j.idx)
    assert j.one_pass() == "Training" and j.api.creates[-1] == f"vcjobs/{FIRST}"
    running(j, FIRST)
    return j


def annotate(j: Job, notes: Json) -> Json:
    body = copy.deepcopy(j.api.objects[(Kind.TRAINIUMJOB, "j")])
    body["metadata"].setdefault("annotations", {}).update(notes)
    return j.api.store(Kind.TRAINIUMJOB, body)


def going(j: Job, name: str) -> None:
    """A foreground delete: the job stays, with a deletionTimestamp, until its pods are gone."""
    body = j.api.objects.get((Kind.VCJOB, name))
    if body is not None:
        body["metadata"]["deletionTimestamp"] = "2026-11-27T05:00:00Z"
        j.api.store(Kind.VCJOB, body)


def gone(j: Job, name: str) -> None:
    j.api.objects.pop((Kind.VCJOB, name), None)
    j.api.deleted.append((Kind.VCJOB, name))
    j.api.deliver(j.idx)


def running(j: Job, name: str) -> None:
    j.api.objects[(Kind.VCJOB, name)]["metadata"]["uid"] = f"uid-{name}"
    j.api.objects[(Kind.VCJOB, name)]["status"] = {"state": {"phase": "Running"}}
    j.api.deliver(j.idx)
    assert j.one_pass() == "Training"


def hang_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next pass finds the gang hung: it is replaced (as for a Neuron runtime error)."""
    real = judge.supervise.gang_to_replace
    told = []

    def once(*args: Any) -> Any:
        excluded, redo = real(*args)
        if told:
            return excluded, redo
        told.append(1)
        return excluded, failures.make_failure("Hung", "no step for 60 s")

    monkeypatch.setattr(judge.supervise, "gang_to_replace", once)


def restart(j: Job) -> None:
    """A new operator process: nothing remembered, the watches list what is there."""
    j.overlay = Overlay()
    j.api.deliver(j.idx)


def train_gangs(j: Job) -> list[str]:
    return [name for (kind, name) in j.api.objects if kind is Kind.VCJOB and "-train" in name]


def test_a_replacement_gang_gets_a_new_name_from_its_predecessors_uid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    j = training(monkeypatch)
    hang_once(monkeypatch)
    j.one_pass()  # names the successor on the job, then deletes the hung gang
    successor = naming.successor("j", f"uid-{FIRST}")
    notes = j.api.objects[(Kind.TRAINIUMJOB, "j")]["metadata"]["annotations"]
    assert notes[ANNOTATION_TRAIN_GANG] == successor and notes[ANNOTATION_REPLACED_GANG] == FIRST
    j.api.deliver(j.idx)
    j.one_pass()  # the old gang still stops: nothing is created
    assert j.api.creates.count(f"vcjobs/{FIRST}") == 1 and successor not in train_gangs(j)
    gone(j, FIRST)
    j.one_pass()
    assert j.api.creates[-1] == f"vcjobs/{successor}" and successor != FIRST
    assert j.api.creates.count(f"vcjobs/{FIRST}") == 1, "the old name was used again"
    running(j, successor)
    assert j.status()["trainingJob"] == successor
    hang_once(monkeypatch)
    j.one_pass()  # the successor hangs too: its own successor has yet another name
    third = naming.successor("j", f"uid-{successor}")
    gone(j, successor)
    j.one_pass()
    assert j.api.creates[-1] == f"vcjobs/{third}" and third not in (FIRST, successor)


def test_a_crash_between_the_delete_and_the_create_neither_reuses_the_name_nor_makes_two(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    j = training(monkeypatch)
    hang_once(monkeypatch)
    j.one_pass()  # the successor named, the old gang deleted; the operator dies now
    gone(j, FIRST)  # the old gang is gone before the new operator starts
    restart(j)
    j.one_pass()
    j.one_pass()  # a second pass before any watch shows the create
    successor = naming.successor("j", f"uid-{FIRST}")
    assert train_gangs(j) == [successor]
    assert j.api.creates.count(f"vcjobs/{successor}") == 1
    assert j.api.creates.count(f"vcjobs/{FIRST}") == 1


def test_a_crash_before_the_delete_deletes_the_old_gang_before_its_successor_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    j = training(monkeypatch)
    hang_once(monkeypatch)

    def dies(ns: str, name: str, uid: str = "", foreground: bool = False) -> None:
        raise Crash

    monkeypatch.setattr(k8s, "delete_vcjob", dies)
    with pytest.raises(Crash):
        j.one_pass()  # the successor named on the job; the operator dies before the delete
    monkeypatch.setattr(k8s, "delete_vcjob", lambda ns, name, *_, **__: going(j, name))
    restart(j)
    j.one_pass()  # the old gang is live and not current: deleted, its successor waits
    assert j.api.objects[(Kind.VCJOB, FIRST)]["metadata"].get("deletionTimestamp")
    assert train_gangs(j) == [FIRST]
    gone(j, FIRST)
    j.one_pass()
    assert train_gangs(j) == [naming.successor("j", f"uid-{FIRST}")]
    assert j.api.objects[(Kind.TRAINIUMJOB, "j")]["metadata"]["namespace"] == NS


# ---- a resize's size goes with its successor's name (issue 34, 5a) -----------------------------

ELASTIC = {"minNodes": 2, "globalBatchSize": 192, "batchSizePerProcess": 1,
           "shrinkAfterSeconds": 60}  # fmt: skip


def elastic_training(monkeypatch: pytest.MonkeyPatch, clock: list[str]) -> Job:
    """A 3-node elastic job (minNodes 2) whose first gang trains; 2 nodes are schedulable."""
    monkeypatch.setattr(reconcile, "now_iso", lambda: clock[0])
    j = Job(monkeypatch)
    j.body["spec"].update(nodes=3, elastic=ELASTIC, precompile={"policy": "Never"})
    j.body["metadata"]["generation"] = 2  # parsed specs are kept by (uid, generation)
    j.api.deliver(j.idx)
    monkeypatch.setattr(k8s, "annotate_trainiumjob", lambda _ns, _n, notes, **_: annotate(j, notes))
    monkeypatch.setattr(k8s, "delete_vcjob", lambda ns, name, *_, **__: going(j, name))
    monkeypatch.setattr(k8s, "list_pods", lambda ns, selector: [])
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    itype = {"node.kubernetes.io/instance-type": "trn1.32xlarge"}
    nodes = [{"metadata": {"name": f"n{i}", "labels": itype}, "spec": {}, "status": ready}
             for i in range(2)]  # fmt: skip
    monkeypatch.setattr(k8s, "list_nodes", lambda selector: nodes)
    j.one_pass()  # precompile.policy Never: the gang first
    assert j.api.creates == [f"vcjobs/{FIRST}"]
    running(j, FIRST)
    return j


def replicas(j: Job, name: str) -> int:
    return sum(t["replicas"] for t in j.api.objects[(Kind.VCJOB, name)]["spec"]["tasks"])


def test_a_crash_between_naming_a_shrinks_successor_and_the_delete_builds_it_at_the_new_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = ["2026-11-27T10:00:00Z"]
    j = elastic_training(monkeypatch, clock)
    assert replicas(j, FIRST) == 3
    j.api.objects[(Kind.VCJOB, FIRST)]["status"] = {"state": {"phase": "Pending"}}  # a node lost
    j.api.deliver(j.idx)
    j.one_pass()  # the gang has not formed since now
    clock[0] = "2026-11-27T10:01:01Z"  # shrinkAfterSeconds later: a shrink to 2 is due

    def dies(ns: str, name: str, uid: str = "", foreground: bool = False) -> None:
        raise Crash

    monkeypatch.setattr(k8s, "delete_vcjob", dies)
    with pytest.raises(Crash):
        j.one_pass()  # the successor named on the job; the leader dies before the delete
    successor = naming.successor("j", f"uid-{FIRST}")
    notes = j.api.objects[(Kind.TRAINIUMJOB, "j")]["metadata"]["annotations"]
    assert notes[ANNOTATION_TRAIN_GANG] == successor
    assert j.status()["elastic"]["currentNodes"] == 3, "the status write was never made"
    monkeypatch.setattr(k8s, "delete_vcjob", lambda ns, name, *_, **__: going(j, name))
    restart(j)
    clock[0] = "2026-11-27T10:01:02Z"
    j.one_pass()  # the next leader deletes the old gang; its successor waits for it
    gone(j, FIRST)
    j.one_pass()
    assert train_gangs(j) == [successor]
    assert replicas(j, successor) == 2, "the successor was built at the old size"
    elastic = j.status()["elastic"]
    assert (elastic["currentNodes"], elastic["resizes"]) == (2, 1)
    assert elastic["lastResize"]["kind"] == "Shrink" and elastic["lastResize"]["to"] == 2


def test_a_resize_saves_its_size_with_the_name_and_nothing_else_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = ["2026-11-27T10:00:00Z"]
    j = elastic_training(monkeypatch, clock)
    j.api.objects[(Kind.VCJOB, FIRST)]["status"] = {"state": {"phase": "Pending"}}
    j.api.deliver(j.idx)
    j.one_pass()
    clock[0] = "2026-11-27T10:01:01Z"
    j.one_pass()  # no crash: named, deleted, recorded
    meta = j.api.objects[(Kind.TRAINIUMJOB, "j")]["metadata"]
    assert gangs.named_size(meta) == elastic.Named(2, 1)
    assert j.status()["elastic"]["resizes"] == 1
    j.api.deliver(j.idx)
    gone(j, FIRST)
    j.one_pass()
    successor = naming.successor("j", f"uid-{FIRST}")
    assert train_gangs(j) == [successor] and replicas(j, successor) == 2
    assert j.status()["elastic"]["resizes"] == 1, "the saved size was counted twice"
