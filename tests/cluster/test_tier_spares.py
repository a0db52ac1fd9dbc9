"""Issue 42's spare nodes on a real cluster: a lost training node is replaced at the same size.

Three fake trn1.32xlarge nodes carry this test's pool label (the tier's fourth does not). A job
of 2 nodes + 1 spare reserves all three: Volcano's gang (minAvailable 3) holds a standby pod
beside the two training pods. A training node is lost as EKS loses an instance (the Node
deleted; the operator removes its pod, Volcano restarts the gang); the operator lowers the
gang's reservation to the nodes left, so it forms again at 2 training nodes, the spare's node
among them: no compile (the same cache entry), no runPolicy.maxRetries spent, status.spares
and a SpareSwapped Event name the node; the gang asks for a replacement spare (Pending), which
is reserved again once a node comes back. The second test loses node 0, the rendezvous host.
The third marks a training node bad instead (Neuron's NeuronHealth condition True, HBM
uncorrectable error, set as the node problem detector sets it): the gang is stopped first (its
pods' graceful deletion: the trainer's SIGTERM, it checkpoints), before any pod failed on its
own; the next gang keeps the node out and the spare's node takes its place at 2 nodes, no retry
spent, status.spares.lastSwap naming the node, why, and the spare's node that took its place.
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import TJ, VCJOB, create, events, fsx_claim, get, small_job
from kubelet import TRN1_32XLARGE, Behavior, FakeKubelet, Metrics
from nodesignals import label_node, neuron_health
from recorder import Recorder

Obj = dict[str, Any]
TRAINING = {"trainium.dev/stage": "train"}
SPARE = {"trainium.dev/role": "spare"}
POOL = "tier.trainium.dev/spares-pool"
NODES = ("trn1-32xl-0", "trn1-32xl-1", "trn1-32xl-2")
#: Runs until stopped; a checkpoint every 10 steps at 5 steps a second (rank 0 serves them).
TRAINS = Behavior(
    outcome="RunForever",
    metrics=Metrics(total_steps=100000, rate=5.0, checkpoint_every=10),
    metrics_index=0,
)
STANDS_BY = Behavior(outcome="RunForever")


def status_of(cluster: Cluster, name: str, namespace: str) -> Obj:
    return dict((get(cluster, TJ, name, namespace) or {}).get("status") or {})


def running_pods(cluster: Cluster, namespace: str) -> dict[str, tuple[str, bool]]:
    """Running gang pod -> (its node, whether it is a spare's), as the API server has them."""
    proc = cluster.kubectl("get", "pods", "-n", namespace, "-l", "trainium.dev/stage=train",
                           "-o", "json")  # fmt: skip
    return {
        p["metadata"]["name"]: (
            p["spec"].get("nodeName", ""),
            (p["metadata"].get("labels") or {}).get("trainium.dev/role") == "spare",
        )
        for p in json.loads(proc.stdout)["items"]
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    }


def training(cluster: Cluster, namespace: str) -> dict[str, str]:
    """Running training pod -> node."""
    return {n: node for n, (node, spare) in running_pods(cluster, namespace).items() if not spare}


def test_a_lost_training_node_is_replaced_by_the_spare(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    with pool(cluster, kubelet, ns) as restore:
        scenario(cluster, kubelet, ns, "spare", lose_rank0=False, restore=restore)


def test_losing_node_0_the_rendezvous_host_is_recovered_the_same_way(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    with pool(cluster, kubelet, ns) as restore:
        scenario(cluster, kubelet, ns, "spare0", lose_rank0=True, restore=restore)


class pool:
    """The test's three labelled nodes; a lost one comes back and every label goes at the end."""

    def __init__(self, cluster: Cluster, kubelet: FakeKubelet, ns: str) -> None:
        self.cluster, self.kubelet, self.ns = cluster, kubelet, ns
        self.lost: list[str] = []

    def __enter__(self) -> list[str]:
        fsx_claim(self.cluster, self.ns)
        for node in NODES:
            label_node(self.cluster, node, POOL, self.ns)
        return self.lost

    def __exit__(self, *exc: object) -> None:
        for node in self.lost:
            if node not in self.kubelet.nodes:
                self.kubelet.add_node(node, TRN1_32XLARGE)
        for node in NODES:
            label_node(self.cluster, node, POOL, None)


def scenario(
    cluster: Cluster, kubelet: FakeKubelet, ns: str, name: str, lose_rank0: bool,
    restore: list[str],
) -> None:  # fmt: skip
    kubelet.plan(TRAINING, TRAINS, namespace=ns)
    kubelet.plan(SPARE, STANDS_BY, namespace=ns)  # the newest plan wins: spares stand by
    scheduling = {"queue": "test", "nodeSelector": {POOL: ns}}
    create(cluster, small_job(name, ns, nodes=2, spares=1, scheduling=scheduling,
                              args=["bert-pretrain", "--max-steps", "100000"]))  # fmt: skip
    gang_name = f"{name}-train"

    def stepping() -> Obj | None:
        """The status once 2 training pods and the spare run and rank 0 served a step."""
        status = status_of(cluster, name, ns)
        pods = running_pods(cluster, ns)
        spares_ = sum(1 for _, spare in pods.values() if spare)
        moving = (status.get("progress") or {}).get("step", 0) > 0
        return status if (len(pods), spares_) == (3, 1) and moving else None

    status = wait_until(stepping, 240, "training at 2 nodes with 1 spare standing by", every=1)
    assert status["phase"] == "Training", status
    gang = get(cluster, VCJOB, gang_name, ns) or {}
    assert gang["spec"]["minAvailable"] == 3, gang["spec"]
    assert [t["name"] for t in gang["spec"]["tasks"]] == ["node", "spare"]
    [spare_node] = [node for node, spare in running_pods(cluster, ns).values() if spare]
    wait_until(lambda: (status_of(cluster, name, ns).get("spares") or {}).get("standby"),
               60, "the spare's node on status", every=0.5)  # fmt: skip
    step_before = int((status_of(cluster, name, ns).get("progress") or {}).get("step", 0))

    pods = training(cluster, ns)
    rank0 = f"{gang_name}-node-0"
    lost = pods[rank0] if lose_rank0 else pods[f"{gang_name}-node-1"]
    restore.append(lost)
    loss = time.monotonic()
    kubelet.lose_node(lost)

    def swapped() -> Obj | None:
        spares_ = status_of(cluster, name, ns).get("spares") or {}
        return spares_ if spares_.get("swaps") == 1 else None

    spares_ = wait_until(swapped, 300, "the swap on status", every=0.5)
    swapped_at = time.monotonic() - loss
    wait_until(lambda: _fresh(cluster, ns, lost), 300, "2 training pods again", every=0.5)
    placed = _iso_now()

    def advanced() -> Obj | None:  # rank 0 of the restarted gang serves steps again
        status = status_of(cluster, name, ns)
        progress = status.get("progress") or {}
        return status if str(progress.get("advancedAt", "")) >= placed else None

    status = wait_until(advanced, 300, "training again at 2 nodes", every=0.5)
    recovered = time.monotonic() - loss
    print(
        f"\nspare swap ({'node 0' if lose_rank0 else 'node 1'}): node {lost} lost -> swapped "
        f"{swapped_at:.1f} s -> training again at 2 nodes {recovered:.1f} s (restarts "
        f"{status.get('restarts')}, disruptions {status.get('disruptions')}; step before "
        f"{step_before})"
    )
    assert spares_["lastSwap"]["node"] == lost and spares_["lastSwap"]["reason"] == "NodeGone"
    assert spares_["lastSwap"]["spares"] == [spare_node], spares_
    assert spares_["reserved"] == 0 and spares_["wanted"] == 1
    # The same world size, the same gang (no compile, no new name), no retry spent.
    assert status.get("restarts", 0) == 0, status
    assert status["trainingJob"] == gang_name
    now = training(cluster, ns)
    assert sorted(now) == [rank0, f"{gang_name}-node-1"], now
    assert spare_node in now.values() and lost not in now.values(), now
    stages = {j["metadata"]["labels"].get("trainium.dev/stage") for j in _vcjobs(cluster, ns)}
    assert stages == {"train"}, stages
    told = [e for e in events(cluster, ns, name) if e["reason"] == "SpareSwapped"]
    assert any(f"training node {lost} was lost (NodeGone)" in e["message"] for e in told), told

    # The replacement spare is asked for once the gang trains again: its pod waits for a node.
    def replacement() -> list[str] | None:
        found = cluster.kubectl("get", "pods", "-n", ns, "-l", "trainium.dev/role=spare",
                                "-o", "json")  # fmt: skip
        phases = [p["status"].get("phase") for p in json.loads(found.stdout)["items"]]
        return phases if phases == ["Pending"] else None

    wait_until(replacement, 60, "the replacement spare's pod, Pending", every=0.5)
    gang = get(cluster, VCJOB, gang_name, ns) or {}
    assert gang["spec"]["minAvailable"] == 2 and gang["spec"]["tasks"][1]["replicas"] == 1
    if lose_rank0:
        return
    # A node joins the pool: the replacement stands by on it and is reserved again.
    kubelet.add_node(lost, TRN1_32XLARGE)
    label_node(cluster, lost, POOL, ns)

    def reserved_again() -> Obj | None:
        spares_ = status_of(cluster, name, ns).get("spares") or {}
        return spares_ if (spares_.get("reserved"), spares_.get("standby")) == (1, [lost]) else None

    wait_until(reserved_again, 120, "the replacement spare reserved on the node back", every=0.5)
    gang = get(cluster, VCJOB, gang_name, ns) or {}
    assert gang["spec"]["minAvailable"] == 3, gang["spec"]
    assert training(cluster, ns) == now  # the training pods never stopped for it


PODS = "/api/v1/namespaces/{ns}/pods"
TJS = "/apis/trainium.dev/v1alpha1/namespaces/{ns}/trainiumjobs"


def test_a_node_turning_neuron_unhealthy_checkpoints_then_goes_to_the_spare(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    kubelet.plan(TRAINING, TRAINS, namespace=ns)
    kubelet.plan(SPARE, STANDS_BY, namespace=ns)
    bad = ""
    with pool(cluster, kubelet, ns), Recorder(cluster.api, PODS.format(ns=ns)) as pods, \
            Recorder(cluster.api, TJS.format(ns=ns)) as jobs:  # fmt: skip
        try:
            scheduling = {"queue": "test", "nodeSelector": {POOL: ns}}
            create(cluster, small_job("sick", ns, nodes=2, spares=1, scheduling=scheduling,
                                      args=["bert-pretrain", "--max-steps", "100000"]))  # fmt: skip
            standing = lambda: (status_of(cluster, "sick", ns).get("spares") or {}).get("standby")  # noqa: E731
            [spare_node] = wait_until(standing, 240, "training, the spare standing by", every=1)
            first = training(cluster, ns)
            bad = first["sick-train-node-1"]
            began = time.monotonic()
            neuron_health(cluster, bad, True)

            def swapped() -> Obj | None:
                status = status_of(cluster, "sick", ns)
                last = (status.get("spares") or {}).get("lastSwap") or {}
                now = training(cluster, ns)
                back = len(now) == 2 and bad not in now.values()
                return status if last.get("replacement") and back else None

            status = wait_until(swapped, 300, "the spare's node training in its place", every=1)
            took = time.monotonic() - began
        finally:
            if bad:
                neuron_health(cluster, bad, False)
    spares_ = status["spares"]
    print(f"\nhealth swap: {bad} NeuronHealth True -> spare {spare_node} training {took:.1f} s")
    last = spares_["lastSwap"]
    assert (last["node"], last["reason"], last["spares"]) == (bad, "NodeUnhealthy", [spare_node])
    assert last["replacement"] == spare_node and spares_["swaps"] == 1, spares_
    assert spare_node in training(cluster, ns).values()
    assert [(e["node"], e["reason"]) for e in status["excludedNodes"]] == [(bad, "NodeUnhealthy")]
    assert status.get("restarts", 0) == 0 and status.get("disruptions") == 1, status
    assert {j["metadata"]["labels"].get("trainium.dev/stage") for j in _vcjobs(cluster, ns)} == {
        "train"
    }  # the same cache entry: no compile
    _stopped_before_swapped(pods.versions(), jobs.versions(), set(first))
    told = [e["message"] for e in events(cluster, ns, "sick") if e["reason"] == "SpareSwapped"]
    assert any(f"training node {bad} was taken out (NodeUnhealthy)" in m for m in told), told
    assert any(f"spare on node {spare_node} took the place" in m for m in told), told


def _stopped_before_swapped(pods: list[Any], jobs: list[Any], first: set[str]) -> None:
    """The gang was told to stop (its pods' graceful deletion: SIGTERM) before the swap, and
    no pod of the job failed but one being stopped."""
    stopped = [v.rv for v in pods if v.name in first and v.obj["metadata"].get("deletionTimestamp")]
    swaps = [v.rv for v in jobs if ((v.obj.get("status") or {}).get("spares") or {}).get("swaps")]
    assert stopped and swaps and min(stopped) < min(swaps), (stopped[:1], swaps[:1])
    failed = [v for v in pods if v.phase == "Failed"]
    assert all(v.obj["metadata"].get("deletionTimestamp") for v in failed), [
        v.name for v in failed if not v.obj["metadata"].get("deletionTimestamp")
    ]


def _iso_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fresh(cluster: Cluster, ns: str, lost: str) -> bool:
    """Both training pods run again, none on the lost node."""
    pods = training(cluster, ns)
    return len(pods) == 2 and lost not in pods.values()


def _vcjobs(cluster: Cluster, ns: str) -> list[Obj]:
    proc = cluster.kubectl("get", VCJOB, "-n", ns, "-o", "json")
    return list(json.loads(proc.stdout)["items"])
