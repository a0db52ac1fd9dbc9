"""A missing PriorityClass holds a job back before submitting; pods Volcano cannot create show."""

from __future__ import annotations

import datetime
from typing import Any

from test_operator_e2e import (
    condition,
    events,
    job,
    prerequisites,
    status,
    vcjob,
    vcjobs,
    wait_phase,
)

from harness import EmulatorServer, OperatorProcess, apply, kubectl, simulate_vcjob_phase, wait_for


def reason_is(ns: str, name: str, reason: str) -> dict[str, Any]:
    """The Running condition when it has this reason, else {}."""
    running = condition(ns, name, "Running")
    return running if running.get("reason") == reason else {}


def failed_create(gang: dict[str, Any]) -> str:
    """Volcano's FailedCreate Event on the gang (a pods quota refused its first pod); the words."""
    md = gang["metadata"]
    said = f'pods "{md["name"]}-node-0" is forbidden: exceeded quota: pods-quota'
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    apply({"apiVersion": "v1", "kind": "Event",
           "metadata": {"name": f"{md['name']}.failed", "namespace": md["namespace"]},
           "involvedObject": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                              "name": md["name"], "namespace": md["namespace"],
                              "uid": md["uid"]},
           "reason": "FailedCreate", "type": "Warning", "count": 3,
           "message": f"Error creating pods: [{said}]",
           "firstTimestamp": now, "lastTimestamp": now,
           "source": {"component": "vc-controller-manager"}})  # fmt: skip
    return said


def test_a_missing_priority_class_is_a_condition_and_nothing_is_submitted(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    klass = f"high-{ns}"[:63]
    apply(job(ns, "urgent", q, precompile={"policy": "Never"},
              scheduling={"queue": q, "priorityClassName": klass}))  # fmt: skip
    held = wait_for(lambda: reason_is(ns, "urgent", "PriorityClassNotFound"),
                    what="PriorityClassNotFound")  # fmt: skip
    assert klass in held["message"] and held["status"] == "False"
    assert status(ns, "urgent")["phase"] == "Pending" and vcjobs(k8s, ns) == []
    assert condition(ns, "urgent", "Failed")["status"] == "False"
    warned = [e for e in events(ns) if e["reason"] == "PriorityClassNotFound"]
    assert warned and klass in warned[0]["message"]

    apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
           "metadata": {"name": klass}, "value": 1000})  # fmt: skip
    try:
        submitted = vcjob(k8s, ns, "urgent-train", timeout=40)  # retried with backoff
        template = submitted["spec"]["tasks"][0]["template"]["spec"]
        assert template["priorityClassName"] == klass
    finally:
        kubectl("delete", "priorityclass", klass, "--wait=false", check=False)


def test_pods_volcano_cannot_create_are_reported_from_its_failed_create_event(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    apply(job(ns, "podless", q, precompile={"policy": "Never"}))
    gang = vcjob(k8s, ns, "podless-train")
    wait_phase(ns, "podless", "Training")
    said = failed_create(gang)
    # No watch on Events: the operator looks at a pending gang's Events 15 s after creation.
    running = wait_for(lambda: reason_is(ns, "podless", "FailedCreate"), timeout=40,
                       what="the FailedCreate reason on status")  # fmt: skip
    assert said in running["message"] and "podless-train" in running["message"]
    assert status(ns, "podless")["phase"] == "Training"
    warned = [e for e in events(ns) if e["reason"] == "FailedCreate"
              and e["involvedObject"]["kind"] == "TrainiumJob"]  # fmt: skip
    assert warned and said in warned[0]["message"]

    simulate_vcjob_phase(ns, "podless-train", "Running")  # the quota was raised: pods run
    wait_for(lambda: condition(ns, "podless", "Running").get("reason") == "GangRunning",
             what="GangRunning once the pods exist")  # fmt: skip
