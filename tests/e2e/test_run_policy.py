"""runPolicy end to end: suspend and resume, a job created suspended, activeDeadlineSeconds."""

from __future__ import annotations

import json

from test_gang_failures import gang_pod, terminated
from test_operator_e2e import (
    TJ,
    condition,
    job,
    prerequisites,
    start_training,
    status,
    vcjob,
    vcjobs,
    wait_phase,
)

from harness import (
    EmulatorServer,
    OperatorProcess,
    apply,
    get,
    kubectl,
    simulate_vcjob_phase,
    wait_for,
)


def set_suspend(ns: str, name: str, value: bool) -> None:
    patch = {"spec": {"runPolicy": {"suspend": value}}}
    kubectl("patch", TJ, name, "-n", ns, "--type=merge", "-p", json.dumps(patch))


def test_suspend_removes_the_training_job_and_resume_recreates_it(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    start_training(k8s, ns, "pausable")

    set_suspend(ns, "pausable", True)
    st = wait_phase(ns, "pausable", "Suspended")
    assert "checkpoints" in st["message"] and "completionTime" not in st
    wait_for(lambda: vcjobs(k8s, ns) == [], what="the training job removed")
    assert condition(ns, "pausable", "Running")["reason"] == "Suspended"

    set_suspend(ns, "pausable", False)
    vcjob(k8s, ns, "pausable-train")  # recreated: the trainer resumes from its checkpoints
    simulate_vcjob_phase(ns, "pausable-train", "Running")
    wait_phase(ns, "pausable", "Training")


def test_a_job_created_suspended_starts_nothing(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    apply(job(ns, "queued-up", q, runPolicy={"suspend": True}))
    wait_phase(ns, "queued-up", "Suspended")
    assert vcjobs(k8s, ns) == [] and k8s.list("coordination.k8s.io/v1/leases", ns) == []
    set_suspend(ns, "queued-up", False)
    vcjob(k8s, ns, "queued-up-compile")


def test_active_deadline_fails_the_job_and_stops_its_pods(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    apply(job(ns, "bounded", q, precompile={"policy": "Never"},
              runPolicy={"activeDeadlineSeconds": 3}))  # fmt: skip
    vcjob(k8s, ns, "bounded-train")
    simulate_vcjob_phase(ns, "bounded-train", "Running")
    st = wait_phase(ns, "bounded", "Failed", timeout=30)  # woken at the deadline, not by a poll
    assert condition(ns, "bounded", "Failed")["reason"] == "DeadlineExceeded"
    assert "activeDeadlineSeconds" in st["message"]
    wait_for(lambda: vcjobs(k8s, ns) == [], what="the training job stopped")
    assert status(ns, "bounded")["completionTime"]


def test_a_failed_job_ignores_suspend_and_resume_never_runs_it_again(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """An OOM-killed job's gang is gone: suspend then resume must not pay for a second run."""
    start_training(k8s, ns, "oomed")
    gang_pod(k8s, ns, "oomed", 0, terminated("OOMKilled", 137), "step 1\nKilled")
    wait_phase(ns, "oomed", "Failed")
    wait_for(lambda: vcjobs(k8s, ns) == [], what="the gang stopped")
    generation = int(get(TJ, "oomed", ns)["metadata"]["generation"])  # type: ignore[index]

    set_suspend(ns, "oomed", True)
    said = wait_for(lambda: condition(ns, "oomed", "Suspended"), what="the suspend answered")
    assert said["reason"] == "JobFinished" and "ignored" in said["message"]
    assert status(ns, "oomed")["phase"] == "Failed"
    assert condition(ns, "oomed", "Failed")["reason"] == "OOMKilled"

    set_suspend(ns, "oomed", False)
    wait_for(lambda: status(ns, "oomed").get("observedGeneration") == generation + 2,
             what="the resume seen")  # fmt: skip
    assert status(ns, "oomed")["phase"] == "Failed" and vcjobs(k8s, ns) == []
    assert condition(ns, "oomed", "Suspended") == {}


def test_a_succeeded_job_stays_succeeded_when_suspended(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    start_training(k8s, ns, "done")
    simulate_vcjob_phase(ns, "done-train", "Completed")
    wait_phase(ns, "done", "Succeeded")
    set_suspend(ns, "done", True)
    wait_for(lambda: condition(ns, "done", "Suspended"), what="the suspend answered")
    assert status(ns, "done")["phase"] == "Succeeded"
    assert condition(ns, "done", "Succeeded")["status"] == "True"


def test_a_claim_deleted_mid_training_does_not_keep_the_job_from_finishing(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """The finished gang decides; the missing claim is reported, so `kubectl wait` returns."""
    q = prerequisites(ns)
    apply(job(ns, "orphaned", q, precompile={"policy": "Never"}))
    vcjob(k8s, ns, "orphaned-train")
    simulate_vcjob_phase(ns, "orphaned-train", "Running")
    wait_for(lambda: condition(ns, "orphaned", "Running").get("status") == "True", what="running")
    kubectl("delete", "pvc", "fsx-claim", "-n", ns, "--wait=false")
    simulate_vcjob_phase(ns, "orphaned-train", "Completed")
    wait_phase(ns, "orphaned", "Succeeded")
    storage = wait_for(
        lambda: (c := condition(ns, "orphaned", "StorageReady")).get("status") == "False" and c,
        what="StorageReady=False",
    )
    assert storage["reason"] == "ClaimNotFound" and "after training finished" in storage["message"]
