"""Issue 28's elastic scenario on a real cluster: a node dies with no spare, the job trains on.

Three fake trn1.32xlarge nodes carry this test's pool label (the tier's fourth does not: no
spare). A 3-node elastic job with minNodes 2 (global batch 192 = 3 x 32 x 2 = 2 x 32 x 3)
precompiles the 3- and the 2-node cache entries, then trains at 3. One node is lost as EKS loses
an instance: nothing on it runs or reports any more and the cloud controller deletes the Node;
the real pod garbage collector then deletes its orphaned pod, and Volcano restarts the gang,
which cannot form at 3. After spec.elastic.shrinkAfterSeconds the operator replaces it with a
2-node gang, which trains from the 2-node entry with no compile; when a node joins again, the
gang grows back to 3 at the next checkpoint rank 0 serves.
"""

from __future__ import annotations

import json
import time
from typing import Any

import procs
from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import TJ, VCJOB, create, events, fsx_claim, get, small_job
from kubelet import TRN1_32XLARGE, Behavior, FakeKubelet, Metrics
from nodesignals import label_node, training_pods

Obj = dict[str, Any]
TRAINING = {"trainium.dev/stage": "train"}
POOL = "tier.trainium.dev/elastic-pool"
NODES = ("trn1-32xl-0", "trn1-32xl-1", "trn1-32xl-2")
#: Runs until stopped; a checkpoint every 10 steps at 5 steps a second.
TRAINS = Behavior(
    outcome="RunForever", metrics=Metrics(total_steps=100000, rate=5.0, checkpoint_every=10)
)


def status_of(cluster: Cluster, name: str, namespace: str) -> Obj:
    return dict((get(cluster, TJ, name, namespace) or {}).get("status") or {})


def vcjobs(cluster: Cluster, namespace: str) -> list[Obj]:
    proc = cluster.kubectl("get", VCJOB, "-n", namespace, "-o", "json")
    return list(json.loads(proc.stdout)["items"])


def test_an_elastic_job_shrinks_without_a_compile_and_grows_back(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    for node in NODES:
        label_node(cluster, node, POOL, ns)
    lost = ""
    try:
        lost = scenario(cluster, kubelet, ns)
    finally:
        if lost and lost not in kubelet.nodes:
            kubelet.add_node(lost, TRN1_32XLARGE)
        for node in NODES:
            label_node(cluster, node, POOL, None)


def scenario(cluster: Cluster, kubelet: FakeKubelet, ns: str) -> str:
    """The scenario; returns the node it lost (restored by the caller if still gone)."""
    kubelet.plan(TRAINING, TRAINS, namespace=ns)
    elastic = {"minNodes": 2, "globalBatchSize": 192, "batchSizePerProcess": 1,
               "shrinkAfterSeconds": 10}  # fmt: skip
    scheduling = {"queue": "test", "nodeSelector": {POOL: ns}}
    body = small_job("elastic", ns, nodes=3, precompile={"policy": "IfNotCached"},
                     elastic=elastic, scheduling=scheduling)  # fmt: skip
    create(cluster, body)

    def training_at(size: int) -> Obj | None:
        """The status once a gang of `size` trains: its pods run and rank 0 served a step."""
        status = status_of(cluster, "elastic", ns)
        pods = training_pods(cluster, ns)
        name = status.get("trainingJob") or "elastic-train"  # a resized gang's name is new
        gang = get(cluster, VCJOB, name, ns) or {}
        progress = status.get("progress") or {}
        sized = (status.get("elastic") or {}).get("currentNodes") == size
        ours = progress.get("gang") == gang.get("metadata", {}).get("uid")
        stepping = ours and progress.get("step", 0) > 0
        return status if sized and len(pods) == size and stepping else None

    status = wait_until(lambda: training_at(3), 240, "training at 3 nodes", every=1)
    assert status["phase"] == "Training" and status["elastic"]["display"] == "3/3"
    compiles = {j["metadata"]["name"]: j for j in vcjobs(cluster, ns)
                if j["metadata"]["labels"].get("trainium.dev/stage") == "precompile"}  # fmt: skip
    assert sorted(compiles) == ["elastic-compile-n2", "elastic-compile-n3"], sorted(compiles)
    entry2 = compiles["elastic-compile-n2"]["metadata"]["labels"]["trainium.dev/cache-entry"]
    records = cluster.kubectl("get", "configmap", "-n", ns, "-l", "trainium.dev/cache-entry",
                              "-o", "json")  # fmt: skip
    states = {
        c["metadata"]["name"]: c["data"]["state"] for c in json.loads(records.stdout)["items"]
    }
    assert len(states) == 2 and set(states.values()) == {"Ready"}, states
    assert entry2 in states

    # A node of the gang dies; there is no spare in the pool.
    pods = training_pods(cluster, ns)
    lost = sorted(pods.values())[-1]
    [orphan] = [name for name, node in pods.items() if node == lost]
    orphan_uid = (get(cluster, "pod", orphan, ns) or {})["metadata"]["uid"]
    loss = time.monotonic()
    kubelet.lose_node(lost)

    def gone() -> bool:  # the restarted gang's pod may take its name
        pod = get(cluster, "pod", orphan, ns)
        return pod is None or pod["metadata"]["uid"] != orphan_uid

    wait_until(gone, 300, f"pod {orphan} removed (the operator, on the Node's deletion)", every=0.5)
    collected = time.monotonic() - loss
    shrunk = lambda: (status_of(cluster, "elastic", ns).get("elastic") or {}).get("resizes") == 1  # noqa: E731
    wait_until(shrunk, 300, "the gang resized", every=0.5)
    resized_at = time.monotonic() - loss
    status = wait_until(lambda: training_at(2), 300, "training again at 2 nodes", every=0.5)
    recovered = time.monotonic() - loss
    print(
        f"\nelastic recovery: node {lost} lost -> its pod deleted {collected:.1f} s -> "
        f"resized {resized_at:.1f} s -> training again at 2 nodes {recovered:.1f} s "
        f"(restarts {status.get('restarts')}, disruptions {status.get('disruptions')}, "
        f"last failure {(status.get('lastFailure') or {}).get('reason')})"
    )
    # The gang had its shrinkAfterSeconds (10) to form again at 3: an old wait, from the first
    # gang's Pending start, must not count (it did while status.elastic kept notFormedSince).
    assert resized_at >= 10 - 1, f"resized {resized_at:.1f} s after the loss"
    assert status["elastic"]["display"] == "2/3" and status["elastic"]["resizes"] == 1
    assert status["elastic"]["lastResize"]["kind"] == "Shrink"
    assert lost not in training_pods(cluster, ns).values()
    # No compile: no new precompile job, and training reads the 2-node entry (a cache hit).
    after = [j["metadata"]["name"] for j in vcjobs(cluster, ns)
             if j["metadata"]["labels"].get("trainium.dev/stage") == "precompile"]  # fmt: skip
    assert sorted(after) == sorted(compiles), after
    assert status["cache"]["entry"] == entry2, status["cache"]
    precompiled = next(c for c in status["conditions"] if c["type"] == "Precompiled")
    assert precompiled["status"] == "True", precompiled
    [train] = [j for j in vcjobs(cluster, ns) if j["metadata"]["name"] == status["trainingJob"]]
    assert train["spec"]["minAvailable"] == 2 and status["trainingJob"] != "elastic-train"
    resized = [e for e in events(cluster, ns, "elastic") if e["reason"] == "Resized"]
    assert any(e["message"].startswith("from 3 to 2 nodes because") for e in resized), resized

    # The node comes back: the gang grows to 3 at the next checkpoint.
    kubelet.add_node(lost, TRN1_32XLARGE)
    label_node(cluster, lost, POOL, ns)
    status = wait_until(lambda: training_at(3), 300, "training at 3 nodes again", every=1)
    assert status["elastic"]["resizes"] == 2 and status["elastic"]["lastResize"]["kind"] == "Grow"
    resized = [e for e in events(cluster, ns, "elastic") if e["reason"] == "Resized"]
    assert any(e["message"].startswith("from 2 to 3 nodes because") for e in resized), resized
    by_size = status["cost"]["instanceHoursBySize"]
    assert set(by_size) == {"3", "2"} and by_size["2"] > 0, status["cost"]
    sizes = [s["nodes"] for s in status["elastic"]["sizes"]]
    assert sizes[-3:] == [3, 2, 3], sizes
    described = cluster.kubectl("describe", "tj", "elastic", "-n", ns).stdout
    assert "Current Nodes:" in described and "Resized" in described
    header = cluster.kubectl("get", "tj", "elastic", "-n", ns).stdout.splitlines()[0]
    assert "SIZE" in header
    return lost


def freeze(cluster: Cluster, namespace: str, on: bool) -> None:
    """An admission policy that refuses, in `namespace`, every delete of a Volcano job and every
    TrainiumJob status write (or not): a leader's pass then writes only its annotations."""
    name = f"freeze-{namespace}"[:63]
    if not on:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                        name, "--ignore-not-found", check=False)  # fmt: skip
        return
    rules = [{"apiGroups": ["batch.volcano.sh"], "apiVersions": ["*"], "resources": ["jobs"],
              "operations": ["DELETE"]},
             {"apiGroups": ["trainium.dev"], "apiVersions": ["*"],
              "resources": ["trainiumjobs/status"], "operations": ["UPDATE"]}]  # fmt: skip
    docs = [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": rules},
                  "validations": [{"expression": "false", "message": "the test freezes the job"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {
                      "kubernetes.io/metadata.name": namespace}}}}},
    ]  # fmt: skip
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": docs}))  # fmt: skip


def test_a_leader_killed_between_naming_a_shrinks_successor_and_the_delete_builds_it_smaller(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """Issue 34 5(a): the successor's name and size are on the job; the old gang still exists
    (its delete refused) when the leader dies; the next one creates one gang, at 2 nodes."""
    fsx_claim(cluster, ns)
    for node in NODES:
        label_node(cluster, node, POOL, ns)
    lost = ""
    try:
        kubelet.plan(TRAINING, TRAINS, namespace=ns)
        # The test must see notFormedSince and freeze the job before the shrink is due: 10 s on
        # an idle machine; at load 20-30 its polls and the policy's apply took longer, with or
        # without issue 43's device requests (the shrink ran before the freeze: 6 of 7 runs).
        after = round(procs.scaled(10))
        elastic = {"minNodes": 2, "globalBatchSize": 192, "batchSizePerProcess": 1,
                   "shrinkAfterSeconds": after}  # fmt: skip
        scheduling = {"queue": "test", "nodeSelector": {POOL: ns}}
        create(cluster, small_job("crash", ns, nodes=3, precompile={"policy": "Never"},
                                  elastic=elastic, scheduling=scheduling))  # fmt: skip

        def running_at_3() -> bool:
            status = status_of(cluster, "crash", ns)
            return status.get("phase") == "Training" and len(training_pods(cluster, ns)) == 3

        wait_until(running_at_3, 240, "training at 3 nodes", every=1)
        lost = sorted(training_pods(cluster, ns).values())[-1]
        kubelet.lose_node(lost)

        def waiting() -> bool:  # shrinkAfterSeconds counts from here, on status
            return "notFormedSince" in (status_of(cluster, "crash", ns).get("elastic") or {})

        wait_until(waiting, 120, "the gang seen not formed", every=0.5)
        freeze(cluster, ns, True)  # the shrink's pass can write its annotations, nothing else

        def named() -> Obj | None:
            notes = (get(cluster, TJ, "crash", ns) or {})["metadata"].get("annotations") or {}
            return notes if notes.get("trainium.dev/train-gang") else None

        notes = wait_until(named, 300, "the shrink's successor named on the job", every=0.5)
        successor = notes["trainium.dev/train-gang"]
        assert [j["metadata"]["name"] for j in vcjobs(cluster, ns)] == ["crash-train"]
        running_operator.kill()  # the leader dies with the old gang not yet deleted
        before = status_of(cluster, "crash", ns).get("elastic") or {}
        assert (before.get("currentNodes"), before.get("resizes")) == (3, 0), before
        freeze(cluster, ns, False)
        running_operator.start(timeout=60)

        def trains_at_2() -> Obj | None:
            status = status_of(cluster, "crash", ns)
            pods = training_pods(cluster, ns)
            return status if status.get("trainingJob") == successor and len(pods) == 2 else None

        status = wait_until(trains_at_2, 300, "the successor training at 2 nodes", every=1)
        gangs = [j for j in vcjobs(cluster, ns) if not j["metadata"].get("deletionTimestamp")]
        assert [(j["metadata"]["name"], j["spec"]["minAvailable"]) for j in gangs] == [
            (successor, 2)
        ], gangs
        assert status["elastic"]["currentNodes"] == 2 and status["elastic"]["resizes"] == 1
        assert status["elastic"]["lastResize"]["kind"] == "Shrink"
        assert [s["nodes"] for s in status["elastic"]["sizes"]] == [3, 2]
        assert json.loads(notes["trainium.dev/train-gang-size"]) == {"nodes": 2, "resize": 1}
    finally:
        freeze(cluster, ns, False)
        if lost and lost not in kubelet.nodes:
            kubelet.add_node(lost, TRN1_32XLARGE)
        for node in NODES:
            label_node(cluster, node, POOL, None)
