"""50 jobs under injected API faults finish like they do without: all Succeeded, no duplicate
children, no phase going backwards, within 3x the fault-free time measured in the same run."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest
from reliability_kit import StartOperator

from faults import FaultInjector, FaultPlan
from fleet import VCJOBS, Cluster, good_spec
from harness import OPERATOR_COMMAND, OperatorProcess

JOBS = 50
FAULT_FREE_LIMIT = 600  # seconds; the fault-free run sets the real deadline (3x its time)


def run_fleet(cluster: Cluster, start_operator: StartOperator, timeout: float) -> float:
    """Operator up, Volcano stand-in on, 50 jobs at once; seconds until all Succeeded."""
    start_operator(cluster)
    cluster.start_volcano()
    specs = {f"j{i:02d}": good_spec(cluster.queue, f"c{i:02d}") for i in range(JOBS)}
    started = time.monotonic()
    cluster.create_jobs(specs)
    try:
        cluster.wait(lambda: set(cluster.phases().values()) == {"Succeeded"}, timeout, "")
    except TimeoutError:
        phases = Counter(str(p) for p in cluster.phases().values())
        stuck = {n: j.get("status") for n, j in cluster.jobs().items()
                 if (j.get("status") or {}).get("phase") != "Succeeded"}  # fmt: skip
        faults = cluster.emulator.faults.injected if cluster.emulator.faults else {}
        sample = dict(list(stuck.items())[:2])
        pytest.fail(
            f"not all {JOBS} jobs Succeeded within {timeout:.0f}s: phases {dict(phases)}; "
            f"faults injected {dict(faults)}; e.g. {sample}"
        )
    return time.monotonic() - started


def assert_clean(cluster: Cluster) -> None:
    """Exactly two Volcano jobs per TrainiumJob, nothing created twice, no phase went back."""
    per_job = Counter(
        (j["metadata"].get("labels") or {}).get("trainium.dev/job-name")
        for j in cluster.server.list(VCJOBS)
    )
    assert set(per_job.values()) == {2} and len(per_job) == JOBS, per_job
    assert cluster.added_twice() == []
    backwards = cluster.backwards(cluster.jobs())
    assert backwards == {}, f"{len(backwards)} jobs went back, e.g. {list(backwards.items())[:3]}"


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[float, Cluster]]:
    """The same 50 jobs without faults, in this run: the yardstick for the 3x deadline."""
    work = tmp_path_factory.mktemp("fault-free")
    cluster = Cluster(work)
    cluster.start()
    procs: list[OperatorProcess] = []

    def start(c: Cluster) -> OperatorProcess:
        proc = OperatorProcess(OPERATOR_COMMAND, work / "operator.log", env=c.operator_env())
        procs.append(proc)
        proc.start(timeout=60)
        return proc

    try:
        seconds = run_fleet(cluster, start, FAULT_FREE_LIMIT)
        print(f"fault-free: {JOBS} jobs Succeeded in {seconds:.1f}s")
        yield seconds, cluster
    finally:
        for proc in procs:
            proc.stop()
        cluster.stop()


def test_fault_free_run_is_clean(fault_free: tuple[float, Cluster]) -> None:
    assert_clean(fault_free[1])


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_jobs_succeed_under_api_faults(
    rate: float,
    fault_free: tuple[float, Cluster],
    cluster: Cluster,
    start_operator: StartOperator,
) -> None:
    plan = FaultPlan(rate=rate, seed=10, watch_drop_seconds=3.0)
    cluster.emulator.faults = injector = FaultInjector(plan)
    seconds = run_fleet(cluster, start_operator, 3 * fault_free[0])
    print(f"faults {rate:.0%}: {seconds:.1f}s (fault-free {fault_free[0]:.1f}s); "
          f"injected {dict(injector.injected)}")  # fmt: skip
    assert set(injector.injected) >= {"500", "429", "409", "reset", "watch-drop"}
    assert_clean(cluster)
