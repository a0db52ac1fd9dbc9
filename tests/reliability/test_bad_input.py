"""Bad input through the operator path, schema bypassed (the emulator validates no CRs).

Every case ends Failed/InvalidSpec with a message naming the field, one Event, no children and
no retries afterwards; good jobs created in between still succeed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet import VCJOBS, WRITES, Cluster, good_spec
from harness import OPERATOR_COMMAND, OperatorProcess

SETTLE_SECONDS = 60
#: After a bad job failed, this long without a single write about it means no retry loop
#: (kopf's retries and the operator's resync come back within 20 s).
QUIET_SECONDS = 25
# Over maxItems (128) and one value over maxLength (32768), within aiohttp's 1 MB request cap.
HUGE_ENV = [{"name": f"V{i}", "value": "x" * (40_000 if i == 0 else 5_000)} for i in range(129)]


def bad_cases(queue: str) -> dict[str, tuple[Any, str]]:
    """name: (spec, the field its message must name)."""
    good = good_spec(queue, "bad")
    return {
        "spec-string": ("x", "spec"),
        "spec-list": ([1], "spec"),
        "runpolicy-string": ({**good, "runPolicy": "x"}, "spec.runPolicy"),
        "ttl-negative": (
            {**good, "runPolicy": {"ttlSecondsAfterFinished": -5}},
            "spec.runPolicy.ttlSecondsAfterFinished",
        ),
        "huge-env": ({**good, "env": HUGE_ENV}, "spec.env"),
    }


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, float]]:
    """Bad jobs, each between two good ones; returns the cluster once everything settled."""
    work: Path = tmp_path_factory.mktemp("bad-input")
    cluster = Cluster(work)
    cluster.start()
    op = OperatorProcess(OPERATOR_COMMAND, work / "operator.log", env=cluster.operator_env())
    op.start(timeout=60)
    cluster.start_volcano()
    try:
        cluster.create_job("good-first", good_spec(cluster.queue, "g0"))
        for i, (name, (spec, _)) in enumerate(bad_cases(cluster.queue).items()):
            cluster.create_job(name, spec)
            cluster.create_job(f"good-{i}", good_spec(cluster.queue, f"g{i + 1}"))
        done = {"Succeeded", "Failed"}
        with contextlib.suppress(TimeoutError):  # each test names what it finds missing
            cluster.wait(lambda: set(cluster.phases().values()) <= done, SETTLE_SECONDS, "")
        settled = time.monotonic()
        time.sleep(QUIET_SECONDS)
        yield cluster, settled
    finally:
        op.stop()
        cluster.stop()


@pytest.mark.parametrize("case", ["spec-string", "spec-list", "runpolicy-string", "ttl-negative",
                                  "huge-env"])  # fmt: skip
def test_bad_spec_fails_once_naming_the_field(case: str, fleet: tuple[Cluster, float]) -> None:
    cluster, settled = fleet
    field = bad_cases(cluster.queue)[case][1]
    job = cluster.jobs().get(case)
    assert job is not None, f"{case} was deleted; its phases were {cluster.phase_history(case)}"
    status = job.get("status") or {}
    failed = next((c for c in status.get("conditions", []) if c["type"] == "Failed"), {})
    assert (status.get("phase"), failed.get("reason")) == ("Failed", "InvalidSpec"), status
    assert field in failed.get("message", ""), failed
    events = cluster.events(case)
    assert [e["reason"] for e in events] == ["InvalidSpec"], events
    assert cluster.children(VCJOBS, case) == []
    assert cluster.children("v1/configmaps", case) == []
    later = [r for r in cluster.operator_requests()
             if r.at > settled and r.name == case and r.verb in WRITES]  # fmt: skip
    assert later == [], f"still writing {QUIET_SECONDS}s after it failed: {later[:5]}"


def test_good_jobs_in_between_succeed(fleet: tuple[Cluster, float]) -> None:
    cluster, _ = fleet
    good = {n: p for n, p in cluster.phases().items() if n.startswith("good-")}
    assert good == dict.fromkeys(good, "Succeeded") and len(good) == 6, good
