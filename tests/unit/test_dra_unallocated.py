"""A DRA job whose ResourceClaim nothing allocates says so on its condition (issue 34, item 7).

The scheduler's words are kube-scheduler's DynamicResources plugin's (which Volcano's predicates
plugin runs with predicate.DynamicResourceAllocationEnable on); with Volcano's DRA off, the pod is
bound unallocated and only the kubelet's FailedPrepareDynamicResources Event says why.
"""

from __future__ import annotations

from typing import Any

import pytest

from trainium_operator.cluster import eventlooks, k8s
from trainium_operator.domain import unschedulable
from trainium_operator.domain.lifecycle import decide
from trainium_operator.domain.model import Child, Observed

Json = dict[str, Any]
NOW = "2026-11-25T10:00:00Z"
#: PreFilter with no DeviceClass (no DRA driver installed), as kube-scheduler's FitError words it.
NO_CLASS = (
    "0/3 nodes are available: request neurons: device class neuron.aws.com does not exist. "
    "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
)
#: Filter: the class exists but no node publishes the devices (no ResourceSlices, all taken).
NO_DEVICES = (
    "0/3 nodes are available: 2 cannot allocate all claims, 1 node(s) didn't match Pod's node "
    "affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
    "scheduling."
)
#: The kubelet of a node Volcano (DRA off) bound the pod to: the claim was never reserved.
KUBELET = (
    "Failed to prepare dynamic resources: prepare dynamic resources: pod j-train-worker-0 "
    "(p0) is not allowed to use ResourceClaim j-train-worker-0-neuron-x7k2p (c0)"
)


def vcjob() -> Json:
    md = {"name": "j-train", "uid": "u1", "creationTimestamp": "2026-11-25T09:59:00Z"}
    return {"metadata": md, "status": {"state": {"phase": "Pending"}}}


def pod(message: str | None = None, node: str = "", claim: str = "j-train-worker-0-neuron-x7k2p",
        owner: str = "u1") -> Json:  # fmt: skip
    status: Json = {"phase": "Pending"}
    if message is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable", "message": message}]  # fmt: skip
    if claim:
        status["resourceClaimStatuses"] = [{"name": "neuron", "resourceClaimName": claim}]
    return {
        "metadata": {"name": "j-train-worker-0", "uid": "p0",
                     "ownerReferences": [{"kind": "Job", "uid": owner}]},
        "spec": {"nodeName": node} if node else {},
        "status": status,
    }  # fmt: skip


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Json]]:
    """The pods and Events a look lists (by label, by involved object and reason)."""
    seen: dict[str, list[Json]] = {"pods": [], "FailedCreate": [], eventlooks.KUBELET_DRA: []}

    def pods(namespace: str, selector: str) -> list[Json]:
        assert (namespace, selector) == ("team-a", "volcano.sh/job-name=j-train")
        return seen["pods"]

    def events(namespace: str, involved: str, reason: str) -> list[Json]:
        return seen[reason]

    monkeypatch.setattr(k8s, "list_pods", pods)
    monkeypatch.setattr(k8s, "list_events", events)
    return seen


def blocker(owner: str = "j") -> Any:
    return eventlooks.failed_create(
        eventlooks.look_at_events("team-a", vcjob(), NOW, None, owner), NOW
    )


def test_no_device_class_names_the_claim_and_the_driver(cluster: dict[str, list[Json]]) -> None:
    cluster["pods"].append(pod(NO_CLASS))
    found = blocker()
    assert found is not None and found.reason == "ClaimNotAllocated"
    msg = found.message
    assert "ResourceClaim j-train-worker-0-neuron-x7k2p of pod j-train-worker-0" in msg
    assert "DeviceClass neuron.aws.com does not exist" in msg and "Neuron DRA driver" in msg
    assert "request neurons: device class neuron.aws.com does not exist" in msg  # its words


def test_no_devices_points_at_the_resource_slices(cluster: dict[str, list[Json]]) -> None:
    cluster["pods"].append(pod(NO_DEVICES))
    found = blocker()
    assert found is not None and found.reason == "ClaimNotAllocated"
    assert "cannot allocate all claims" in found.message
    assert "kubectl get resourceslices" in found.message and "neuron.aws.com" in found.message


def test_volcano_without_dra_is_told_by_the_kubelet(cluster: dict[str, list[Json]]) -> None:
    cluster["pods"].append(pod(node="trn-0"))
    cluster[eventlooks.KUBELET_DRA].append({
        "reason": eventlooks.KUBELET_DRA, "message": KUBELET, "lastTimestamp": NOW,
        "involvedObject": {"kind": "Pod", "name": "j-train-worker-0", "uid": "p0"},
    })  # fmt: skip
    found = blocker()
    assert found is not None and found.reason == "ClaimNotAllocated"
    assert (
        "bound it to trn-0" in found.message
        and "is not allowed to use ResourceClaim" in found.message
    )
    assert "predicate.DynamicResourceAllocationEnable: true" in found.message


def test_a_claim_not_made_yet_names_the_template(cluster: dict[str, list[Json]]) -> None:
    said = '0/3 nodes are available: pod "team-a/j-train-worker-0": ResourceClaim not created yet.'
    cluster["pods"].append(pod(said, claim=""))
    found = blocker()
    assert found is not None
    assert (
        "ResourceClaimTemplate j-neuron" in found.message
        and "resource-claim controller" in found.message
    )


def test_a_gang_short_of_nodes_is_no_claim_problem(cluster: dict[str, list[Json]]) -> None:
    cluster["pods"].append(pod("0/3 nodes are available: 3 Insufficient cpu."))
    cluster["pods"].append(pod(node="trn-0"))  # bound, no kubelet Event: starting
    assert blocker() is None


def test_a_job_without_dra_reads_no_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(k8s, "list_pods", lambda *a: pytest.fail("listed pods"))
    monkeypatch.setattr(k8s, "list_events", lambda *a: [])
    assert blocker(owner="") is None


def test_pods_of_an_earlier_gang_instance_do_not_count(cluster: dict[str, list[Json]]) -> None:
    cluster["pods"].append(pod(NO_CLASS, owner="u0"))
    assert blocker() is None


def test_the_claim_holds_until_the_next_look(cluster: dict[str, list[Json]]) -> None:
    """Unlike a FailedCreate, the claim's words do not age out between two looks."""
    cluster["pods"].append(pod(NO_CLASS))
    first = eventlooks.look_at_events("team-a", vcjob(), NOW, None, "j")
    cluster["pods"].clear()
    later = "2026-11-25T10:03:59Z"
    again = eventlooks.look_at_events("team-a", vcjob(), later, first, "j")
    assert again is first and eventlooks.failed_create(again, later) is not None


@pytest.mark.parametrize("stage", ["training", "precompile"])
def test_the_condition_says_the_claim(stage: str) -> None:
    """The lifecycle puts the claim's words on Running / Precompiled, not GangPending."""
    stuck = eventlooks.failed_create(eventlooks.EventLook("u1", 2, "j-train", claim="claim c"), NOW)
    if stage == "training":
        obs = Observed(storage_ready=True, precompile=Child.SUCCEEDED, cache_recorded=True,
                       training=Child.PENDING, gang_blocker=stuck)  # fmt: skip
        cond = "Running"
    else:
        obs = Observed(storage_ready=True, precompile=Child.PENDING, cache_holder="self",
                       gang_blocker=stuck)  # fmt: skip
        cond = "Precompiled"
    d = decide(obs)
    found = {c.type: (c.status, c.reason, c.message) for c in d.conditions}
    assert found[cond] == ("False", "ClaimNotAllocated", "claim c")
    assert d.message == "claim c"


@pytest.mark.parametrize(
    ("message", "short"),
    [(NO_CLASS, "DeviceClass neuron.aws.com (a DRA driver)"),
     (NO_DEVICES, "devices for the pod's ResourceClaim (DRA)"),
     ("0/4 nodes are unavailable: 4 cannot allocate all claims.",
      "devices for the pod's ResourceClaim (DRA)")],
)  # fmt: skip
def test_a_startup_deadline_names_the_claim_as_short(message: str, short: str) -> None:
    assert unschedulable.short_resource(message) == short
