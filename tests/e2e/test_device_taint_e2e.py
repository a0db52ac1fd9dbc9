"""Issue 42 on the emulator: a DRA job's gang pod whose claim holds a NoExecute-tainted device
(a ResourceSlice's taint) has its node excluded and its gang replaced, no retry spent. The
claims and slices are applied as kube-controller-manager and the Neuron DRA driver would write
them (the real ones: tests/cluster/test_tier_dra_taints.py)."""

from __future__ import annotations

import json
from typing import Any

from test_elastic_e2e import node
from test_node_gone_e2e import running_pod
from test_operator_e2e import job, prerequisites, status, vcjob, wait_phase

from harness import EmulatorServer, OperatorProcess, apply, kubectl, simulate_vcjob_phase, wait_for
from trainium_operator.manifests import dra
from trainium_operator.manifests.ownership import (
    ANNOTATION_OWNER_UID,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)

Obj = dict[str, Any]
TAINT = {"key": "neuron.aws.com/unhealthy", "value": "hbm", "effect": "NoExecute"}


def device_slice(node_name: str, taint: bool = False) -> Obj:
    devices: list[Obj] = [{"name": f"neuron-{i}"} for i in range(2)]
    if taint:
        devices[1]["taints"] = [TAINT]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": node_name},
            "spec": {"driver": dra.DRIVER, "nodeName": node_name, "devices": devices,
                     "pool": {"name": node_name, "generation": 1,
                              "resourceSliceCount": 1}}}  # fmt: skip


def pod_claim(ns: str, pod: Obj, uid: str) -> Obj:
    """The claim kube-controller-manager made for the pod, allocated its node's devices."""
    name, node_name = pod["metadata"]["name"], pod["spec"]["nodeName"]
    results = [{"request": dra.REQUEST, "driver": dra.DRIVER, "pool": node_name,
                "device": f"neuron-{i}"} for i in range(2)]  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"{name}-neuron-x", "namespace": ns,
                         "labels": {LABEL_MANAGED_BY: MANAGED_BY},
                         "annotations": {ANNOTATION_OWNER_UID: uid},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name,
                                              "uid": pod["metadata"]["uid"],
                                              "controller": True}]},
            "status": {"allocation": {"devices": {"results": results}}}}  # fmt: skip


def test_a_tainted_device_a_gang_claim_holds_excludes_its_node(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    nodes = [f"{ns}-n{i}" for i in range(2)]
    for name in nodes:
        apply(node(name, ns))
        apply(device_slice(name))
    q = prerequisites(ns)
    apply(job(ns, "dt", q, precompile={"policy": "Never"}, devices="dra",
              instanceType="trn2.48xlarge"))  # fmt: skip
    vcjob(k8s, ns, "dt-train")
    simulate_vcjob_phase(ns, "dt-train", "Running")
    wait_phase(ns, "dt", "Training")
    uid = k8s.get("trainium.dev/v1alpha1/trainiumjobs", ns, "dt")["metadata"]["uid"]
    for i, name in enumerate(nodes):
        claim = pod_claim(ns, running_pod(k8s, ns, "dt", i, name), uid)
        apply(claim)  # its status (the allocation) as the scheduler writes it: the subresource
        kubectl("patch", "resourceclaim", claim["metadata"]["name"], "-n", ns,
                "--subresource=status", "--type=merge", "-p", json.dumps(claim))  # fmt: skip
    apply(device_slice(nodes[1], taint=True))

    def excluded() -> list[Any]:
        return [(e["node"], e["reason"]) for e in status(ns, "dt").get("excludedNodes") or []]

    assert wait_for(excluded, timeout=30, what="the tainted node excluded") == [
        (nodes[1], "NodeUnhealthy")
    ]
    said = status(ns, "dt")
    assert said.get("restarts", 0) == 0, said
    assert "is tainted neuron.aws.com/unhealthy=hbm:NoExecute" in said["lastFailure"]["message"]
