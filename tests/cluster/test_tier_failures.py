"""A pod of a gang fails with a known log line: one whole-gang restart, counted with its class."""

from __future__ import annotations

import json

import pytest

from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import TJ, create, fsx_claim, get, small_job, wait_condition
from kubelet import Behavior, FakeKubelet

LINES = {
    "NeuronRuntimeError": "2026-Nov-25 04:00:00.0000 1234:1234 ERROR   NRT:nrt_init  Failed to "
    "initialize devices",
    "EfaInitFailed": "CCOM WARN NET/OFI aws-ofi-nccl initialization failed",
}


@pytest.mark.parametrize("cause", sorted(LINES))
def test_a_failing_pod_restarts_the_gang_once_with_its_class(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str, cause: str
) -> None:
    fsx_claim(cluster, ns)
    kubelet.plan({}, Behavior(outcome="RunForever"), namespace=ns)
    failing = Behavior(exit_code=1, logs=("starting", LINES[cause]), run_seconds=2)
    kubelet.plan({}, failing, namespace=ns, times=1)
    create(cluster, small_job("faulty", ns, nodes=2, runPolicy={"maxRetries": 2}))

    def restarted() -> dict | None:
        status = (get(cluster, TJ, "faulty", ns) or {}).get("status") or {}
        return status if status.get("restarts", 0) >= 1 or status.get("phase") == "Failed" else None

    status = wait_until(restarted, 120, "a whole-gang restart", every=0.5)
    assert status.get("phase") != "Failed", status.get("conditions")
    assert status["restarts"] == 1
    assert status["lastFailure"]["reason"] == cause, json.dumps(status["lastFailure"])
    wait_until(lambda: len(kubelet.running(ns)) == 2, 120, "the restarted gang running")
    kubelet.finish(ns)
    job = wait_condition(cluster, "faulty", ns, "Succeeded", timeout=120)
    assert job["status"]["restarts"] == 1
