"""Issue 42 on a real cluster: a NoExecute DRA device taint on a device a `devices: dra` gang's
claim holds takes the node out (the gang stopped with SIGTERM, the node excluded, an elastic
shrink to the nodes left, no retry spent) before kube-controller-manager's device-taint eviction
deletes any pod (the claim tolerates the taint for dra.TOLERATION_SECONDS).

Real: the API server (resource.k8s.io/v1, DRADeviceTaints on by default in 1.36), the claims
kube-controller-manager's resourceclaim controller generates from the job's template (with the
template's labels and toleration), its device-taint eviction controller, Volcano's gang, the
operator under the chart's RBAC (its claim and slice watches).
Played (the tier has no Neuron DRA driver and its Volcano allocates no claims): the driver's
DeviceClass and one ResourceSlice per node (what the driver publishes), and each claim's
status.allocation + reservedFor, written by this test as a DRA scheduler would once Volcano
bound the pod (the fake kubelet runs pods whatever their claims). The taint is set on the slice
as Neuron's "isolate faulty devices" guide has the driver set it.

1. Played pods (make test-cluster, ~20 s): an elastic 3-node job shrinks to 2 off the tainted
   node; kube-controller-manager's eviction, postponed by the toleration, is cancelled.
2. The real trainer (TRAINIUM_E2E_FAULTS=1, minutes): the gang's trainers get SIGTERM,
   checkpoint and exit 143; the new gang resumes from that checkpoint without the node.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import TJ, create, fsx_claim, get, small_job
from kubelet import Behavior, FakeKubelet, Metrics
from nodesignals import label_node, training_pods
from realtrainer import (
    OPT_IN,
    TRN2_48XLARGE,
    log_events,
    stopped_with_checkpoint,
    tiny_bert,
    volume,
)
from trainium_operator.manifests import dra

Obj = dict[str, Any]
POOL = "tier.trainium.dev/dra-pool"
POOL_NODES = ("trn1-32xl-0", "trn1-32xl-1", "trn1-32xl-2")
DEVICES = 16  # trn1.32xlarge's Neuron devices
TAINT = {"key": "neuron.aws.com/unhealthy", "value": "HBM_UNCORRECTABLE_ERROR",
         "effect": "NoExecute"}  # fmt: skip
TRAINS = Behavior(
    outcome="RunForever", metrics=Metrics(total_steps=100000, rate=5.0, checkpoint_every=10)
)


def slice_name(ns: str, node: str) -> str:
    return f"{node}-{ns}"[:63]


def device_slice(ns: str, node: str, taint: bool = False, kind: str = "trn1.32xlarge") -> Obj:
    """The driver's slice of one node: its 16 devices, the first tainted if asked."""
    devices: list[Obj] = [
        {"name": f"neuron-{i}", "attributes": {"instanceType": {"string": kind}}}
        for i in range(DEVICES)
    ]
    if taint:
        devices[0]["taints"] = [TAINT]
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": slice_name(ns, node)},
        "spec": {"driver": dra.DRIVER, "nodeName": node, "devices": devices,
                 "pool": {"name": node, "generation": 2 if taint else 1,
                          "resourceSliceCount": 1}},
    }  # fmt: skip


def _items(cluster: Cluster, kind: str, ns: str) -> list[Obj]:
    proc = cluster.kubectl("get", kind, "-n", ns, "-o", "json")
    return list(json.loads(proc.stdout)["items"])


def allocate(cluster: Cluster, ns: str) -> int:
    """Play the DRA scheduler: each bound pod's unallocated claim gets its node's 16 devices."""
    pods = {p["metadata"]["name"]: p for p in _items(cluster, "pods", ns)}
    done = 0
    for claim in _items(cluster, "resourceclaims.resource.k8s.io", ns):
        owner = next((r for r in claim["metadata"].get("ownerReferences") or ()
                      if r.get("kind") == "Pod"), None)  # fmt: skip
        pod = pods.get(owner["name"]) if owner else None
        node = (pod or {}).get("spec", {}).get("nodeName")
        if not node or (claim.get("status") or {}).get("allocation"):
            continue
        results = [{"request": dra.REQUEST, "driver": dra.DRIVER, "pool": node,
                    "device": f"neuron-{i}"} for i in range(DEVICES)]  # fmt: skip
        where = {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}  # fmt: skip
        status = {"allocation": {"devices": {"results": results}, "nodeSelector": where},
                  "reservedFor": [{"resource": "pods", "name": owner["name"],
                                   "uid": owner["uid"]}]}  # fmt: skip
        proc = cluster.kubectl("patch", "resourceclaim", claim["metadata"]["name"], "-n", ns,
                               "--subresource=status", "--type=merge",
                               "-p", json.dumps({"status": status}), check=False)  # fmt: skip
        assert proc.returncode == 0 or "NotFound" in proc.stderr, proc.stderr  # gone with its pod
        done += 1
    return done


def test_a_device_taint_on_a_dra_gangs_claim_takes_the_node_out_before_the_eviction(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    for node in POOL_NODES:
        label_node(cluster, node, POOL, ns)
    try:
        with driver(cluster, ns, POOL_NODES, "trn1.32xlarge"):
            _shrinks_off_the_tainted_node(cluster, kubelet, ns)
    finally:
        for node in POOL_NODES:
            label_node(cluster, node, POOL, None)


@contextlib.contextmanager
def driver(cluster: Cluster, ns: str, nodes: tuple[str, ...], kind: str) -> Iterator[None]:
    """What the Neuron DRA driver publishes: its DeviceClass and a slice per node (then gone)."""
    selector = {"cel": {"expression": f"device.driver == '{dra.DRIVER}'"}}
    cluster.apply({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                   "metadata": {"name": dra.DEVICE_CLASS},
                   "spec": {"selectors": [selector]}})  # fmt: skip
    try:
        cluster.apply(*(device_slice(ns, node, kind=kind) for node in nodes))
        yield
    finally:
        for node in nodes:
            cluster.kubectl("delete", "resourceslice", slice_name(ns, node),
                            "--ignore-not-found", check=False)  # fmt: skip
        cluster.kubectl("delete", "deviceclass", dra.DEVICE_CLASS, "--ignore-not-found",
                        check=False)  # fmt: skip


def _shrinks_off_the_tainted_node(cluster: Cluster, kubelet: FakeKubelet, ns: str) -> None:
    kubelet.plan({"trainium.dev/stage": "train"}, TRAINS, namespace=ns)
    elastic = {"minNodes": 2, "globalBatchSize": 192, "batchSizePerProcess": 1,
               "shrinkAfterSeconds": 10}  # fmt: skip
    scheduling = {"queue": "test", "nodeSelector": {POOL: ns}}
    create(cluster, small_job("dt", ns, nodes=3, devices="dra", elastic=elastic,
                              scheduling=scheduling))  # fmt: skip

    def at(n: int) -> dict[str, str] | None:
        allocate(cluster, ns)
        pods = training_pods(cluster, ns)
        return pods if len(pods) == n else None

    first = wait_until(lambda: at(3), 240, "training at 3 with allocated claims", every=1)
    wait_until(lambda: allocate(cluster, ns) == 0 and _all_allocated(cluster, ns), 60,
               "every claim allocated")  # fmt: skip
    for claim in _items(cluster, "resourceclaims.resource.k8s.io", ns):
        (request,) = claim["spec"]["devices"]["requests"]
        assert request["exactly"]["tolerations"] == [dra.tolerate_eviction()], claim
    bad = sorted(first.values())[-1]
    began = time.monotonic()
    cluster.apply(device_slice(ns, bad, taint=True))

    def at_two() -> Obj | None:
        status = dict((get(cluster, TJ, "dt", ns) or {}).get("status") or {})
        pods = at(2)
        sized = (status.get("elastic") or {}).get("currentNodes") == 2
        return status if sized and pods and bad not in pods.values() else None

    status = wait_until(at_two, 300, "training at 2 without the tainted node", every=1)
    took = time.monotonic() - began
    excluded = [(e["node"], e["reason"]) for e in status.get("excludedNodes") or []]
    assert excluded == [(bad, "NodeUnhealthy")], status
    assert status.get("restarts", 0) == 0 and status.get("disruptions") == 1, status
    said = status["lastFailure"]["message"]
    assert "tainted neuron.aws.com/unhealthy=HBM_UNCORRECTABLE_ERROR:NoExecute" in said, said
    # kube-controller-manager saw the taint: the toleration postponed its eviction, and the
    # operator's stop cancelled it ("Cancelling deletion"); it never marked a pod for deletion.
    evictions = {e["message"] for e in _items(cluster, "events", ns)
                 if e.get("reason") == "DeviceTaintManagerEviction"}  # fmt: skip
    assert evictions <= {"Cancelling deletion"}, evictions
    assert took < dra.TOLERATION_SECONDS, took
    print(f"\ndevice taint: {bad} tainted -> training at 2 nodes without it {took:.1f} s")


def _all_allocated(cluster: Cluster, ns: str) -> bool:
    claims = _items(cluster, "resourceclaims.resource.k8s.io", ns)
    return bool(claims) and all((c.get("status") or {}).get("allocation") for c in claims)


THIRD = "trn2-dra-2"
STEPS = 64


@pytest.fixture
def third_trn2(kubelet: FakeKubelet, trn2_nodes: tuple[str, ...]) -> Iterator[str]:
    """A third trn2.48xlarge node: the gang of two has somewhere to go without a tainted one."""
    kubelet.add_node(THIRD, TRN2_48XLARGE)
    yield THIRD
    with contextlib.suppress(urllib.error.URLError):
        kubelet.remove_nodes((THIRD,))


@OPT_IN
def test_the_real_trainer_checkpoints_on_a_device_taint_and_resumes_without_the_node(
    cluster: Cluster,
    running_pods: FakeKubelet,
    trn2_nodes: tuple[str, ...],
    third_trn2: str,
    running_operator: OperatorProcess,
    ns: str,
) -> None:
    """The real trainer (the kubelet's running mode; TRAINIUM_E2E_FAULTS=1): a 2-node DRA job
    trains, a device its claim holds is tainted NoExecute; every trainer gets the operator's
    SIGTERM, checkpoints and exits 143 (no eviction came first); the new gang runs on the
    two other nodes, resumes from that checkpoint and finishes; no retry is spent."""
    kubelet = running_pods
    fsx_claim(cluster, ns)
    body = tiny_bert("sick", ns, STEPS, ("--checkpoint-every", "1000"), devices="dra")
    # The tier's kubelet gives a pod /dev/neuron* for the device plugin's resource only (a DRA
    # driver's CDI spec would for a claim): the preflight, which counts them, is off here.
    body["spec"].update(precompile={"policy": "Never"}, preflight=False)
    with driver(cluster, ns, (*trn2_nodes, third_trn2), TRN2_48XLARGE.name):
        create(cluster, body)

        def step() -> int:
            allocate(cluster, ns)
            status = (get(cluster, TJ, "sick", ns) or {}).get("status") or {}
            return int((status.get("progress") or {}).get("step") or 0)

        wait_until(lambda: step() >= 3 and _all_allocated(cluster, ns), 300, "training", every=1)
        first = list(kubelet.runs(ns))
        bad = sorted({r.pod["spec"]["nodeName"] for r in first})[0]
        cluster.apply(device_slice(ns, bad, taint=True, kind=TRN2_48XLARGE.name))
        kept = stopped_with_checkpoint(first, STEPS)

        def done() -> Obj | None:
            allocate(cluster, ns)
            job = get(cluster, TJ, "sick", ns) or {}
            return job if (job.get("status") or {}).get("phase") == "Succeeded" else None

        job = wait_until(done, 400, "the job Succeeded without the tainted node", every=1)
    _resumed_without(cluster, kubelet, ns, job, (first, bad, kept))


def _resumed_without(
    cluster: Cluster, kubelet: FakeKubelet, ns: str, job: Obj, stop: tuple[list[Any], str, int]
) -> None:
    """The job left `bad` (one disruption, no retry); its new gang resumed at `kept`."""
    first, bad, kept = stop
    status = job["status"]
    assert [(e["node"], e["reason"]) for e in status["excludedNodes"]] == [(bad, "NodeUnhealthy")]
    assert status.get("restarts", 0) == 0 and status.get("disruptions") == 1, status
    assert "NoExecute" in status["lastFailure"]["message"], status["lastFailure"]
    again = [r for r in kubelet.runs(ns) if r not in first]
    assert again and all(r.pod["spec"]["nodeName"] != bad for r in again), again
    rank0 = next(r for r in again if r.pod["metadata"]["name"].endswith("-0"))
    resumed = [e for e in log_events(rank0.containers[0].log.read_text())
               if e.get("event") == "resumed"]  # fmt: skip
    assert [e["step"] for e in resumed] == [kept], resumed
    summary = json.loads((Path(volume(kubelet)) / "output" / "sick" / "summary.json").read_text())
    assert summary["resumed_from_step"] == kept and summary["steps"] == STEPS, summary
    evictions = {e["message"] for e in _items(cluster, "events", ns)
                 if e.get("reason") == "DeviceTaintManagerEviction"}  # fmt: skip
    assert evictions <= {"Cancelling deletion"}, evictions
