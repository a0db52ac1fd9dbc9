"""The failure classifier, table-driven over pods shaped as the API server returns them."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import V1ContainerStateTerminated, V1PodCondition

from trainium_operator.domain import failures
from trainium_operator.domain.failures import (
    LOG_TAIL_LINES,
    POLICIES,
    Failure,
    classify_gang,
    classify_pod,
)
from trainium_operator.domain.logrules import LOG_RULES
from trainium_operator.domain.unschedulable import short_resource, unschedulable

Json = dict[str, Any]
HERE = Path(__file__).parent / "failures"
T0, T1 = "2026-11-22T06:40:00Z", "2026-11-22T06:41:00Z"


def log(name: str) -> list[str]:
    """A fixture log tail, as `kubectl logs --tail` gives it."""
    return (HERE / name).read_text(encoding="utf-8").splitlines()


def lines() -> list[tuple[str, str]]:
    """(reason, line) rows of lines.tsv: one real-looking line per log pattern."""
    rows = (r.split("\t", 1) for r in log("lines.tsv") if r and not r.startswith("#"))
    return [(reason, line) for reason, line in rows]


def ended(code: int, reason: str = "Error", at: str = T0, **kw: Any) -> Json:
    """containerStatuses[].state with a terminated container (the API's camelCase keys)."""
    return {"terminated": {"exitCode": code, "reason": reason, "finishedAt": at, **kw}}


def waiting(reason: str, message: str = "") -> Json:
    return {"waiting": {"reason": reason, "message": message}}


def cond(kind: str, status: str, reason: str, message: str = "", at: str = T0) -> Json:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": at}  # fmt: skip


def pod(name: str = "w-0", state: Json | None = None, *conds: Json, **status: Any) -> Json:
    """A v1.Pod dict with one container "node"; phase follows the container unless given."""
    state = state or {"running": {"startedAt": T0}}
    phase = "Running" if "running" in state else "Pending" if "waiting" in state else "Failed"
    cs = {"name": "node", "image": "trainer:1", "ready": False, "restartCount": 0, "state": state}
    body = {"phase": phase, "conditions": list(conds), "containerStatuses": [cs], **status}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "status": body}


def test_fixtures_use_the_api_field_names() -> None:
    """The dicts here use the wire names the kubernetes client's models map to."""
    wire = V1ContainerStateTerminated.attribute_map
    assert (wire["exit_code"], wire["finished_at"]) == ("exitCode", "finishedAt")
    assert V1PodCondition.attribute_map["last_transition_time"] == "lastTransitionTime"


@pytest.mark.parametrize(("reason", "line"), lines(), ids=lambda v: v[:40])
def test_each_log_line(reason: str, line: str) -> None:
    got = classify_pod(pod(state=ended(1)), [line])
    assert got is not None and got.reason == reason
    if reason != "Unknown":
        assert got.message == f"pod w-0 container node (Error, exit 1): {line.strip()}"


def test_every_log_pattern_has_a_line() -> None:
    """No dead pattern: each regex of the table matches a fixture line of its own reason."""
    rows = lines()
    for rule in LOG_RULES:
        for rx in rule.patterns:
            assert any(rx.search(ln) for r, ln in rows if r == rule.reason), rx.pattern


def gone(reason: str, msg: str = "", kind: str = "DisruptionTarget", status: str = "True") -> Json:
    """A pod stopped with exit 143 under a disruption condition."""
    return pod("w-0", ended(143), cond(kind, status, reason, msg))


CASES: list[tuple[str, Json, list[str], str, str]] = [
    # id, pod, log tail, reason, text the message must contain
    ("oom-killed", pod(state=ended(137, "OOMKilled")), [], "OOMKilled",
     "node: OOMKilled (exit 137)"),
    ("oom-beats-log", pod(state=ended(137, "OOMKilled")), log("efa_init.log"), "OOMKilled",
     "OOMKilled (exit 137)"),
    ("pull-backoff", pod(state=waiting("ImagePullBackOff", 'Back-off pulling image "t:x"')), [],
     "ImagePullFailed", 'node: ImagePullBackOff: Back-off pulling image "t:x"'),
    ("err-image-pull", pod(state=waiting("ErrImagePull", "manifest unknown")), [],
     "ImagePullFailed", "ErrImagePull: manifest unknown"),
    ("invalid-image", pod(state=waiting("InvalidImageName")), [], "ImagePullFailed",
     "node: InvalidImageName"),
    ("config-error", pod(state=waiting("CreateContainerConfigError", 'secret "hf" not found')), [],
     "ContainerConfigError", 'secret "hf" not found'),
    ("compiler", pod(state=ended(1)), log("compiler.log"), "NeuronCompilerError", "[TEN404]"),
    ("runtime", pod(state=ended(1)), log("runtime.log"), "NeuronRuntimeError", "TDRV:tdrv_init"),
    ("efa-beats-traceback", pod(state=ended(1)), log("efa_init.log"), "EfaInitFailed",
     "aws-ofi-nccl initialization failed"),
    ("efa-after-traceback", pod(state=ended(1)), log("efa_init.log")[::-1], "EfaInitFailed",
     "OFI plugin initNet() failed"),
    ("rendezvous", pod(state=ended(1)), log("rendezvous.log"), "RendezvousTimeout",
     "RendezvousTimeoutError"),
    ("diverged", pod(state=ended(1)), log("diverged.log"), "LossDiverged",
     "non-finite loss nan (mean over ranks) at step 410"),
    ("exception-line-not-torchrun", pod(state=ended(1)), log("user_code.log"), "UserCodeError",
     "(Error, exit 1): [default0]:KeyError: 'input_ids'"),
    ("unknown", pod(state=ended(137)), ["step 3 done"], "Unknown",
     "(Error, exit 137): no known error in 1 log lines"),
    ("termination-message", pod(state=ended(1, message="Failure: NRT_RESOURCE in nrt_load()\n")),
     [], "NeuronRuntimeError", "Failure: NRT_RESOURCE in nrt_load()"),
    ("evicted", pod("w-0", ended(137), reason="Evicted", message="The node was low on memory."),
     log("user_code.log"), "Evicted", "pod w-0: Evicted (Evicted): The node was low on memory."),
    ("preempted", gone("PreemptionByScheduler", "default-scheduler: preempting to accommodate"),
     log("rendezvous.log"), "Preempted", "Preempted (PreemptionByScheduler): default-scheduler"),
    ("eviction-api", gone("EvictionByEvictionAPI"), [], "Evicted",
     "pod w-0: Evicted (EvictionByEvictionAPI)"),
    ("node-shutdown", gone("TerminationByKubelet", "Pod was terminated in response to imminent "
     "node shutdown."), [], "Evicted", "(TerminationByKubelet): Pod was terminated"),
    ("taint-manager", gone("DeletionByTaintManager"), [], "Evicted", "DeletionByTaintManager"),
    ("volcano-preempt", gone("Evict", "Pod is evicted, because of preempt", "Ready", "False"), [],
     "Preempted", "Preempted (Evict): Pod is evicted, because of preempt"),
    ("volcano-reclaim", gone("Evict", "Pod is evicted, because of reclaim", "Ready", "False"), [],
     "Preempted", "because of reclaim"),
    ("disruption-reset", gone("PreemptionByScheduler", "", "DisruptionTarget", "False"),
     log("runtime.log"), "NeuronRuntimeError", "TDRV"),
    ("admission", pod("w-0", waiting(""), reason="UnexpectedAdmissionError",
     message="Allocate failed due to no healthy devices present"), [], "AdmissionRejected",
     "(UnexpectedAdmissionError): Allocate failed"),
    ("out-of-neuron", pod("w-0", waiting(""), reason="OutOfaws.amazon.com/neuron"), [],
     "AdmissionRejected", "OutOfaws.amazon.com/neuron"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("id_", "body", "tail", "reason", "text"), CASES, ids=[c[0] for c in CASES]
)
def test_classify_pod(id_: str, body: Json, tail: list[str], reason: str, text: str) -> None:
    got = classify_pod(body, tail)
    assert got is not None and got.reason == reason, got
    assert text in got.message and got.message.startswith("pod w-0") and "\n" not in got.message
    policy = POLICIES[reason]
    assert (got.retry, got.counts_against_budget) == (policy.retry, policy.counts_against_budget)


def test_message_names_pod_and_container() -> None:
    got = classify_pod(pod("bert-train-node-1-0", ended(137, "OOMKilled")))
    msg = "pod bert-train-node-1-0 container node: OOMKilled (exit 137)"
    assert got == Failure("OOMKilled", False, True, msg)


@pytest.mark.parametrize(
    "healthy",
    [
        pod(),
        pod(state=ended(0, "Completed"), phase="Succeeded"),
        pod(state=waiting("ContainerCreating")),
        pod("w-0", waiting("ContainerCreating"), cond("PodScheduled", "False", "Unschedulable")),
    ],
    ids=["running", "succeeded", "creating", "unschedulable-is-not-failed-yet"],
)
def test_not_failed(healthy: Json) -> None:
    assert classify_pod(healthy, log("user_code.log")) is None


def test_last_state_of_a_restarted_container_counts() -> None:
    body = pod()
    body["status"]["containerStatuses"][0]["lastState"] = ended(1)
    got = classify_pod(body, ["[default0]:ValueError: bad shape"])
    assert got is not None and got.reason == "UserCodeError" and "ValueError" in got.message


def test_failed_phase_without_container_state() -> None:
    bare = {"metadata": {"name": "w-0"}, "status": {"phase": "Failed", "message": "Pod was lost"}}
    got = classify_pod(bare)
    assert got is not None and got.reason == "Unknown" and "failed: Pod was lost" in got.message


def test_init_container_failure() -> None:
    body = pod(state=waiting("PodInitializing"))
    body["status"]["initContainerStatuses"] = [{"name": "fetch", "state": ended(1)}]
    got = classify_pod(body, ["error: cannot read /fsx/tokenizer"])
    assert got is not None and got.reason == "UserCodeError"
    assert got.message.startswith("pod w-0 container fetch (Error, exit 1): error: cannot read")


def test_log_tail_capped_at_50_lines() -> None:
    got = classify_pod(pod(state=ended(1)), [f"line {i}\n" for i in range(120)])
    assert got is not None and len(got.log_tail) == LOG_TAIL_LINES == 50
    assert (got.log_tail[0], got.log_tail[-1]) == ("line 70", "line 119")


def test_evidence_older_than_the_tail_still_counts() -> None:
    first = "2026-Nov-22 06:20:11 5120:5120 ERROR   NRT:nrt_init  Failed to initialize devices"
    got = classify_pod(pod(state=ended(1)), [first, *["noise"] * 80])
    assert got is not None and got.reason == "NeuronRuntimeError" and first not in got.log_tail


def test_termination_message_is_the_tail_without_a_log() -> None:
    got = classify_pod(pod(state=ended(1, message="a\nb\nValueError: x\n")), ())
    assert got is not None and got.log_tail == ("a", "b", "ValueError: x")


def test_long_evidence_is_cut() -> None:
    got = classify_pod(pod(state=ended(1)), ["ValueError: " + "x" * 1000])
    assert got is not None and len(got.message) < 400 and got.message.endswith("...")


# --- the gang --------------------------------------------------------------------------------


def test_gang_first_to_fail_wins() -> None:
    pods = [pod("w-0", ended(1, at=T1)), pod("w-1", ended(1, at=T0))]
    got = classify_gang(pods, {"w-0": log("compiler.log"), "w-1": log("runtime.log")})
    assert got is not None and got.reason == "NeuronRuntimeError" and "pod w-1 " in got.message


def test_gang_primary_cause_beats_an_earlier_generic_one() -> None:
    pods = [pod("w-0", ended(1, at=T0)), pod("w-1", ended(1, at=T1))]
    got = classify_gang(pods, {"w-0": log("user_code.log"), "w-1": log("efa_init.log")})
    assert got is not None and got.reason == "EfaInitFailed"


def test_gang_peer_symptom_does_not_hide_the_user_error() -> None:
    """Rank 0 raised; its peer then lost the rendezvous: the user error is the cause."""
    pods = [pod("w-0", ended(1, at=T1)), pod("w-1", ended(1, at=T0))]
    got = classify_gang(pods, {"w-0": log("rendezvous.log"), "w-1": log("user_code.log")})
    assert got is not None and got.reason == "UserCodeError" and not got.retry


def test_gang_disruption_explains_the_rest() -> None:
    preempted = pod(
        "w-1", ended(143, at=T1), cond("DisruptionTarget", "True", "PreemptionByScheduler", at=T1)
    )
    got = classify_gang([pod("w-0", ended(1, at=T0)), preempted], {"w-0": log("runtime.log")})
    assert got is not None and got.reason == "Preempted" and not got.counts_against_budget


SIGNALLED = "[default0]:stopped: SIGTERM: stopped after step 3, checkpointed; a rerun resumes there"
SIGNAL_EXCEPTION = [
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3/site-packages/torch/distributed/run.py", line 901, in main',
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15",
]


def test_torchrun_signal_exception_is_an_interruption_not_user_code() -> None:
    """torchrun's agent exits 1 with a SignalException traceback after a SIGTERM (issue 20)."""
    got = classify_pod(pod(state=ended(1)), [SIGNALLED, *SIGNAL_EXCEPTION])
    assert got is not None and got.reason == "Interrupted"
    assert got.retry and not got.counts_against_budget


def test_exit_143_without_evidence_is_an_interruption() -> None:
    """128 + SIGTERM: what the trainer and its torchrun wrapper exit with when told to stop."""
    got = classify_pod(pod(state=ended(143)), [])
    assert got is not None and got.reason == "Interrupted"
    bare = classify_pod(pod(state=ended(143)), ["Traceback (most recent call last):"])
    assert bare is not None and bare.reason == "Interrupted"


def test_exit_143_keeps_a_specific_cause() -> None:
    got = classify_pod(pod(state=ended(143)), log("runtime.log"))
    assert got is not None and got.reason == "NeuronRuntimeError"


def test_gang_interruption_explains_only_itself() -> None:
    """Volcano SIGTERMs the peers of a pod that failed: their clean stop hides nothing."""
    pods = [pod("w-0", ended(1, at=T0)), pod("w-1", ended(143, at=T0))]
    got = classify_gang(pods, {"w-0": log("user_code.log"), "w-1": [SIGNALLED]})
    assert got is not None and got.reason == "UserCodeError"
    pods = [pod("w-0", ended(143, at=T1)), pod("w-1", ended(1, at=T0))]
    got = classify_gang(pods, {"w-0": [SIGNALLED], "w-1": [SIGNALLED, *SIGNAL_EXCEPTION]})
    assert got is not None and got.reason == "Interrupted" and not got.counts_against_budget


def test_gang_reads_each_pods_own_log() -> None:
    got = classify_gang(
        [pod("w-0"), pod("w-1", ended(1))], {"w-0": log("efa_init.log"), "w-1": log("diverged.log")}
    )
    assert got is not None and got.reason == "LossDiverged"
    assert got.log_tail == tuple(log("diverged.log"))


def test_gang_nothing_failed() -> None:
    assert classify_gang([pod("w-0")], {}) is None
    assert classify_gang([], {}) is None


# --- unschedulable ---------------------------------------------------------------------------

TAINT_AND_NEURON = (
    "0/3 nodes are available: 1 node(s) had untolerated taint {aws.amazon.com/neuron: true}, "
    "2 Insufficient aws.amazon.com/neuron. preemption: 0/3 nodes are available: "
    "3 No preemption victims found for incoming pod."
)
SCHEDULER_MESSAGES = [
    (  # real Volcano v1.16 on the tier: a gang of 5 trn1.32xlarge pods on 4 such nodes
        "pod group is not ready, 5 Pending, 5 minAvailable; "
        "Pending: 1 Unschedulable, 4 Schedulable",
        "free nodes for the whole gang (1 of 5 pods fit none)",
    ),
    ("0/4 nodes are available: 4 Insufficient aws.amazon.com/neuron.", "aws.amazon.com/neuron"),
    (TAINT_AND_NEURON, "aws.amazon.com/neuron"),
    ("0/5 nodes are available: 1 Insufficient vpc.amazonaws.com/efa, 3 Insufficient memory, 1 "
     "node(s) didn't match Pod's node affinity/selector. preemption: 0/5 nodes are available: 1 "
     "Preemption is not helpful for scheduling, 4 No preemption victims found for incoming pod.",
     "memory, vpc.amazonaws.com/efa"),
    ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: "
     "0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
     "node matching the pod's node affinity/selector"),
    ("0/2 nodes are available: 2 node(s) had untolerated taint {aws.amazon.com/neuron: true}.",
     "toleration for taint {aws.amazon.com/neuron: true}"),
    # kube-scheduler before 1.25 wrote the taint reason this way.
    ("0/3 nodes are available: 3 node(s) had taint {node.kubernetes.io/not-ready: }, that the "
     "pod didn't tolerate.", "toleration for taint {node.kubernetes.io/not-ready: }"),
    # Volcano's FitErrors (pkg/scheduler/api/unschedule_info.go).
    ("0/4 nodes are unavailable: 4 Insufficient aws.amazon.com/neurondevice.",
     "aws.amazon.com/neurondevice"),
    ("all nodes are unavailable: 2 node(s) resource fit failed.",
     "node resources (Volcano: resource fit failed)"),
    ("0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
     "bound PersistentVolumeClaim"),
    ("0/1 nodes are available: 1 node(s) had volume node affinity conflict.",
     "node in the volume's zone"),
    ("3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable", None),
]  # fmt: skip


@pytest.mark.parametrize(("message", "short"), SCHEDULER_MESSAGES)
def test_short_resource(message: str, short: str | None) -> None:
    assert short_resource(message) == short


def stuck(name: str, message: str) -> Json:
    return pod(
        name, waiting("ContainerCreating"), cond("PodScheduled", "False", "Unschedulable", message)
    )


def test_unschedulable_gang_names_what_is_short() -> None:
    gang_msg = "2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable"
    got = unschedulable([stuck("w-0", gang_msg), stuck("w-1", TAINT_AND_NEURON), pod("w-2")])
    assert got is not None
    assert (got.reason, got.short, got.retry, got.counts_against_budget) == (
        "Unschedulable", "aws.amazon.com/neuron", False, False,
    )  # fmt: skip
    assert (
        got.message
        == f"pod w-1 cannot be scheduled, short of aws.amazon.com/neuron: {TAINT_AND_NEURON}"
    )


def test_unschedulable_without_a_message() -> None:
    got = unschedulable([stuck("w-0", "")])
    assert got is not None and got.short is None
    assert got.message == "pod w-0 cannot be scheduled: no message from the scheduler"


def test_scheduled_pods_are_not_unschedulable() -> None:
    assert (
        unschedulable(
            [pod("w-0", waiting("ContainerCreating"), cond("PodScheduled", "True", "")), pod("w-1")]
        )
        is None
    )


# --- the tables ------------------------------------------------------------------------------


def test_every_reason_has_exactly_one_policy() -> None:
    used = {r.reason for r in LOG_RULES} | {"Unschedulable", "Unknown", "AdmissionRejected"}
    used.add("Hung")  # judged from the trainer's progress (progress.py), not from a pod
    used |= {"NodeUnhealthy", "Straggler"}  # judged from the node (health.py, stragglers.py)
    for table in (
        failures._DISRUPTION_REASONS,
        failures._STATUS_REASONS,
        failures._WAITING_REASONS,
    ):
        used |= set(table.values())
    assert used == set(POLICIES)
    assert set(POLICIES) >= failures.SECONDARY | failures.GANG_DISRUPTIONS | failures.NOT_CHARGED


def test_retry_decisions_the_issue_names() -> None:
    """A compiler error or a bad image fails fast; runtime/EFA/rendezvous errors restart."""
    fail_fast = {
        "NeuronCompilerError",
        "ImagePullFailed",
        "OOMKilled",
        "UserCodeError",
        "LossDiverged",
    }
    restart = {"NeuronRuntimeError", "EfaInitFailed", "RendezvousTimeout", "Evicted", "Preempted"}
    assert not any(POLICIES[r].retry for r in fail_fast)
    assert all(POLICIES[r].retry for r in restart)
    free = {r for r, p in POLICIES.items() if not p.counts_against_budget}
    assert free == {
        "Evicted", "Preempted", "Interrupted", "Unschedulable", "PreflightFailed",
        "NodeUnhealthy", "Straggler",
    }  # fmt: skip
    assert POLICIES["Interrupted"].retry


def test_module_does_no_io() -> None:
    """Pure: it imports only standard-library text and data tools, and opens nothing."""
    tree = ast.parse(inspect.getsource(failures))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    stdlib = {"__future__", "datetime", "re", "collections.abc", "dataclasses", "typing"}
    # trainium_trainer: only its contract (constants shared with the trainer).
    assert imported == stdlib | {"trainium_operator.domain", "trainium_trainer"}
    # Its one sibling is pure as well (tests/unit/test_checkpoints.py pins that module's imports).
    siblings = {
        a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "trainium_operator.domain"
        for a in n.names
    }
    assert siblings == {"checkpoints", "logrules"}
    calls = {
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    assert not calls & {"open", "print", "input", "exec", "eval"}


def test_trainer_divergence_message_drift() -> None:
    """The trainer's own NonFiniteLoss text (trainer/trainium_trainer/errors.py) is LossDiverged."""
    errors = pytest.importorskip(
        "trainium_trainer.errors", reason="the trainer has no errors.py yet"
    )
    for what in ("non-finite loss nan (mean over ranks)", "3 non-finite weights"):
        line = f"[default0]:error: {errors.NonFiniteLoss(410, what, 400)}"
        got = classify_pod(pod(state=ended(1)), [line])
        assert got is not None and got.reason == "LossDiverged", line


# --- the node a failure points at ---------------------------------------------------------------


def on_node(body: Json, node: str) -> Json:
    return {**body, "spec": {"nodeName": node}}


def preflight_pod(code: int, message: str) -> Json:
    """A training pod whose preflight init container ended: the trainer never started."""
    body = pod(state=waiting("PodInitializing"))
    init = {"name": "preflight", "ready": False, "restartCount": 0,
            "state": ended(code, message=message)}  # fmt: skip
    body["status"] = {**body["status"], "phase": "Failed", "initContainerStatuses": [init]}
    return on_node(body, "ip-10-0-1-5")


def test_a_failed_preflight_is_the_nodes_fault_and_spends_no_retry() -> None:
    got = classify_pod(preflight_pod(4, "preflight failed: 0 EFA devices (want 8)\n"))
    assert got is not None
    assert (got.reason, got.retry, got.counts_against_budget) == ("PreflightFailed", True, False)
    assert got.message == (
        "pod w-0 container preflight (exit 4): preflight failed: 0 EFA devices (want 8)"
    )
    assert got.node == "ip-10-0-1-5" and got.node_fault


def test_a_preflight_that_crashed_is_not_the_nodes_fault() -> None:
    # The image lacks the trainer: the job's mistake, whatever node it ran on.
    got = classify_pod(
        preflight_pod(1, ""), ["ModuleNotFoundError: No module named 'trainium_trainer'"]
    )
    assert got is not None and got.reason == "UserCodeError" and not got.node_fault


@pytest.mark.parametrize(
    ("fixture", "fault"),
    [("runtime.log", True), ("efa_init.log", True), ("user_code.log", False)],
)
def test_neuron_and_efa_failures_point_at_the_node(fixture: str, fault: bool) -> None:
    got = classify_gang([on_node(pod(state=ended(1)), "ip-10-0-9-9")], {"w-0": log(fixture)})
    assert got is not None and got.node == "ip-10-0-9-9"
    assert got.node_fault is fault


def test_without_a_node_nothing_is_excluded() -> None:
    got = classify_pod(pod(state=ended(1)), log("runtime.log"))
    assert got is not None and got.node is None and not got.node_fault


# ---- issue 17 bug 5 on a real cluster: the peers Volcano stops are no cause -----------------


def _deleted(body: Json, at: str = T1, grace: int = 30) -> Json:
    body["metadata"].update(deletionTimestamp=at, deletionGracePeriodSeconds=grace)
    return body


def test_17_bug5_a_peer_killed_by_its_pods_deletion_is_no_cause() -> None:
    """Volcano deletes the gang of a failed pod; the kubelet kills the peer (exit 137)."""
    killed = _deleted(pod("w-1", ended(137, at=T1)), at="2026-11-22T06:41:30Z")
    assert failures.classify_pod(killed) is None
    first = pod("w-0", ended(1, at=T1), message="")
    gang = failures.classify_gang([killed, first], {"w-0": ["CCOM WARN NET/OFI aws-ofi-nccl "
                                                            "initialization failed"]})  # fmt: skip
    assert gang is not None and gang.reason == "EfaInitFailed" and "w-0" in gang.message


def test_17_bug5_what_a_killed_peer_still_proves_and_what_deletion_does_not_explain() -> None:
    """An OOM, a telling log line, a failure before the deletion: each is still a cause."""
    oom = _deleted(pod("w-1", ended(137, "OOMKilled", at=T1)))
    assert failures.classify_pod(oom).reason == "OOMKilled"  # type: ignore[union-attr]
    nrt = _deleted(pod("w-1", ended(137, at=T1)))
    line = ["2026-Nov-25 04:00:00.0000 1:1 ERROR   NRT:nrt_init  Failed to initialize devices"]
    assert failures.classify_pod(nrt, line).reason == "NeuronRuntimeError"  # type: ignore[union-attr]
    before = _deleted(pod("w-1", ended(137, at=T0)), at="2026-11-22T06:41:30Z")
    assert failures.classify_pod(before) is not None  # failed a minute before its deletion
    exit1 = _deleted(pod("w-1", ended(1, at=T1)))
    assert failures.classify_pod(exit1) is not None


def test_17_bug5_a_log_tail_in_the_termination_message_classifies() -> None:
    """FallbackToLogsOnError: the kubelet puts the failed container's log tail in the message."""
    said = "starting\n2026-Nov-25 04:00:00.0000 1:1 ERROR   NRT:nrt_init  Failed to initialize\n"
    found = failures.classify_pod(pod("w-0", ended(1, message=said)))
    assert found is not None and found.reason == "NeuronRuntimeError"
    assert found.log_tail[-1].startswith("2026-Nov-25")
