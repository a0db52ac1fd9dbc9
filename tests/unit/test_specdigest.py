"""status.specDigest: one line in `kubectl describe`, and what lifecycle refuses (issue 26)."""

from __future__ import annotations

from trainium_operator.domain import specdigest

STARTED = {"image": "a1", "nodes": "b2", "args": "c3"}


def test_a_job_that_starts_gets_one_digest_and_an_unchanged_spec_is_no_change() -> None:
    written = specdigest.fragment({}, STARTED)
    assert list(written) == ["specDigest"] and len(written["specDigest"]) == 23
    assert specdigest.changed(STARTED, written) == ()
    assert specdigest.fragment(written, {**STARTED, "nodes": "x"}) == written  # kept


def test_a_changed_field_holds_the_job_naming_every_field_the_digest_covers() -> None:
    written = specdigest.fragment({}, STARTED)
    assert specdigest.changed({**STARTED, "nodes": "x"}, written) == tuple(STARTED)


def test_a_field_made_immutable_after_the_start_is_compared_with_nothing() -> None:
    written = specdigest.fragment({}, STARTED)
    assert specdigest.changed({**STARTED, "backend": "n", "nodes": "x"}, written) == ()


def test_an_old_status_map_names_the_changed_field_then_converts_exactly() -> None:
    old = {"specDigests": dict(STARTED)}
    assert specdigest.changed({**STARTED, "nodes": "x"}, old) == ("nodes",)
    written = specdigest.fragment(old, {**STARTED, "nodes": "x"})
    assert written == {"specDigest": specdigest.combined(STARTED), "specDigests": None}
    after = {"specDigest": written["specDigest"]}  # the merge patch removed the map
    assert specdigest.changed(STARTED, after) == ()
    assert specdigest.changed({**STARTED, "nodes": "x"}, after) == tuple(STARTED)
    assert specdigest.fragment(after, STARTED) == after  # nothing more to write
