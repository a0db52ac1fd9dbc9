"""status.lastCheckpoint from the trainer's report in a training pod's termination message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_gang_failures import gang_pod, terminated
from test_operator_e2e import start_training, status, wait_phase

from harness import EmulatorServer, OperatorProcess, kubectl, simulate_vcjob_phase, wait_for
from trainium_trainer import termination

Obj = dict[str, Any]
CKPT = "/fsx/output/steady/checkpoints/ckpt-{:08d}.pt"


def report(step: int, time: str) -> str:
    """The line the trainer's rank 0 leaves after a complete checkpoint (its own code)."""
    return termination.report_line(step, Path(CKPT.format(step)), time)


def ended(code: int, message: str, restarts: int = 0) -> Obj:
    """A container status whose last run ended with this exit code and termination message."""
    cs = terminated("Error" if code else "Completed", code)
    cs["state"]["terminated"]["message"] = message
    cs["restartCount"] = restarts
    return cs


def last_checkpoint(ns: str, name: str) -> Obj | None:
    return status(ns, name).get("lastCheckpoint")


def test_a_failed_pods_checkpoint_report_becomes_status_and_never_goes_back(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    start_training(k8s, ns, "steady")
    # Rank 0 checkpointed step 120, then a runtime fault killed the worker (no outcome line).
    log = "ERROR   NRT:nrt_init  Failed to initialize devices\nRuntimeError: boom"
    pod0 = gang_pod(k8s, ns, "steady", 0, ended(1, report(120, "2026-11-22T10:00:00Z")), log)
    want = {"step": 120, "time": "2026-11-22T10:00:00Z", "path": CKPT.format(120)}
    wait_for(lambda: last_checkpoint(ns, "steady") == want, what="lastCheckpoint step 120")
    failure = status(ns, "steady")["lastFailure"]
    assert failure["reason"] == "NeuronRuntimeError"
    assert "trainiumCheckpoint" not in failure["message"]  # progress, not failure evidence

    # Volcano restarts the gang: the pods go, the new gang runs; later passes keep the step.
    kubectl("delete", "pod", pod0, "-n", ns, "--wait=false")
    simulate_vcjob_phase(ns, "steady-train", "Restarting", retryCount=1)
    wait_for(lambda: status(ns, "steady").get("restarts") == 1, what="restart 1 on status")
    simulate_vcjob_phase(ns, "steady-train", "Running", retryCount=1)
    wait_for(lambda: condition_reason(ns) == "GangRunning", what="the new gang running")
    assert last_checkpoint(ns, "steady") == want

    # A new operator (nothing in memory) sees an older report, malformed ones and a user's own
    # text: none of them moves the step on status back.
    operator.restart()
    said = "\n".join(
        [
            "my own exit note",
            '{"trainiumCheckpoint": {"step": "lots", "time": "2026-11-22T11:00:00Z"}}',
            '{"trainiumCheckpoint": {"step": 999, "time": "yesterday"}}',
            '{"trainiumCheckpoint": {"step": 400',
            report(80, "2026-11-22T11:00:00Z"),
        ]
    )
    pod1 = gang_pod(k8s, ns, "steady", 1, ended(143, said), "stopped: SIGTERM")
    wait_for(lambda: pod1 in status(ns, "steady")["lastFailure"]["message"],
             what="the second pod's failure read")  # fmt: skip
    assert last_checkpoint(ns, "steady") == want

    # Volcano says Completed before the pod watch brings rank 0's last report: it still lands.
    simulate_vcjob_phase(ns, "steady-train", "Completed", retryCount=1)
    wait_phase(ns, "steady", "Succeeded")
    gang_pod(k8s, ns, "steady", 0, ended(0, report(200, "2026-11-22T12:00:00Z")), "done")
    wait_for(lambda: (last_checkpoint(ns, "steady") or {}).get("step") == 200,
             what="the final checkpoint on a finished job")  # fmt: skip
    assert status(ns, "steady")["phase"] == "Succeeded"


def condition_reason(ns: str) -> str | None:
    """The Running condition's reason of the job under test."""
    conds = status(ns, "steady").get("conditions") or []
    return next((c["reason"] for c in conds if c["type"] == "Running"), None)
