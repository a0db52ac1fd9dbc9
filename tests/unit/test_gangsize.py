"""The gang's pods request their devices, so Volcano's PodGroup counts them (issue 43, item 8)."""

from __future__ import annotations

from decimal import Decimal

from support import spec_of

from trainium_operator.manifests import builders, gangsize
from trainium_operator.manifests.ownership import Owner


def test_requests_default_to_limits_as_the_api_server_does_for_a_pod() -> None:
    res = {
        "limits": {"aws.amazon.com/neuron": "16", "memory": "4Gi"},
        "requests": {"memory": "2Gi"},
    }
    gangsize.default_requests(res)
    assert res["requests"] == {"memory": "2Gi", "aws.amazon.com/neuron": "16"}
    empty: dict[str, dict[str, str]] = {}
    gangsize.default_requests(empty)
    assert empty == {}


def test_every_stages_pods_request_the_instances_devices() -> None:
    """Before: devices under limits only, so Volcano's PodGroup minResources counted pods only,
    and its enqueue let a gang that cannot fit make all its pods."""
    spec = spec_of(nodes=4, instanceType="trn1.32xlarge",
                   resources={"requests": {"cpu": "8", "memory": "64Gi"}})  # fmt: skip
    for stage in ("precompile", "train"):
        job = builders.build_vcjob(spec, Owner("job", "ns", "uid-1"), stage)
        [task] = job["spec"]["tasks"]
        assert gangsize.pod_requests(task["template"]["spec"]) == {
            "aws.amazon.com/neuron": Decimal(16), "vpc.amazonaws.com/efa": Decimal(8),
            "cpu": Decimal(8), "memory": Decimal(64 * 2**30),
        }, stage  # fmt: skip


def test_a_gang_volcano_never_enqueued_names_the_short_devices() -> None:
    """Volcano's PodGroup Event when its enqueue refuses the gang (seen on the tier)."""
    from trainium_operator.domain import unschedulable

    said = ["0/0 tasks in gang unschedulable: pod group is not ready, 5 minAvailable",
            "resource in cluster is overused: overused aws.amazon.com/neuron, overused "
            "vpc.amazonaws.com/efa"]  # fmt: skip
    failure = unschedulable.not_enqueued("train", said)
    assert failure is not None and failure.reason == "Unschedulable"
    assert failure.message.startswith("the train gang was never admitted by Volcano")
    assert failure.short == "aws.amazon.com/neuron, vpc.amazonaws.com/efa"
    assert unschedulable.not_enqueued("train", said[:1]) is None


def test_the_gangs_podgroup_counts_its_devices_at_1024_nodes() -> None:
    """Volcano's PodGroup: minAvailable pods of the template's requests; a queued 1,024-node
    gang asks for 16,384 Neuron devices (the tier's test_a_queued_1024_node_job_makes_no_pods)."""
    spec = spec_of(nodes=1024, instanceType="trn1.32xlarge",
                   resources={"requests": {"cpu": "100", "memory": "400Gi"}})  # fmt: skip
    job = builders.build_vcjob(spec, Owner("big", "ns", "uid-1"), "train")
    [task] = job["spec"]["tasks"]
    assert job["spec"]["minAvailable"] == task["minAvailable"] == 1024
    per_pod = gangsize.pod_requests(task["template"]["spec"])
    assert {k: v * 1024 for k, v in per_pod.items()} == {
        "aws.amazon.com/neuron": 16384, "vpc.amazonaws.com/efa": 8192,
        "cpu": 102400, "memory": 400 * 2**30 * 1024,
    }  # fmt: skip
    assert "minResources" not in job["spec"]  # not in Volcano 1.16's Job: pruned
