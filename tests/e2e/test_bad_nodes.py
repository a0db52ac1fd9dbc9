"""A node whose preflight fails is kept out: excludedNodes, an Event, and a new gang around it."""

from __future__ import annotations

import json
from typing import Any

from test_operator_e2e import events, start_training, status, vcjob

from harness import (
    EmulatorServer,
    OperatorProcess,
    apply,
    kubectl,
    simulate_vcjob_phase,
    train_gang,
    wait_for,
)

Obj = dict[str, Any]
VCJOBS = "batch.volcano.sh/v1alpha1/jobs"


def failed_preflight_pod(k8s: EmulatorServer, ns: str, owner: str, node: str) -> str:
    """Pod 0 of the gang on `node`, its preflight init container ended with exit 4."""
    template = k8s.get(VCJOBS, ns, f"{owner}-train")["spec"]["tasks"][0]["template"]
    name = f"{owner}-train-node-0"
    apply({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, **template["metadata"]},
           "spec": {**template["spec"], "nodeName": node}})  # fmt: skip
    line = "preflight failed: 3 Neuron devices in /dev (want 16)"
    init = {
        "name": "preflight",
        "ready": False,
        "restartCount": 0,
        "image": "trainer:1",
        "imageID": "",
        "state": {
            "terminated": {
                "reason": "Error",
                "exitCode": 4,
                "message": line + "\n",
                "finishedAt": "2026-11-22T10:00:00Z",
                "startedAt": "2026-11-22T09:59:00Z",
            }
        },
    }
    patch = {"status": {"phase": "Failed", "initContainerStatuses": [init]}}  # fmt: skip
    kubectl("patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps(patch))  # fmt: skip
    return name


def test_a_failed_preflight_keeps_the_node_out_of_the_next_gang_and_spends_no_retry(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    start_training(k8s, ns, "picky")
    first_uid = k8s.get(VCJOBS, ns, "picky-train")["metadata"]["uid"]
    failed_preflight_pod(k8s, ns, "picky", "ip-10-0-1-5")

    def recreated() -> Obj | None:
        job = k8s.get(VCJOBS, ns, train_gang(k8s, ns, "picky"))
        return job if job and job["metadata"]["uid"] != first_uid else None

    job = wait_for(recreated, what="a new training Volcano job")
    assert job["metadata"]["name"] != "picky-train", "a replacement never reuses a gang's name"
    for task in job["spec"]["tasks"]:
        affinity = task["template"]["spec"]["affinity"]["nodeAffinity"]
        (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term["matchFields"] == [
            {"key": "metadata.name", "operator": "NotIn", "values": ["ip-10-0-1-5"]}
        ]
    st = wait_for(lambda: (s := status(ns, "picky")).get("excludedNodes") and s,
                  what="status.excludedNodes")  # fmt: skip
    (entry,) = st["excludedNodes"]
    assert (entry["node"], entry["reason"]) == ("ip-10-0-1-5", "PreflightFailed")
    assert st["restarts"] == 0 and st["disruptions"] == 1
    assert st["lastFailure"]["reason"] == "PreflightFailed"
    (warned,) = [e for e in events(ns) if e["reason"] == "NodeExcluded"]
    assert "ip-10-0-1-5" in warned["message"] and "preflight failed" in warned["message"]
    # The new gang runs; the node stays excluded, nothing more is counted.
    vcjob(k8s, ns, job["metadata"]["name"])
    simulate_vcjob_phase(ns, job["metadata"]["name"], "Running")
    wait_for(lambda: status(ns, "picky").get("phase") == "Training", what="training again")
    assert status(ns, "picky")["disruptions"] == 1
