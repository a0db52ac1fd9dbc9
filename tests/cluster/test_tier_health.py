"""Issue 42, health signals on a real cluster: a node that says it is failing is left first.

1. The real trainer (the kubelet's running mode, test_tier_e2e.py's trn2 nodes plus a third):
   a 2-node job trains; Neuron's node problem detector's condition `NeuronHealth` turns True
   (NeuronHasError_HBM_UNCORRECTABLE_ERROR) on one of its nodes, set with kubectl as the NPD
   sets it. The operator stops the gang before any pod fails: every trainer gets SIGTERM,
   checkpoints and exits 143; the node goes to status.excludedNodes; the new gang runs on the
   two healthy nodes, resumes from that checkpoint and finishes; no retry is spent.
2. Played pods: an elastic 3-node job on a pool of three nodes; SageMaker HyperPod's label
   `sagemaker.amazonaws.com/node-health-status=UnschedulablePendingReplacement` on one of them.
   The gang leaves the node, cannot form at 3 without it, and shrinks to 2 (no retry spent).
3. Stragglers, played pods: rank 0 serves each node's step time; one node steps at 1.5x the
   others: flagged within the window (status, Event, metric), then replaced once asked.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import TJ, create, events, fsx_claim, get, small_job, wait_condition
from kubelet import Behavior, FakeKubelet, Metrics
from nodesignals import label_node, neuron_health, training_pods
from realtrainer import TRN2_48XLARGE, log_events, stopped_with_checkpoint, tiny_bert, volume

Obj = dict[str, Any]
THIRD = "trn2-health-2"
STEPS = 64
HYPERPOD = "sagemaker.amazonaws.com/node-health-status"
POOL = "tier.trainium.dev/health-pool"
POOL_NODES = ("trn1-32xl-0", "trn1-32xl-1", "trn1-32xl-2")


@pytest.fixture(scope="module")
def third_trn2(kubelet: FakeKubelet, trn2_nodes: tuple[str, ...]) -> Iterator[str]:
    """A third trn2.48xlarge node: the gang of two has somewhere to go without a bad one."""
    kubelet.add_node(THIRD, TRN2_48XLARGE)
    yield THIRD
    with contextlib.suppress(urllib.error.URLError):
        kubelet.remove_nodes((THIRD,))


def status_of(cluster: Cluster, name: str, ns: str) -> Obj:
    return dict((get(cluster, TJ, name, ns) or {}).get("status") or {})


def test_a_neuron_health_error_checkpoints_then_leaves_the_node_before_any_pod_fails(
    cluster: Cluster,
    running_pods: FakeKubelet,
    third_trn2: str,
    running_operator: OperatorProcess,
    ns: str,
) -> None:
    kubelet = running_pods
    fsx_claim(cluster, ns)
    body = tiny_bert("sick", ns, STEPS, ("--checkpoint-every", "1000"))
    body["spec"]["precompile"] = {"policy": "Never"}
    create(cluster, body)
    step = lambda: int((status_of(cluster, "sick", ns).get("progress") or {}).get("step") or 0)  # noqa: E731
    wait_until(lambda: step() >= 3, 300, "training (rank 0's step)", every=1)
    first = list(kubelet.runs(ns))
    nodes = {r.pod["spec"]["nodeName"] for r in first}
    assert len(first) == 2 and len(nodes) == 2, [r.pod["metadata"]["name"] for r in first]
    bad = sorted(nodes)[0]
    try:
        neuron_health(cluster, bad, True)
        # Before any pod failed: every trainer was told to stop, checkpointed and exited 143.
        kept = stopped_with_checkpoint(first, STEPS)
        status = status_of(cluster, "sick", ns)
        excluded = status.get("excludedNodes") or []
        assert [(e["node"], e["reason"]) for e in excluded] == [(bad, "NodeUnhealthy")], status
        assert status["lastFailure"]["reason"] == "NodeUnhealthy", status["lastFailure"]
        assert "NeuronHasError_HBM_UNCORRECTABLE_ERROR" in status["lastFailure"]["message"]
        job = wait_condition(cluster, "sick", ns, "Succeeded", timeout=400)
    finally:
        neuron_health(cluster, bad, False)
    assert job["status"].get("restarts", 0) == 0, job["status"]
    assert job["status"].get("disruptions") == 1, job["status"]
    again = [r for r in kubelet.runs(ns) if r not in first]
    assert again and all(r.pod["spec"]["nodeName"] != bad for r in again), again
    rank0 = next(r for r in again if r.pod["metadata"]["name"].endswith("-0"))
    resumed = [e for e in log_events(rank0.containers[0].log.read_text())
               if e.get("event") == "resumed"]  # fmt: skip
    assert [e["step"] for e in resumed] == [kept], resumed
    summary = json.loads((Path(volume(kubelet)) / "output" / "sick" / "summary.json").read_text())
    assert summary["resumed_from_step"] == kept and summary["steps"] == STEPS, summary
    warned = [e for e in events(cluster, ns, "sick") if e["reason"] == "NodeExcluded"]
    assert any(bad in e["message"] and "NeuronHealth" in e["message"] for e in warned), warned


TRAINS = Behavior(
    outcome="RunForever", metrics=Metrics(total_steps=100000, rate=5.0, checkpoint_every=10)
)


def test_a_hyperpod_unschedulable_label_takes_the_node_out_and_the_gang_shrinks(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    for node in POOL_NODES:
        label_node(cluster, node, POOL, ns)
    bad = ""
    try:
        kubelet.plan({"trainium.dev/stage": "train"}, TRAINS, namespace=ns)
        elastic = {"minNodes": 2, "globalBatchSize": 192, "batchSizePerProcess": 1,
                   "shrinkAfterSeconds": 10}  # fmt: skip
        scheduling = {"queue": "test", "nodeSelector": {POOL: ns}}
        create(cluster, small_job("hp", ns, nodes=3, elastic=elastic, scheduling=scheduling))
        wait_until(lambda: len(training_pods(cluster, ns)) == 3, 240, "training at 3", every=1)
        bad = sorted(training_pods(cluster, ns).values())[-1]
        began = time.monotonic()
        label_node(cluster, bad, HYPERPOD, "UnschedulablePendingReplacement")

        def at_two() -> Obj | None:
            status = status_of(cluster, "hp", ns)
            pods = training_pods(cluster, ns)
            sized = (status.get("elastic") or {}).get("currentNodes") == 2
            return status if sized and len(pods) == 2 and bad not in pods.values() else None

        status = wait_until(at_two, 300, "training at 2 without the labelled node", every=1)
        took = time.monotonic() - began
        excluded = [(e["node"], e["reason"]) for e in status.get("excludedNodes") or []]
        assert excluded == [(bad, "NodeUnhealthy")], status
        assert status.get("restarts", 0) == 0 and status.get("disruptions") == 1, status
        assert status["elastic"]["lastResize"]["kind"] == "Shrink", status["elastic"]
        assert f"{HYPERPOD}=UnschedulablePendingReplacement" in status["lastFailure"]["message"]
        print(f"\nhealth label: {bad} labelled -> training at 2 nodes without it {took:.1f} s")
    finally:
        if bad:
            label_node(cluster, bad, HYPERPOD, None)
        for node in POOL_NODES:
            label_node(cluster, node, POOL, None)


STRAGGLER_POOL = ("trn1-32xl-0", "trn1-32xl-1", "trn1-32xl-2", "trn1-32xl-3")
WINDOW = 10


def straggler_count(operator: OperatorProcess, ns: str) -> float | None:
    """trainium_operator_job_straggler_nodes of the job `slow`, from the operator's metrics."""
    with urllib.request.urlopen(operator.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith("trainium_operator_job_straggler_nodes{") and f'"{ns}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_node_stepping_slower_than_the_gang_is_flagged_then_replaced_when_asked(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """Three played nodes serve each node's step time; one steps at 1.5x the others. It is
    flagged (status, Event, metric) once slow for the window; replace: true takes it out at the
    next checkpoint (the gang moves to the pool's fourth node), with no retry spent."""
    fsx_claim(cluster, ns)
    for node in STRAGGLER_POOL:
        label_node(cluster, node, POOL, ns)
    try:
        slow_node = "trn1-32xl-1"
        metrics = Metrics(total_steps=100000, rate=5.0, checkpoint_every=10, step_seconds=0.2,
                          slow_nodes=((slow_node, 1.5),))  # fmt: skip
        kubelet.plan({"trainium.dev/stage": "train"}, Behavior(outcome="RunForever",
                     metrics=metrics), namespace=ns)  # fmt: skip
        # The slow node holds one pod of the gang: the pool's fourth node waits, cordoned.
        cluster.kubectl("cordon", "trn1-32xl-3")
        knobs = {"threshold": 1.3, "windowSeconds": WINDOW}
        scheduling = {"queue": "test", "nodeSelector": {POOL: ns}}
        create(cluster, small_job("slow", ns, nodes=3, stragglers=knobs, scheduling=scheduling))
        wait_until(lambda: len(training_pods(cluster, ns)) == 3, 240, "training at 3", every=1)
        assert slow_node in training_pods(cluster, ns).values()
        cluster.kubectl("uncordon", "trn1-32xl-3")

        def flagged() -> Obj | None:
            found = status_of(cluster, "slow", ns).get("stragglers") or []
            return next((e for e in found if e.get("flaggedAt")), None)

        entry = wait_until(flagged, 120, "the slow node flagged", every=0.5)
        assert entry["node"] == slow_node and entry["ratio"] >= 1.3, entry
        took = _between(entry["since"], entry["flaggedAt"])
        assert WINDOW <= took <= WINDOW + 15, (took, entry)  # within the window's readings
        warned = [e for e in events(cluster, ns, "slow") if e["reason"] == "Straggler"]
        assert any(slow_node in e["message"] for e in warned), warned
        assert straggler_count(running_operator, ns) == 1
        assert not status_of(cluster, "slow", ns).get("excludedNodes")  # not asked: flag only

        cluster.kubectl("patch", TJ, "slow", "-n", ns, "--type=merge",
                        "-p", json.dumps({"spec": {"stragglers": {"replace": True}}}))  # fmt: skip

        def replaced() -> Obj | None:
            status = status_of(cluster, "slow", ns)
            pods = training_pods(cluster, ns)
            out = len(pods) == 3 and slow_node not in pods.values()
            return status if out and status.get("excludedNodes") else None

        status = wait_until(replaced, 240, "the gang without the slow node", every=1)
        assert [(e["node"], e["reason"]) for e in status["excludedNodes"]] == [
            (slow_node, "Straggler")
        ], status
        assert status.get("restarts", 0) == 0 and status.get("disruptions") == 1, status
    finally:
        cluster.kubectl("delete", TJ, "slow", "-n", ns, "--wait=false", check=False)
        cluster.kubectl("uncordon", "trn1-32xl-3", check=False)
        for node in STRAGGLER_POOL:
            label_node(cluster, node, POOL, None)


def _between(start: str, end: str) -> float:
    parse = datetime.datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()
