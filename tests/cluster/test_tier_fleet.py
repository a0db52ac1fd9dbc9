"""Issue 35 on a real cluster: 1,024 fake nodes, a 1,024-node elastic job, and one queued behind it.

The module adds 1,024 fake trn1.32xlarge nodes that carry a label and a NoSchedule taint of
their own: only jobs that select the label and tolerate the taint land there (other modules'
jobs never do), and the nodes are deleted at the module's end, so Volcano's per-cycle cost goes
back to the tier's six nodes. An elastic job of 1,024 nodes (minNodes 1,023, one process per
node, the global batch a multiple of both sizes) is admitted by the API server's CEL and
Volcano's webhook, finds both sizes in the cache (compiled by an earlier job of the namespace:
two more 1,024-pod gangs would double the module's time) and trains at 1,024 (progress from
rank 0, the only pod that serves metrics). A node is lost (the Node deleted): the gang cannot
form again, and after shrinkAfterSeconds the operator restarts it at 1,023 from the cached
entry; the node comes back and the gang grows to 1,024 at the next checkpoint. A second
1,024-node job in the same Volcano queue then waits without a single pod while the first runs
(its pods request their Neuron devices, so its PodGroup's minResources count them and Volcano's
enqueue refuses it: "resource in cluster is overused"; before issue 43 the PodGroup counted pods
only, Volcano made all 1,024 pods and only the allocate found they did not fit); the first
finishes and Succeeds, and the second is bound and Succeeds.

Opt-in (TRAINIUM_TIER_FLEET=1): on the loaded 2-core machine the module took 17-22 minutes (far
over the tier's budget): each 1,024-pod gang costs minutes of API-server time there.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import fsx_claim, small_job
from kubelet import TRN1_32XLARGE, Behavior, FakeKubelet, Metrics
from trainium_operator.api import spec as specs
from trainium_operator.domain import elastic as sizes
from trainium_operator.domain.status import now_iso
from trainium_operator.manifests import cache
from trainium_operator.manifests.ownership import Owner

Obj = dict[str, Any]
OPT_IN = "TRAINIUM_TIER_FLEET"
pytestmark = pytest.mark.skipif(
    os.environ.get(OPT_IN) != "1", reason=f"{OPT_IN}=1 runs the 1,024-node module (17-22 minutes)"
)
FLEET = 1024
POOL = "tier.trainium.dev/fleet"
QUEUE = "fleet"
NAMES = tuple(f"fleet-{i:04d}" for i in range(FLEET))
TAINT = {"key": POOL, "value": "true", "effect": "NoSchedule"}
SCHEDULING = {
    "queue": QUEUE,
    "nodeSelector": {POOL: "true"},
    "tolerations": [{"key": POOL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
}
#: Runs until stopped; rank 0 serves a checkpoint every 10 steps at 5 steps a second.
TRAINS = Behavior(
    outcome="RunForever",
    metrics=Metrics(total_steps=100000, rate=5.0, checkpoint_every=10),
    metrics_index=0,
)
TJ_PATH = "/apis/trainium.dev/v1alpha1/namespaces/{ns}/trainiumjobs/{name}"
VC_PATH = "/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/{name}"
PG_PATH = "/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups"
#: Seconds each step may take on a loaded 2-core machine (a 1,024-pod gang is minutes there).
DEADLINE = 600


@pytest.fixture(scope="module")
def fleet(cluster: Cluster, kubelet: FakeKubelet) -> Iterator[tuple[str, ...]]:
    """1,024 labelled and tainted nodes and the `fleet` queue, for this module only."""
    cluster.ensure_queue(QUEUE)
    began = time.monotonic()
    try:
        kubelet.add_nodes(NAMES, TRN1_32XLARGE, labels={POOL: "true"}, taints=[TAINT])
        print(f"\nfleet: {FLEET} nodes added in {time.monotonic() - began:.1f} s")
        yield NAMES
    finally:
        began = time.monotonic()
        kubelet.remove_nodes(NAMES)
        print(f"\nfleet: {FLEET} nodes removed in {time.monotonic() - began:.1f} s")


def status_of(cluster: Cluster, ns: str, name: str) -> Obj:
    return dict((cluster.api.get(TJ_PATH.format(ns=ns, name=name)) or {}).get("status") or {})


def gang_pods(kubelet: FakeKubelet, ns: str, gang: str) -> list[str]:
    """The pods of gang the fake kubelet runs now (bound, started, not ended)."""
    return [n for n in kubelet.running(ns) if n.startswith(f"{gang}-node-")]


def podgroups(cluster: Cluster, ns: str) -> dict[str, Obj]:
    """Volcano job name -> its PodGroup."""
    listing = cluster.api.request("GET", PG_PATH.format(ns=ns))["items"]
    return {
        ref["name"]: pg
        for pg in listing
        for ref in pg["metadata"].get("ownerReferences") or ()
        if ref.get("kind") == "Job"
    }


def mark(what: str, seconds: float) -> None:
    """A step's timing, printed as it is reached (a failure later keeps it)."""
    print(f"\nfleet: {what} {seconds:.1f} s", flush=True)


def seed_cache(cluster: Cluster, body: Obj) -> list[str]:
    """The job's precompile sizes, Ready in the cache as an earlier job of its namespace compiled
    them (the records the operator writes then); their record names."""
    spec, ns = specs.parse(body), body["metadata"]["namespace"]
    earlier, now = Owner("fleet-earlier", ns, str(uuid.uuid4())), now_iso()
    names = []
    for size in sizes.precompile_sizes(spec):
        at = sizes.at_size(spec, size)
        ident = cache.identity(at)
        record = cache.record(ident, at, earlier, cache.READY, started_at=now, now=now)
        cluster.api.request("POST", f"/api/v1/namespaces/{ns}/configmaps", record)
        names.append(ident.record_name)
    return names


def test_a_1024_node_elastic_job_trains_shrinks_grows_and_a_second_queues_behind_it(
    cluster: Cluster,
    kubelet: FakeKubelet,
    fleet: tuple[str, ...],
    running_operator: OperatorProcess,
    ns: str,
) -> None:
    fsx_claim(cluster, ns)
    kubelet.plan({"trainium.dev/stage": "train", "trainium.dev/job-name": "fleet"}, TRAINS,
                 namespace=ns)  # fmt: skip
    elastic = {"minNodes": FLEET - 1, "globalBatchSize": FLEET * (FLEET - 1),
               "batchSizePerProcess": 1, "shrinkAfterSeconds": 10}  # fmt: skip
    body = small_job("fleet", ns, nodes=FLEET, nprocPerNode=1, elastic=elastic,
                     precompile={"policy": "IfNotCached"}, scheduling=SCHEDULING)  # fmt: skip
    records = seed_cache(cluster, body)
    assert len(records) == 2, records
    created = time.monotonic()
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(body))

    def gang_bound() -> dict[str, float] | None:
        bound = kubelet.bound(ns, "fleet-train-node-")
        return bound if len(bound) == FLEET else None

    bound = wait_until(gang_bound, DEADLINE, f"the {FLEET}-node gang bound", every=0.5)
    mark("create -> 1024 pods bound", max(bound.values()) - created)

    def training_at(size: int) -> Obj | None:
        """The status once a gang of `size` trains: its pods run and rank 0 served a step."""
        status = status_of(cluster, ns, "fleet")
        name = status.get("trainingJob")
        if not name or (status.get("elastic") or {}).get("currentNodes") != size:
            return None
        if len(gang_pods(kubelet, ns, name)) != size:
            return None
        gang = cluster.api.get(VC_PATH.format(ns=ns, name=name)) or {}
        progress = status.get("progress") or {}
        ours = progress.get("gang") == gang.get("metadata", {}).get("uid")
        return status if ours and progress.get("step", 0) > 0 else None

    status = wait_until(lambda: training_at(FLEET), DEADLINE, f"training at {FLEET}", every=1)
    mark("training at 1024 (rank 0 stepping)", time.monotonic() - created)
    assert status["elastic"]["display"] == f"{FLEET}/{FLEET}"
    assert sorted(podgroups(cluster, ns)) == ["fleet-train"], "a precompile gang ran"
    assert status["cache"]["entry"] in records, status["cache"]

    # A node of the gang (not rank 0's) dies; there is no spare in the pool.
    gang = status["trainingJob"]
    lost = _node_of(cluster, ns, f"{gang}-node-{FLEET - 1}")
    loss = time.monotonic()
    kubelet.lose_node(lost)
    status = wait_until(lambda: training_at(FLEET - 1), DEADLINE, "training at 1023", every=1)
    mark("node lost -> training at 1023", time.monotonic() - loss)
    assert status["elastic"]["lastResize"]["kind"] == "Shrink", status["elastic"]
    assert status["elastic"]["display"] == f"{FLEET - 1}/{FLEET}"
    assert status["cache"]["entry"] in records, status["cache"]
    assert not [g for g in podgroups(cluster, ns) if "compile" in g], "the shrink compiled"

    # The node comes back: the gang grows to 1,024 at the next checkpoint.
    back = time.monotonic()
    kubelet.add_node(lost, TRN1_32XLARGE, labels={POOL: "true"}, taints=[TAINT], heartbeat=False)
    status = wait_until(lambda: training_at(FLEET), DEADLINE, "training at 1024 again", every=1)
    mark("node back -> training at 1024", time.monotonic() - back)
    assert status["elastic"]["resizes"] == 2 and status["elastic"]["lastResize"]["kind"] == "Grow"

    # A second 1,024-node job in the same queue waits: Volcano's enqueue refuses it, no pods.
    second = small_job("queued", ns, nodes=FLEET, scheduling=SCHEDULING)
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(second))

    def seen_refused() -> Obj | None:
        group = podgroups(cluster, ns).get("queued-train") or {}
        if not group:
            return None
        selector = f"involvedObject.name={group['metadata']['name']},reason=Unschedulable"
        said = json.loads(cluster.kubectl("get", "events", "-n", ns, "--field-selector",
                                          selector, "-o", "json").stdout)["items"]  # fmt: skip
        return group if any("overused" in (e.get("message") or "") for e in said) else None

    group = wait_until(seen_refused, DEADLINE, "the second gang refused by Volcano's enqueue")
    print(f"\nfleet: second job waits: {json.dumps(group['spec'].get('minResources'))}")
    # Still queued as the first ends: not one of its pods made, the first's gang whole.
    assert podgroups(cluster, ns)["queued-train"]["status"]["phase"] == "Pending"
    assert group["spec"]["minResources"]["aws.amazon.com/neuron"] == str(16 * FLEET)
    made = [p for p in cluster.api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
            if p["metadata"]["name"].startswith("queued-train-node-")]  # fmt: skip
    assert made == [], f"{len(made)} pods of a gang that cannot fit"
    assert len(gang_pods(kubelet, ns, status["trainingJob"])) == FLEET

    # The first finishes; the second is bound and runs to its end.
    done = time.monotonic()
    kubelet.finish(ns)
    wait_until(lambda: status_of(cluster, ns, "fleet").get("phase") == "Succeeded", DEADLINE,
               "the first job Succeeded", every=1)  # fmt: skip
    mark("finish -> first Succeeded", time.monotonic() - done)
    wait_until(lambda: status_of(cluster, ns, "queued").get("phase") == "Succeeded", DEADLINE,
               "the second job Succeeded", every=1)  # fmt: skip
    mark("finish -> second Succeeded", time.monotonic() - done)
    bound = kubelet.bound(ns, "queued-train-node-")
    assert len(bound) == FLEET, len(bound)
    mark("finish -> second's 1024 pods bound", max(bound.values()) - done)


def _node_of(cluster: Cluster, ns: str, pod: str) -> str:
    found = cluster.api.get(f"/api/v1/namespaces/{ns}/pods/{pod}") or {}
    node = str((found.get("spec") or {}).get("nodeName") or "")
    assert node, f"pod {pod} is not bound"
    return node
