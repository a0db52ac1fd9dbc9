"""The examples run to Succeeded through the real webhook, gang scheduler, PV binder, fake nodes."""

from __future__ import annotations

import pytest

from cluster import Cluster
from harness import OperatorProcess
from jobs import TJ, VCJOB, children, create, example, fsx_claim, get, wait_condition
from kubelet import FakeKubelet


def test_bert_large_pretrain_with_fsx_succeeds(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """The tutorial job: the operator's static FSx PV is bound by the real PV binder."""
    create(cluster, example("bert-large-pretrain", ns))
    job = wait_condition(cluster, "bert-large-pretrain", ns, "Succeeded", timeout=180)
    assert job["status"]["phase"] == "Succeeded"
    claim = get(cluster, "pvc", "bert-large-pretrain-fsx", ns)
    assert claim is not None and claim["status"]["phase"] == "Bound"
    vcjobs = children(cluster, VCJOB, ns, "bert-large-pretrain")
    assert {v["metadata"]["labels"].get("trainium.dev/stage") for v in vcjobs} == {
        "precompile",
        "train",
    }


@pytest.mark.parametrize("name", ["bert-claim", "aws-bert-script"])
def test_example_on_an_existing_claim_succeeds(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str, name: str
) -> None:
    fsx_claim(cluster, ns)
    body = example(name, ns)
    create(cluster, body)
    job = wait_condition(cluster, name, ns, "Succeeded", timeout=180)
    assert job["status"]["phase"] == "Succeeded"
    header, row = cluster.kubectl("get", TJ, "-n", ns).stdout.splitlines()
    assert header.split() == [
        "NAME",
        "PHASE",
        "INSTANCE",
        "NODES",
        "SIZE",  # an elastic job's current/wanted nodes (blank for the others)
        "CACHE",
        "RESTARTS",
        "PROGRESS",
        "ETA",
        "COST",
        "AGE",
    ]
    spec = body["spec"]
    assert row.split()[:4] == [name, "Succeeded", spec["instanceType"], str(spec.get("nodes", 1))]
