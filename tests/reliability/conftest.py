"""Reliability suite: many jobs, injected API faults, killed operators, bad input, killed trainers.

Each test builds its own emulator (tests/fleet.py), so faults and kills stay inside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_kit import StartOperator

from fleet import Cluster
from harness import OPERATOR_COMMAND, OPERATORS, OperatorProcess


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A private emulator with the CRD, a queue and a claim; Volcano stand-in not started."""
    c = Cluster(tmp_path)
    c.start()
    yield c
    c.stop()


@pytest.fixture
def start_operator(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StartOperator]:
    """Start the product operator against a cluster (default settings); stopped afterwards."""
    started: list[OperatorProcess] = []

    def start(cluster: Cluster) -> OperatorProcess:
        log = tmp_path / f"operator-{len(started)}.log"
        proc = OperatorProcess(OPERATOR_COMMAND, log, env=cluster.operator_env())
        request.node.stash.setdefault(OPERATORS, []).append(proc)
        started.append(proc)
        proc.start(timeout=60)
        return proc

    yield start
    for proc in started:
        proc.stop()
