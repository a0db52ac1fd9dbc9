"""The work queue's guarantees, each with the interleaving that broke the old pass runtime forced.

Issue 18's bugs on the queue's side: 1 (a trigger between "any more?" and "not busy" was lost),
3 (nothing of ours may run while kopf has paused us), 7 (only a running pass coalesced triggers).
No sleeps: a fake clock for timers, `get(timeout=0)` to ask "is anything ready now?".
"""

from __future__ import annotations

import threading

import pytest

from trainium_operator.runtime.queue import FIRST, FOLLOW_UP, Item, WorkQueue

A, B, C = ("ns", "a"), ("ns", "b"), ("ns", "c")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ready(q: WorkQueue[tuple[str, str]]) -> Item[tuple[str, str]] | None:
    return q.get(timeout=0)


def test_a_key_is_handed_to_one_worker_at_a_time() -> None:
    q: WorkQueue[tuple[str, str]] = WorkQueue()
    q.add(A)
    assert ready(q) == Item(A)
    q.add(A)  # a trigger while A's pass runs: dirty, not handed out
    assert ready(q) is None and q.is_processing(A)
    q.done(A)
    assert ready(q) == Item(A)
    q.done(A)
    assert ready(q) is None


def test_bug1_a_trigger_just_before_done_is_never_lost() -> None:
    """The old handle(): a trigger between the last "anything more?" and clearing busy parked."""
    q: WorkQueue[tuple[str, str]] = WorkQueue()
    q.add(A)
    item = ready(q)
    assert item is not None
    # The pass has returned; the trigger lands at the last moment before done().
    q.add(A, fresh=True)
    q.done(A)
    assert ready(q) == Item(A, fresh=True)


def test_bug7_triggers_that_find_the_key_queued_make_one_pass() -> None:
    """N events spaced wider than nothing, all before a worker takes the key: one pass."""
    q: WorkQueue[tuple[str, str]] = WorkQueue()
    for _ in range(5):
        q.add(A)
    q.add(B)
    assert len(q) == 2
    assert {ready(q), ready(q)} == {Item(A), Item(B)}
    assert ready(q) is None


def test_first_looks_go_before_follow_ups_and_a_queued_key_is_promoted() -> None:
    q: WorkQueue[tuple[str, str]] = WorkQueue()
    q.add(A)
    q.add(B)
    q.add(C, rank=FIRST)
    q.add(B, rank=FIRST)  # promoted, still one entry
    taken = [ready(q), ready(q), ready(q), ready(q)]
    assert [i.key if i else None for i in taken] == [C, B, A, None]


def test_fresh_is_kept_when_triggers_merge() -> None:
    q: WorkQueue[tuple[str, str]] = WorkQueue()
    q.add(A, fresh=True)
    q.add(A)
    assert ready(q) == Item(A, fresh=True)


def test_add_after_waits_keeps_the_earliest_time_and_is_fresh() -> None:
    clock = Clock()
    q: WorkQueue[tuple[str, str]] = WorkQueue(clock=clock)
    q.add_after(A, 10)
    q.add_after(A, 30)  # later: the earlier time stays
    assert ready(q) is None and q.pending_after(A) == 10
    q.add_after(A, 5)  # earlier: replaces
    clock.now += 5
    assert ready(q) == Item(A, fresh=True)


def test_a_key_handed_out_drops_its_timer_the_pass_decides_the_next_look() -> None:
    clock = Clock()
    q: WorkQueue[tuple[str, str]] = WorkQueue(clock=clock)
    q.add_after(A, 10)
    q.add(A)  # an event before the timer
    assert ready(q) == Item(A)
    q.done(A)
    clock.now += 20
    assert ready(q) is None and q.pending_after(A) is None


def test_rate_limited_backoff_doubles_to_the_cap_until_forget() -> None:
    clock = Clock()
    q: WorkQueue[tuple[str, str]] = WorkQueue(clock=clock, base_delay=1, max_delay=6)
    assert [q.add_rate_limited(A) for _ in range(5)] == [1, 2, 4, 6, 6]
    assert q.num_requeues(A) == 5
    q.forget(A)
    assert q.num_requeues(A) == 0 and q.add_rate_limited(A) == 1


def test_discard_drops_what_waits_for_a_gone_key() -> None:
    clock = Clock()
    q: WorkQueue[tuple[str, str]] = WorkQueue(clock=clock)
    q.add(A)
    q.add_after(B, 1)
    q.add_rate_limited(B)
    q.discard(A)
    q.discard(B)
    clock.now += 100
    assert ready(q) is None and q.num_requeues(B) == 0


def test_bug3_nothing_is_handed_out_while_paused_timers_included() -> None:
    clock = Clock()
    q: WorkQueue[tuple[str, str]] = WorkQueue(clock=clock)
    q.pause()
    q.add(A)
    q.add_after(B, 1)
    q.add_rate_limited(C)
    clock.now += 100
    assert ready(q) is None and q.paused
    q.resume()
    assert {ready(q), ready(q), ready(q)} == {Item(A), Item(B, True), Item(C, True)}


def test_pause_then_wait_idle_returns_once_running_passes_end() -> None:
    q: WorkQueue[tuple[str, str]] = WorkQueue()
    q.add(A)
    assert ready(q) is not None
    q.pause()
    assert not q.wait_idle(timeout=0)
    q.done(A)
    assert q.wait_idle(timeout=0)


def test_shutdown_drops_waiting_work_and_drains_the_running() -> None:
    q: WorkQueue[tuple[str, str]] = WorkQueue()
    q.add(A)
    q.add(B)
    assert ready(q) is not None
    assert not q.shut_down(timeout=0)  # one pass still running
    q.add(C)
    assert ready(q) is None and q.get() is None  # closed: workers end
    q.done(A)
    assert q.wait_idle(timeout=0)


@pytest.mark.parametrize("rank", [FIRST, FOLLOW_UP])
def test_a_blocked_get_wakes_on_add(rank: int) -> None:
    q: WorkQueue[tuple[str, str]] = WorkQueue()
    got: list[Item[tuple[str, str]] | None] = []
    thread = threading.Thread(target=lambda: got.append(q.get(timeout=10)))
    thread.start()
    q.add(A, rank=rank)
    thread.join(10)
    assert got == [Item(A)]


def test_a_blocked_get_wakes_when_a_timer_falls_due() -> None:
    q: WorkQueue[tuple[str, str]] = WorkQueue()
    q.add_after(A, 0.01)
    assert q.get(timeout=10) == Item(A, fresh=True)


def test_a_timer_wakes_a_waiting_worker_only_when_it_is_the_soonest() -> None:
    """Every pass sets a far backstop: waking a sleeping worker for it was a thread switch."""
    clock = Clock()
    q: WorkQueue[tuple[str, str]] = WorkQueue(clock=clock)
    woken: list[int] = []
    notify = q._cv.notify
    q._cv.notify = lambda n=1: (woken.append(n), notify(n))  # type: ignore[method-assign]
    q.add_after(A, 60)
    q.add_after(B, 1800)  # later than A: the worker waiting for A wakes in time anyway
    q.add_after(C, 10)  # sooner: it must wake
    assert len(woken) == 2
    clock.now += 10
    assert ready(q) == Item(C, fresh=True)
    q.done(C)
    clock.now += 50
    assert ready(q) == Item(A, fresh=True)
    q.done(A)
    clock.now += 1740
    assert ready(q) == Item(B, fresh=True)


def test_a_blocked_get_wakes_for_a_sooner_timer() -> None:
    q: WorkQueue[tuple[str, str]] = WorkQueue()
    q.add_after(A, 3600)
    got: list[Item[tuple[str, str]] | None] = []
    thread = threading.Thread(target=lambda: got.append(q.get(timeout=10)))
    thread.start()
    q.add_after(B, 0.01)
    thread.join(10)
    assert got == [Item(B, fresh=True)]
