"""Gang pod failures classified from what the pods say, while they still exist."""

from __future__ import annotations

import json
from typing import Any

from test_operator_e2e import (
    condition,
    events,
    start_training,
    status,
    vcjobs,
    wait_phase,
)

from harness import EmulatorServer, OperatorProcess, apply, kubectl, wait_for

Obj = dict[str, Any]


def gang_pod(k8s: EmulatorServer, ns: str, owner: str, replica: int, container_status: Obj,
             log: str) -> str:  # fmt: skip
    """A training pod as Volcano creates it from our template, then the kubelet's status."""
    vcjob_obj = k8s.get("batch.volcano.sh/v1alpha1/jobs", ns, f"{owner}-train")
    assert vcjob_obj is not None
    template = vcjob_obj["spec"]["tasks"][0]["template"]
    name = f"{owner}-train-node-{replica}"
    apply({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, **template["metadata"]},
           "spec": template["spec"]})  # fmt: skip
    k8s.emulator.pod_logs[(ns, name)] = log
    patch = {"status": {"phase": "Running", "containerStatuses": [container_status]}}
    kubectl("patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps(patch))  # fmt: skip
    return name


def terminated(reason: str, code: int) -> Obj:
    return {"name": "node", "ready": False, "restartCount": 0, "image": "trainer:1",
            "imageID": "", "state": {"terminated": {
                "reason": reason, "exitCode": code, "finishedAt": "2026-11-22T10:00:00Z",
                "startedAt": "2026-11-22T09:00:00Z"}}}  # fmt: skip


def test_an_oom_kill_fails_fast_with_the_log_tail(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    start_training(k8s, ns, "hungry")
    log = "\n".join(f"step {i} loss 7.{i}" for i in range(80)) + "\nKilled"
    gang_pod(k8s, ns, "hungry", 0, terminated("OOMKilled", 137), log)
    st = wait_phase(ns, "hungry", "Failed")
    failed = condition(ns, "hungry", "Failed")
    assert failed["reason"] == "OOMKilled" and "hungry-train-node-0" in failed["message"]
    assert "step 79 loss" in failed["message"] and "step 20 loss" not in failed["message"]
    assert st["lastFailure"]["reason"] == "OOMKilled" and st["lastFailure"]["retry"] is False
    assert st["lastFailure"]["logTail"][-2:] == ["step 79 loss 7.79", "Killed"]
    wait_for(lambda: vcjobs(k8s, ns) == [], what="the gang stopped: a restart would OOM again")
    warned = [e for e in events(ns) if e["reason"] == "OOMKilled"]
    assert warned and "step 79 loss" in warned[0]["message"]


def test_an_efa_failure_restarts_and_says_why_before_the_pod_goes(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    start_training(k8s, ns, "fabric")
    log = ("2026-11-22 10:00:00 ERROR nccl_net_ofi_create_plugin:... "
           "OFI fi_getinfo() call failed: No data available\n"
           "RuntimeError: Failed to initialize EFA")  # fmt: skip
    gang_pod(k8s, ns, "fabric", 1, terminated("Error", 1), log)
    warned = wait_for(lambda: [e for e in events(ns) if e["reason"] == "EfaInitFailed"],
                      what="an EfaInitFailed Warning with the log")  # fmt: skip
    assert "fi_getinfo" in warned[0]["message"]
    assert status(ns, "fabric")["phase"] == "Training"  # Volcano restarts the gang
    assert status(ns, "fabric")["lastFailure"]["retry"] is True
    assert vcjobs(k8s, ns) == ["fabric-train"]


def test_log_lines_reach_status_and_events_as_lines_and_anchored_rules_match(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """The log is text/plain (as through the API server): lines, not one `b'...'` repr."""
    start_training(k8s, ns, "buggy")
    log = "step 1 loss 7.1\nstep 2 loss 7.0\nValueError: batch size 7 does not divide 64"
    gang_pod(k8s, ns, "buggy", 0, terminated("Error", 1), log)
    st = wait_phase(ns, "buggy", "Failed")  # a user error is not retried: a line rule matched
    failed = condition(ns, "buggy", "Failed")
    assert failed["reason"] == "UserCodeError"
    assert st["lastFailure"]["reason"] == "UserCodeError"
    assert "step 2 loss 7.0" in st["lastFailure"]["logTail"]
    # One line each where `kubectl describe` prints them (a newline broke its indentation).
    for text in (failed["message"], st["message"]):
        assert "| step 2 loss 7.0 |" in text and "\n" not in text and "b'" not in text, text
    warned = wait_for(lambda: [e for e in events(ns) if e["reason"] == "UserCodeError"],
                      what="a UserCodeError Event")  # fmt: skip
    assert "| step 2 loss 7.0 |" in warned[0]["message"] and "\n" not in warned[0]["message"]


def test_describe_shows_no_digest_of_a_finished_job_and_keeps_the_log_tail_indented(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """Issue 26: `kubectl describe tj` printed 12 spec-digest lines, and a message's newlines
    started lines at column 0, outside the field they belong to. Issue 43: the one line left,
    `Spec Digest`, guards a live job only; a finished job's describe shows none."""
    start_training(k8s, ns, "told")
    log = "step 1 loss 7.1\nTraceback (most recent call last):\nValueError: bad batch"
    gang_pod(k8s, ns, "told", 0, terminated("Error", 1), log)
    wait_phase(ns, "told", "Failed")
    wait_for(lambda: [e for e in events(ns) if e["reason"] == "UserCodeError"], what="the Event")
    out = kubectl("describe", "trainiumjobs.v1alpha1.trainium.dev", "told", "-n", ns).stdout
    lines = out.splitlines()
    assert "Spec Digests:" not in out, out  # a section of 12 lines before
    assert not [ln for ln in lines if ln.strip().startswith("Spec Digest")], out
    top = {ln.split(":")[0] for ln in lines if ln[:1].strip()}  # what starts at column 0
    assert top <= {"Name", "Namespace", "Labels", "Annotations", "API Version", "Kind",
                   "Metadata", "Spec", "Status", "Events"}, top  # fmt: skip
    tail = lines.index(next(ln for ln in lines if ln.strip() == "Log Tail:"))
    assert [ln.strip() for ln in lines[tail + 1 : tail + 4]] == log.splitlines()
