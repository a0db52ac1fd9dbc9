"""A user's view of a job's life on a real cluster: gang scheduling, failures, deletes, restarts."""

from __future__ import annotations

import json
import time

from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import (
    TJ,
    VCJOB,
    children,
    condition,
    create,
    fsx_claim,
    get,
    small_job,
    wait_condition,
)
from kubelet import TRN1_32XLARGE_NODES, Behavior, FakeKubelet

RUNNING = Behavior(outcome="RunForever")
#: Evictions in a row (issue 17: one in 15 was once counted as a restart).
EVICTIONS = 20


def pods(cluster: Cluster, namespace: str) -> list[dict]:
    return list(
        json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    )


def running_pods(cluster: Cluster, kubelet: FakeKubelet, namespace: str, count: int) -> list[str]:
    """Wait until the kubelet runs `count` pods of namespace; their names."""
    return list(
        wait_until(
            lambda: len(kubelet.running(namespace)) == count and kubelet.running(namespace),
            120,
            f"{count} running pods in {namespace}",
        )
    )


def test_gang_larger_than_the_free_nodes_never_starts_partially(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """Five trn1.32xlarge pods on four nodes: Volcano makes none of them (issue 43, item 8: its
    PodGroup counts the gang's Neuron devices, so its enqueue refuses it, as it refuses a queued
    1,024-node gang, instead of making every pod and binding none); the deadline fails it
    Unschedulable, naming what is short."""
    fsx_claim(cluster, ns)
    nodes = TRN1_32XLARGE_NODES + 1
    create(cluster, small_job("too-big", ns, nodes=nodes, runPolicy={"startupDeadlineSeconds": 60}))
    deadline = time.monotonic() + 150
    sized: set[str] = set()  # the PodGroup's Neuron devices, while it exists
    while True:
        made = [p["metadata"]["name"] for p in pods(cluster, ns)]
        assert made == [], f"Volcano made pods of a gang that cannot fit: {made}"
        listed = cluster.kubectl("get", "podgroups.scheduling.volcano.sh", "-n", ns, "-o", "json")
        for group in json.loads(listed.stdout)["items"]:
            sized.add((group["spec"].get("minResources") or {}).get("aws.amazon.com/neuron", ""))
        job = get(cluster, TJ, "too-big", ns) or {}
        if (job.get("status") or {}).get("phase") == "Failed":
            break
        assert time.monotonic() < deadline, f"never Failed: {json.dumps(job.get('status'))}"
        time.sleep(1)
    failed = condition(job, "Failed")
    assert failed.get("reason") == "Unschedulable", job["status"]
    # Real Volcano's words, on the PodGroup's Event: "resource in cluster is overused: overused
    # aws.amazon.com/neuron, overused vpc.amazonaws.com/efa".
    assert "never admitted by Volcano (none of its pods made)" in failed["message"], failed
    assert "overused aws.amazon.com/neuron" in failed["message"], failed
    assert sized == {str(16 * nodes)}, sized  # the whole gang's devices (was: pods only)


def test_a_queued_1024_node_job_makes_no_pods(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """Issue 43, item 8: a 1,024-node job the cluster cannot hold waits without a single pod.

    Before, its PodGroup's minResources counted pods only: Volcano enqueued it and made all
    1,024 pods, the scheduler writing a condition on each. Now the PodGroup carries the gang's
    16,384 Neuron devices and Volcano's enqueue refuses it ("resource in cluster is overused").
    """
    fsx_claim(cluster, ns)
    nodes = 1024
    create(cluster, small_job("huge", ns, nodes=nodes, precompile={"policy": "Never"}))

    def refused() -> dict | None:
        made = [p["metadata"]["name"] for p in pods(cluster, ns)]
        assert made == [], f"Volcano made {len(made)} pods of a gang that cannot fit"
        listed = cluster.kubectl("get", "podgroups.scheduling.volcano.sh", "-n", ns, "-o", "json")
        for group in json.loads(listed.stdout)["items"]:
            selector = f"involvedObject.name={group['metadata']['name']},reason=Unschedulable"
            said = cluster.kubectl("get", "events", "-n", ns, "--field-selector", selector,
                                   "-o", "json")  # fmt: skip
            if any(
                "overused" in (e.get("message") or "") for e in json.loads(said.stdout)["items"]
            ):
                return dict(group)
        return None

    group = wait_until(refused, 180, "the 1,024-node gang refused by Volcano's enqueue", every=2)
    assert group["spec"]["minResources"]["aws.amazon.com/neuron"] == str(16 * nodes), group
    assert group["status"].get("phase") == "Pending", group["status"]
    time.sleep(10)  # a few more scheduling sessions: still no pod of it
    assert pods(cluster, ns) == []
    cluster.kubectl("delete", TJ, "huge", "-n", ns, "--wait=false")


def test_deleting_a_running_job_leaves_nothing(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """The garbage collector removes the Volcano jobs, pods, PodGroups and the FSx claim."""
    kubelet.plan({}, RUNNING, namespace=ns)
    job = small_job("doomed", ns, nodes=2)
    fsx = {"fileSystemId": "fs-0123456789abcdef0", "dnsName": "fs.example", "mountName": "abc"}
    job["spec"]["storage"] = {"fsx": fsx}
    create(cluster, job)
    running_pods(cluster, kubelet, ns, 2)
    cluster.kubectl("delete", TJ, "doomed", "-n", ns, "--timeout=60s")

    def gone() -> bool:
        left = [
            f"{kind}: {len(items)}"
            for kind in (VCJOB, "pods", "podgroups.scheduling.volcano.sh", "pvc")
            if (
                items := json.loads(cluster.kubectl("get", kind, "-n", ns, "-o", "json").stdout)[
                    "items"
                ]
            )
        ]
        return not left

    wait_until(gone, 90, f"everything of the job in {ns} to be deleted", every=1)
    assert kubelet.running(ns) == []


def test_operator_sigkill_mid_lifecycle_makes_no_duplicate(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """SIGKILL right after the first Volcano job appears; the restarted operator adopts it."""
    fsx_claim(cluster, ns)
    kubelet.plan({}, RUNNING, namespace=ns)
    create(cluster, small_job("survivor", ns, nodes=2))
    wait_until(lambda: children(cluster, VCJOB, ns, "survivor"), 60, "the first Volcano job")
    running_operator.kill()
    running_operator.start(timeout=60)
    running_pods(cluster, kubelet, ns, 2)
    assert len(children(cluster, VCJOB, ns, "survivor")) == 1
    assert len(pods(cluster, ns)) == 2
    kubelet.finish(ns)
    wait_condition(cluster, "survivor", ns, "Succeeded", timeout=120)
    assert len(children(cluster, VCJOB, ns, "survivor")) == 1


def test_oom_killed_fails_fast_with_the_log_tail(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """OOMKilled is not retried, and lastFailure carries the log's tail (every time)."""
    fsx_claim(cluster, ns)
    lines = ("step 1 loss 9.1", "step 2 loss 8.7", "allocating 64 GiB host buffer")
    kubelet.plan({}, Behavior(outcome="OOMKilled", logs=lines), namespace=ns)
    missing = []
    for attempt in range(5):
        name = f"hungry-{attempt}"
        create(cluster, small_job(name, ns, runPolicy={"maxRetries": 3}))
        job = wait_condition(cluster, name, ns, "Failed", timeout=120)
        assert condition(job, "Failed")["reason"] == "OOMKilled", job["status"]
        assert job["status"].get("restarts", 0) == 0
        if "allocating 64 GiB host buffer" not in json.dumps(job["status"].get("lastFailure")):
            missing.append(f"{name}: {job['status'].get('lastFailure')}")
    assert missing == []


def test_max_retries_spent_fails_max_retries_exceeded(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """A retryable failure (Neuron runtime) on every run: restarts up to maxRetries, then Failed."""
    fsx_claim(cluster, ns)
    logs = (
        "2026-Nov-25 04:00:00.0000 1234:1234 ERROR   NRT:nrt_init  Failed to initialize devices",
    )
    kubelet.plan({}, Behavior(exit_code=1, logs=logs), namespace=ns)
    create(cluster, small_job("flaky", ns, runPolicy={"maxRetries": 1}))
    job = wait_condition(cluster, "flaky", ns, "Failed", timeout=180)
    assert condition(job, "Failed")["reason"] == "MaxRetriesExceeded", job["status"]
    assert job["status"]["restarts"] == 1


def test_evictions_count_as_disruptions_never_restarts(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """Evictions through the Eviction API (as a drain does), 20 in a row: disruptions only."""
    fsx_claim(cluster, ns)
    kubelet.plan({}, RUNNING, namespace=ns)
    create(cluster, small_job("evicted", ns, nodes=2, runPolicy={"maxRetries": 0}))
    evicted: set[str] = set()
    for count in range(1, EVICTIONS + 1):

        def new_gang() -> dict[str, str]:
            live = {u: n for u, n in kubelet.running_uids(ns).items() if u not in evicted}
            return live if len(live) == 2 else {}

        gang = wait_until(new_gang, 120, f"a new gang of 2 before eviction {count}")
        victim = sorted(gang.values())[count % 2]
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": victim, "namespace": ns}}  # fmt: skip
        cluster.api.request("POST", f"/api/v1/namespaces/{ns}/pods/{victim}/eviction", eviction)
        evicted.update(gang)

        def counted(count: int = count) -> dict | None:
            status = (get(cluster, TJ, "evicted", ns) or {}).get("status") or {}
            done = status.get("disruptions", 0) >= count or status.get("phase") == "Failed"
            return status if done else None

        status = wait_until(counted, 120, f"eviction {count} to be counted", every=0.5)
        why = condition({"status": status}, "Failed").get("message")
        assert status["phase"] != "Failed", f"eviction {count}: {why}"
        assert status.get("restarts", 0) == 0, f"eviction {count}: {status.get('lastFailure')}"
    running_pods(cluster, kubelet, ns, 2)
    kubelet.finish(ns)
    job = wait_condition(cluster, "evicted", ns, "Succeeded", timeout=120)
    assert job["status"]["disruptions"] == EVICTIONS and job["status"].get("restarts", 0) == 0


def test_suspend_and_resume(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    kubelet.plan({}, RUNNING, namespace=ns)
    create(cluster, small_job("pausable", ns))
    running_pods(cluster, kubelet, ns, 1)
    cluster.kubectl("patch", TJ, "pausable", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"runPolicy":{"suspend":true}}}')  # fmt: skip
    cluster.kubectl("wait", TJ, "pausable", "-n", ns, "--for=jsonpath={.status.phase}=Suspended",
                    "--timeout=60s")  # fmt: skip
    wait_until(lambda: not children(cluster, VCJOB, ns, "pausable"), 60, "Volcano jobs deleted")
    wait_until(lambda: not pods(cluster, ns), 60, "pods deleted")
    cluster.kubectl("patch", TJ, "pausable", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"runPolicy":{"suspend":false}}}')  # fmt: skip
    running_pods(cluster, kubelet, ns, 1)
    kubelet.finish(ns)
    wait_condition(cluster, "pausable", ns, "Succeeded", timeout=120)


def test_ttl_deletes_the_finished_job(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    create(cluster, small_job("brief", ns, runPolicy={"ttlSecondsAfterFinished": 2}))
    wait_until(lambda: get(cluster, TJ, "brief", ns) is None, 120, "the job deleted by its TTL")
    wait_until(lambda: not children(cluster, VCJOB, ns, "brief"), 60, "its Volcano jobs deleted")
