"""spec.scheduling.placement on real Volcano: a gang lands under one network node, or waits.

Four fake trn2.48xlarge nodes carry EKS's network-node labels: two layer-3 groups (a0, a1 and
b0, b1) under one layer-2 and one layer-1 network node. Volcano learns them the way a cluster
would: the chart's `volcano.networkTopology` rendering, its controller ConfigMap applied (the
real vc-controller-manager's label discovery makes the HyperNodes) and its scheduler conf
written to the file the tier's vc-scheduler reloads (the network-topology-aware plugin). The
module puts everything back afterwards: the nodes go (discovery then deletes the HyperNodes),
then the ConfigMap, then the scheduler's own conf, so no other tier test sees any of it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from cluster import Cluster, wait_until
from harness import OperatorProcess
from helmchart import by_kind, render
from jobs import TJ, VCJOB, children, condition, create, events, fsx_claim, get, small_job
from kubelet import Behavior, FakeKubelet, NodeType

Obj = dict[str, Any]
#: trn2.48xlarge as its device plugins report it: 16 Trainium2 devices, 128 NeuronCores, 16 EFA.
TRN2_48XLARGE = NodeType("trn2.48xlarge", "192", "2048Gi", 16, 128, 16)
LAYER = "topology.k8s.aws/network-node-layer-"
GROUPS = {"trn2-a0": "nn-a", "trn2-a1": "nn-a", "trn2-b0": "nn-b", "trn2-b1": "nn-b"}
SOURCE = "volcano.sh/network-topology-source=label"
RUNNING = Behavior(outcome="RunForever")
REQUIRED = {"placement": {"mode": "Required", "networkNodeLayer": 3}, "queue": "test"}
PREFERRED = {"placement": {"mode": "Preferred"}, "queue": "test"}


def hypernodes(cluster: Cluster) -> list[Obj]:
    out = cluster.kubectl("get", "hypernodes", "-l", SOURCE, "-o", "json").stdout
    return list(json.loads(out)["items"])


def groups_found(cluster: Cluster) -> dict[int, list[set[str]]]:
    """{tier: [member names of each HyperNode]} as discovery made them."""
    found: dict[int, list[set[str]]] = {}
    for hn in hypernodes(cluster):
        members = {m["selector"]["exactMatch"]["name"] for m in hn["spec"]["members"]}
        found.setdefault(hn["spec"]["tier"], []).append(members)
    return found


class SchedulerConf:
    """The tier's vc-scheduler conf file: replaced atomically, each change waited for in its log.

    Volcano reloads on any write in the conf's directory; a file written in place can be read
    half-written (the log then says "Scheduler config is invalid"), a rename cannot.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.path = cluster.root / "vc-conf" / "volcano-scheduler.conf"
        self.log = cluster.root / "vc-scheduler.log"
        self.original = self.path.read_text()

    def write(self, text: str, marker: str) -> None:
        """Install text; return once the scheduler logged loading a conf containing marker."""
        start = self.log.stat().st_size
        staged = self.path.parent.parent / "vc-conf.next"
        staged.write_text(text)
        os.replace(staged, self.path)

        def loaded() -> bool:
            with self.log.open("rb") as f:
                f.seek(start)
                tail = f.read().decode(errors="replace")
            return "Successfully loaded Scheduler conf" in tail and marker in tail

        wait_until(loaded, 30, f"vc-scheduler to load a conf with {marker!r}")


def chart_confs() -> tuple[Obj, str]:
    """The chart's Volcano controller ConfigMap and scheduler conf (volcano.networkTopology)."""
    docs = by_kind(render("volcano.networkTopology.enabled=true"), "ConfigMap")
    found = {d["metadata"]["name"]: d for d in docs}
    scheduler = found["volcano-scheduler-configmap"]["data"]["volcano-scheduler.conf"]
    return found["volcano-controller-configmap"], scheduler


@pytest.fixture(scope="module")
def topology(cluster: Cluster, kubelet: FakeKubelet) -> Iterator[None]:
    """The four labelled nodes, Volcano's HyperNodes from them, the plugin on; then undone."""
    controller, scheduler = chart_confs()
    conf = SchedulerConf(cluster)
    for name, group in GROUPS.items():
        kubelet.add_node(name, TRN2_48XLARGE)
        labels = {f"{LAYER}1": "nn-top", f"{LAYER}2": "nn-mid", f"{LAYER}3": group}
        cluster.api.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": labels}})
    try:
        started = time.monotonic()
        cluster.apply(controller)
        want = {1: [{"trn2-a0", "trn2-a1"}, {"trn2-b0", "trn2-b1"}]}

        def discovered() -> bool:
            found = groups_found(cluster)
            tier1 = sorted(found.get(1, []), key=sorted)
            return tier1 == want[1] and len(found.get(2, [])) == 1 and len(found.get(3, [])) == 1

        wait_until(discovered, 60, "HyperNodes of the two layer-3 groups from label discovery")
        print(
            f"HyperNodes discovered in {time.monotonic() - started:.1f} s: {groups_found(cluster)}"
        )
        conf.write(scheduler, "network-topology-aware")
        yield
    finally:
        for name in GROUPS:  # the kubelet stops heartbeating them first
            kubelet.nodes.pop(name, None)
            cluster.kubectl("delete", "node", name, "--wait=false", check=False)
            cluster.kubectl("delete", "csinode", name, "--wait=false", check=False)
        wait_until(lambda: not hypernodes(cluster), 60, "discovery to delete its HyperNodes")
        cluster.kubectl("delete", "configmap", "-n", controller["metadata"]["namespace"],
                        controller["metadata"]["name"], check=False)  # fmt: skip
        conf.write(conf.original, "Successfully loaded")


def pods_on_group_nodes(cluster: Cluster) -> list[str]:
    items = json.loads(cluster.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    return [p["metadata"]["name"] for p in items if p["spec"].get("nodeName") in GROUPS]


@pytest.fixture
def free(topology: None, cluster: Cluster, kubelet: FakeKubelet, ns: str) -> str:
    """The four nodes free (an earlier test's namespace may still be going), pods kept running."""
    wait_until(lambda: not pods_on_group_nodes(cluster), 90, "the group nodes to be free")
    kubelet.plan({}, RUNNING, namespace=ns)
    fsx_claim(cluster, ns)
    return ns


def block(cluster: Cluster, ns: str, node: str) -> None:
    """A pod holding all of node's Neuron devices (bound by name, past the scheduler)."""
    limits = {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "16"}
    cluster.apply({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"block-{node}", "namespace": ns},
        "spec": {"nodeName": node, "containers": [
            {"name": "c", "image": "registry.example/idle:1", "resources": {"limits": limits}}]},
    })  # fmt: skip


def gang(cluster: Cluster, ns: str, name: str) -> list[Obj]:
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", f"trainium.dev/job-name={name}",
                          "-o", "json").stdout  # fmt: skip
    return list(json.loads(out)["items"])


def bound(cluster: Cluster, ns: str, name: str, timeout: float = 60) -> dict[str, str]:
    """{pod: node} once both pods of the 2-node gang are bound."""

    def both() -> dict[str, str] | None:
        placed = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in gang(cluster, ns, name)}
        return placed if len(placed) == 2 and all(placed.values()) else None

    started = time.monotonic()
    placed: dict[str, str] = wait_until(both, timeout, f"the {name} gang bound")
    print(f"{name}: bound in {time.monotonic() - started:.1f} s to {sorted(placed.values())}")
    return placed


def job(name: str, ns: str, scheduling: Obj) -> Obj:
    return small_job(name, ns, instanceType="trn2.48xlarge", nodes=2, scheduling=scheduling)


def test_a_required_gang_lands_under_one_layer3_network_node(
    cluster: Cluster, running_operator: OperatorProcess, free: str
) -> None:
    create(cluster, job("close", free, REQUIRED))
    placed = bound(cluster, free, "close")
    assert len({GROUPS[node] for node in placed.values()}) == 1, placed
    [vcjob] = children(cluster, VCJOB, free, "close")
    assert vcjob["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}


def test_a_required_gang_waits_rather_than_straddle_and_says_why(
    cluster: Cluster, running_operator: OperatorProcess, free: str
) -> None:
    """One node free in each group: Pending, unsplit; a group freed, it lands there."""
    block(cluster, free, "trn2-a0")
    block(cluster, free, "trn2-b0")
    create(cluster, job("apart", free, REQUIRED))

    def refused() -> list[Obj] | None:
        """Both pods marked Unschedulable by Volcano: it tried and would not split the gang."""
        pods = gang(cluster, free, "apart")
        said = [c for p in pods for c in p["status"].get("conditions") or []
                if (c["type"], c["status"], c.get("reason")) == ("PodScheduled", "False",
                                                                 "Unschedulable")]  # fmt: skip
        return pods if len(pods) == 2 and len(said) == 2 else None

    pods = wait_until(refused, 60, "Volcano to mark the gang Unschedulable")
    assert [p["spec"].get("nodeName") for p in pods] == [None, None]

    def says_why() -> Obj | None:
        running = condition(get(cluster, TJ, "apart", free), "Running")
        return running if "network-node-layer-3" in running.get("message", "") else None

    running = wait_until(says_why, 60, "the job's status to name the placement")
    assert running["reason"] == "GangPending", running
    assert "all 2 node(s) under one network-node-layer-3 network node" in running["message"]
    assert all(not p["spec"].get("nodeName") for p in gang(cluster, free, "apart"))
    said = [e["message"] for e in events(cluster, free, "apart")]
    assert any("network-node-layer-3" in m for m in said), said  # the phase's Event says it too

    started = time.monotonic()
    cluster.kubectl("delete", "pod", "block-trn2-a0", "-n", free, "--grace-period=0", "--force")
    placed = bound(cluster, free, "apart")
    print(f"apart: placed {time.monotonic() - started:.1f} s after group a was freed")
    assert sorted(placed.values()) == ["trn2-a0", "trn2-a1"], placed


def test_a_preferred_gang_is_placed_split_when_no_group_has_room(
    cluster: Cluster, running_operator: OperatorProcess, free: str
) -> None:
    block(cluster, free, "trn2-a0")
    block(cluster, free, "trn2-b0")
    create(cluster, job("near", free, PREFERRED))
    placed = bound(cluster, free, "near")
    assert sorted(placed.values()) == ["trn2-a1", "trn2-b1"], placed
    [vcjob] = children(cluster, VCJOB, free, "near")
    assert vcjob["spec"]["networkTopology"] == {"mode": "soft"}


def test_the_chart_discovery_lists_what_volcano_used(cluster: Cluster, topology: None) -> None:
    """The tiers discovery made are the layers the operator's mapping assumes (layer 3: tier 1)."""
    controller, _ = chart_confs()
    conf = yaml.safe_load(controller["data"]["volcano-controller.conf"])
    labels = [n["nodeLabel"] for n in conf["networkTopologyDiscovery"][0]["config"][
        "networkTopologyTypes"]["eks"]]  # fmt: skip
    names = {hn["spec"]["tier"]: hn["spec"].get("tierName") for hn in hypernodes(cluster)}
    assert names == {1: labels[2], 2: labels[1], 3: labels[0]}
    assert labels[2] == f"{LAYER}3"
