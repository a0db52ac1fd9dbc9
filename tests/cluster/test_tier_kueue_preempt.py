"""Issue 33 on a real cluster: real Kueue preempts a running lower-priority TrainiumJob for a
higher-priority one (a ClusterQueue with quota for one gang, withinClusterQueue LowerPriority).

The lower job's gang stops (its Volcano job deleted, as runPolicy.suspend deletes it), the job
says Preempted with Kueue's message, no retry is spent, its Workload is requeued by the
operator's server-side apply as kueue-admission (Kueue's own job framework would make it), and
once the higher job ends Kueue admits it again: its gang is created again and the step in
status continues from the checkpoint rank 0 served (the fake kubelet's trainer is told to start
there, as the real trainer resumes from the newest checkpoint on the job's volume).

The module's Kueue is conftest's `kueue` fixture; queues, priority classes and the test's
world (`queued`) come from kueuesetup.py.
"""

from __future__ import annotations

from typing import Any

from cluster import wait_until
from jobs import TJ, condition, create, events, get, small_job
from kubelet import Behavior, Metrics
from kueuesetup import Queued, in_queue, priority_classes

Obj = dict[str, Any]
#: Runs until stopped; rank 0 serves a checkpoint every 10 steps at 5 steps a second.
STEPS = Metrics(total_steps=100000, rate=5.0, checkpoint_every=10)


def test_a_higher_priority_job_preempts_a_lower_one_which_resumes_at_its_checkpoint(
    queued: Queued,
) -> None:
    cluster, kubelet, ns = queued.cluster, queued.kubelet, queued.ns
    cq = queued.queues(neuron=16, preempt=True)  # one one-node gang at a time
    low_class, high_class = priority_classes(cluster, ns)
    kubelet.plan({}, Behavior(outcome="RunForever", metrics=STEPS), namespace=ns)
    create(cluster, in_queue(small_job("low", ns), low_class))
    queued.running(1, "low")

    def checkpointed() -> int | None:
        step = (queued.status("low").get("progress") or {}).get("checkpointStep")
        return step if isinstance(step, int) and step >= 10 else None

    kept = wait_until(checkpointed, 90, "a checkpoint served by low's rank 0", every=0.5)
    create(cluster, in_queue(small_job("high", ns), high_class))

    def preempted() -> Obj | None:
        cond = condition(get(cluster, TJ, "low", ns), "Running")
        return cond if cond.get("reason") in ("Preempted", "WaitingForQuota") else None

    wait_until(preempted, 90, "low preempted by Kueue", every=0.5)
    queued.running(1, "high")  # low's gang gone, high's admitted and running
    low = queued.status("low")
    left = max(kept, int((low.get("progress") or {}).get("step") or 0))
    assert low["phase"] == "Pending" and low.get("restarts", 0) == 0, low
    assert "Preempted" in condition({"status": low}, "Running").get("message", ""), low
    said = [e for e in events(cluster, ns, "low") if e["reason"] == "Preempted"]
    assert said and "Kueue evicted Workload" in said[0]["message"], said
    (wl,) = queued.workloads("low")
    assert "admission" not in wl["status"], wl["status"]
    assert condition(wl, "QuotaReserved")["status"] == "False"
    requeued = condition(wl, "Requeued")
    assert (requeued["status"], requeued["reason"]) == ("True", "Preempted"), requeued

    # The resumed trainer starts at the checkpoint it left (the real one reads it from the volume).
    resumed = Metrics(total_steps=100000, rate=5.0, checkpoint_every=10, start=kept)
    kubelet.plan({"trainium.dev/job-name": "low"}, Behavior(outcome="RunForever",
                 metrics=resumed), namespace=ns)  # fmt: skip
    assert kubelet.finish(ns) == 1  # high's pod ends: its Workload Finished, low admitted again
    queued.running(1, "low")

    def continued() -> Obj | None:
        status = queued.status("low")
        step = (status.get("progress") or {}).get("step")
        return status if isinstance(step, int) and step > left else None

    low = wait_until(continued, 90, "low's step going on from its checkpoint", every=0.5)
    assert low["phase"] == "Training" and low.get("restarts", 0) == 0, low
    kubelet.finish(ns)
    wait_until(lambda: queued.status("low").get("phase") == "Succeeded", 90,
               "low Succeeded")  # fmt: skip
    queued.wait_released(cq, 60)
