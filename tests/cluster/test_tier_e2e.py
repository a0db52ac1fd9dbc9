"""Issue 40: the real trainer runs inside the tier's pods, started only from the operator's pods.

Scenario 1, the tutorial's shape. The running pods, the nodes, the shards and "the image" are
realtrainer.py's. No test here writes a termination message, a metric or a checkpoint: the
trainer does.
"""

from __future__ import annotations

import subprocess
import sys
import time

from cluster import Cluster, wait_until
from jobs import TJ, VCJOB, children, create, get, wait_condition
from kubelet import FakeKubelet
from realtrainer import MAX_STEPS, Obj, metrics, tiny_bert, volume


def test_tutorial_shape_precompile_then_training_with_the_real_trainer(
    cluster: Cluster, trainer_pods: FakeKubelet, ns: str
) -> None:
    kubelet = trainer_pods
    began = time.monotonic()
    create(cluster, tiny_bert("tiny", ns))
    seen: list[Obj] = []

    def progress() -> Obj | None:
        job = get(cluster, TJ, "tiny", ns) or {}
        found = (job.get("status") or {}).get("progress") or {}
        if found.get("step"):
            seen.append(found)
        return found if found.get("step") or job.get("status", {}).get("phase") in (
            "Succeeded", "Failed") else None  # fmt: skip

    wait_until(progress, 420, "progress from rank 0's metrics, or the end", every=1)
    job = wait_condition(cluster, "tiny", ns, "Succeeded", timeout=420)
    took = time.monotonic() - began
    status = job["status"]
    assert status["cache"]["outcome"] == "miss", status
    stages = {
        v["metadata"]["labels"]["trainium.dev/stage"] for v in children(cluster, VCJOB, ns, "tiny")
    }
    assert stages == {"precompile", "train"}, stages
    # Progress on status came from the real rank 0: the total is the trainer's --max-steps.
    assert seen and seen[-1]["totalSteps"] == MAX_STEPS, seen
    out = volume(kubelet) / "output" / "tiny"
    records = [r for r in metrics(out) if "loss" in r]
    assert records and records[-1]["step"] == MAX_STEPS, records[-3:]
    assert records[-1]["loss"] < records[0]["loss"], [(r["step"], r["loss"]) for r in records]
    assert sorted(p.name for p in out.glob("checkpoint*")), sorted(p.name for p in out.iterdir())
    probe = ("import sys, transformers; m = transformers.AutoModelForPreTraining.from_pretrained("
             "sys.argv[1]); print(type(m).__name__)")  # fmt: skip
    loaded = subprocess.run([sys.executable, "-c", probe, str(out / "model")], check=True,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert "Bert" in loaded.stdout, loaded.stdout
    # The precompile gang ran the trainer's precompile mode; the cache dirs are on the volume.
    pre = [r for r in kubelet.runs(ns) if r.pod["metadata"]["labels"].get("trainium.dev/stage")
           == "precompile"]  # fmt: skip
    assert pre and all(b.exit_code == 0 for r in pre for b in r.containers), pre
    print(f"tutorial shape: apply -> Succeeded in {took:.0f}s")

    # A second job with the same cache key skips the precompile.
    create(cluster, tiny_bert("again", ns, steps=5))  # the step limit is not in the cache key

    def training_from_the_cache() -> Obj | None:
        status = (get(cluster, TJ, "again", ns) or {}).get("status") or {}
        gangs = children(cluster, VCJOB, ns, "again")
        return status if gangs and (status.get("cache") or {}).get("outcome") else None

    status = wait_until(training_from_the_cache, 300, "again's cache outcome and gang", every=1)
    assert status["cache"]["outcome"] == "hit", status
    stages = {v["metadata"]["labels"]["trainium.dev/stage"]
              for v in children(cluster, VCJOB, ns, "again")}  # fmt: skip
    assert stages == {"train"}, stages
    # Training from the cache was shown above; its pods get SIGTERM now (CI's minutes count).
    cluster.kubectl("delete", TJ, "again", "-n", ns, "--timeout=120s")
