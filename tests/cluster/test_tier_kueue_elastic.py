"""Issue 41 (5) on the real tier (real Kueue v0.19.2, real Volcano): an elastic job under Kueue
never runs nothing and holds nothing because of a resize.

A 2-node elastic job (minNodes 1) trains at 2 in a ClusterQueue of 2 nodes' devices; a node is
lost and the gang shrinks to 1 (its 1-node Workload admitted, the 2-node one deleted). The
quota is cut to 1 node and the node comes back: the grow is due, but Kueue cannot admit the
2-node Workload, so the gang keeps training at 1 under its admission and the job says why
(Running reason GrowWaitingForQuota). Once the quota holds both sizes the 2-node Workload is
admitted, the gang grows to 2, and the 1-node Workload is deleted (the queue holds 2 nodes).
"""

from __future__ import annotations

from typing import Any

import procs
from cluster import wait_until
from jobs import TJ, VCJOB, condition, get
from kubelet import TRN1_32XLARGE
from kueue import Kueue
from kueuesetup import Queued, workloads_of
from nodesignals import label_node, training_pods
from test_tier_elastic import NODES, POOL, TRAINS, status_of

Obj = dict[str, Any]
TRAINING = {"trainium.dev/stage": "train"}
#: 64 = 2 nodes x 32 processes x 1 = 1 node x 32 processes x 2: both sizes keep the batch.
ELASTIC = {"minNodes": 1, "globalBatchSize": 64, "batchSizePerProcess": 1, "shrinkAfterSeconds": 10}
#: A trn1.32xlarge's Neuron devices: the ClusterQueue's quota counts nodes in these.
PER_NODE = 16


def test_an_elastic_grow_under_kueue_keeps_the_running_size_until_admitted(queued: Queued) -> None:
    cluster, kubelet, ns = queued.cluster, queued.kubelet, queued.ns
    for node in NODES[:2]:
        label_node(cluster, node, POOL, ns)
    lost = ""
    try:
        lost = scenario(queued)
    finally:
        cluster.kubectl("delete", TJ, "grow", "-n", ns, "--ignore-not-found", "--wait=false",
                        check=False)  # fmt: skip
        if lost and lost not in kubelet.nodes:
            kubelet.add_node(lost, TRN1_32XLARGE)
        for node in NODES:
            label_node(cluster, node, POOL, None)


def workloads(kueue: Kueue, ns: str) -> dict[str, Obj]:
    """The job's Workloads by their size suffix ("n1", "n2")."""
    return {w["metadata"]["name"].rsplit("-", 1)[-1]: w for w in workloads_of(kueue, ns, "grow")}


def admitted(wl: Obj | None) -> bool:
    return condition(wl, "Admitted").get("status") == "True"


def scenario(queued: Queued) -> str:
    """The scenario; returns the node it lost (restored by the caller if still gone)."""
    cluster, kubelet, kueue, ns = queued.cluster, queued.kubelet, queued.kueue, queued.ns
    kubelet.plan(TRAINING, TRAINS, namespace=ns)
    queued.queues(neuron=2 * PER_NODE)
    scheduling = {"queue": "test", "nodeSelector": {POOL: ns}}
    queued.create("grow", nodes=2, elastic=ELASTIC, scheduling=scheduling)

    def training_at(size: int) -> Obj | None:
        """The status once a gang of `size` trains: its pods run and rank 0 served a step."""
        status = status_of(cluster, "grow", ns)
        gang = get(cluster, VCJOB, status.get("trainingJob") or "grow-train", ns) or {}
        progress = status.get("progress") or {}
        sized = (status.get("elastic") or {}).get("currentNodes") == size
        ours = progress.get("gang") == gang.get("metadata", {}).get("uid")
        stepping = ours and progress.get("step", 0) > 0
        return status if sized and len(training_pods(cluster, ns)) == size and stepping else None

    wait_until(lambda: training_at(2), procs.scaled(240), "training at 2 nodes", every=1)
    assert admitted(workloads(kueue, ns).get("n2")), workloads(kueue, ns)

    # A node is lost: the gang shrinks to 1 under Kueue (its 1-node Workload admitted).
    pods = training_pods(cluster, ns)
    lost = sorted(pods.values())[-1]
    kubelet.lose_node(lost)
    wait_until(lambda: training_at(1), procs.scaled(300), "training again at 1 node", every=1)
    wait_until(lambda: list(workloads(kueue, ns)) == ["n1"], procs.scaled(60),
               "only the 1-node Workload")  # fmt: skip
    assert admitted(workloads(kueue, ns)["n1"])
    assert status_of(cluster, "grow", ns)["elastic"]["lastResize"]["kind"] == "Shrink"

    # The quota is cut to 1 node; the node comes back: the grow is due, Kueue cannot admit it.
    queued.queues(neuron=PER_NODE)
    gang = status_of(cluster, "grow", ns)["trainingJob"]
    kubelet.add_node(lost, TRN1_32XLARGE)
    label_node(cluster, lost, POOL, ns)

    def grow_waits() -> Obj | None:
        status = status_of(cluster, "grow", ns)
        running = condition({"status": status}, "Running")
        return status if running.get("reason") == "GrowWaitingForQuota" else None

    status = wait_until(grow_waits, procs.scaled(120), "the grow waiting for quota", every=1)
    assert "waits for Kueue to admit Workload" in status["message"], status["message"]
    found = workloads(kueue, ns)
    assert admitted(found["n1"]) and not admitted(found["n2"]), found
    assert not (found["n2"].get("status") or {}).get("admission"), found["n2"]["status"]
    # It keeps training at 1 under its admission while the grow waits (checkpoints come every
    # 2 s: a grow decided from the free nodes alone would have stopped the gang by now).
    start = int((status.get("progress") or {}).get("checkpointStep") or 0)

    def kept() -> bool:
        """Still at 1 under its admission; True once 3 more checkpoints were served."""
        now = training_at(1)
        assert now is not None and now["trainingJob"] == gang, status_of(cluster, "grow", ns)
        assert admitted(workloads(kueue, ns)["n1"]), workloads(kueue, ns)
        return int((now.get("progress") or {}).get("checkpointStep") or 0) >= start + 30

    wait_until(kept, procs.scaled(120), "3 more checkpoints at 1 node", every=0.5)

    # The quota now holds both sizes: Kueue admits the 2-node Workload and the gang grows.
    queued.queues(neuron=3 * PER_NODE)
    status = wait_until(lambda: training_at(2), procs.scaled(300), "training at 2", every=1)
    assert status["elastic"]["lastResize"]["kind"] == "Grow", status["elastic"]
    wait_until(lambda: list(workloads(kueue, ns)) == ["n2"], procs.scaled(60),
               "the 1-node Workload deleted")  # fmt: skip
    assert admitted(workloads(kueue, ns)["n2"])
    running = condition({"status": status_of(cluster, "grow", ns)}, "Running")
    assert running.get("reason") != "GrowWaitingForQuota", running
    return lost
