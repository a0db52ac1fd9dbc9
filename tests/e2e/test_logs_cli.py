"""`trainium logs` against a cluster: the gang's pods, each line labelled with node and rank."""

from __future__ import annotations

import json
import subprocess
import sys

from test_operator_e2e import start_training, wait_phase

from harness import EmulatorServer, OperatorProcess, apply, kubectl

VCJOBS = "batch.volcano.sh/v1alpha1/jobs"


def logs(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "trainium_operator", "logs", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def test_logs_label_every_line_with_its_node_and_rank(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    start_training(k8s, ns, "chatty")
    template = k8s.get(VCJOBS, ns, "chatty-train")["spec"]["tasks"][0]["template"]
    for node in (0, 1):
        name = f"chatty-train-node-{node}"
        apply({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns, **template["metadata"]},
               "spec": template["spec"]})  # fmt: skip
        k8s.emulator.pod_logs[(ns, name)] = (
            f"torchrun node {node} up\n[default0]:step 10 on {node}\n[default1]:step 10 on {node}\n"
        )
    got = logs("chatty", "-n", ns)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == [
        "node 0 | torchrun node 0 up",
        "node 0 rank 0 | step 10 on 0",
        "node 0 rank 1 | step 10 on 0",
        "node 1 | torchrun node 1 up",
        "node 1 rank 32 | step 10 on 1",  # trn1.32xlarge: 32 processes per node
        "node 1 rank 33 | step 10 on 1",
    ], got.stdout
    one = logs("chatty", "-n", ns, "--rank", "33")
    assert one.stdout.splitlines() == ["node 1 rank 33 | step 10 on 1"], one.stdout


def test_a_failed_job_says_where_the_last_failures_tail_is(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    start_training(k8s, ns, "gone")
    kubectl("patch", "vcjob", "gone-train", "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"state": {"phase": "Failed"}}}))  # fmt: skip
    wait_phase(ns, "gone", "Failed")
    got = logs("gone", "-n", ns)
    assert "no train pods of job gone" in got.stderr
    assert "job gone is Failed" in got.stderr and got.returncode == 0


def test_an_unknown_job_is_one_error_line(operator: OperatorProcess, ns: str) -> None:
    got = logs("nope", "-n", ns)
    assert (
        got.returncode == 2
        and got.stderr == f"error: TrainiumJob 'nope' not found in namespace '{ns}'\n"
    )
