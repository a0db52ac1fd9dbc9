"""A job deleted and re-applied under the same name while the garbage collector lags (issue 32).

The old object's Volcano jobs keep the names the new object's children take until the collector
deletes them; with `kubectl delete --cascade=orphan`, forever. The new job never reads them as its
own: it waits, saying which object holds the name, and trains under its own gang.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_operator_e2e import (
    TJ,
    condition,
    events,
    job,
    start_training,
    status,
    vcjob,
    wait_phase,
)

from harness import (
    EmulatorServer,
    OperatorProcess,
    apply,
    get,
    kubectl,
    simulate_vcjob_phase,
    train_gang,
    wait_for,
)


@pytest.fixture
def collector_paused(k8s: EmulatorServer) -> Iterator[EmulatorServer]:
    """kube-controller-manager stopped: deletions leave their dependents until it resumes."""
    k8s.call(lambda: setattr(k8s.emulator, "collecting", False))
    try:
        yield k8s
    finally:
        k8s.await_(k8s.emulator.resume_collection)


def finished(k8s: EmulatorServer, ns: str, name: str) -> str:
    """A job that trained and Succeeded (no precompile); its queue."""
    q = start_training(k8s, ns, name)
    simulate_vcjob_phase(ns, f"{name}-train", "Completed")
    wait_phase(ns, name, "Succeeded")
    return q


def never_succeeds(ns: str, name: str, polls: int = 30) -> None:
    """The job's phase stays short of Succeeded for `polls` reads (a wrong answer is quick)."""
    for _ in range(polls):
        assert status(ns, name).get("phase") != "Succeeded", status(ns, name)


def test_a_reapplied_job_waits_for_the_old_gang_and_trains_under_its_own(
    operator: OperatorProcess, ns: str, collector_paused: EmulatorServer
) -> None:
    k8s = collector_paused
    q = finished(k8s, ns, "again")
    old = get(TJ, "again", ns)["metadata"]["uid"]  # type: ignore[index]
    kubectl("delete", TJ, "again", "-n", ns, "--wait=false")
    wait_for(lambda: get(TJ, "again", ns) is None, what="the old object gone")
    apply(job(ns, "again", q, precompile={"policy": "Never"}))
    wait_for(lambda: condition(ns, "again", "Running").get("reason") == "NameTaken",
             what="the new job waits for the old gang")  # fmt: skip
    assert old in condition(ns, "again", "Running")["message"]
    never_succeeds(ns, "again")
    fresh = train_gang(k8s, ns, "again")
    assert fresh != "again-train"  # never a name Volcano may still be cleaning up
    assert k8s.get(VCJOBS, ns, fresh) is None  # not beside the old gang's pods
    k8s.await_(k8s.emulator.resume_collection)  # the collector deletes the old gang
    new = wait_for(lambda: (k8s.get(VCJOBS, ns, fresh) or {}).get("metadata"),
                   what="the new job's own gang")  # fmt: skip
    assert new["ownerReferences"][0]["uid"] == get(TJ, "again", ns)["metadata"]["uid"]  # type: ignore[index]
    assert status(ns, "again").get("phase") != "Succeeded"
    simulate_vcjob_phase(ns, fresh, "Completed")
    wait_phase(ns, "again", "Succeeded")


def test_an_orphaned_gang_gives_the_reapplied_job_a_fresh_name(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = finished(k8s, ns, "orphaned")
    kubectl("delete", TJ, "orphaned", "-n", ns, "--cascade=orphan", "--wait=false")
    wait_for(lambda: get(TJ, "orphaned", ns) is None, what="the old object gone")
    assert k8s.get(VCJOBS, ns, "orphaned-train") is not None  # left behind, owned by nothing
    apply(job(ns, "orphaned", q, precompile={"policy": "Never"}))
    fresh = wait_for(lambda: train_gang(k8s, ns, "orphaned") != "orphaned-train"
                     and train_gang(k8s, ns, "orphaned"), what="a fresh gang name")  # fmt: skip
    vcjob(k8s, ns, fresh)
    assert any(e["reason"] == "GangRenamed" for e in events(ns))
    never_succeeds(ns, "orphaned", polls=5)
    simulate_vcjob_phase(ns, fresh, "Completed")
    wait_phase(ns, "orphaned", "Succeeded")
    assert status(ns, "orphaned")["trainingJob"] == fresh


VCJOBS = "batch.volcano.sh/v1alpha1/jobs"
