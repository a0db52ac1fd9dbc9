"""What the node-fault tier modules do to a node (a pool label, Neuron's health condition) and
read of the gang (its running training pods), written once for all of them."""

from __future__ import annotations

import json

from cluster import Cluster

#: Neuron's node problem detector's condition reason and kernel line for an HBM error.
HBM_ERROR = "NeuronHasError_HBM_UNCORRECTABLE_ERROR"


def label_node(cluster: Cluster, node: str, key: str, value: str | None) -> None:
    """Set a node label (None: remove it; gone already is fine)."""
    change = f"{key}={value}" if value else f"{key}-"
    cluster.kubectl("label", "node", node, change, "--overwrite", check=value is not None)


def neuron_health(cluster: Cluster, node: str, bad: bool) -> None:
    """Set the node condition as Neuron's node problem detector does (a status patch)."""
    reason = HBM_ERROR if bad else "NeuronHasNoError"
    said = "kernel: NEURON_HW_ERR=HBM_UNCORRECTABLE_ERROR" if bad else "ok"
    cond = {"type": "NeuronHealth", "status": "True" if bad else "False", "reason": reason,
            "message": said}  # fmt: skip
    cluster.kubectl("patch", "node", node, "--subresource=status", "--type=strategic",
                    "-p", json.dumps({"status": {"conditions": [cond]}}))  # fmt: skip


def training_pods(cluster: Cluster, namespace: str) -> dict[str, str]:
    """Running, undeleted training pod -> node, as the API server has them."""
    proc = cluster.kubectl("get", "pods", "-n", namespace, "-l", "trainium.dev/stage=train",
                           "-o", "json")  # fmt: skip
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in json.loads(proc.stdout)["items"]
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    }
