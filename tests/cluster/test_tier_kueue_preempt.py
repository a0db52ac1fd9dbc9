"""Issue 33 on a real cluster: real Kueue preempts a running lower-priority TrainiumJob for a
higher-priority one (a ClusterQueue with quota for one gang, withinClusterQueue LowerPriority).

The lower job's gang stops (its Volcano job deleted, as runPolicy.suspend deletes it), the job
says Preempted with Kueue's message, no retry is spent, its Workload is requeued by the
operator's server-side apply as kueue-admission (Kueue's own job framework would make it), and
once the higher job ends Kueue admits it again: its gang is created again and the step in
status continues from the checkpoint rank 0 served (the fake kubelet's trainer is told to start
there, as the real trainer resumes from the newest checkpoint on the job's volume).

Needs tests/cluster/kueue.py, the module fixture `kueue` (tests/cluster/conftest.py) and
test_tier_kueue.py's helpers (branch kueuetier).
"""

from __future__ import annotations

from typing import Any

import pytest

from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import TJ, condition, create, events, fsx_claim, get
from kubelet import Behavior, FakeKubelet, Metrics

pytest.importorskip("kueue", reason="real Kueue on the tier: tests/cluster/kueue.py (kueuetier)")
from kueue import API, Kueue
from test_tier_kueue import (  # noqa: F401  (flavor is a fixture)
    LOCAL_QUEUE,
    NEURON,
    PRIORITY_LABEL,
    active,
    flavor,
    kueue_job,
    released,
    running_pods,
    workloads_of,
)

Obj = dict[str, Any]
#: Runs until stopped; rank 0 serves a checkpoint every 10 steps at 5 steps a second.
STEPS = Metrics(total_steps=100000, rate=5.0, checkpoint_every=10)


def priority_classes(cluster: Cluster, namespace: str) -> tuple[str, str]:
    """Kueue WorkloadPriorityClasses low (10) and high (1000) for namespace: their names."""
    low, high = f"low-{namespace}"[:63], f"high-{namespace}"[:63]
    cluster.apply(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
         "metadata": {"name": low}, "value": 10},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
         "metadata": {"name": high}, "value": 1000},
    )  # fmt: skip
    return low, high


def preempting_queues(cluster: Cluster, namespace: str, rf: str, neuron: int) -> str:
    """A ClusterQueue for namespace alone that preempts lower priorities within itself, and
    LocalQueue team-a there; the ClusterQueue's name."""
    name = f"cq-{namespace}"
    resources: list[Obj] = [
        {"name": "cpu", "nominalQuota": 1024},
        {"name": "memory", "nominalQuota": "4Ti"},
        {"name": NEURON, "nominalQuota": neuron},
        {"name": "vpc.amazonaws.com/efa", "nominalQuota": neuron},
    ]
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{
                    "coveredResources": [r["name"] for r in resources],
                    "flavors": [{"name": rf, "resources": resources}],
                }],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": name},
        },
    )  # fmt: skip
    for path in (f"{API}/clusterqueues/{name}",
                 f"{API}/namespaces/{namespace}/localqueues/{LOCAL_QUEUE}"):  # fmt: skip
        wait_until(lambda path=path: active(cluster.api.get(path)), 60, f"{path} Active")
    return name


def priority_job(name: str, namespace: str, priority_class: str) -> Obj:
    body = kueue_job(name, namespace)
    body["metadata"]["labels"][PRIORITY_LABEL] = priority_class
    return body


def job_status(cluster: Cluster, name: str, namespace: str) -> Obj:
    return (get(cluster, TJ, name, namespace) or {}).get("status") or {}


def test_a_higher_priority_job_preempts_a_lower_one_which_resumes_at_its_checkpoint(
    cluster: Cluster,
    kubelet: FakeKubelet,
    kueue: Kueue,
    flavor: str,  # noqa: F811
    running_operator: OperatorProcess,
    ns: str,
) -> None:
    fsx_claim(cluster, ns)
    cq = preempting_queues(cluster, ns, flavor, neuron=16)  # one one-node gang at a time
    low_class, high_class = priority_classes(cluster, ns)
    kubelet.plan({}, Behavior(outcome="RunForever", metrics=STEPS), namespace=ns)
    create(cluster, priority_job("low", ns, low_class))
    running_pods(kubelet, ns, 1, "low")

    def checkpointed() -> int | None:
        step = (job_status(cluster, "low", ns).get("progress") or {}).get("checkpointStep")
        return step if isinstance(step, int) and step >= 10 else None

    kept = wait_until(checkpointed, 90, "a checkpoint served by low's rank 0", every=0.5)
    create(cluster, priority_job("high", ns, high_class))

    def preempted() -> Obj | None:
        cond = condition(get(cluster, TJ, "low", ns), "Running")
        return cond if cond.get("reason") in ("Preempted", "WaitingForQuota") else None

    wait_until(preempted, 90, "low preempted by Kueue", every=0.5)
    running_pods(kubelet, ns, 1, "high")  # low's gang gone, high's admitted and running
    low = job_status(cluster, "low", ns)
    left = max(kept, int((low.get("progress") or {}).get("step") or 0))
    assert low["phase"] == "Pending" and low.get("restarts", 0) == 0, low
    assert "Preempted" in condition({"status": low}, "Running").get("message", ""), low
    said = [e for e in events(cluster, ns, "low") if e["reason"] == "Preempted"]
    assert said and "Kueue evicted Workload" in said[0]["message"], said
    (wl,) = workloads_of(kueue, ns, "low")
    assert "admission" not in wl["status"], wl["status"]
    assert condition(wl, "QuotaReserved")["status"] == "False"
    requeued = condition(wl, "Requeued")
    assert (requeued["status"], requeued["reason"]) == ("True", "Preempted"), requeued

    # The resumed trainer starts at the checkpoint it left (the real one reads it from the volume).
    resumed = Metrics(total_steps=100000, rate=5.0, checkpoint_every=10, start=kept)
    kubelet.plan({"trainium.dev/job-name": "low"}, Behavior(outcome="RunForever",
                 metrics=resumed), namespace=ns)  # fmt: skip
    assert kubelet.finish(ns) == 1  # high's pod ends: its Workload Finished, low admitted again
    running_pods(kubelet, ns, 1, "low")

    def continued() -> Obj | None:
        status = job_status(cluster, "low", ns)
        step = (status.get("progress") or {}).get("step")
        return status if isinstance(step, int) and step > left else None

    low = wait_until(continued, 90, "low's step going on from its checkpoint", every=0.5)
    assert low["phase"] == "Training" and low.get("restarts", 0) == 0, low
    kubelet.finish(ns)
    wait_until(lambda: job_status(cluster, "low", ns).get("phase") == "Succeeded", 90,
               "low Succeeded")  # fmt: skip
    wait_until(lambda: released(kueue, cq), 60, f"ClusterQueue {cq} usage back to 0")
