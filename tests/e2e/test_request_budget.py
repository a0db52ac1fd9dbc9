"""What a whole lifecycle costs the API server: reads come from the watches, not from GETs.

A private emulator (tests/fleet.py) and the real operator process; a stand-in for Volcano
takes every job through Running to Completed, so each job goes Pending -> Precompiling ->
Training -> Succeeded with a compile-cache lease and record of its own.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from fleet import DRIVER_AGENT, Cluster, count_by_verb, good_spec
from harness import OPERATOR_COMMAND, OPERATORS, OperatorProcess
from trainium_operator.runtime.passes import RESYNC

JOBS = 20
#: Issue 10's budget: reads (GET and LIST requests) per job's whole lifecycle.
READS_PER_LIFECYCLE = 10
#: Issue 18: writes per lifecycle are not to go up (12-13 before it; 9 is the floor). 13 is the
#: mean; the half is how many of Volcano's states passes happen to see (4-6 status patches a
#: job; 12.80-13.10 measured on a loaded machine), so a busy CI run is not a regression.
WRITES_PER_LIFECYCLE = 13.5


@pytest.fixture
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A private cluster with the operator running against it (the production resync)."""
    cluster = Cluster(tmp_path)
    cluster.start()
    proc = OperatorProcess(OPERATOR_COMMAND, tmp_path / "operator.log", cluster.operator_env())
    request.node.stash.setdefault(OPERATORS, []).append(proc)
    proc.start(timeout=60)
    yield cluster
    proc.stop()
    cluster.stop()


def test_a_lifecycle_reads_at_most_ten_times(fleet: Cluster) -> None:
    fleet.start_volcano()
    specs = {f"b{i:02d}": good_spec(fleet.queue, f"budget-{i}") for i in range(JOBS)}
    fleet.create_jobs(specs)
    fleet.wait(lambda: set(fleet.phases().values()) == {"Succeeded"}, 120, "all Succeeded")
    ours = [r for r in fleet.operator_requests() if r.user_agent != DRIVER_AGENT]
    # kopf lists each watched kind once when its watch starts: a cost per start, not per job.
    passes = [r for r in ours if not (r.client == "kopf" and r.verb == "list")]
    reads = count_by_verb(passes).get("reads", 0)
    assert reads / JOBS <= READS_PER_LIFECYCLE, sorted(
        {(r.verb, r.resource, r.client) for r in passes if r.verb in ("get", "list")}
    )
    # A write refused 409 (a pass on a view a watch had not caught up with) is routine, not a
    # cost that grows: counted apart, bounded, so a busy machine's lagging watch is no failure.
    refused = [r for r in ours if r.code == 409]
    writes = count_by_verb(r for r in ours if r.code != 409).get("writes", 0)
    print(f"per lifecycle: {reads / JOBS:.2f} reads, {writes / JOBS:.2f} writes, "
          f"{len(refused)} refused 409")  # fmt: skip
    by_kind = Counter((r.verb, r.resource, r.subresource or "", r.code) for r in ours
                      if r.verb not in ("get", "list", "watch"))  # fmt: skip
    print("writes:", sorted(by_kind.items()))
    assert writes / JOBS <= WRITES_PER_LIFECYCLE, sorted(by_kind.items())
    assert len(refused) <= JOBS // 4, sorted(by_kind.items())
    assert fleet.added_twice() == []  # no child created twice on a lagging watch
    for name in specs:  # Precompiling too when the compile completed before its echo pass ran
        assert fleet.phase_history(name) == ["Precompiling", "Training", "Succeeded"]
        reasons = [e["reason"] for e in fleet.events(name)]
        assert len(reasons) == len(set(reasons)), reasons  # each transition announced once


#: Issue 26: what a job that waits on a missing queue or PriorityClass may cost an hour.
WAITING_PER_HOUR = 10


def waiting_fleet(request: pytest.FixtureRequest, tmp_path: Path, resync: str) -> Cluster:
    """A private cluster, the operator on it with this resync; both stopped after the test."""
    cluster = Cluster(tmp_path)
    cluster.start()
    request.addfinalizer(cluster.stop)
    env = dict(cluster.operator_env(), TRAINIUM_RESYNC_SECONDS=resync)
    proc = OperatorProcess(OPERATOR_COMMAND, tmp_path / "operator.log", env)
    request.node.stash.setdefault(OPERATORS, []).append(proc)
    proc.start(timeout=60)
    request.addfinalizer(proc.stop)
    cluster.proc = proc  # type: ignore[attr-defined]
    return cluster


def blocked(fleet: Cluster, name: str, reason: str) -> bool:
    conds = (fleet.jobs().get(name, {}).get("status") or {}).get("conditions") or []
    return any(c.get("reason") == reason for c in conds)


def test_a_job_waiting_on_a_missing_queue_or_class_costs_at_most_ten_requests_an_hour(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Its only passes are the backstop's (RESYNC apart): each may read what the index shows
    with a GET (a ghost), never what it says is absent (8 requests a pass, 16 an hour, before)."""
    fleet = waiting_fleet(request, tmp_path, resync="4")
    proc: OperatorProcess = fleet.proc  # type: ignore[attr-defined]
    scheduling = {"queue": fleet.queue, "priorityClassName": "no-such-class"}
    fleet.create_jobs({
        "no-queue": good_spec("no-such-queue", "c-q"),
        "no-class": good_spec(fleet.queue, "c-p", scheduling=scheduling),
    })  # fmt: skip
    fleet.wait(lambda: blocked(fleet, "no-queue", "QueueNotFound"), 30, "QueueNotFound")
    fleet.wait(lambda: blocked(fleet, "no-class", "PriorityClassNotFound"), 30, "no class")
    time.sleep(2)  # the first passes' echoes
    seen, passes = len(fleet.operator_requests()), proc.passes()
    time.sleep(14)
    sent = [r for r in fleet.operator_requests()[seen:] if r.verb != "watch"]
    passes = proc.passes() - passes
    assert passes >= 4, passes  # about two backstops per job
    per_hour = len(sent) / passes * (3600 / RESYNC)
    print(f"per waiting job: {len(sent) / passes:.1f} requests a backstop, {per_hour:.1f} an hour")
    assert per_hour <= WAITING_PER_HOUR, sorted({(r.verb, r.resource, r.code) for r in sent})


def test_a_missing_priority_class_is_watched_not_polled(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """No request while the class is missing (82 GETs in 20 minutes before); its creation wakes
    the job at once."""
    fleet = waiting_fleet(request, tmp_path, resync=str(RESYNC))
    scheduling = {"queue": fleet.queue, "priorityClassName": "urgent"}
    fleet.create_job("later", good_spec(fleet.queue, "c-u", scheduling=scheduling))
    fleet.wait(lambda: blocked(fleet, "later", "PriorityClassNotFound"), 30, "no class")
    time.sleep(1)
    seen = len(fleet.operator_requests())
    time.sleep(12)  # a poll, even one backed off from 10 s, would have looked
    sent = [r for r in fleet.operator_requests()[seen:] if r.verb != "watch"]
    assert sent == [], sorted({(r.verb, r.resource, r.code) for r in sent})
    body = {"metadata": {"name": "urgent"}, "value": 1000}
    kubernetes.client.SchedulingV1Api(fleet.client).create_priority_class(body)
    fleet.wait(lambda: fleet.phases().get("later") == "Precompiling", 8, "woken by the class")
