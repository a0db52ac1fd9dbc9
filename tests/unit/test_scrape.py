"""Reading rank 0: the pod's named port, a real HTTP read, one read per interval, a hang."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support import job

from trainium_operator.api.spec import parse
from trainium_operator.cluster import gangpods, k8s, scrape
from trainium_operator.domain.lifecycle import Child
from trainium_operator.manifests.ownership import Owner
from trainium_trainer import contract
from trainium_trainer.live import LiveMetrics

OWNER = Owner("bert", "team-a", "uid-job")
T0, T1 = "2026-11-22T10:00:00Z", "2026-11-22T10:01:00Z"


@pytest.fixture
def trainer() -> Iterator[LiveMetrics]:
    """The trainer's own metrics server, on loopback."""
    live = LiveMetrics()
    live.start(0, 1000, 0)
    live.serve(0, addr="127.0.0.1")
    yield live
    live.close()


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(k8s, "pod_log_tail", lambda ns, pod, c, n: ["[default0]:step 40"])


def pod(port: int, name: str = "bert-train-node-0-0", ip: str | None = "127.0.0.1") -> Any:
    ports = [{"name": contract.METRICS_PORT_NAME, "containerPort": port}]
    status = {"podIP": ip} if ip else {}
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "node", "ports": ports}]},
            "status": status}  # fmt: skip


def with_pods(monkeypatch: pytest.MonkeyPatch, pods: list[Any]) -> list[int]:
    calls: list[int] = []

    def gang_pods(owner: Owner, stage: str) -> list[Any]:
        calls.append(1)
        return pods

    monkeypatch.setattr(gangpods, "gang_pods", gang_pods)
    return calls


def test_a_running_gang_is_read_from_its_pods_named_port(
    trainer: LiveMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert trainer.port is not None
    with_pods(monkeypatch, [pod(1, "other", ip=None), pod(trainer.port)])
    trainer.log({"step": 40, "loss": 2.5, "samples_per_second": 100.0})
    seen = scrape.look(parse(job()), OWNER, scrape.Sight(Child.RUNNING, "uid-1", {}, T0))
    assert seen.write is not None and seen.write["step"] == 40 and seen.write["loss"] == 2.5
    assert seen.write["display"] == "40/1000 (4%)" and seen.hung is None
    assert seen.next_read_in == scrape.interval()


def test_one_read_per_interval_per_job(
    trainer: LiveMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert trainer.port is not None
    calls = with_pods(monkeypatch, [pod(trainer.port)])
    spec = parse(job())
    first = scrape.look(spec, OWNER, scrape.Sight(Child.RUNNING, "uid-1", {}, T0, None, 100.0))
    assert first.read_at == 100.0
    again = scrape.look(
        spec, OWNER, scrape.Sight(Child.RUNNING, "uid-1", {}, T0, first.read_at, 101.0)
    )
    assert len(calls) == 1 and again.write is None and again.read_at == 100.0
    assert again.next_read_in == scrape.interval() - 1.0
    later = scrape.look(
        spec, OWNER, scrape.Sight(Child.RUNNING, "uid-1", {}, T0, 100.0, 100 + scrape.interval())
    )
    assert len(calls) == 2 and later.read_at == 100 + scrape.interval()


def test_with_the_pod_watch_running_no_rank0_means_no_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator knows rank 0 from its pod watch: no address yet is no reading, not a list."""
    calls = with_pods(monkeypatch, [pod(1)])
    seen = scrape.look(
        parse(job()), OWNER, scrape.Sight(Child.RUNNING, "uid-1", {}, T0, watched=True)
    )
    assert calls == [] and seen == scrape.Reading()  # no look either: rank 0's address wakes it
    heard = {"gang": "uid-1", "step": 40, "totalSteps": 1000, "firstStep": 0,
             "advancedAt": T0, "observedAt": T0}  # fmt: skip
    later = "2026-11-22T10:02:00Z"
    spec = parse(job(runPolicy={"progressDeadlineSeconds": 60}))
    seen = scrape.look(spec, OWNER, scrape.Sight(Child.RUNNING, "uid-1", {"progress": heard}, later,
                       watched=True))  # fmt: skip
    assert seen == scrape.Reading()  # a hang is judged on a reading, not on an old status


def test_the_read_time_goes_once_no_gang_trains() -> None:
    """The job's record keeps the read time only while a gang trains (no module-level memory)."""
    gone = scrape.look(
        parse(job()), OWNER, scrape.Sight(Child.SUCCEEDED, "u", {}, T0, 100.0, 200.0)
    )
    assert gone.read_at is None


def test_the_interval_comes_from_the_chart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(scrape.INTERVAL_ENV, "45")
    assert scrape.interval() == 45.0
    monkeypatch.setenv(scrape.INTERVAL_ENV, "soon")
    assert scrape.interval() == 30.0
    assert (scrape.write_every(), scrape.first_step_allowance()) == (60.0, 900)
    monkeypatch.setenv(scrape.WRITE_ENV, "5")
    monkeypatch.setenv(scrape.ALLOWANCE_ENV, "0")
    assert (scrape.write_every(), scrape.first_step_allowance()) == (5.0, 0)


def test_a_trainer_that_does_not_answer_is_no_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    with_pods(monkeypatch, [pod(1)])  # nothing listens on port 1
    seen = scrape.look(parse(job()), OWNER, scrape.Sight(Child.RUNNING, "uid-1", {}, T0))
    # Nothing for status (issue 43: describe showed Advanced At / Observed At on a job that
    # never logged a step); the job's record keeps the first sight for the next reading.
    assert seen.write is None
    assert seen.latest == {"gang": "uid-1", "advancedAt": T0, "observedAt": T0}
    old = {"gang": "uid-0", "step": 40, "totalSteps": 100, "advancedAt": T0, "observedAt": T0}
    seen = scrape.look(parse(job()), OWNER,
                       scrape.Sight(Child.RUNNING, "uid-1", {"progress": old}, T0))  # fmt: skip
    assert seen.write == scrape.CLEAR  # a replaced gang's step is not this one's


def test_a_stalled_step_past_the_deadline_is_hung_with_the_log_tail(
    trainer: LiveMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert trainer.port is not None
    with_pods(monkeypatch, [pod(trainer.port)])
    trainer.log({"step": 40})
    before = {"progress": {"gang": "uid-1", "step": 40, "totalSteps": 1000, "firstStep": 10,
                           "advancedAt": "2026-11-22T09:00:00Z", "observedAt": T0}}  # fmt: skip
    spec = parse(job(runPolicy={"progressDeadlineSeconds": 600}))
    seen = scrape.look(spec, OWNER, scrape.Sight(Child.RUNNING, "uid-1", before, T1))
    assert seen.hung is not None and seen.hung.reason == "Hung"
    assert "3660s" in seen.hung.message and seen.hung.log_tail == ("[default0]:step 40",)
    assert seen.write is not None  # the last progress goes on status with the hang


def test_progress_goes_once_no_gang_trains(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = with_pods(monkeypatch, [])
    spec = parse(job())
    assert (
        scrape.look(
            spec, OWNER, scrape.Sight(Child.ABSENT, None, {"progress": {"step": 1}}, T0)
        ).write
        == {}
    )
    assert scrape.look(spec, OWNER, scrape.Sight(Child.SUCCEEDED, "u", {}, T0)).write is None
    assert (
        scrape.look(
            spec, OWNER, scrape.Sight(Child.RESTARTING, "u", {"progress": {"step": 1}}, T0)
        ).write
        is None
    )
    assert calls == []


def test_a_replaced_gang_shows_no_progress_until_its_first_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a hang restart the old gang's 150/1000 and its ETA are not the new gang's."""
    calls = with_pods(monkeypatch, [])
    spec = parse(job())
    old = {"progress": {"gang": "old-gang", "step": 150, "totalSteps": 1000, "etaSeconds": 1800}}
    assert scrape.look(spec, OWNER, scrape.Sight(Child.PENDING, "new-gang", old, T0)).write == {}
    same = {"progress": {"gang": "new-gang", "step": 3}}
    assert (
        scrape.look(spec, OWNER, scrape.Sight(Child.RESTARTING, "new-gang", same, T0)).write is None
    )
    assert calls == []


def test_a_succeeded_job_keeps_its_final_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """kubectl get tj shows 1000/1000 (100%) at Succeeded, not a blank PROGRESS (issue 26)."""
    with_pods(monkeypatch, [])
    spec = parse(job())
    last = {"gang": "g", "step": 950, "totalSteps": 1000, "percent": 95.0, "etaSeconds": 40,
            "display": "950/1000 (95%)", "eta": "40s"}  # fmt: skip
    done = scrape.look(
        spec, OWNER, scrape.Sight(Child.SUCCEEDED, "g", {"progress": last}, T0)
    ).write
    assert done is not None and done["display"] == "1000/1000 (100%)"
    assert done["etaSeconds"] is None and done["eta"] == "-"  # null: the merge patch removes it
    again = scrape.look(
        spec, OWNER, scrape.Sight(Child.SUCCEEDED, "g", {"progress": done}, T0)
    ).write
    assert again is None  # written once


def test_a_hang_counts_from_the_reading_that_last_saw_the_step_move_not_from_a_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Progress is written once a minute, read every 2 s: a stall at t=10 is hung at t<=72.

    Each pass starts from what the last one read (the job's memory), not from the last write:
    found on the tier (bench/recovery.py), where a hang was judged up to one write interval
    late (the unwritten readings each saw the step move past the written one).
    """
    monkeypatch.setenv(scrape.INTERVAL_ENV, "2")
    monkeypatch.setenv(scrape.WRITE_ENV, "60")
    stall = 10
    step = {"now": 0}

    def metrics(ip: str, port: int, timeout: float = 5.0) -> str:
        return f"{contract.METRIC_STEP} {step['now']}\n{contract.METRIC_TOTAL_STEPS} 1000\n"

    monkeypatch.setattr(scrape, "read_metrics", metrics)
    spec = parse(job(runPolicy={"progressDeadlineSeconds": 60}))
    status: dict[str, Any] = {}
    read_at, latest, hung_at = None, None, None
    for t in range(0, 200, 2):
        step["now"] = min(t, stall)
        now = f"2026-11-22T10:{t // 60:02d}:{t % 60:02d}Z"
        sight = scrape.Sight(Child.RUNNING, "g", status, now, read_at, float(t), pod(9),
                             watched=True, last_progress=latest)  # fmt: skip
        seen = scrape.look(spec, OWNER, sight)
        if seen.write is not None:
            status = {"progress": seen.write}
        read_at, latest = seen.read_at, seen.latest
        if seen.hung is not None:
            hung_at = t
            break
    assert hung_at is not None and stall + 60 < hung_at <= stall + 60 + 2, hung_at


def test_a_hang_is_judged_at_the_first_reading_past_the_deadline_to_the_microsecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Readings ~2.5 s apart stamped to the microsecond: the hang is declared at the first one
    past the deadline; with whole seconds the 60 s read as 60 there and the next one declared it
    (the tier's bench: 5.3 s past the deadline against 4 s wanted)."""
    monkeypatch.setenv(scrape.INTERVAL_ENV, "2")
    monkeypatch.setenv(scrape.WRITE_ENV, "4")
    step, base = {"now": 0}, 1_795_000_000.0
    monkeypatch.setattr(
        scrape, "read_metrics",
        lambda ip, port, timeout=5.0: f"{contract.METRIC_STEP} {step['now']}\n"
        f"{contract.METRIC_TOTAL_STEPS} 1000\n",
    )  # fmt: skip
    spec = parse(job(runPolicy={"progressDeadlineSeconds": 60}))
    status: dict[str, Any] = {}
    read_at, latest, stall = None, None, 10.3
    for k in range(100):
        t = k * 2.51  # a pass's own time and the queue's slack on top of the interval
        step["now"] = int(min(t, stall) * 50)
        sight = scrape.Sight(Child.RUNNING, "g", status, scrape.timestamp(base + t), read_at,
                             t, pod(9), watched=True, last_progress=latest)  # fmt: skip
        seen = scrape.look(spec, OWNER, sight)
        status = {"progress": seen.write} if seen.write is not None else status
        read_at, latest = seen.read_at, seen.latest
        if seen.hung is not None:
            break
    # The first reading that shows the frozen step starts the 60 s; the first one past them ends.
    frozen_seen = next(k * 2.51 for k in range(100) if k * 2.51 > stall)
    first_past = next(k * 2.51 for k in range(100) if k * 2.51 - frozen_seen > 60)
    assert seen.hung is not None and t == first_past, (t, first_past)
