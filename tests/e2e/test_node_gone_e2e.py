"""A Node deleted: the operator removes its gang pod as PodGC would, without PodGC's 40 s wait."""

from __future__ import annotations

import json
from typing import Any

from test_elastic_e2e import node
from test_operator_e2e import events, start_training, status

from harness import EmulatorServer, OperatorProcess, apply, kubectl, wait_for

Obj = dict[str, Any]
VCJOBS = "batch.volcano.sh/v1alpha1/jobs"


def running_pod(k8s: EmulatorServer, ns: str, owner: str, index: int, node_name: str) -> Obj:
    """Gang pod `index` of the training Volcano job, bound to `node_name` and Running."""
    template = k8s.get(VCJOBS, ns, f"{owner}-train")["spec"]["tasks"][0]["template"]
    name = f"{owner}-train-node-{index}"
    apply({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, **template["metadata"]},
           "spec": {**template["spec"], "nodeName": node_name}})  # fmt: skip
    patch = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    kubectl("patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps(patch))  # fmt: skip
    pod = k8s.get("v1/pods", ns, name)
    assert pod is not None
    return pod


def test_a_deleted_node_has_its_gang_pod_removed_and_a_not_ready_one_does_not(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer, api_requests: list[Any]
) -> None:
    gone, sick = f"{ns}-gone", f"{ns}-sick"
    apply(node(gone, ns))
    apply(node(sick, ns, ready=False))
    start_training(k8s, ns, "orphan")
    doomed = running_pod(k8s, ns, "orphan", 0, gone)
    kept = running_pod(k8s, ns, "orphan", 1, sick)
    before = len(api_requests)

    kubectl("delete", "node", gone)

    wait_for(lambda: k8s.get("v1/pods", ns, doomed["metadata"]["name"]) is None,
             what="the pod of the deleted node removed")  # fmt: skip
    (said,) = wait_for(lambda: [e for e in events(ns) if e["reason"] == "NodeGone"] or None,
                       what="a NodeGone Event")  # fmt: skip
    assert said["type"] == "Warning" and said["involvedObject"]["name"] == "orphan"
    assert f"node {gone} was deleted" in said["message"]
    assert doomed["metadata"]["name"] in said["message"]
    # What PodGC does, by the operator: the pod's status patched (DisruptionTarget), then deleted
    # (the bodies: tests/unit/test_orphans.py).
    name = doomed["metadata"]["name"]
    ours = [r for r in api_requests[before:] if r.client == "trainium-operator"]
    sent = [(r.verb, r.subresource) for r in ours if r.resource == "pods" and r.name == name]
    # A pass before the pod's DELETED event reaches the index tries again and meets 404s.
    assert sent[:2] == [("patch", "status"), ("delete", None)], sent
    # The NotReady node's pod stays (it may come back). Volcano restarts the gang (the real tier,
    # bench/recovery.py node-gone: lastFailure Evicted, no retry spent).
    assert k8s.get("v1/pods", ns, kept["metadata"]["name"]) is not None
    assert status(ns, "orphan").get("restarts", 0) == 0


def test_a_node_deleted_while_the_operator_was_down_is_seen_when_it_starts(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    gone = f"{ns}-gone"
    apply(node(gone, ns))
    start_training(k8s, ns, "late")
    doomed = running_pod(k8s, ns, "late", 0, gone)
    operator.stop()
    kubectl("delete", "node", gone)
    operator.start()
    wait_for(lambda: k8s.get("v1/pods", ns, doomed["metadata"]["name"]) is None,
             what="the pod of the node deleted before the start removed")  # fmt: skip
    (said,) = wait_for(lambda: [e for e in events(ns) if e["reason"] == "NodeGone"] or None,
                       what="a NodeGone Event")  # fmt: skip
    assert gone in said["message"]
