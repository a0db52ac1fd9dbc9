"""Two operator processes electing a leader through a Lease: exactly one acts, a stop hands over."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_operator_e2e import job, prerequisites, vcjob, wait_phase

from harness import (
    OPERATORS,
    EmulatorServer,
    OperatorProcess,
    apply,
    simulate_vcjob_phase,
    wait_for,
)

ACQUIRED = "acquired by"
COMMAND = [sys.executable, "-m", "trainium_operator", "operator", "--all-namespaces",
           "--leader-elect=trainium"]  # fmt: skip


@pytest.fixture
def replicas(
    crd: Path, ns: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[list[OperatorProcess]]:
    made = [
        OperatorProcess(
            COMMAND,
            tmp_path / f"operator-{i}.log",
            env={"POD_NAME": f"op-{i}", "POD_NAMESPACE": ns},
        )
        for i in range(2)
    ]
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
