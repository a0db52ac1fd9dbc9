"""Two operator processes with kopf peering: exactly one acts; a missing CRD is said, not hidden."""

from __future__ import annotations

import re
import sys
import urllib.request
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
    kubectl,
    simulate_vcjob_phase,
    wait_for,
)

REPO = Path(__file__).resolve().parents[2]
PEERING_CRD = REPO / "crds" / "kopf-peering.yaml"
RESUMED = "Resuming operations after the pause"
PRIORITY = re.compile(r"peering 'trainium' with priority (\d+)")
COMMAND = [sys.executable, "-m", "trainium_operator", "operator", "--all-namespaces",
           "--peering=trainium"]  # fmt: skip


@pytest.fixture
def peers(
    crd: Path, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[list[OperatorProcess]]:
    made: list[OperatorProcess] = []
    for i in range(2):
        proc = OperatorProcess(COMMAND, tmp_path / f"operator-{i}.log")
        request.node.stash.setdefault(OPERATORS, []).append(proc)
        made.append(proc)
    yield made
    for proc in made:
        proc.stop()


def test_peering_without_its_crd_says_so_then_one_of_two_peers_acts(
    peers: list[OperatorProcess], ns: str, k8s: EmulatorServer, api_requests: list[Any]
) -> None:
    first, second = peers
    kubectl(
        "delete",
        "crd",
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
        "--ignore-not-found",
        check=False,
    )  # the chart installs them (test_chart_apply)
    first.start()
    wait_for(lambda: "needs the CRD clusterkopfpeerings.kopf.dev" in first.log(),
             what="an ERROR line naming the missing peering CRD")  # fmt: skip
    first.stop()

    kubectl("apply", "--validate=false", "-f", str(PEERING_CRD))
    first.start()
    second.start()
    wait_for(lambda: all(PRIORITY.search(p.log()) for p in peers), what="both peers up")
    active, standby = sorted(peers, key=priority, reverse=True)
    wait_for(lambda: RESUMED in active.log(), timeout=30, what="the higher-priority peer acting")

    q = prerequisites(ns)
    apply(job(ns, "shared", q, precompile={"policy": "Never"}))
    vcjob(k8s, ns, "shared-train")
    simulate_vcjob_phase(ns, "shared-train", "Completed")
    wait_phase(ns, "shared", "Succeeded")
    assert len(creates(api_requests, ns)) == 1  # two processes, one actor

    assert standby.passes() == 0  # paused by kopf: none of its passes ran (issue 18, bug 3)
    resumed = standby.log().count(RESUMED)
    active.stop()  # a clean exit leaves the peering: the standby takes over
    wait_for(lambda: standby.log().count(RESUMED) > resumed, timeout=30,
             what="the standby taking over")  # fmt: skip
    apply(job(ns, "after", q, precompile={"policy": "Never"}))
    vcjob(k8s, ns, "after-train")
    assert len(creates(api_requests, ns)) == 2


def priority(proc: OperatorProcess) -> int:
    """The peering priority a process chose (it logs it at start-up)."""
    found = PRIORITY.findall(proc.log())
    return int(found[-1])


def creates(api_requests: list[Any], ns: str) -> list[Any]:
    """Volcano jobs created in the namespace."""
    return [
        r for r in api_requests
        if r.verb == "create" and r.namespace == ns and r.resource == "jobs" and r.code == 201
    ]  # fmt: skip


STANDALONE = [sys.executable, "-m", "trainium_operator", "operator", "--standalone",
              "--all-namespaces"]  # fmt: skip
TWICE = "another --standalone trainium operator is running"


def test_two_standalone_operators_are_said_loudly_and_counted(
    ns: str, k8s: EmulatorServer, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Issue 20 item 6: a `kubectl scale` of a standalone Deployment doubles every write."""
    procs = [
        OperatorProcess(
            STANDALONE,
            tmp_path / f"standalone-{i}.log",
            env={"POD_NAME": f"op-{i}", "POD_NAMESPACE": ns},
        )
        for i in range(2)
    ]
    request.node.stash.setdefault(OPERATORS, []).extend(procs)
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            wait_for(lambda p=proc: TWICE in p.log(), timeout=40,  # type: ignore[misc]
                     what="an ERROR line about the other standalone operator")  # fmt: skip
            assert peers_metric(proc) == 1
    finally:
        for proc in procs:
            proc.stop()


def peers_metric(proc: OperatorProcess) -> float:
    """trainium_operator_standalone_peers on the process's /metrics."""
    with urllib.request.urlopen(proc.metrics_url, timeout=5) as response:
        text = response.read().decode()
    line = next(x for x in text.splitlines() if x.startswith("trainium_operator_standalone_peers "))
    return float(line.split()[1])
