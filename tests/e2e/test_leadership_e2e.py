"""Two operator processes electing a leader through a Lease: exactly one acts, a stop hands over,
and the standby sends no write at all (issue 32 item 4: kopf's own writes included)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_operator_e2e import TJ, job, prerequisites, queue, vcjob, wait_phase

from harness import (
    OPERATORS,
    EmulatorServer,
    OperatorProcess,
    apply,
    kubectl,
    simulate_vcjob_phase,
    wait_for,
    write_kubeconfig,
)
from trainium_operator.api import naming

ACQUIRED = "acquired by"
WRITES = {"create", "patch", "update", "delete", "deletecollection"}
COMMAND = [sys.executable, "-m", "trainium_operator", "operator", "--all-namespaces",
           "--leader-elect=trainium"]  # fmt: skip


@pytest.fixture
def replicas(
    crd: Path, ns: str, request: pytest.FixtureRequest, tmp_path: Path, k8s: EmulatorServer
) -> Iterator[list[OperatorProcess]]:
    """Two replicas, each with its own token (as an audit log tells pods apart)."""
    made = []
    for i in range(2):
        config = tmp_path / f"kubeconfig-{i}"
        write_kubeconfig(config, k8s.url, token=f"op-{i}")
        env = {"POD_NAME": f"op-{i}", "POD_NAMESPACE": ns, "KUBECONFIG": str(config)}
        made.append(OperatorProcess(COMMAND, tmp_path / f"operator-{i}.log", env=env))
    request.node.stash.setdefault(OPERATORS, []).extend(made)
    yield made
    for proc in made:
        proc.stop()


def test_one_of_two_replicas_acts_and_a_stop_hands_the_lease_over(
    replicas: list[OperatorProcess], ns: str, k8s: EmulatorServer, api_requests: list[Any]
) -> None:
    for proc in replicas:
        proc.start()
    wait_for(lambda: any(ACQUIRED in p.log() for p in replicas), timeout=30, what="a leader")
    leader = next(p for p in replicas if ACQUIRED in p.log())
    standby = next(p for p in replicas if p is not leader)

    q = prerequisites(ns)
    apply(job(ns, "shared", q, precompile={"policy": "Never"}))
    vcjob(k8s, ns, "shared-train")
    simulate_vcjob_phase(ns, "shared-train", "Completed")
    wait_phase(ns, "shared", "Succeeded")
    assert len(creates(api_requests, ns)) == 1  # two processes, one actor
    assert standby.passes() == 0  # outside a term no pass runs

    leader.stop()  # a clean exit releases the Lease: the standby takes over at once
    wait_for(lambda: ACQUIRED in standby.log(), timeout=20, what="the standby taking over")
    apply(job(ns, "after", q, precompile={"policy": "Never"}))
    vcjob(k8s, ns, "after-train")
    assert len(creates(api_requests, ns)) == 2


def creates(api_requests: list[Any], ns: str) -> list[Any]:
    """Volcano jobs created in the namespace."""
    return [
        r for r in api_requests
        if r.verb == "create" and r.namespace == ns and r.resource == "jobs" and r.code == 201
    ]  # fmt: skip


def test_the_standby_writes_nothing_while_fsx_jobs_come_and_go(
    replicas: list[OperatorProcess], ns: str, k8s: EmulatorServer, api_requests: list[Any]
) -> None:
    """kopf's diff-base annotation, its finalizer and a retried delete handler's progress and
    Events were written by every replica; now the leader's sweep deletes the PV, in its term."""
    for proc in replicas:
        proc.start()
    wait_for(lambda: any(ACQUIRED in p.log() for p in replicas), timeout=30, what="a leader")
    leader = next(i for i, p in enumerate(replicas) if ACQUIRED in p.log())
    start = len(api_requests)
    q = f"q-{ns}"
    queue(q)
    names = ["lustre-a", "lustre-b"]
    for name in names:
        fsx = {"fileSystemId": "fs-0123456789abcdef0", "mountName": "abcdefgh",
               "dnsName": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"}  # fmt: skip
        apply(job(ns, name, q, storage={"fsx": fsx}))
    volumes = [naming.volume_name(ns, name) for name in names]
    wait_for(lambda: all(k8s.get("v1/persistentvolumes", None, v) for v in volumes),
             what="both FSx PVs")  # fmt: skip
    for name in names:
        kubectl("delete", TJ, name, "-n", ns, "--wait=false")
    wait_for(
        lambda: not any(k8s.get("v1/persistentvolumes", None, v) for v in volumes),
        timeout=30, what="the FSx PVs deleted with their jobs",
    )  # fmt: skip
    writes = [r for r in api_requests[start:] if r.verb in WRITES and r.token.startswith("op-")]
    by = {f"op-{i}": [f"{r.verb} {r.resource}/{r.name}" for r in writes if r.token == f"op-{i}"]
          for i in range(2)}  # fmt: skip
    assert by[f"op-{1 - leader}"] == []  # the standby: not one write, kopf's own included
    deleted = {r.name for r in writes if r.verb == "delete" and r.resource == "persistentvolumes"}
    assert deleted == set(volumes) and all(r.token == f"op-{leader}" for r in writes)
