"""Issue 40, scenarios 4 and 5 with the real trainer: a hung gang, a bad node, a bad data dir.

Minutes each on a busy machine, so opt-in: TRAINIUM_E2E_FAULTS=1 (README, "Tests"). Fixtures and
the job come from realtrainer.py (every pod of the test's namespace runs as processes).
 - hang: the trainer's processes are stopped (SIGSTOP, as a rank stuck in a collective): the
   operator's hang detection restarts the gang, whose trainer resumes from the newest checkpoint;
 - a node whose device plugin lacks a Neuron device: the real preflight init container fails
   there, the node is kept out and the job succeeds on another;
 - a data dir that does not exist: Failed, with the trainer's own `error:` line in the condition.
"""

from __future__ import annotations

import json
import signal
import time
from typing import Any

from cluster import Cluster, wait_until
from jobs import TJ, condition, create, get, wait_condition
from kubelet import FakeKubelet
from realtrainer import NODES, OPT_IN, goodput, log_events, metrics, tiny_bert, volume

pytestmark = OPT_IN
Obj = dict[str, Any]


def status_of(cluster: Cluster, name: str, ns: str) -> Obj:
    return (get(cluster, TJ, name, ns) or {}).get("status") or {}


def test_a_hung_gang_is_restarted_and_resumes_from_its_checkpoint(
    cluster: Cluster, trainer_pods: FakeKubelet, ns: str
) -> None:
    kubelet = trainer_pods
    # The tier's operator gives the first step no allowance (TRAINIUM_FIRST_STEP_ALLOWANCE_SECONDS
    # 0; 15 minutes by default): the deadline must outlast a gang's start here (imports, the
    # rendezvous and the first step took over 60 s at load 17, and 60 s restarted it 3 times).
    policy = {"progressDeadlineSeconds": 180, "maxRetries": 2}
    body = tiny_bert("hang", ns, 60, ("--checkpoint-every", "5"), runPolicy=policy)
    body["spec"]["precompile"] = {"policy": "Never"}
    began = time.monotonic()
    create(cluster, body)

    def checkpointed() -> int | None:
        step = (status_of(cluster, "hang", ns).get("progress") or {}).get("checkpointStep")
        return step if isinstance(step, int) and step >= 5 else None

    wait_until(checkpointed, 300, "a checkpoint reported by rank 0", every=1)
    first = list(kubelet.runs(ns))
    assert kubelet.signal_pods(ns, signal.SIGSTOP) > 0
    stopped_at = time.monotonic()

    def restarted() -> Obj | None:
        status = status_of(cluster, "hang", ns)
        return status if status.get("restarts", 0) >= 1 or status.get("phase") == "Failed" else None

    status = wait_until(restarted, 360, "the hung gang restarted", every=1)
    assert status["lastFailure"]["reason"] == "Hung", status["lastFailure"]
    job = wait_condition(cluster, "hang", ns, "Succeeded", timeout=420)
    took = time.monotonic() - began
    assert job["status"]["restarts"] == 1, job["status"]
    # The newest checkpoint on the volume when the ranks stopped is where the new gang began.
    kept = max(e["step"] for r in first for e in log_events(r.containers[0].log.read_text())
               if e.get("event") == "checkpoint")  # fmt: skip
    later = [r for r in kubelet.runs(ns) if r not in first and r.containers]
    resumed = [e["step"] for r in later for e in log_events(r.containers[0].log.read_text())
               if e.get("event") == "resumed"]  # fmt: skip
    assert resumed and set(resumed) == {kept}, (resumed, kept)
    out = volume(kubelet) / "output" / "hang"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from_step"] == kept, summary
    print(f"hang: apply -> Succeeded {took:.0f}s (stopped {time.monotonic() - stopped_at:.0f}s "
          f"before the end); the trainer's training time {goodput(metrics(out)):.0f}s; "
          f"resumed at {kept}")  # fmt: skip


def test_a_node_whose_real_preflight_fails_is_kept_out(
    cluster: Cluster, trainer_pods: FakeKubelet, ns: str
) -> None:
    kubelet = trainer_pods
    bad, good = NODES
    kubelet.missing_devices[bad] = 1  # its Neuron device plugin hands out one device too few
    cluster.kubectl("cordon", good)  # the first gang can only go to the bad node
    try:
        body = tiny_bert("checked", ns, 5, runPolicy={"maxRetries": 0}, nodes=1)
        body["spec"]["precompile"] = {"policy": "Never"}
        create(cluster, body)

        def failed_preflight() -> list[Any]:
            return [r for r in kubelet.runs(ns) if r.failed_init is not None]

        (run,) = wait_until(failed_preflight, 300, "the real preflight to fail", every=0.5)
        assert run.pod["spec"]["nodeName"] == bad
        cluster.kubectl("uncordon", good)
        job = wait_condition(cluster, "checked", ns, "Succeeded", timeout=420)
    finally:
        kubelet.missing_devices.pop(bad, None)
        cluster.kubectl("uncordon", good, check=False)
    status = job["status"]
    assert [e["node"] for e in status.get("excludedNodes") or []] == [bad], status
    failure = status["lastFailure"]
    assert failure["reason"] == "PreflightFailed", failure
    assert "preflight failed: 15 Neuron devices in /dev (want 16)" in failure["message"], failure


def test_a_bad_data_dir_fails_with_the_trainers_own_error_line(
    cluster: Cluster, trainer_pods: FakeKubelet, ns: str
) -> None:
    body = tiny_bert("nodata", ns, 5, ("--data-dir", "/data/no-such-dir"), nodes=1)
    body["spec"]["precompile"] = {"policy": "Never"}
    create(cluster, body)
    job = wait_condition(cluster, "nodata", ns, "Failed", timeout=300)
    failed = condition(job, "Failed")
    assert "error:" in failed.get("message", "") and "/data/no-such-dir" in failed["message"], (
        failed
    )
