"""observe's verdicts on what it reads: the queue Volcano will admit into, and the storage."""

from __future__ import annotations

from typing import Any

import pytest

from trainium_operator import k8s, observe
from trainium_operator.observe import Views


def queue(state: str | None) -> dict[str, Any]:
    q: dict[str, Any] = {"metadata": {"name": "q"}, "spec": {"weight": 1}}
    if state:
        q["status"] = {"state": state}
    return q


@pytest.mark.parametrize(
    ("found", "parents", "reason"),
    [
        (None, {}, "QueueNotFound"),
        (queue("Closed"), {}, "QueueNotOpen"),
        (queue("Closing"), {}, "QueueNotOpen"),
        (queue("Open"), {"q": "root", "child": "q"}, "QueueNotLeaf"),
        (queue("Open"), {"q": "root"}, None),
        (queue(None), {}, None),  # a new queue before Volcano's controller set its state
    ],
)
def test_queue_blocker(
    monkeypatch: pytest.MonkeyPatch, found: Any, parents: dict[str, str], reason: str | None
) -> None:
    monkeypatch.setattr(k8s, "get_queue", lambda name: found)
    blocker = observe.queue_blocker("q", Views(parents))
    assert (blocker.reason if blocker else None) == reason
    if blocker:
        assert "spec.scheduling.queue" in blocker.message and "'q'" in blocker.message


def claim(phase: str | None, uid: str = "c1") -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"name": "job-fsx", "uid": uid}}
    if phase:
        out["status"] = {"phase": phase}
    return out


def pv(ref_uid: str | None, deleting: bool = False) -> dict[str, Any]:
    md: dict[str, Any] = {"name": "ns-job-fsx", "resourceVersion": "7"}
    if deleting:
        md["deletionTimestamp"] = "2026-11-22T00:00:00Z"
    ref = {"namespace": "ns", "name": "job-fsx", **({"uid": ref_uid} if ref_uid else {})}
    return {"metadata": md, "spec": {"claimRef": ref}}


@pytest.mark.parametrize(
    ("volume", "found_claim", "ready", "released", "reason"),
    [
        (pv("c1"), claim("Bound"), True, False, None),
        (pv(None), claim("Pending"), False, False, "ClaimPending"),
        (pv("old"), claim("Pending"), False, True, None),  # bound to a claim that is gone
        (pv("old"), None, False, True, None),
        (pv("c1", deleting=True), None, False, False, "VolumeTerminating"),
        (pv(None), None, False, False, None),  # the claim is still to be created
    ],
)
def test_static_volume(
    volume: Any, found_claim: Any, ready: bool, released: bool, reason: str | None
) -> None:
    got = observe._static_volume(volume, found_claim)
    assert (got.ready, got.released) == (ready, released)
    assert (got.blocker.reason if got.blocker else None) == reason
