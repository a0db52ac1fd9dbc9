"""The compile cache across jobs, and an FSx job deleted and created again, on a real cluster."""

from __future__ import annotations

from typing import Any

from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import TJ, VCJOB, create, fsx_claim, get, small_job, wait_condition
from kubelet import FakeKubelet


def precompile_jobs(cluster: Cluster, namespace: str) -> list[str]:
    proc = cluster.kubectl(
        "get", VCJOB, "-n", namespace, "-l", "trainium.dev/stage=precompile", "-o", "name"
    )
    return proc.stdout.split()


def test_identical_jobs_compile_once_and_later_ones_hit_the_cache(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    spec: dict[str, Any] = {"precompile": {"policy": "IfNotCached"}, "cache": {"name": "shared"}}
    for name in ("twin-a", "twin-b"):
        create(cluster, small_job(name, ns, **spec))
    outcomes = {}
    for name in ("twin-a", "twin-b"):
        job = wait_condition(cluster, name, ns, "Succeeded", timeout=180)
        outcomes[name] = job["status"].get("cache", {}).get("outcome")
    assert len(precompile_jobs(cluster, ns)) == 1, outcomes
    assert sorted(outcomes.values()) == ["hit", "miss"], outcomes
    create(cluster, small_job("later", ns, **spec))
    job = wait_condition(cluster, "later", ns, "Succeeded", timeout=120)
    assert job["status"]["cache"]["outcome"] == "hit"
    assert len(precompile_jobs(cluster, ns)) == 1


def test_an_fsx_job_deleted_and_created_again_binds_again(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """The operator's static PV and claim go with the job and come back with it."""
    fsx = {"fileSystemId": "fs-0123456789abcdef0", "dnsName": "fs.example", "mountName": "abc"}
    body = small_job("again", ns, storage={"fsx": fsx})
    for round_ in range(2):
        create(cluster, body)
        wait_condition(cluster, "again", ns, "Succeeded", timeout=120)
        claim = get(cluster, "pvc", "again-fsx", ns)
        assert claim is not None and claim["status"]["phase"] == "Bound", (round_, claim)
        cluster.kubectl("delete", TJ, "again", "-n", ns, "--timeout=60s")
        wait_until(lambda: get(cluster, "pvc", "again-fsx", ns) is None, 60, "the claim deleted")
