"""The backstop's timing, with an injected clock: due order, replacement, the re-check policy."""

from __future__ import annotations

import threading

import pytest

from trainium_operator.scheduler import (
    FIRST,
    FOLLOW_UP,
    RESYNC,
    Due,
    RankedPool,
    Scheduler,
    backoff,
    next_look,
)

A, B = ("ns", "a"), ("ns", "b")


def test_due_pops_in_time_order_and_only_when_due() -> None:
    due = Due()
    due.set(A, 10.0)
    due.set(B, 5.0)
    assert due.pop_due(4.9) == []
    assert due.next_time() == 5.0
    assert due.pop_due(10.0) == [B, A]
    assert due.next_time() is None


def test_a_new_due_time_replaces_the_old_one() -> None:
    due = Due()
    due.set(A, 5.0)
    due.set(A, 50.0)  # the latest decision wins: the 5 s entry is stale
    assert due.pop_due(10.0) == []
    assert due.next_time() == 50.0
    due.cancel(A)
    assert A not in due and due.pop_due(100.0) == []


@pytest.mark.parametrize(
    ("attempt", "expected"), [(0, 1.0), (1, 2.0), (5, 32.0), (6, 60.0), (400, 60.0)]
)
def test_backoff_doubles_up_to_the_cap(attempt: int, expected: float) -> None:
    assert backoff(attempt, 1.0, 60.0) == expected


def test_next_look_policy() -> None:
    assert next_look(None) is None  # gone
    assert next_look("Succeeded", terminal=True) is None  # finished, no TTL: events only
    assert next_look("Failed", terminal=True, ttl_remaining=30.5) == 30.5
    assert next_look("Failed", terminal=True, ttl_remaining=-3) == 1.0
    assert next_look("Training") == RESYNC  # progress comes from events; this is the backstop
    assert next_look("Pending", waiting=True, attempt=0) == 10.0
    assert next_look("Pending", waiting=True, attempt=20, resync=300) == 60  # capped
    assert next_look(None, errored=True, attempt=0) == 1.0
    assert next_look("Training", errored=True, attempt=3) == 8.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_scheduler_runs_due_work_and_reschedules_what_it_returns() -> None:
    clock = FakeClock()
    ran: list[tuple[float, tuple[str, str]]] = []
    done = threading.Event()

    def work(key: tuple[str, str]) -> float | None:
        ran.append((clock.now, key))
        if len(ran) == 2:
            done.set()
            return None
        return 100.0

    sched = Scheduler(work, clock=clock)
    sched.start()
    try:
        sched.after(A, 30.0)
        assert not done.wait(0.3) and ran == []  # not due on the fake clock
        clock.now = 30.0
        sched.after(B, None)  # any call wakes the thread to look at the clock again
        deadline = threading.Event()
        for _ in range(100):
            if ran:
                break
            deadline.wait(0.05)
        assert ran == [(30.0, A)]
        clock.now = 130.0
        sched.after(B, None)
        assert done.wait(5) and ran[1] == (130.0, A)
    finally:
        sched.stop()


def test_the_ranked_pool_runs_first_looks_before_follow_ups_then_in_arrival_order() -> None:
    pool = RankedPool(1, "test-pool")
    started, release, ran = threading.Event(), threading.Event(), []

    def blocker() -> None:
        started.set()
        assert release.wait(10)

    pool.submit(blocker)
    assert started.wait(10)  # the only worker is busy: the rest queue up
    done = threading.Event()
    pool.submit(ran.append, "follow-up 1")
    pool.submit(ran.append, "first 1", rank=FIRST)
    pool.submit(ran.append, "follow-up 2", rank=FOLLOW_UP)
    pool.submit(ran.append, "first 2", rank=FIRST)
    pool.submit(done.set)
    release.set()
    assert done.wait(10)
    assert ran == ["first 1", "first 2", "follow-up 1", "follow-up 2"]
    pool.shutdown()


def test_a_failing_call_does_not_end_its_worker() -> None:
    pool, done = RankedPool(1, "test-pool"), threading.Event()
    pool.submit(lambda: 1 / 0)
    pool.submit(done.set)
    assert done.wait(10)
    pool.shutdown()


def test_the_ranked_pool_says_when_its_queue_ran_empty() -> None:
    idle, release, started = threading.Event(), threading.Event(), threading.Event()
    pool = RankedPool(1, "test-pool", on_idle=idle.set)

    def blocker() -> None:
        started.set()
        assert release.wait(10)

    pool.submit(blocker)
    assert started.wait(10)
    pool.submit(lambda: None)  # queued behind the blocker: not idle after the blocker
    release.set()
    assert idle.wait(10)
    pool.shutdown()
