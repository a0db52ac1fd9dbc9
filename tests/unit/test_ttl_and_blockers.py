"""ttlSecondsAfterFinished arithmetic and the blocker a Pending decision carries."""

from __future__ import annotations

import datetime

import pytest

from trainium_operator.domain.lifecycle import (
    Blocker,
    Child,
    Observed,
    Phase,
    decide,
    ttl_remaining,
)

NOW = datetime.datetime(2026, 11, 22, 12, 0, 0, tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize(
    ("completed", "ttl", "expected"),
    [
        ("2026-11-22T11:59:00Z", 120, 60.0),
        ("2026-11-22T11:59:00Z", 60, 0.0),
        ("2026-11-22T11:00:00Z", 60, -3540.0),
        ("2026-11-22T12:00:00Z", 0, 0.0),
        (None, 60, None),
        ("2026-11-22T11:59:00Z", None, None),
    ],
)
def test_ttl_remaining(completed: str | None, ttl: int | None, expected: float | None) -> None:
    assert ttl_remaining(completed, ttl, NOW) == expected


@pytest.mark.parametrize(
    "obs",
    [
        Observed(storage_blocker=Blocker("ClaimNotFound", "no claim")),
        Observed(storage_ready=True, queue_blocker=Blocker("QueueNotFound", "no queue")),
        Observed(
            storage_ready=True,
            cache_recorded=True,
            queue_blocker=Blocker("QueueNotFound", "no queue"),
        ),
    ],
)
def test_pending_decisions_carry_their_blocker(obs: Observed) -> None:
    decision = decide(obs)
    expected = obs.storage_blocker or obs.queue_blocker
    assert decision.phase is Phase.PENDING and decision.blocker == expected


def test_no_blocker_once_things_run() -> None:
    obs = Observed(storage_ready=True, precompile=Child.SUCCEEDED, cache_recorded=True)
    assert decide(obs).blocker is None
    assert decide(Observed(storage_ready=True, training=Child.RUNNING)).blocker is None
