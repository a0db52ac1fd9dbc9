"""A gang node that says it is failing (Neuron's NPD, HyperPod's label, a DRA device taint)
is left before the job crashes on it: found once, replaced with no retry spent."""

from __future__ import annotations

from typing import Any

import pytest

from trainium_operator.cluster import nodehealth
from trainium_operator.domain import budget, capacity, health
from trainium_operator.domain.failures import NODE_FAULTS, NOT_CHARGED
from trainium_operator.domain.model import Child
from trainium_operator.domain.supervise import gang_to_replace
from trainium_operator.manifests.ownership import Owner

OWNER = Owner("bert", "team-a", "uid-1")


def node(name: str = "ip-1", conditions: list[Any] = (), labels: dict[str, str] | None = None,
         ) -> dict[str, Any]:  # fmt: skip
    ready = {"type": "Ready", "status": "True"}
    return {"metadata": {"name": name, "labels": labels or {}},
            "status": {"conditions": [ready, *conditions]}}  # fmt: skip


def neuron(status: str, reason: str, message: str = "") -> dict[str, str]:
    return {"type": "NeuronHealth", "status": status, "reason": reason, "message": message}


def test_neuron_health_true_is_unhealthy_with_its_reason() -> None:
    bad = node(conditions=[neuron("True", "NeuronHasError_HBM_UNCORRECTABLE_ERROR", "hbm")])
    said = health.node_verdict(bad)
    assert said == (
        "node condition NeuronHealth is True (NeuronHasError_HBM_UNCORRECTABLE_ERROR): hbm"
    )


@pytest.mark.parametrize("status", ["False", "Unknown"])
def test_neuron_health_ok_or_unknown_is_not(status: str) -> None:
    assert health.node_verdict(node(conditions=[neuron(status, "NeuronHasNoError")])) is None
    assert health.node_verdict(node()) is None


@pytest.mark.parametrize(
    "value", ["Unschedulable", "UnschedulablePendingReplacement", "UnschedulablePendingReboot"]
)
def test_hyperpod_unschedulable_labels_are_unhealthy(value: str) -> None:
    said = health.node_verdict(node(labels={health.HYPERPOD_LABEL: value}))
    assert said == f"node label sagemaker.amazonaws.com/node-health-status={value}"


def test_hyperpod_schedulable_is_healthy() -> None:
    assert health.node_verdict(node(labels={health.HYPERPOD_LABEL: "Schedulable"})) is None


def claim(*devices: tuple[str, str, str]) -> dict[str, Any]:
    results = [{"request": "neuron", "driver": d, "pool": p, "device": n} for d, p, n in devices]
    return {"status": {"allocation": {"devices": {"results": results}}}}


def slice_(pool: str, devices: dict[str, list[dict[str, str]]]) -> dict[str, Any]:
    listed = [{"name": n, "taints": t} for n, t in devices.items()]
    return {"spec": {"driver": "neuron.aws.com", "pool": {"name": pool}, "devices": listed}}


def test_a_hard_taint_on_an_allocated_device_is_found() -> None:
    held = health.allocated(claim(("neuron.aws.com", "ip-1", "neuron-3")))
    taint = {"key": "neuron.aws.com/unhealthy", "value": "hbm", "effect": "NoExecute"}
    slices = [slice_("ip-1", {"neuron-2": [taint], "neuron-3": []}),
              slice_("ip-2", {"neuron-3": [taint]})]  # fmt: skip
    assert health.tainted(held, slices) is None  # others' devices are not the claim's
    slices.append(slice_("ip-1", {"neuron-3": [taint]}))
    assert health.tainted(held, slices) == (
        "device neuron.aws.com/ip-1/neuron-3 is tainted neuron.aws.com/unhealthy=hbm:NoExecute"
    )


def test_a_prefer_no_schedule_taint_and_an_unallocated_claim_say_nothing() -> None:
    soft = {"key": "k", "effect": "PreferNoSchedule"}
    held = health.allocated(claim(("neuron.aws.com", "ip-1", "neuron-0")))
    assert health.tainted(held, [slice_("ip-1", {"neuron-0": [soft]})]) is None
    assert health.allocated({"status": {}}) == ()


def test_the_first_unhealthy_gang_node_not_yet_excluded_is_a_free_node_fault() -> None:
    pods = [health.GangPod("bert-train-node-1", "ip-2"),
            health.GangPod("bert-train-node-0", "ip-1")]  # fmt: skip
    verdicts = {"ip-1": "label x", "ip-2": "condition y"}
    found = health.unhealthy(pods, verdicts, excluded=())
    assert found is not None and found.node == "ip-1" and found.reason == "NodeUnhealthy"
    assert "bert-train-node-0 runs on node ip-1" in found.message
    assert found.reason in NODE_FAULTS and found.reason in NOT_CHARGED and found.node_fault
    again = health.unhealthy(pods, verdicts, excluded=("ip-1",))
    assert again is not None and again.node == "ip-2"
    assert health.unhealthy(pods, {}, ()) is None


def test_a_sick_node_replaces_a_live_gang_and_spends_no_retry() -> None:
    sick = health.unhealthy([health.GangPod("p-0", "ip-2")], {"ip-2": "x"}, ())
    known = {"excludedNodes": [{"node": "ip-1", "reason": "PreflightFailed"}]}
    assert gang_to_replace(None, Child.RUNNING, known, None, sick) == (("ip-1", "ip-2"), sick)
    assert gang_to_replace(None, Child.SUCCEEDED, known, None, sick) == (("ip-1",), None)
    counted = budget.replaced(budget.Accounted(budget.Tally()), "NodeUnhealthy", max_retries=0)
    assert counted.tally.restarts == 0 and counted.tally.disruptions == 1
    assert counted.exhausted is None and counted.disrupted == ("NodeUnhealthy",)


def test_a_restarted_gang_still_counts_a_sick_node_as_a_disruption() -> None:
    cursor = budget.Cursor("gang-uid", retry_count=1)
    before = budget.Accounted(budget.Tally(restarts=1, cursor=cursor))
    counted = budget.replaced(before, "NodeUnhealthy", max_retries=3)
    assert counted.tally.restarts == 1 and counted.tally.disruptions == 1


def test_an_unhealthy_node_holds_no_elastic_size(spec: Any = None) -> None:
    from support import job

    from trainium_operator.api.spec import parse

    parsed = parse(job()["spec"])
    fine = node(labels={"node.kubernetes.io/instance-type": parsed.instanceType})
    sick = node(conditions=[neuron("True", "NeuronHasError_DMA_ERROR")],
                labels={"node.kubernetes.io/instance-type": parsed.instanceType})  # fmt: skip
    assert capacity.fits(fine, parsed) and not capacity.fits(sick, parsed)


def test_the_pass_reads_the_live_gangs_pods_and_the_unhealthy_nodes_from_the_indices() -> None:
    pods = {("job", "uid-1"): [
        {"namespace": "team-a", "name": "bert-train-node-0", "uid": "a", "node": "ip-1",
         "phase": "Running"},
        {"namespace": "team-a", "name": "bert-train-node-1", "uid": "b", "node": "ip-2",
         "phase": "Running"},
        {"namespace": "team-a", "name": "bert-compile-node-0", "uid": "c", "node": "ip-3",
         "phase": "Running"},
    ]}  # fmt: skip
    sick = {"ip-3": ["label z"]}
    assert nodehealth.look(OWNER, (sick, pods), "bert-train", ()) is None  # not the gang's
    sick["ip-2"] = ["condition y"]
    found = nodehealth.look(OWNER, (sick, pods), "bert-train", ())
    assert found is not None and found.node == "ip-2" and "condition y" in found.message
    assert nodehealth.look(OWNER, (sick, pods), "bert-train", ("ip-2",)) is None
    assert nodehealth.look(OWNER, None, "bert-train", ()) is None
    assert nodehealth.look(OWNER, (sick, pods), "", ()) is None
