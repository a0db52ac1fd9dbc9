"""Issue 19 on a real cluster: progress and ETA, a hung gang, bad nodes kept out, `trainium logs`.

The fake kubelet serves rank 0's metrics on each training pod's IP and named port (and stops
advancing them on request), fails the preflight init container, or fails the pods of one node
with a Neuron runtime or EFA log line; the operator runs with the tier's short progress interval,
write budget and first-step allowance (conftest.PROGRESS_ENV).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import TJ, create, events, fsx_claim, get, small_job, wait_condition
from kubelet import Behavior, FakeKubelet, Metrics

Obj = dict[str, Any]
TRAINING = {"trainium.dev/stage": "train"}
#: 5 steps a second of 1000: the ETA is minutes, the test seconds.
STEADY = Behavior(outcome="RunForever", metrics=Metrics(total_steps=1000, rate=5.0))
NODE_FAULTS = {
    "NeuronRuntimeError": "2026-Nov-25 04:00:00.0000 1234:1234 ERROR   NRT:nrt_init  Failed to "
    "initialize devices",
    "EfaInitFailed": "CCOM WARN NET/OFI aws-ofi-nccl initialization failed",
}


def columns(cluster: Cluster, name: str, namespace: str) -> dict[str, str]:
    """`kubectl get tj NAME` as a user reads it: header -> cell (cells may hold spaces)."""
    header, row = cluster.kubectl("get", "tj", name, "-n", namespace).stdout.splitlines()[:2]
    starts = [(m.start(), m.group()) for m in re.finditer(r"\S+", header)]
    ends = [s for s, _ in starts[1:]] + [len(row)]
    return {title: row[start:end].strip() for (start, title), end in zip(starts, ends, strict=True)}


def status_of(cluster: Cluster, name: str, namespace: str) -> Obj:
    return dict((get(cluster, TJ, name, namespace) or {}).get("status") or {})


def pods_on_nodes(cluster: Cluster, namespace: str) -> dict[str, str]:
    """Running pod name -> node of namespace, as the API server has them."""
    proc = cluster.kubectl("get", "pods", "-n", namespace, "-o", "json")
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in json.loads(proc.stdout)["items"]
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    }


def test_a_running_job_shows_progress_and_eta_in_kubectl_get(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    kubelet.plan(TRAINING, STEADY, namespace=ns)
    create(cluster, small_job("watched", ns))

    def shown() -> dict[str, str] | None:
        cells = columns(cluster, "watched", ns)
        moving = re.fullmatch(r"(\d+)/1000 \((\d+)%\)", cells.get("PROGRESS", ""))
        return cells if moving and re.fullmatch(r"\d+(h\d\dm|m|s)", cells.get("ETA", "")) else None

    cells = wait_until(shown, 120, "PROGRESS and ETA in kubectl get tj", every=1)
    assert kubelet.serving(ns), "no pod served metrics"
    progress = status_of(cluster, "watched", ns)["progress"]
    assert progress["totalSteps"] == 1000 and 0 < progress["step"] < 1000, progress
    assert progress["percent"] == round(100 * progress["step"] / 1000, 1)
    assert (progress["samplesPerSecond"], progress["loss"]) == (512.0, 2.5)
    assert progress["observedAt"].endswith("Z")
    # 5 steps a second: what is left, at that rate (the operator measures it between readings).
    expected = (1000 - progress["step"]) / 5
    assert expected / 2 <= progress["etaSeconds"] <= expected * 2, (progress, cells)
    # The cost column gains the projected total at completion while the ETA is known.
    assert re.fullmatch(r"\$\d+\.\d\d \(~\$\d+\.\d\d\)", cells["COST"]), cells

    kubelet.finish(ns)
    job = wait_condition(cluster, "watched", ns, "Succeeded", timeout=120)
    done = job["status"].get("progress") or {}  # kubectl get keeps the total, not a blank
    assert done.get("display") == "1000/1000 (100%)" and "etaSeconds" not in done, done


def test_a_stalled_gang_is_restarted_as_hung(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    kubelet.plan(TRAINING, STEADY, namespace=ns)
    run_policy = {"progressDeadlineSeconds": 60, "maxRetries": 2}
    create(cluster, small_job("stuck", ns, nodes=2, runPolicy=run_policy))

    def stepping() -> bool:
        return status_of(cluster, "stuck", ns).get("progress", {}).get("step", 0) > 0

    wait_until(stepping, 120, "the gang's step on status", every=1)
    first_gang = set(kubelet.running_uids(ns))
    assert len(first_gang) == 2
    assert kubelet.stall(ns) == 2

    def restarted() -> Obj | None:
        status = status_of(cluster, "stuck", ns)
        return status if status.get("restarts", 0) >= 1 or status.get("phase") == "Failed" else None

    # 60 s without a step, read every 2 s and written every 4 s: well within 150 s.
    status = wait_until(restarted, 150, "the hung gang restarted", every=1)
    assert status.get("phase") != "Failed", status.get("conditions")
    failure = status["lastFailure"]
    assert failure["reason"] == "Hung", failure
    assert "progressDeadlineSeconds (60s)" in failure["message"], failure
    warnings = [e for e in events(cluster, ns, "stuck") if e["type"] == "Warning"]
    assert any("Hung" in f"{e['reason']} {e['message']}" for e in warnings), [
        (e["reason"], e["message"]) for e in warnings
    ]

    def new_gang() -> set[str] | None:
        uids = set(kubelet.running_uids(ns))
        return uids if len(uids) == 2 and not uids & first_gang else None

    wait_until(new_gang, 120, "a whole new gang running", every=0.5)
    wait_until(stepping, 120, "the new gang's step on status", every=1)
    kubelet.finish(ns)
    job = wait_condition(cluster, "stuck", ns, "Succeeded", timeout=120)
    assert job["status"]["restarts"] == 1
    assert job["status"]["lastFailure"]["reason"] == "Hung"


def assert_kept_out(cluster: Cluster, namespace: str, name: str, node: str, reason: str) -> None:
    """status.excludedNodes names node, the next gang runs elsewhere, and an Event says so."""

    def excluded() -> list[Obj] | None:
        entries = status_of(cluster, name, namespace).get("excludedNodes") or []
        return entries if any(e["node"] == node for e in entries) else None

    entries = wait_until(excluded, 120, f"{node} in status.excludedNodes", every=1)
    assert [(e["node"], e["reason"]) for e in entries] == [(node, reason)], entries

    def elsewhere() -> dict[str, str] | None:
        placed = pods_on_nodes(cluster, namespace)
        return placed if placed and node not in placed.values() else None

    placed = wait_until(elsewhere, 120, "the next gang running on another node", every=0.5)
    for pod in placed:
        body = get(cluster, "pod", pod, namespace) or {}
        terms = body["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert {"key": "metadata.name", "operator": "NotIn", "values": [node]} in terms[0][
            "matchFields"
        ], terms
    said = [e["message"] for e in events(cluster, namespace, name) if e["reason"] == "NodeExcluded"]
    assert any(node in m for m in said), said


@pytest.mark.parametrize("cause", sorted(NODE_FAULTS))
def test_a_node_whose_neuron_or_efa_failed_is_kept_out_of_the_next_gang(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str, cause: str
) -> None:
    fsx_claim(cluster, ns)
    kubelet.plan(TRAINING, Behavior(outcome="RunForever"), namespace=ns)
    create(cluster, small_job("picky", ns, runPolicy={"maxRetries": 3}))
    [(pod, node)] = wait_until(
        lambda: list(pods_on_nodes(cluster, ns).items()), 120, "the gang running", every=0.5
    )
    failing = Behavior(exit_code=1, logs=("starting", NODE_FAULTS[cause]), run_seconds=0.5)
    kubelet.plan(TRAINING, failing, namespace=ns, node=node)  # the node stays bad
    assert kubelet.fail_node(node, failing) == [pod]
    assert_kept_out(cluster, ns, "picky", node, cause)
    kubelet.finish(ns)
    job = wait_condition(cluster, "picky", ns, "Succeeded", timeout=120)
    assert job["status"]["lastFailure"]["reason"] == cause


def test_a_failed_preflight_keeps_the_node_out_without_spending_retries(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    kubelet.plan(TRAINING, Behavior(outcome="RunForever"), namespace=ns)
    line = "preflight failed: 15 Neuron devices in /dev (want 16)"
    unfit = Behavior(init_exit_code=4, init_message=line)
    preflight = kubelet.plan(TRAINING, unfit, namespace=ns, times=1)
    create(cluster, small_job("checked", ns, runPolicy={"maxRetries": 0}))
    wait_until(lambda: preflight.pods, 120, "the preflight to fail on a node", every=0.5)
    [(_pod, node)] = preflight.pods
    assert_kept_out(cluster, ns, "checked", node, "PreflightFailed")
    status = status_of(cluster, "checked", ns)
    assert status["lastFailure"]["reason"] == "PreflightFailed", status["lastFailure"]
    assert line in status["lastFailure"]["message"]
    kubelet.finish(ns)
    job = wait_condition(cluster, "checked", ns, "Succeeded", timeout=120)
    assert job["status"].get("phase") == "Succeeded"


def trainium(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """The `trainium` CLI as a user runs it, with the admin's kubeconfig."""
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
    command = [sys.executable, "-m", "trainium_operator", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_trainium_logs_prints_each_line_with_its_node_and_rank(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    said = ("torchrun: starting 32 workers", "[default0]:step 1 loss 2.5", "[default1]:step 1")
    kubelet.plan(TRAINING, Behavior(outcome="RunForever", logs=said), namespace=ns)
    create(cluster, small_job("chatty", ns, nodes=2))
    wait_until(lambda: len(kubelet.running(ns)) == 2, 120, "the gang running", every=0.5)

    every = trainium(cluster, "logs", "chatty", "-n", ns)
    assert every.returncode == 0, every.stderr
    assert every.stdout.splitlines() == [
        "node 0 | torchrun: starting 32 workers",
        "node 0 rank 0 | step 1 loss 2.5",
        "node 0 rank 1 | step 1",
        "node 1 | torchrun: starting 32 workers",
        "node 1 rank 32 | step 1 loss 2.5",
        "node 1 rank 33 | step 1",
    ], every.stdout
    one = trainium(cluster, "logs", "chatty", "-n", ns, "--rank", "33")
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines() == ["node 1 rank 33 | step 1"]
    kubelet.finish(ns)
    wait_condition(cluster, "chatty", ns, "Succeeded", timeout=120)
