"""The FSx PV sweep (issue 32 item 4): our cluster-scoped PV goes once its job is gone, never a
PV whose job (that object, by uid) is still there."""

from __future__ import annotations

from typing import Any

import pytest

from trainium_operator.cluster import k8s, storage, volumes
from trainium_operator.manifests.ownership import ANNOTATION_OWNER, ANNOTATION_OWNER_UID

Json = dict[str, Any]


def volume(uid: str | None = "job-uid", **meta: Any) -> Json:
    annotations = {ANNOTATION_OWNER: "ns/train"}
    if uid:
        annotations[ANNOTATION_OWNER_UID] = uid
    return {"metadata": {"name": "pv", "uid": "pv-uid", "annotations": annotations, **meta}}


def job(uid: str = "job-uid", **meta: Any) -> Json:
    return {"metadata": {"name": "train", "namespace": "ns", "uid": uid, **meta}}


@pytest.mark.parametrize(
    ("pv", "owner", "expected"),
    [
        (volume(), None, True),  # the job is gone
        (volume(), job(deletionTimestamp="t"), True),  # being deleted
        (volume(), job("new-uid"), True),  # another object of the name: not the PV's job
        (volume(), job(), False),  # its job is there
        (volume(uid=None), job("any"), False),  # an older PV: judged by the job's name
        (volume(uid=None), None, True),
        (volume(deletionTimestamp="t"), None, False),  # already going
    ],
)
def test_orphaned(pv: Json, owner: Json | None, expected: bool) -> None:
    assert storage.orphaned(pv, owner) is expected


def test_sweep_deletes_only_that_pv_of_a_gone_job(monkeypatch: pytest.MonkeyPatch) -> None:
    deleted: list[tuple[str, str | None]] = []
    asked: list[tuple[str, str]] = []
    monkeypatch.setattr(volumes, "get_volume", lambda name: volume())
    monkeypatch.setattr(k8s, "get_trainiumjob", lambda ns, name: asked.append((ns, name)))
    monkeypatch.setattr(
        volumes, "delete_volume", lambda name, uid=None: deleted.append((name, uid))
    )
    assert storage.sweep_volume("pv")
    assert asked == [("ns", "train")] and deleted == [("pv", "pv-uid")]  # the uid precondition


def test_sweep_keeps_a_live_jobs_pv_and_a_pv_without_owner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(k8s, "get_trainiumjob", lambda ns, name: job())
    monkeypatch.setattr(volumes, "delete_volume", lambda *a, **k: pytest.fail("deleted"))
    monkeypatch.setattr(volumes, "get_volume", lambda name: volume())
    assert not storage.sweep_volume("pv")
    monkeypatch.setattr(volumes, "get_volume", lambda name: {"metadata": {"name": "pv"}})
    assert not storage.sweep_volume("pv")
    monkeypatch.setattr(volumes, "get_volume", lambda name: None)
    assert not storage.sweep_volume("pv")
