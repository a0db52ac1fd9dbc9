"""What a real cluster does that the emulator used to hide: binding, refusals, Volcano's phases.

The emulator's controllers (tests/controllers.py) bind claims and protect PVs/claims like
kube-controller-manager; `Refusal`s stand in for Volcano's webhook and ResourceQuota. Every test
runs the operator with the production resync, so events, not polling, must drive it.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest
from test_operator_e2e import (
    TJ,
    claim,
    condition,
    events,
    job,
    operator_passes,
    prerequisites,
    queue,
    start_training,
    status,
    vcjob,
    vcjobs,
    wait_phase,
)

from controllers import Refusal
from harness import (
    OPERATOR_COMMAND,
    EmulatorServer,
    OperatorProcess,
    apply,
    get,
    kubectl,
    simulate_vcjob_phase,
    started,
    wait_for,
)
from trainium_operator.manifests.ownership import LABEL_MANAGED_BY, MANAGED_BY

PVS, PVCS = "v1/persistentvolumes", "v1/persistentvolumeclaims"
FSX = {
    "fileSystemId": "fs-0123456789abcdef0",
    "dnsName": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
    "mountName": "abcdefgh",
}


def fsx_job(ns: str, name: str, q: str, **spec: Any) -> dict[str, Any]:
    return job(ns, name, q, storage={"fsx": FSX}, **spec)


def pv_phase(k8s: EmulatorServer, name: str) -> str | None:
    return ((k8s.get(PVS, None, name) or {}).get("status") or {}).get("phase")


def storage_ready(ns: str, name: str) -> bool:
    return condition(ns, name, "StorageReady").get("status") == "True"


def test_fsx_pv_is_deleted_with_its_job_and_a_same_name_job_binds_again(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = f"q-{ns}"
    queue(q)
    apply(fsx_job(ns, "lustre", q))
    wait_for(lambda: storage_ready(ns, "lustre"), what="StorageReady=True (claim Bound)")
    pvc = k8s.get(PVCS, ns, "lustre-fsx")
    assert pvc is not None and pvc["status"]["phase"] == "Bound"
    pv_name = pvc["spec"]["volumeName"]
    assert k8s.get(PVS, None, pv_name)["status"]["phase"] == "Bound"  # type: ignore[index]

    kubectl("delete", TJ, "lustre", "-n", ns, "--wait=false")
    wait_for(lambda: get(TJ, "lustre", ns) is None, what="job deleted once its PV is cleaned up")
    wait_for(lambda: k8s.get(PVS, None, pv_name) is None, what="the Retain PV deleted, not leaked")

    apply(fsx_job(ns, "lustre", q))  # same name again: the new claim must bind
    wait_for(lambda: storage_ready(ns, "lustre"), what="the re-created job's claim Bound")
    assert k8s.get(PVCS, ns, "lustre-fsx")["status"]["phase"] == "Bound"  # type: ignore[index]
    vcjob(k8s, ns, "lustre-compile")


def test_a_released_pv_left_by_an_earlier_job_is_repaired(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """What an operator without the finalizer leaked: a Released PV with a stale claimRef uid."""
    q = f"q-{ns}"
    queue(q)
    pv_name = f"{ns}-stale-fsx"
    leaked = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
        "spec": {
            "capacity": {"storage": "1200Gi"}, "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
            "claimRef": {"namespace": ns, "name": "stale-fsx", "uid": "uid-of-a-deleted-claim"},
            "csi": {"driver": "fsx.csi.aws.com", "volumeHandle": FSX["fileSystemId"]},
        },
    }  # fmt: skip
    apply(leaked)
    wait_for(lambda: pv_phase(k8s, pv_name) == "Released", what="the leaked PV Released")
    apply(fsx_job(ns, "stale", q))
    wait_for(lambda: storage_ready(ns, "stale"), what="claim bound to the repaired PV")
    pv = k8s.get(PVS, None, pv_name)
    claim_uid = k8s.get(PVCS, ns, "stale-fsx")["metadata"]["uid"]  # type: ignore[index]
    assert pv is not None and pv["spec"]["claimRef"]["uid"] == claim_uid


def test_a_pending_claim_is_not_storage_ready(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = f"q-{ns}"
    queue(q)
    claim(ns, storage_class=f"slow-{ns}")  # no such StorageClass yet: the claim stays Pending
    apply(job(ns, "patient", q))
    wait_for(lambda: condition(ns, "patient", "StorageReady").get("reason") == "ClaimPending",
             what="StorageReady=False ClaimPending")  # fmt: skip
    assert status(ns, "patient")["phase"] == "Pending" and vcjobs(k8s, ns) == []
    warned = wait_for(lambda: [e for e in events(ns) if e["reason"] == "ClaimPending"],
                      what="a ClaimPending Warning")  # fmt: skip
    assert "fsx-claim" in warned[0]["message"]
    apply({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
           "metadata": {"name": f"slow-{ns}"}, "provisioner": "fsx.csi.aws.com"})  # fmt: skip
    vcjob(k8s, ns, "patient-compile")  # the claim's Bound event woke the job
    # The status write follows the Volcano job's create: poll, or a loaded machine sees it late.
    wait_for(lambda: storage_ready(ns, "patient"), what="StorageReady True")


def test_a_webhook_refusal_fails_the_job_with_the_servers_message(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    msg = "spec.tasks[0].template.spec.containers[0].image: Required value"
    refusal = Refusal("batch.volcano.sh/v1alpha1/jobs", 400, msg, name="refused-*")
    k8s.emulator.refusals.append(refusal)
    try:
        apply(job(ns, "refused", q))
        st = wait_phase(ns, "refused", "Failed")
        assert msg in st["message"]
        assert condition(ns, "refused", "Failed")["reason"] == "PrecompileRejected"
        warning = [e for e in events(ns) if e["reason"] == "PrecompileRejected"]
        assert warning and warning[0]["type"] == "Warning" and msg in warning[0]["message"]
        kubectl("annotate", TJ, "refused", "-n", ns, "poke=1")  # a settled job is left alone
        assert refusal.count == 1 and vcjobs(k8s, ns) == []
    finally:
        k8s.emulator.refusals.remove(refusal)


def test_a_queue_refusal_the_queue_can_lift_waits_then_proceeds(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """Issue 17 bug 2: Volcano's webhook refusing for the queue's state is never terminal."""
    q = prerequisites(ns)
    msg = f"can only submit job to queue with state `Open`, queue `{q}` status is `Closed`"
    refusal = Refusal("batch.volcano.sh/v1alpha1/jobs", 400, msg, name="waits-*")
    k8s.emulator.refusals.append(refusal)
    try:
        apply(job(ns, "waits", q))
        wait_for(lambda: condition(ns, "waits", "Precompiled").get("reason") == "QueueNotOpen",
                 what="Precompiled=False QueueNotOpen")  # fmt: skip
        assert status(ns, "waits")["phase"] != "Failed" and vcjobs(k8s, ns) == []
    finally:
        k8s.emulator.refusals.remove(refusal)
    kubectl("annotate", TJ, "waits", "-n", ns, "poke=1")  # the queue's event would, on a cluster
    vcjob(k8s, ns, "waits-compile")


def test_a_quota_refusal_waits_with_a_condition_then_proceeds(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = f"q-{ns}"
    queue(q)
    msg = 'persistentvolumeclaims "quota-fsx" is forbidden: exceeded quota: storage, requested: 1'
    refusal = Refusal(PVCS, 403, msg, reason="Forbidden", name="quota-fsx")
    k8s.emulator.refusals.append(refusal)
    try:
        apply(fsx_job(ns, "quota", q))
        wait_for(lambda: condition(ns, "quota", "StorageReady").get("reason") == "QuotaExceeded",
                 what="StorageReady=False QuotaExceeded")  # fmt: skip
        st = status(ns, "quota")
        assert st["phase"] == "Pending" and "exceeded quota" in st["message"]
        assert condition(ns, "quota", "Failed")["status"] == "False"
        assert [e["type"] for e in events(ns) if e["reason"] == "QuotaExceeded"] == ["Warning"]
    finally:
        k8s.emulator.refusals.remove(refusal)
    vcjob(k8s, ns, "quota-compile", timeout=75)  # a backed-off retry (10 s, ... 60 s) goes through
    assert storage_ready(ns, "quota")


def test_a_suspended_volcano_job_is_followed_not_failed(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """`vcctl job suspend` (Aborting -> Aborted) then resume: a TTL of 0 must not delete it."""
    q = prerequisites(ns)
    apply(job(ns, "paused", q, precompile={"policy": "Never"},
              runPolicy={"ttlSecondsAfterFinished": 0}))  # fmt: skip
    vcjob(k8s, ns, "paused-train")
    simulate_vcjob_phase(ns, "paused-train", "Running")
    wait_for(lambda: condition(ns, "paused", "Running").get("reason") == "GangRunning",
             what="GangRunning")  # fmt: skip
    for phase in ("Aborting", "Aborted"):
        simulate_vcjob_phase(ns, "paused-train", phase)
    wait_for(lambda: condition(ns, "paused", "Running").get("reason") == "Aborted", what="Aborted")
    st = status(ns, "paused")
    assert st["phase"] == "Training" and "completionTime" not in st
    simulate_vcjob_phase(ns, "paused-train", "Running")  # vcctl job resume
    wait_for(lambda: condition(ns, "paused", "Running").get("reason") == "GangRunning",
             what="GangRunning again")  # fmt: skip
    assert get(TJ, "paused", ns) is not None
    simulate_vcjob_phase(ns, "paused-train", "Completed")
    wait_for(lambda: get(TJ, "paused", ns) is None, what="deleted by its TTL once Succeeded")


def test_a_gang_restart_does_not_flap_the_phase(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    start_training(k8s, ns, "bumpy")
    reasons = []
    for phase, retries in (("Restarting", 1), ("Pending", 1), ("Running", 1)):
        simulate_vcjob_phase(ns, "bumpy-train", phase, retryCount=retries)
        want = "GangRunning" if phase == "Running" else "Restarting"
        wait_for(lambda want=want: condition(ns, "bumpy", "Running").get("reason") == want,
                 what=f"Running reason {want}")  # fmt: skip
        reasons.append(want)
        assert status(ns, "bumpy")["phase"] == "Training"
    assert status(ns, "bumpy")["restarts"] == 1
    transitions = [e["reason"] for e in events(ns) if e["type"] == "Normal"]
    # One transition: the pass that creates the training job reports Training (the job now
    # exists); no Training -> Pending -> Training flap while Volcano restarts the gang.
    assert transitions == ["Training"], transitions
    assert [e["reason"] for e in events(ns) if e["type"] == "Warning"] == ["GangRestarted"]


def test_events_name_the_operator_and_deleted_jobs_leave_the_gauge(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    start_training(k8s, ns, "counted")
    posted = wait_for(lambda: events(ns), what="an Event of the job")
    assert posted[0]["source"]["component"] == "trainium-operator"
    assert posted[0]["reportingComponent"] == "trainium-operator"

    def training_jobs() -> float:
        text = urllib.request.urlopen(operator.metrics_url, timeout=5).read().decode()
        line = next(
            x for x in text.splitlines() if x.startswith('trainium_operator_jobs{phase="Training"}')
        )
        return float(line.split()[-1])

    before = training_jobs()
    assert before >= 1
    kubectl("delete", TJ, "counted", "-n", ns, "--wait=false")
    wait_for(lambda: training_jobs() == before - 1, what="the deleted job forgotten by the gauge")


def test_invalid_shapes_fail_once_and_are_not_deleted_by_their_ttl(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """Schema bypassed (no CRD validation here): any shape fails cleanly, once."""
    shapes = {
        "spec-string": "x",
        "spec-list": [1],
        "runpolicy-string": {**job(ns, "x", "default")["spec"], "runPolicy": "x"},
        "negative-ttl": {**job(ns, "x", "default")["spec"],
                         "runPolicy": {"ttlSecondsAfterFinished": -5}},
    }  # fmt: skip
    for name, spec in shapes.items():
        apply({"apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob",
               "metadata": {"name": name, "namespace": ns}, "spec": spec})  # fmt: skip
    for name in shapes:
        wait_phase(ns, name, "Failed")
        assert condition(ns, name, "Validated")["reason"] == "InvalidSpec"
    for name in shapes:  # more events: nothing new happens, nothing is deleted
        kubectl("annotate", TJ, name, "-n", ns, "poke=1")
    apply(job(ns, "sentinel", "default"))  # processed after the pokes: no claim, so it waits
    wait_for(lambda: condition(ns, "sentinel", "StorageReady").get("reason") == "ClaimNotFound",
             what="the sentinel job handled")  # fmt: skip
    for name in shapes:
        assert get(TJ, name, ns) is not None, f"{name} deleted: its failure was never seen"
        assert [e["reason"] for e in events(ns) if e["involvedObject"]["name"] == name] == [
            "InvalidSpec"
        ]
    assert operator.running and "Traceback" not in operator.log()
    assert "spec" in status(ns, "spec-string")["message"]  # the field is named


@pytest.fixture
def eager_operator(crd: Path, request: pytest.FixtureRequest, tmp_path: Path) -> OperatorProcess:
    """The operator with a 1 s backstop, to watch many backstop passes in a short test."""
    env = {"TRAINIUM_RESYNC_SECONDS": "1"}
    return started(request, OperatorProcess(OPERATOR_COMMAND, tmp_path / "operator.log", env=env))


def test_the_backstop_only_reads(
    eager_operator: OperatorProcess, ns: str, k8s: EmulatorServer, api_requests: list[Any]
) -> None:
    """An unsettled job re-checked again and again writes nothing: no status, no annotations."""
    q = prerequisites(ns)
    apply(job(ns, "steady", q, precompile={"policy": "Never"}))
    vcjob(k8s, ns, "steady-train")
    simulate_vcjob_phase(ns, "steady-train", "Running")
    wait_for(lambda: condition(ns, "steady", "Running").get("reason") == "GangRunning",
             what="GangRunning")  # fmt: skip
    start = len(api_requests)
    first = operator_passes(api_requests, ns, "steady")
    wait_for(lambda: operator_passes(api_requests, ns, "steady") >= first + 3,
             what="three backstop passes")  # fmt: skip
    ours = [r for r in api_requests[start:] if r.client in ("trainium-operator", "kopf")]
    writes = [r for r in ours if r.verb in ("create", "patch", "update", "delete")]
    assert writes == [], writes
