"""A gang's failed pods' logs: a pass reads none the pod watch saw deleted or found gone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_failures import ended, pod
from test_runtime_passes import KEY, Script, runtime, step

from trainium_operator.cluster import k8s
from trainium_operator.cluster.gangpods import gang_failure
from trainium_operator.manifests import ownership
from trainium_operator.manifests.ownership import Owner
from trainium_operator.runtime import pods, records

OWNER = Owner("job", "ns", KEY)
LABELS = {ownership.LABEL_STAGE: "train"}


def shown(name: str, state: Any, *, deleting: bool = True) -> dict[str, Any]:
    """A gang pod as its watch event shows it (a peer killed by its deletion by default)."""
    meta: dict[str, Any] = {
        "name": name, "namespace": "ns", "uid": f"uid-{name}",
        "annotations": {ownership.ANNOTATION_OWNER_UID: KEY, pods.JOB_VERSION: "1"},
        "ownerReferences": [{"kind": "Job", "name": "j", "uid": "vc-1", "controller": True}],
    }  # fmt: skip
    if deleting:
        meta.update(deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=30)
    return {"metadata": meta, "spec": {}, "status": pod(name, state)["status"]}


def test_a_pass_reads_no_log_of_a_pod_the_watch_saw_deleted_or_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fleet_spares at 1,024 nodes: while Volcano restarted the gang (6 min), each pass read
    up to 4 failed pods' logs (gangpods.MAX_LOGS) that the pod watch had seen deleted: 282
    reads, 275 answered 404. A log read once, or known gone, is never read again."""
    reads: list[str] = []
    live = {"w-live"}  # every other pod is gone: its log read answers 404 (k8s gives [])

    def read_log(ns: str, name: str, container: str, lines: int) -> list[str]:
        reads.append(name)
        return ["RuntimeError: boom"] if name in live else []

    monkeypatch.setattr(k8s, "pod_log_tail", read_log)
    script = Script()
    passes = runtime(script)
    killed = ended(137, at="2026-01-01T00:00:05Z")
    by_passes: list[str] = []
    for rnd in range(10):  # Volcano deletes the gang's pods a few at a time; a pass each time
        for i in range(4):
            peer = shown(f"w-{rnd}-{i}", killed)
            asyncio.run(pods.changed(passes, "MODIFIED", peer, LABELS, None))
            asyncio.run(pods.changed(passes, "DELETED", peer, LABELS, None))
        watch_reads = len(reads)
        assert step(passes)
        views = script.views[-1]
        gang_failure(OWNER, list(views.failed_pods), views.pod_logs)
        by_passes += reads[watch_reads:]
    assert by_passes == []  # before the fix: 4 a pass, 40 in these 10 passes
    assert len(reads) == 8  # the watch's capped peer reads (records.PEER_LOGS), each once
    # A pod the pass lists failed on its own, unseen by the watch: read once it is listed.
    failed = shown("w-live", ended(1), deleting=False)
    found = gang_failure(OWNER, [failed], script.views[-1].pod_logs)
    assert reads[-1] == "w-live" and found is not None


def test_a_log_read_empty_by_the_watch_is_not_read_again_by_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 404 on the watch's read marks the pod's log gone; a later event reads nothing."""
    passes = runtime(Script())
    calls: list[str] = []
    monkeypatch.setattr(k8s, "pod_log_tail", lambda ns, name, *_: calls.append(name) or [])
    failed = shown("w-0", ended(1), deleting=False)
    asyncio.run(pods.changed(passes, "MODIFIED", failed, LABELS, None))
    asyncio.run(pods.changed(passes, "MODIFIED", failed, LABELS, None))
    assert calls == ["w-0"]
    assert passes.records.has_log(KEY, "uid-w-0")


def test_a_pass_reads_no_killed_peer_the_watch_left_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    """fleet_spares at 128 after the fix above: 35 of 44 reads still 404, of killed peers past
    the watch's cap (records.PEER_LOGS) listed or shown before their deletion event came."""
    reads: list[str] = []
    monkeypatch.setattr(k8s, "pod_log_tail", lambda ns, name, *_: reads.append(name) or [])
    script = Script()
    passes = runtime(script)
    killed = ended(137, at="2026-01-01T00:00:05Z")
    peers = [shown(f"w-{i}", killed) for i in range(20)]
    for peer in peers:  # killed by their deletion; no DELETED event yet
        asyncio.run(pods.changed(passes, "MODIFIED", peer, LABELS, None))
    assert step(passes)
    watch_reads = len(reads)
    unread = peers[records.PEER_LOGS :]  # the peers the watch read are gone from the listing
    gang_failure(OWNER, unread, script.views[-1].pod_logs)
    assert reads[watch_reads:] == []  # before: the 4 first peers past the cap


def test_a_pass_reads_no_killed_peer_the_watch_has_not_seen_yet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fleet_spares at 128 after both fixes above: 42 of 48 reads still 404, one each of peers
    the pass listed (exit 137, being deleted) before the lagging pod watch showed them."""
    reads: list[str] = []
    monkeypatch.setattr(k8s, "pod_log_tail", lambda ns, name, *_: reads.append(name) or [])
    killed = ended(137, at="2026-01-01T00:00:05Z")
    listed = [shown(f"w-{i}", killed) for i in range(20)]
    gang_failure(OWNER, listed, {})
    assert reads == []  # before: the first 4 listed
    gang_failure(OWNER, [shown("w-own", ended(1), deleting=False)], {})
    assert reads == ["w-own"]  # one that failed on its own is read
