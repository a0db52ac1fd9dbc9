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


def test_the_volcano_job_says_the_whole_gangs_resources_at_1024_nodes() -> None:
    """spec.minResources: what minAvailable pods of the template request (the PodGroup's sum,
    from the same numbers); a queued 1,024-node gang asks for 16,384 Neuron devices."""
    spec = spec_of(nodes=1024, instanceType="trn1.32xlarge",
                   resources={"requests": {"cpu": "100", "memory": "400Gi"}})  # fmt: skip
    job = builders.build_vcjob(spec, Owner("big", "ns", "uid-1"), "train")
    [task] = job["spec"]["tasks"]
    assert job["spec"]["minAvailable"] == task["minAvailable"] == 1024
    assert job["spec"]["minResources"] == {
        "aws.amazon.com/neuron": "16384", "vpc.amazonaws.com/efa": "8192",
        "cpu": "102400", "memory": str(400 * 2**30 * 1024),
    }  # fmt: skip
    per_pod = gangsize.pod_requests(task["template"]["spec"])  # the drift check
    assert {k: Decimal(v) for k, v in job["spec"]["minResources"].items()} == {
        k: v * 1024 for k, v in per_pod.items()
    }


def test_quantities_never_use_an_exponent() -> None:
    pod = {"containers": [{"resources": {"requests": {"cpu": "500m", "memory": "1G"}}}]}
    assert gangsize.min_resources(pod, 1000) == {"cpu": "500", "memory": "1000000000000"}
    assert gangsize.min_resources({"containers": [{}]}, 3) == {}
