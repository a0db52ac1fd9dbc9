"""The compile-cache record: durations never negative, and only a genuine record is a hit."""

from __future__ import annotations

import pytest
from support import job

from trainium_operator.api.spec import parse
from trainium_operator.manifests import cache
from trainium_operator.manifests.ownership import Owner

SPEC = parse(job("w"))
WRITER = Owner("w", "default", "uid-w")


def test_a_compile_done_within_the_second_its_lease_was_taken_lasted_zero_seconds() -> None:
    """acquireTime has microseconds, `now` whole seconds: the difference can be below zero."""
    record = cache.record(
        cache.identity(SPEC), SPEC, WRITER, cache.READY,
        started_at="2026-01-01T00:00:00.900000Z", now="2026-01-01T00:00:00Z",
    )  # fmt: skip
    assert record["data"]["durationSeconds"] == "0"
    assert cache.seconds_between("2026-01-01T00:00:05Z", "2026-01-01T00:00:00Z") == 0.0


@pytest.mark.parametrize(
    ("written", "seconds"), [("-3", 0.0), ("-0", 0.0), ("12", 12.0), ("soon", None), ("", None)]
)
def test_a_recorded_duration_reads_back_clamped(written: str, seconds: float | None) -> None:
    record = cache.record(
        cache.identity(SPEC), SPEC, WRITER, cache.READY,
        started_at="2026-01-01T00:00:00Z", now="2026-01-01T00:00:12Z",
    )  # fmt: skip
    record["data"]["durationSeconds"] = written
    entry = cache.read_entry(record, cache.identity(SPEC))
    assert entry is not None and entry.seconds == seconds
