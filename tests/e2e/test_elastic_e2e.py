"""An elastic job on the emulator: a gang that cannot form again is replaced smaller."""

from __future__ import annotations

import json
from typing import Any

from test_operator_e2e import events, job, prerequisites, status, vcjob, wait_phase

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
POOL = "e2e.trainium.dev/elastic-pool"
ELASTIC = {"minNodes": 2, "globalBatchSize": 192, "batchSizePerProcess": 1,
           "shrinkAfterSeconds": 10}  # fmt: skip


def node(name: str, pool: str, ready: bool = True) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "node.kubernetes.io/instance-type": "trn1.32xlarge", POOL: pool}},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }  # fmt: skip


def test_a_gang_that_cannot_form_at_its_size_is_replaced_smaller(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    for i in range(3):
        apply(node(f"{ns}-n{i}", ns))
    q = prerequisites(ns)
    args = ["bert-pretrain", "--data-dir", "/data/bert"]
    apply(job(ns, "stretchy", q, nodes=3, args=args, elastic=ELASTIC,
              precompile={"policy": "Never"},
              scheduling={"queue": q, "nodeSelector": {POOL: ns}}))  # fmt: skip
    first = vcjob(k8s, ns, "stretchy-train")
    assert first["spec"]["minAvailable"] == 3
    simulate_vcjob_phase(ns, "stretchy-train", "Running")
    st = wait_phase(ns, "stretchy", "Training")
    wait_for(lambda: status(ns, "stretchy").get("elastic", {}).get("display") == "3/3",
             what="status.elastic 3/3")  # fmt: skip

    # A node goes NotReady for good and Volcano's restart cannot place the gang again.
    apply(node(f"{ns}-n2", ns, ready=False))
    kubectl(
        "patch",
        "node",
        f"{ns}-n2",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
    )
    simulate_vcjob_phase(ns, "stretchy-train", "Pending", retryCount=1)

    def replaced() -> Obj | None:
        job_ = k8s.get(VCJOBS, ns, train_gang(k8s, ns, "stretchy"))
        gone = job_ is None or job_["metadata"]["uid"] != first["metadata"]["uid"]
        return job_ if gone and job_ is not None else None

    smaller = wait_for(replaced, timeout=40, what="the gang recreated smaller")
    assert smaller["spec"]["minAvailable"] == 2 and smaller["spec"]["tasks"][0]["replicas"] == 2
    assert smaller["metadata"]["name"] != "stretchy-train", "a resize's gang has a new name"
    simulate_vcjob_phase(ns, smaller["metadata"]["name"], "Running")
    st = wait_for(lambda: (s := status(ns, "stretchy")).get("elastic", {}).get("display") == "2/3"
                  and s.get("phase") == "Training" and s, what="status.elastic 2/3")  # fmt: skip
    assert st["elastic"]["resizes"] == 1 and st["elastic"]["lastResize"]["kind"] == "Shrink"
    # Volcano's one restart (the lost node) is counted as any restart; the resize adds nothing.
    assert st["restarts"] + st["disruptions"] == 1, st
    (resized,) = [e for e in events(ns) if e["reason"] == "Resized"]
    assert resized["message"].startswith("from 3 to 2 nodes because"), resized


def test_the_precompile_stage_compiles_each_size_then_trains_at_the_full_size(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    args = ["bert-pretrain", "--data-dir", "/data/bert"]
    apply(job(ns, "sized", q, nodes=3, args=args, elastic=ELASTIC, cache={"name": "sized"}))
    three = vcjob(k8s, ns, "sized-compile-n3")
    assert three["spec"]["minAvailable"] == 3
    simulate_vcjob_phase(ns, "sized-compile-n3", "Completed")
    two = vcjob(k8s, ns, "sized-compile-n2")
    assert two["spec"]["minAvailable"] == 2
    assert k8s.get(VCJOBS, ns, "sized-train") is None  # the 2-node entry first
    simulate_vcjob_phase(ns, "sized-compile-n2", "Completed")
    train = vcjob(k8s, ns, "sized-train")
    assert train["spec"]["minAvailable"] == 3, json.dumps(status(ns, "sized"))
    entries = {j["metadata"]["labels"]["trainium.dev/cache-entry"] for j in (three, two)}
    assert len(entries) == 2
