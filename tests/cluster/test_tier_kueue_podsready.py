"""Issue 41: Kueue's waitForPodsReady (on by default since v0.19: 30 min timeout, recovery) and
the operator's PodsReady condition, on the real tier with short timeouts to keep it cheap.

The rest of the tier runs Kueue with its default configuration (tests/cluster/kueue.py adds no
waitForPodsReady: Kueue's own defaults apply). Here a module's Kueue has a timeout of
`TIMEOUT` seconds, the same recovery timeout, and a requeue backoff of a second:
- a precompile that runs longer than the timeout is not evicted (its gang runs: PodsReady True);
- a gang Volcano restarts (a node fails under it) recovers within the recovery timeout and is
  not evicted (PodsReady WaitForRecovery, then Recovered);
- a gang whose pods never start is evicted by the timeout (PodsReadyTimeout), and resumes as a
  preemption does: its gang stopped, no retry spent, its Workload requeued, the gang started
  again once Kueue admits it again.
"""

from __future__ import annotations

import time
from typing import Any

import procs
from cluster import wait_until
from jobs import TJ, condition, get, wait_condition
from kubelet import Behavior
from kueue import Kueue
from kueuesetup import PRECOMPILE, RUNNING, Queued, workloads_of

Obj = dict[str, Any]
#: waitForPodsReady's timeout and recoveryTimeout here (seconds), scaled with the machine's load.
TIMEOUT = int(procs.scaled(20))
CACHED: Obj = {"precompile": {"policy": "IfNotCached"}, "cache": {"name": "podsready"}}

#: This module's Kueue (conftest's `kueue` reads it) has short waitForPodsReady timeouts.
KUEUE_CONFIG: Obj = {"waitForPodsReady": {
    "timeout": f"{TIMEOUT}s", "recoveryTimeout": f"{TIMEOUT}s", "blockAdmission": False,
    "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 1,
                          "backoffMaxSeconds": 5},
}}  # fmt: skip


def evictions(kueue: Kueue, ns: str, job: str) -> list[Obj]:
    """The Evicted conditions (True) on the job's Workloads now."""
    return [
        condition(w, "Evicted")
        for w in workloads_of(kueue, ns, job)
        if condition(w, "Evicted").get("status") == "True"
    ]


def pods_ready(kueue: Kueue, ns: str, job: str, stage: str) -> Obj:
    found = [w for w in workloads_of(kueue, ns, job)
             if w["metadata"]["labels"].get("trainium.dev/stage") == stage]  # fmt: skip
    return condition(found[0], "PodsReady") if found else {}


def outlive_the_timeout(kueue: Kueue, ns: str, job: str) -> None:
    """Watch the job's Workloads for 1.5 timeouts: none is evicted."""
    end = time.monotonic() + 1.5 * TIMEOUT
    while time.monotonic() < end:
        assert evictions(kueue, ns, job) == [], workloads_of(kueue, ns, job)
        time.sleep(1)


def test_a_long_precompile_is_not_evicted_by_the_pods_ready_timeout(queued: Queued) -> None:
    """A compile that runs longer than waitForPodsReady's timeout: its gang runs, so the
    operator's PodsReady is True and Kueue leaves it alone; the job goes on to train."""
    cluster, kubelet, kueue, ns = queued.cluster, queued.kubelet, queued.kueue, queued.ns
    cq = queued.queues(neuron=16)
    kubelet.plan(PRECOMPILE, RUNNING, namespace=ns)
    queued.create("longcompile", **CACHED)
    queued.running(1, "longcompile")
    wait_until(lambda: pods_ready(kueue, ns, "longcompile", "precompile").get("status") == "True",
               procs.scaled(60), "PodsReady True on the compile Workload")  # fmt: skip
    outlive_the_timeout(kueue, ns, "longcompile")
    kubelet.plan({}, Behavior(outcome="Exit", run_seconds=1), namespace=ns)
    kubelet.finish(ns)
    wait_condition(cluster, "longcompile", ns, "Succeeded", timeout=int(procs.scaled(120)))
    assert evictions(kueue, ns, "longcompile") == []
    queued.wait_released(cq)


def test_a_gang_restart_recovers_without_an_eviction(queued: Queued) -> None:
    """A node fails under the running gang: Volcano restarts it (PodsReady WaitForRecovery),
    it runs again within the recovery timeout (Recovered): no eviction."""
    cluster, kubelet, kueue, ns = queued.cluster, queued.kubelet, queued.kueue, queued.ns
    queued.queues(neuron=16)
    kubelet.plan({}, RUNNING, namespace=ns)
    queued.create("restart")
    (pod,) = queued.running(1, "restart")
    wait_until(lambda: pods_ready(kueue, ns, "restart", "train").get("status") == "True",
               procs.scaled(60), "PodsReady True")  # fmt: skip
    before = set(kubelet.running_uids(ns))
    node = (get(cluster, "pod", pod, ns) or {})["spec"]["nodeName"]
    kubelet.fail_node(node, Behavior(outcome="Exit", exit_code=137))

    def again() -> bool:
        now = set(kubelet.running_uids(ns)) - before
        return bool(now) and pods_ready(kueue, ns, "restart", "train").get("status") == "True"

    wait_until(again, procs.scaled(120), "the gang running again, PodsReady True")
    assert pods_ready(kueue, ns, "restart", "train").get("reason") in ("Recovered", "Started")
    outlive_the_timeout(kueue, ns, "restart")
    kubelet.finish(ns)
    wait_condition(cluster, "restart", ns, "Succeeded", timeout=int(procs.scaled(90)))


def test_a_pods_ready_timeout_evicts_and_the_job_resumes_as_after_a_preemption(
    queued: Queued,
) -> None:
    """Pods that never start: Kueue evicts the Workload (PodsReadyTimeout); the operator stops
    the gang (no retry spent) and requeues the Workload; once Kueue admits it again the gang
    is created again and, its pods running now, the job runs to its end."""
    cluster, kubelet, ns = queued.cluster, queued.kubelet, queued.ns
    cq = queued.queues(neuron=16)
    kubelet.plan({}, Behavior(outcome="NeverStart"), namespace=ns)
    queued.create("stuck")

    def evicted() -> Obj | None:
        cond = condition(get(cluster, TJ, "stuck", ns), "Running")
        return cond if cond.get("reason") == "PodsReadyTimeout" else None

    cond = wait_until(evicted, procs.scaled(120), "the job saying PodsReadyTimeout", every=0.5)
    assert "no retry spent" in cond["message"] or "no runPolicy.maxRetries" in cond["message"]
    kubelet.plan({}, RUNNING, namespace=ns)
    queued.running(1, "stuck")
    (wl,) = queued.workloads("stuck")
    assert condition(wl, "Admitted").get("status") == "True", wl.get("status")
    status = (get(cluster, TJ, "stuck", ns) or {}).get("status") or {}
    assert not status.get("restarts"), status  # no runPolicy.maxRetries spent
    kubelet.finish(ns)
    wait_condition(cluster, "stuck", ns, "Succeeded", timeout=int(procs.scaled(90)))
    queued.wait_released(cq)
