"""The failure classifier, table-driven over pods shaped as the API server returns them."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import V1ContainerStateTerminated, V1ContainerStateWaiting, V1PodCondition

from trainium_operator import failures
from trainium_operator.failures import (
    LOG_RULES,
    LOG_TAIL_LINES,
    POLICIES,
    Failure,
    classify_gang,
    classify_pod,
    short_resource,
    unschedulable,
)

Json = dict[str, Any]
LOGS = Path(__file__).parent / "failures"


def log(name: str) -> list[str]:
    """A fixture log tail, as `kubectl logs --tail` would give it."""
    return (LOGS / name).read_text(encoding="utf-8").splitlines()


def terminated(
    code: int, reason: str = "Error", at: str = "2026-11-22T06:40:00Z", **kw: Any
) -> Json:
    """state.terminated as the API returns it (camelCase keys)."""
    return {"terminated": {"exitCode": code, "reason": reason, "finishedAt": at, **kw}}


def pod(
    name: str = "bert-train-node-0-0",
    phase: str = "Failed",
    state: Json | None = None,
    container: str = "node",
    conditions: tuple[Json, ...] = (),
    last: Json | None = None,
    **status: Any,
) -> Json:
    """A v1.Pod dict with one container in `state` (a Running container when None)."""
    cs: Json = {"name": container, "ready": False, "restartCount": 0, "image": "trainer:1"}
    cs["state"] = state if state is not None else {"running": {"startedAt": "2026-11-22T06:00:00Z"}}
    cs["lastState"] = last or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "status": {
            "phase": phase,
            "conditions": list(conditions),
            "containerStatuses": [cs],
            **status,
        },
    }


def cond(type_: str, status: str, reason: str, message: str = "", at: str = "") -> Json:
    """A pod condition dict."""
    out = {"type": type_, "status": status, "reason": reason, "message": message}
    return out | ({"lastTransitionTime": at} if at else {})


def test_fixture_field_names_are_the_apis() -> None:
    """The dicts above use the wire names the kubernetes client maps its models to."""
    assert {"exit_code": "exitCode", "finished_at": "finishedAt"}.items() <= (
        V1ContainerStateTerminated.attribute_map.items()
    )
    assert V1ContainerStateWaiting.attribute_map["reason"] == "reason"
    assert V1PodCondition.attribute_map["last_transition_time"] == "lastTransitionTime"


@dataclass(frozen=True)
class Case:
    id: str
    pod: Json
    logs: tuple[str, ...]
    reason: str
    evidence: str


CASES = [
    Case(
        "oom-killed",
        pod(state=terminated(137, "OOMKilled")),
        (),
        "OOMKilled",
        "OOMKilled (exit 137)",
    ),
    Case(
        "oom-beats-log-text",
        pod(state=terminated(137, "OOMKilled")),
        tuple(log("efa_init.log")),
        "OOMKilled",
        "OOMKilled (exit 137)",
    ),
    Case(
        "image-pull-backoff",
        pod(
            phase="Pending",
            state={
                "waiting": {
                    "reason": "ImagePullBackOff",
                    "message": 'Back-off pulling image "trainer:nope"',
                }
            },
        ),
        (),
        "ImagePullFailed",
        'ImagePullBackOff: Back-off pulling image "trainer:nope"',
    ),
    Case(
        "err-image-pull",
        pod(
            phase="Pending",
            state={"waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}},
        ),
        (),
        "ImagePullFailed",
        "ErrImagePull: manifest unknown",
    ),
    Case(
        "invalid-image-name",
        pod(phase="Pending", state={"waiting": {"reason": "InvalidImageName"}}),
        (),
        "ImagePullFailed",
        "InvalidImageName",
    ),
    Case(
        "config-error",
        pod(
            phase="Pending",
            state={
                "waiting": {
                    "reason": "CreateContainerConfigError",
                    "message": 'secret "hf" not found',
                }
            },
        ),
        (),
        "ContainerConfigError",
        'secret "hf" not found',
    ),
    Case(
        "compiler",
        pod(state=terminated(1)),
        tuple(log("compiler.log")),
        "NeuronCompilerError",
        "[TEN404]",
    ),
    Case(
        "runtime",
        pod(state=terminated(1)),
        tuple(log("runtime.log")),
        "NeuronRuntimeError",
        "TDRV:tdrv_init_mla_phase1",
    ),
    Case(
        "efa-beats-traceback",
        pod(state=terminated(1)),
        tuple(log("efa_init.log")),
        "EfaInitFailed",
        "aws-ofi-nccl initialization failed",
    ),
    Case(
        "efa-line-after-traceback-still-wins",
        pod(state=terminated(1)),
        tuple(reversed(log("efa_init.log"))),
        "EfaInitFailed",
        "OFI plugin initNet() failed",
    ),
    Case(
        "libfabric-getinfo",
        pod(state=terminated(1)),
        (
            "libfabric:85:1763792000::core:core:fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list",
        ),
        "EfaInitFailed",
        "provider efa output empty list",
    ),
    Case(
        "rendezvous",
        pod(state=terminated(1)),
        tuple(log("rendezvous.log")),
        "RendezvousTimeout",
        "RendezvousTimeoutError",
    ),
    Case(
        "c10d-socket",
        pod(state=terminated(1)),
        (
            "torch.distributed.DistNetworkError: The client socket has timed out after 900000ms while trying to connect to (bert-train-node-0-0.bert-train, 29500).",
        ),
        "RendezvousTimeout",
        "DistNetworkError",
    ),
    Case(
        "device-oom",
        pod(state=terminated(1)),
        ('[default3]:RuntimeError: nrt_tensor_allocate status=4 message="Allocation Failure"',),
        "DeviceOutOfMemory",
        "nrt_tensor_allocate status=4",
    ),
    Case(
        "bad-alloc",
        pod(state=terminated(134)),
        ("terminate called after throwing an instance of 'std::bad_alloc'",),
        "OOMKilled",
        "std::bad_alloc",
    ),
    Case(
        "diverged",
        pod(state=terminated(1)),
        tuple(log("diverged.log")),
        "LossDiverged",
        "non-finite loss nan (mean over ranks) at step 410",
    ),
    Case(
        "non-finite-weights",
        pod(state=terminated(3)),
        (
            "error: 2 non-finite weights at step 12; nothing saved from it (latest good checkpoint: none)",
        ),
        "LossDiverged",
        "2 non-finite weights at step 12",
    ),
    Case(
        "user-exception-line",
        pod(state=terminated(1)),
        tuple(log("user_code.log")),
        "UserCodeError",
        "KeyError: 'input_ids'",
    ),
    Case(
        "trainer-usage-error",
        pod(state=terminated(2)),
        ("error: --data-dir /fsx/data: no *.hdf5 shards",),
        "UserCodeError",
        "--data-dir /fsx/data",
    ),
    Case(
        "traceback-only",
        pod(state=terminated(1)),
        ("Traceback (most recent call last):",),
        "UserCodeError",
        "Traceback",
    ),
    Case(
        "unknown",
        pod(state=terminated(1)),
        ("step 3 done",),
        "Unknown",
        "Error, exit 1): no known error in its last 1 log lines",
    ),
    Case(
        "termination-message-is-evidence",
        pod(state=terminated(1, message="Failure: NRT_RESOURCE in nrt_load()\n")),
        (),
        "NeuronRuntimeError",
        "Failure: NRT_RESOURCE in nrt_load()",
    ),
    Case(
        "last-state-counts",
        pod(phase="Running", state={"running": {}}, last=terminated(1)),
        ("[default0]:ValueError: bad shape",),
        "UserCodeError",
        "ValueError: bad shape",
    ),
    Case(
        "evicted-status-reason",
        pod(
            state=terminated(137),
            reason="Evicted",
            message="The node was low on resource: ephemeral-storage.",
        ),
        tuple(log("user_code.log")),
        "Evicted",
        "Evicted (Evicted): The node was low on resource: ephemeral-storage.",
    ),
    Case(
        "preempted-by-scheduler",
        pod(
            state=terminated(143),
            conditions=(
                cond(
                    "DisruptionTarget",
                    "True",
                    "PreemptionByScheduler",
                    "default-scheduler: preempting to accommodate a higher priority pod",
                ),
            ),
        ),
        tuple(log("rendezvous.log")),
        "Preempted",
        "Preempted (PreemptionByScheduler)",
    ),
    Case(
        "eviction-api",
        pod(
            state=terminated(143),
            conditions=(
                cond("DisruptionTarget", "True", "EvictionByEvictionAPI", "Eviction API: evicting"),
            ),
        ),
        (),
        "Evicted",
        "Evicted (EvictionByEvictionAPI)",
    ),
    Case(
        "kubelet-termination",
        pod(
            state=terminated(143),
            conditions=(
                cond(
                    "DisruptionTarget",
                    "True",
                    "TerminationByKubelet",
                    "Pod was terminated in response to imminent node shutdown.",
                ),
            ),
        ),
        (),
        "Evicted",
        "imminent node shutdown",
    ),
    Case(
        "taint-manager",
        pod(
            state=terminated(143),
            conditions=(
                cond(
                    "DisruptionTarget",
                    "True",
                    "DeletionByTaintManager",
                    "Taint manager: deleting due to NoExecute taint",
                ),
            ),
        ),
        (),
        "Evicted",
        "DeletionByTaintManager",
    ),
    Case(
        "volcano-preempt",
        pod(
            state=terminated(143),
            conditions=(cond("Ready", "False", "Evict", "Pod is evicted, because of preempt"),),
        ),
        (),
        "Preempted",
        "because of preempt",
    ),
    Case(
        "disruption-reset-is-not-one",
        pod(
            state=terminated(1),
            conditions=(cond("DisruptionTarget", "False", "PreemptionByScheduler"),),
        ),
        tuple(log("runtime.log")),
        "NeuronRuntimeError",
        "TDRV",
    ),
    Case(
        "device-plugin-admission",
        pod(
            state={"waiting": {}},
            reason="UnexpectedAdmissionError",
            message="Allocate failed due to no healthy devices present",
        ),
        (),
        "AdmissionRejected",
        "no healthy devices present",
    ),
    Case(
        "out-of-neuron",
        pod(
            state={"waiting": {}},
            reason="OutOfaws.amazon.com/neuron",
            message="Node didn't have enough resource",
        ),
        (),
        "AdmissionRejected",
        "OutOfaws.amazon.com/neuron",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_classify_pod(case: Case) -> None:
    got = classify_pod(case.pod, case.logs)
    assert got is not None
    assert got.reason == case.reason
    assert case.evidence in got.message
    assert got.message.startswith(f"pod {case.pod['metadata']['name']}")
    assert "\n" not in got.message
    policy = POLICIES[case.reason]
    assert (got.retry, got.counts_against_budget) == (policy.retry, policy.counts_against_budget)


def test_container_named_in_message() -> None:
    got = classify_pod(pod("bert-train-node-1-0", state=terminated(137, "OOMKilled")))
    assert got == Failure(
        "OOMKilled", False, True, "pod bert-train-node-1-0 container node: OOMKilled (exit 137)"
    )


@pytest.mark.parametrize(
    "healthy",
    [
        pod(phase="Running"),
        pod(phase="Succeeded", state=terminated(0, "Completed")),
        pod(phase="Pending", state={"waiting": {"reason": "ContainerCreating"}}),
        pod(
            phase="Pending",
            conditions=(
                cond(
                    "PodScheduled",
                    "False",
                    "Unschedulable",
                    "0/2 nodes are available: 2 Insufficient cpu.",
                ),
            ),
        ),
    ],
    ids=["running", "succeeded", "creating", "unschedulable-is-not-a-failure-yet"],
)
def test_not_failed(healthy: Json) -> None:
    assert classify_pod(healthy, log("user_code.log")) is None


def test_failed_phase_without_container_state() -> None:
    bare = {"metadata": {"name": "p"}, "status": {"phase": "Failed", "message": "Pod was deleted"}}
    got = classify_pod(bare, ())
    assert got is not None and got.reason == "Unknown" and "Pod was deleted" in got.message


def test_log_tail_capped_at_50_lines() -> None:
    lines = [f"line {i}\n" for i in range(120)]
    got = classify_pod(pod(state=terminated(1)), lines)
    assert got is not None
    assert len(got.log_tail) == LOG_TAIL_LINES == 50
    assert got.log_tail[0] == "line 70" and got.log_tail[-1] == "line 119"


def test_evidence_beyond_the_tail_still_counts() -> None:
    lines = [
        "2026-Nov-22 06:20:11.3 5120:5120 ERROR   NRT:nrt_init  Failed to initialize devices",
        *["noise"] * 80,
    ]
    got = classify_pod(pod(state=terminated(1)), lines)
    assert got is not None and got.reason == "NeuronRuntimeError"
    assert "NRT:nrt_init" not in "".join(got.log_tail)


def test_termination_message_is_the_tail_when_no_log() -> None:
    got = classify_pod(pod(state=terminated(1, message="a\nb\nValueError: x\n")), ())
    assert got is not None and got.log_tail == ("a", "b", "ValueError: x")


def test_long_evidence_line_is_cut() -> None:
    got = classify_pod(pod(state=terminated(1)), ["ValueError: " + "x" * 1000])
    assert got is not None and len(got.message) < 400 and got.message.endswith("...")


def test_init_container_failure() -> None:
    p = pod(phase="Failed", state={"waiting": {"reason": "PodInitializing"}})
    p["status"]["initContainerStatuses"] = [{"name": "fetch", "state": terminated(1)}]
    got = classify_pod(p, ["error: cannot read /fsx/tokenizer"])
    assert got is not None and got.reason == "UserCodeError" and "container fetch" in got.message


# --- the gang --------------------------------------------------------------------------------


def gang(*members: tuple[str, Json]) -> list[Json]:
    """Pods of one gang: Running while their container runs, Failed once it terminated."""
    return [pod(n, "Running" if "running" in s else "Failed", s) for n, s in members]


def test_gang_first_to_fail_wins() -> None:
    pods = gang(
        ("w-0", terminated(1, at="2026-11-22T06:40:05Z")),
        ("w-1", terminated(1, at="2026-11-22T06:40:01Z")),
    )
    logs = {"w-0": log("rendezvous.log"), "w-1": log("runtime.log")}
    got = classify_gang(pods, logs)
    assert (
        got is not None
        and got.reason == "NeuronRuntimeError"
        and got.message.startswith("pod w-1 ")
    )


def test_gang_specific_cause_beats_earlier_generic() -> None:
    pods = gang(
        ("w-0", terminated(1, at="2026-11-22T06:40:00Z")),
        ("w-1", terminated(1, at="2026-11-22T06:41:00Z")),
    )
    got = classify_gang(pods, {"w-0": log("user_code.log"), "w-1": log("efa_init.log")})
    assert got is not None and got.reason == "EfaInitFailed"


def test_gang_disruption_explains_the_rest() -> None:
    preempted = pod(
        "w-1",
        state=terminated(143, at="2026-11-22T06:45:00Z"),
        conditions=(cond("DisruptionTarget", "True", "PreemptionByScheduler"),),
    )
    pods = [pod("w-0", state=terminated(1, at="2026-11-22T06:40:00Z")), preempted]
    got = classify_gang(pods, {"w-0": log("runtime.log")})
    assert got is not None and got.reason == "Preempted" and not got.counts_against_budget


def test_gang_uses_each_pods_own_log() -> None:
    pods = gang(("w-0", {"running": {}}), ("w-1", terminated(1)))
    got = classify_gang(pods, {"w-0": log("efa_init.log"), "w-1": log("diverged.log")})
    assert (
        got is not None
        and got.reason == "LossDiverged"
        and len(got.log_tail) == len(log("diverged.log"))
    )


def test_gang_nothing_failed() -> None:
    assert classify_gang(gang(("w-0", {"running": {}})), {}) is None
    assert classify_gang([], {}) is None


# --- unschedulable ---------------------------------------------------------------------------

TAINT_AND_NEURON = (
    "0/3 nodes are available: 1 node(s) had untolerated taint {aws.amazon.com/neuron: true}, "
    "2 Insufficient aws.amazon.com/neuron. preemption: 0/3 nodes are available: "
    "3 No preemption victims found for incoming pod."
)


@pytest.mark.parametrize(
    ("message", "short"),
    [
        ("0/4 nodes are available: 4 Insufficient aws.amazon.com/neuron.", "aws.amazon.com/neuron"),
        (TAINT_AND_NEURON, "aws.amazon.com/neuron"),
        (
            "0/5 nodes are available: 1 Insufficient vpc.amazonaws.com/efa, 3 Insufficient memory, "
            "1 node(s) didn't match Pod's node affinity/selector. preemption: 0/5 nodes are "
            "available: 1 Preemption is not helpful for scheduling, 4 No preemption victims found.",
            "memory, vpc.amazonaws.com/efa",
        ),
        (
            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
            "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
            "node matching the pod's node affinity/selector",
        ),
        (
            "0/2 nodes are available: 2 node(s) had untolerated taint {aws.amazon.com/neuron: true}.",
            "toleration for taint {aws.amazon.com/neuron: true}",
        ),
        # kube-scheduler before 1.25 and Volcano's FitErrors (pkg/scheduler/api/unschedule_info.go).
        (
            "0/3 nodes are available: 3 node(s) had taint {node.kubernetes.io/not-ready: }, that the pod didn't tolerate.",
            "toleration for taint {node.kubernetes.io/not-ready: }",
        ),
        (
            "0/4 nodes are unavailable: 4 Insufficient aws.amazon.com/neurondevice.",
            "aws.amazon.com/neurondevice",
        ),
        (
            "all nodes are unavailable: 2 node(s) resource fit failed.",
            "node resources (Volcano: resource fit failed)",
        ),
        (
            "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
            "bound PersistentVolumeClaim",
        ),
        (
            "3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable",
            None,
        ),
        (
            "0/1 nodes are available: 1 node(s) had volume node affinity conflict.",
            "node in the volume's zone",
        ),
    ],
)
def test_short_resource(message: str, short: str | None) -> None:
    assert short_resource(message) == short


def stuck(name: str, message: str) -> Json:
    return pod(
        name,
        phase="Pending",
        state={"waiting": {"reason": "ContainerCreating"}},
        conditions=(cond("PodScheduled", "False", "Unschedulable", message),),
    )


def test_unschedulable_gang() -> None:
    gang_msg = "2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable"
    pods = [stuck("w-0", gang_msg), stuck("w-1", TAINT_AND_NEURON), pod("w-2", phase="Running")]
    got = unschedulable(pods)
    assert got is not None
    assert (got.reason, got.short, got.retry, got.counts_against_budget) == (
        "Unschedulable",
        "aws.amazon.com/neuron",
        False,
        False,
    )
    assert got.message == f"pod w-1 cannot be scheduled: {TAINT_AND_NEURON}"


def test_unschedulable_without_a_parsable_reason_keeps_the_message() -> None:
    got = unschedulable([stuck("w-0", "")])
    assert (
        got is not None
        and got.short is None
        and got.message.endswith("no message from the scheduler")
    )


def test_scheduled_pods_are_not_unschedulable() -> None:
    scheduled = pod("w-0", phase="Pending", conditions=(cond("PodScheduled", "True", ""),))
    assert unschedulable([scheduled, pod("w-1", phase="Running")]) is None


# --- the tables ------------------------------------------------------------------------------


def test_every_reason_has_one_policy() -> None:
    used = {r.reason for r in LOG_RULES} | set(failures._DISRUPTION_REASONS.values())
    used |= set(failures._STATUS_REASONS.values()) | set(failures._WAITING_REASONS.values())
    assert used | {"Unschedulable", "Unknown", "AdmissionRejected"} == set(POLICIES)
    assert all(r[0].isupper() and " " not in r for r in POLICIES)


def test_retry_decisions() -> None:
    """The decisions the issue names: compiler error and bad image fail fast; comms restart."""
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
    assert {r for r, p in POLICIES.items() if not p.counts_against_budget} == {
        "Evicted",
        "Preempted",
        "Unschedulable",
    }


def test_module_is_pure() -> None:
    source = inspect.getsource(failures)
    for io in (
        "import kubernetes",
        "import kopf",
        "open(",
        "requests",
        "subprocess",
        "trainium_operator.k8s",
    ):
        assert io not in source


def test_trainer_divergence_line_is_classified() -> None:
    """Drift: the trainer's own NonFiniteLoss text (once it exists) is what LossDiverged matches."""
    errors = pytest.importorskip("trainium_trainer.errors")
    line = f"error: {errors.NonFiniteLoss(410, 'non-finite loss nan (mean over ranks)', 400)}"
    got = classify_pod(pod(state=terminated(3)), [line])
    assert got is not None and got.reason == "LossDiverged"
