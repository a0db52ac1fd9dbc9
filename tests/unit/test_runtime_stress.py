"""The pass runtime under load: many threads, random delays and operations, seeds printed.

Invariants (issue 18): at most one pass per job at a time; no trigger lost (every trigger is
followed by a pass that started after it); nothing runs while paused; DELETED events (`gone`)
interleave with all of it. Real workers and the real Passes; only reconcile is a fake. Set
TRAINIUM_STRESS_SEED to replay one seed.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster.observe import Views
from trainium_operator.cluster.reconcile import Outcome
from trainium_operator.runtime.passes import Passes

KEYS = [f"job-{i}" for i in range(12)]  # uids; each job is named after its uid here
# xdist's workers collect separately and must agree: they draw from the run's shared id.
_DRAW = random.Random(os.environ.get("PYTEST_XDIST_TESTRUNUID"))  # None: fresh each run
SEEDS = (
    [int(os.environ["TRAINIUM_STRESS_SEED"])]
    if "TRAINIUM_STRESS_SEED" in os.environ
    else [_DRAW.randrange(2**32) for _ in range(3)]
)


class World:
    """What the fake reconcile and the test threads share, and the invariants they check."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.lock = threading.Lock()
        self.clock = itertools.count()
        self.active: set[str] = set()
        self.last_trigger: dict[str, int] = {}
        self.last_start: dict[str, int] = {}
        self.deleted: set[str] = set()
        self.paused = False
        self.violations: list[str] = []
        self.passes = 0
        self.failing = True

    def reconcile(self, namespace: str, name: str, emit: Any, views: Views) -> Outcome:
        key = name
        rng = random.Random(hash((self.seed, key, next(self.clock))))
        with self.lock:
            self.last_start[key] = next(self.clock)
            self.passes += 1
            if key in self.active:
                self.violations.append(f"two passes of {key}")
            if self.paused:
                self.violations.append(f"a pass of {key} while paused")
            self.active.add(key)
        try:
            time.sleep(rng.random() * 0.002)  # a jitter, not a wait for anything
            if self.failing and rng.random() < 0.1:
                raise ApiException(status=503)
            return Outcome("Training")
        finally:
            with self.lock:
                self.active.discard(key)

    def trigger(self, key: str) -> None:
        with self.lock:
            self.last_trigger[key] = next(self.clock)


def producer(world: World, passes: Passes, rng: random.Random, stop: threading.Event) -> None:
    while not stop.is_set():
        key = rng.choice(KEYS)
        op = rng.random()
        world.trigger(key)
        if op < 0.4:
            passes.wake(key)
        elif op < 0.6:
            passes.job_event(key, ("ns", key), str(rng.randrange(100)), first=rng.random() < 0.3)
        elif op < 0.8:
            passes.pod_event(key)
        else:
            passes.queue.add_after(key, rng.random() * 0.003)
        time.sleep(rng.random() * 0.0005)


def deleter(world: World, passes: Passes, rng: random.Random, stop: threading.Event) -> None:
    while not stop.is_set():
        time.sleep(rng.random() * 0.01)
        key = rng.choice(KEYS[:4])
        with world.lock:
            world.deleted.add(key)  # its later wakes find no record: no pass is expected
        passes.gone(key)  # the DELETED event


def pauser(world: World, passes: Passes, rng: random.Random, stop: threading.Event) -> None:
    while not stop.is_set():
        time.sleep(rng.random() * 0.01)
        passes.end_term()  # what the election does when the term ends
        assert passes.queue.wait_idle(timeout=10)
        with world.lock:
            world.paused = True
        time.sleep(rng.random() * 0.005)
        with world.lock:
            world.paused = False
        passes.queue.resume()


def drained(passes: Passes) -> bool:
    """Nothing queued, running or due soon (a Training job's next look is the far backstop)."""
    soon = [k for k in KEYS if (passes.queue.pending_after(k) or 1e9) < 100]
    return not len(passes.queue) and not soon and passes.queue.wait_idle(0)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_runtime_keeps_its_invariants_under_random_load(seed: int) -> None:
    print(f"stress seed={seed} (TRAINIUM_STRESS_SEED={seed} replays it)")
    world = World(seed)
    passes = Passes(world.reconcile, lambda *_: None, workers=8, backoff=(0.001, 0.004))
    for key in KEYS:  # each job's own watch event came first
        passes.records.named(key, "ns", key)
    passes.start()
    stop = threading.Event()
    rng = random.Random(seed)
    roles = [producer] * 4 + [deleter, pauser]
    threads = [
        threading.Thread(target=role, args=(world, passes, random.Random(rng.random()), stop))
        for role in roles
    ]
    for thread in threads:
        thread.start()
    time.sleep(1.5)  # the load's duration
    stop.set()
    for thread in threads:
        thread.join(10)
    world.failing = False
    passes.queue.resume()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not drained(passes):
        time.sleep(0.01)  # polled to a deadline: the queue drains what the producers left
    lost = [
        key for key, t in world.last_trigger.items()
        if key not in world.deleted and world.last_start.get(key, -1) < t
    ]  # fmt: skip
    passes.stop()
    assert not world.violations, (seed, world.violations[:5])
    assert not lost, (seed, lost)
    assert world.passes > 100, (seed, world.passes)
