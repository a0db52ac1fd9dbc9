"""runPolicy.maxRetries is the operator's: a restart storm stops at it, disruptions do not spend it.

Volcano is played as its job controller behaves (pkg/controllers/job/state): a failed or evicted
pod restarts the whole gang, status.retryCount steps up, Running -> Restarting -> Pending ->
Running, the old pods are deleted. The operator gave Volcano a ceiling it never reaches.
"""

from __future__ import annotations

import json
from typing import Any

from test_gang_failures import gang_pod, terminated
from test_operator_e2e import (
    VCJOBS,
    condition,
    events,
    job,
    prerequisites,
    status,
    vcjob,
    vcjobs,
)
from test_operator_e2e import wait_phase as wait_phase_
from test_run_policy import set_suspend

from harness import EmulatorServer, OperatorProcess, apply, kubectl, simulate_vcjob_phase, wait_for

Obj = dict[str, Any]
EFA_LOG = (
    "2026-11-22 10:00:00 ERROR nccl_net_ofi_create_plugin:... "
    "OFI fi_getinfo() call failed: No data available\n"
    "RuntimeError: Failed to initialize EFA"
)


def wait_phase(ns: str, name: str, phase: str) -> Obj:
    return wait_phase_(ns, name, phase, timeout=30)


def efa_failure(k8s: EmulatorServer, ns: str, owner: str) -> str:
    """Node 1's trainer fails to set up EFA (a restartable, budget-spending failure)."""
    return gang_pod(k8s, ns, owner, 1, terminated("Error", 1), EFA_LOG)


def disrupted_pod(k8s: EmulatorServer, ns: str, owner: str, how: str) -> str:
    """Node 0's pod taken away: the kubelet's node-pressure eviction, or a preemption.

    One status write, as the kubelet makes it: the reason (or DisruptionTarget) comes with the
    killed container, never after it.
    """
    vcjob_obj = k8s.get(VCJOBS, ns, f"{owner}-train")
    assert vcjob_obj is not None
    template = vcjob_obj["spec"]["tasks"][0]["template"]
    name = f"{owner}-train-node-0"
    apply({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, **template["metadata"]},
           "spec": template["spec"]})  # fmt: skip
    k8s.emulator.pod_logs[(ns, name)] = "step 10 loss 3.2"
    status_: Obj = {"phase": "Failed", "containerStatuses": [terminated("Error", 137)]}
    if how == "evicted":
        status_ |= {"reason": "Evicted", "message": "The node was low on resource: memory."}
    else:
        status_["conditions"] = [{
            "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
            "message": "Preempted in order to admit critical pod",
            "lastTransitionTime": "2026-11-22T10:00:00Z",
        }]  # fmt: skip
    kubectl("patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status_}))  # fmt: skip
    return name


def seen(ns: str, name: str, failure: str) -> None:
    """The operator saw the failure before Volcano restarts the gang (its pods go then)."""
    wait_for(lambda: (status(ns, name).get("restartCursor") or {}).get("pendingFailure")
             == failure, timeout=30, what=f"{failure} seen by the operator")  # fmt: skip


def volcano_restarts(ns: str, vcjob_name: str, retry_count: int, pod: str) -> None:
    """Volcano's RestartJob: Restarting with retryCount + 1, pods killed, Pending, Running."""
    simulate_vcjob_phase(ns, vcjob_name, "Restarting", retryCount=retry_count)
    kubectl("delete", "pod", pod, "-n", ns, "--wait=false")
    simulate_vcjob_phase(ns, vcjob_name, "Pending", retryCount=retry_count)
    simulate_vcjob_phase(ns, vcjob_name, "Running", retryCount=retry_count)


def warnings(ns: str, reason: str) -> list[str]:
    """Warning messages of one reason, sorted (Events list by their generated names)."""
    found = [e["message"] for e in events(ns) if e["type"] == "Warning" and e["reason"] == reason]
    return sorted(found)


def test_a_restart_storm_stops_at_the_budget(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    apply(job(ns, "storm", q, precompile={"policy": "Never"}, runPolicy={"maxRetries": 2}))
    assert vcjob(k8s, ns, "storm-train")["spec"]["maxRetry"] > 100  # Volcano never decides
    simulate_vcjob_phase(ns, "storm-train", "Running")
    wait_phase(ns, "storm", "Training")
    for n in (1, 2):
        pod = efa_failure(k8s, ns, "storm")
        seen(ns, "storm", "EfaInitFailed")
        volcano_restarts(ns, "storm-train", n, pod)
        wait_for(lambda n=n: status(ns, "storm").get("restarts") == n, timeout=30,
                 what=f"restart {n} counted")  # fmt: skip
        assert status(ns, "storm")["phase"] == "Training"
    efa_failure(k8s, ns, "storm")  # the third failure: the budget is spent
    st = wait_phase(ns, "storm", "Failed")
    failed = condition(ns, "storm", "Failed")
    assert failed["reason"] == "MaxRetriesExceeded"
    assert "runPolicy.maxRetries (2)" in failed["message"] and "EfaInitFailed" in failed["message"]
    assert "fi_getinfo" in failed["message"]  # the evidence of the last failure
    assert st["restarts"] == 2 and st["disruptions"] == 0
    wait_for(lambda: vcjobs(k8s, ns) == [], what="the gang stopped by the operator")
    assert warnings(ns, "GangRestarted") == [
        "whole-gang restart 1 of 2 (EfaInitFailed)",
        "whole-gang restart 2 of 2 (EfaInitFailed)",
    ]
    [final] = warnings(ns, "MaxRetriesExceeded")
    assert "runPolicy.maxRetries (2)" in final
    assert warnings(ns, "GangDisrupted") == []


def test_disruptions_do_not_spend_the_budget_and_suspend_keeps_the_count(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    apply(job(ns, "shaky", q, precompile={"policy": "Never"}, runPolicy={"maxRetries": 1}))
    vcjob(k8s, ns, "shaky-train")
    simulate_vcjob_phase(ns, "shaky-train", "Running")
    wait_phase(ns, "shaky", "Training")

    pod = efa_failure(k8s, ns, "shaky")  # spends the whole budget of 1
    seen(ns, "shaky", "EfaInitFailed")
    volcano_restarts(ns, "shaky-train", 1, pod)
    wait_for(lambda: status(ns, "shaky").get("restarts") == 1, timeout=30, what="restart 1")
    for n, how, failure in ((2, "evicted", "Evicted"), (3, "preempted", "Preempted")):
        pod = disrupted_pod(k8s, ns, "shaky", how)
        seen(ns, "shaky", failure)
        volcano_restarts(ns, "shaky-train", n, pod)
        wait_for(lambda n=n: status(ns, "shaky").get("disruptions") == n - 1, timeout=30,
                 what=f"disruption {n - 1} counted")  # fmt: skip
    st = status(ns, "shaky")
    assert (st["phase"], st["restarts"], st["disruptions"]) == ("Training", 1, 2)

    set_suspend(ns, "shaky", True)  # the Volcano job is deleted; the totals stay
    wait_phase(ns, "shaky", "Suspended")
    wait_for(lambda: vcjobs(k8s, ns) == [], what="the training job removed")
    set_suspend(ns, "shaky", False)
    wait_for(lambda: k8s.get(VCJOBS, ns, "shaky-train") is not None, timeout=30,
             what="the training job recreated")  # fmt: skip
    simulate_vcjob_phase(ns, "shaky-train", "Running", retryCount=0)
    wait_for(lambda: condition(ns, "shaky", "Running").get("reason") == "GangRunning",
             timeout=30, what="GangRunning after resume")  # fmt: skip
    st = status(ns, "shaky")
    assert (st["restarts"], st["disruptions"]) == (1, 2)  # a new cursor, not a reset

    pod = disrupted_pod(k8s, ns, "shaky", "evicted")  # the new Volcano job's first restart
    seen(ns, "shaky", "Evicted")
    volcano_restarts(ns, "shaky-train", 1, pod)
    wait_for(lambda: status(ns, "shaky").get("disruptions") == 3, timeout=30,
             what="disruption 3 counted")  # fmt: skip
    simulate_vcjob_phase(ns, "shaky-train", "Completed", retryCount=1)
    st = wait_phase(ns, "shaky", "Succeeded")
    assert (st["restarts"], st["disruptions"]) == (1, 3)
    assert warnings(ns, "GangRestarted") == ["whole-gang restart 1 of 1 (EfaInitFailed)"]
    disrupted = warnings(ns, "GangDisrupted")
    assert [m.split(":")[0] for m in disrupted] == [
        "whole-gang restart after a disruption (Evicted)",
        "whole-gang restart after a disruption (Evicted)",
        "whole-gang restart after a disruption (Preempted)",
    ]
    assert sorted(m.rsplit(" ", 5)[1] for m in disrupted) == ["1", "2", "3"]  # disruption N
    assert all("does not count against runPolicy.maxRetries (1)" in m for m in disrupted)
