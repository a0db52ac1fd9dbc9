"""Progress from rank 0's metrics text: parsing, the ETA, the write budget and hang judgement."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from trainium_operator.domain import progress
from trainium_operator.domain.progress import Sample
from trainium_trainer import contract
from trainium_trainer.live import LiveMetrics

T0, T1, T2 = "2026-11-22T10:00:00Z", "2026-11-22T10:01:00Z", "2026-11-22T10:01:30Z"


def served(step: int, total: int = 1000, loss: float = 2.5, sps: float = 512.0) -> str:
    """The text the trainer's own server would serve (its registry, rendered)."""
    live = LiveMetrics()
    live.start(0, total, 0)
    live.log({"step": step, "loss": loss, "lr": 1e-4, "samples_per_second": sps,
              "tokens_per_second": sps * 128})  # fmt: skip
    live.checkpoint(step - step % 100)
    return generate_latest(live.registry).decode()


def test_the_operator_reads_what_the_trainer_serves() -> None:
    assert progress.parse(served(250)) == Sample(250, 1000, 2.5, 512.0, 200)


@pytest.mark.parametrize(
    "text",
    ["", "garbage {{{", f"{contract.METRIC_STEP} 3\n", "# HELP x y\nx 1\n"],
)
def test_text_without_the_gauges_is_no_reading(text: str) -> None:
    assert progress.parse(text) is None


def test_nan_loss_is_left_out() -> None:
    text = served(10).replace(f"{contract.METRIC_LOSS} 2.5", f"{contract.METRIC_LOSS} NaN")
    got = progress.parse(text)
    assert got is not None and got.loss is None and got.step == 10


def test_the_first_reading_anchors_the_gang_and_writes_at_once() -> None:
    p = progress.advance(None, Sample(100, 1000, 3.0, 64.0), "uid-1", T0)
    assert p == {
        "gang": "uid-1", "step": 100, "totalSteps": 1000, "observedAt": T0, "advancedAt": T0,
        "firstStep": 100, "percent": 10.0, "samplesPerSecond": 64.0, "loss": 3.0,
        "display": "100/1000 (10%)", "eta": "-",
    }  # fmt: skip
    assert progress.write_due(None, p, T0)


def test_the_eta_follows_the_step_rate_between_readings() -> None:
    first = progress.advance(None, Sample(100, 1000), "uid-1", T0)
    later = progress.advance(first, Sample(160, 1000), "uid-1", T1)  # 1 step/s
    assert later["etaSeconds"] == 840 and later["eta"] == "14m"
    assert later["advancedAt"] == T1 and later["firstStep"] == 100
    assert progress.write_due(first, later, T1)


def test_writes_wait_a_minute_per_job() -> None:
    first = progress.advance(None, Sample(100, 1000), "uid-1", T0)
    soon = progress.advance(first, Sample(130, 1000), "uid-1", "2026-11-22T10:00:30Z")
    assert not progress.write_due(first, soon, "2026-11-22T10:00:30Z")


def test_the_write_budget_and_the_first_step_allowance_are_settings() -> None:
    first = progress.advance(None, Sample(0, 1000), "uid-1", T0)
    soon = progress.advance(first, Sample(30, 1000), "uid-1", "2026-11-22T10:00:05Z")
    assert progress.write_due(first, soon, "2026-11-22T10:00:05Z", every=5)
    assert progress.hung(first, 60, "2026-11-22T10:01:01Z", first_step=0) is not None
    assert progress.hung(first, 60, "2026-11-22T10:01:01Z") is None  # the default: 900 s more


def test_a_new_gang_starts_afresh() -> None:
    old = progress.advance(None, Sample(500, 1000), "uid-1", T0)
    new = progress.advance(old, Sample(400, 1000), "uid-2", T1)
    assert new["firstStep"] == 400 and new["advancedAt"] == T1 and "etaSeconds" not in new
    assert progress.write_due(old, new, T1)


def test_a_gang_restarted_in_place_resumes_lower_and_starts_afresh() -> None:
    old = progress.advance(None, Sample(100, 1000), "uid-1", T0)
    old = progress.advance(old, Sample(160, 1000), "uid-1", T1)
    back = progress.advance(old, Sample(150, 1000), "uid-1", T2)
    assert back["firstStep"] == 150 and back["advancedAt"] == T2 and "etaSeconds" not in back


def test_nothing_read_keeps_what_was_known() -> None:
    known = progress.advance(None, Sample(100, 1000), "uid-1", T0)
    assert progress.advance(known, None, "uid-1", T1) == known
    assert not progress.write_due(known, known, T1)
    fresh = progress.advance(known, None, "uid-2", T1)
    assert fresh == {"gang": "uid-2", "advancedAt": T1, "observedAt": T1}
    assert progress.display(fresh) == "starting"


@pytest.mark.parametrize(
    ("seconds", "text"), [(None, "-"), (45, "45s"), (720, "12m"), (3900, "1h05m"), (0, "0s")]
)
def test_eta_text(seconds: int | None, text: str) -> None:
    assert progress.eta_text(seconds) == text


def test_a_stalled_step_is_hung_after_the_deadline() -> None:
    p = progress.advance(None, Sample(100, 1000), "uid-1", T0)
    p = progress.advance(p, Sample(120, 1000, 2.0), "uid-1", T1)  # moved: no allowance now
    assert progress.hung(p, 600, "2026-11-22T10:11:00Z") is None
    why = progress.hung(p, 600, "2026-11-22T10:11:01Z")
    assert why is not None and "601s" in why and "step 120/1000 (12%)" in why
    assert "loss 2.0" in why and "progressDeadlineSeconds (600s)" in why


def test_the_first_step_gets_an_allowance() -> None:
    p = progress.advance(None, Sample(0, 1000), "uid-1", T0)  # served before the first step
    allowance = progress.FIRST_STEP_ALLOWANCE_SECONDS
    assert progress.hung(p, 60, "2026-11-22T10:16:00Z") is None  # 960 s <= 60 + 900
    why = progress.hung(p, 60, "2026-11-22T10:16:01Z")
    assert why is not None and "step 0/1000 (0%)" in why and f"{allowance}s" in why


def test_a_trainer_never_heard_from_is_not_judged() -> None:
    p = progress.advance(None, None, "uid-1", T0)
    assert progress.hung(p, 60, "2027-01-01T00:00:00Z") is None


def test_no_deadline_never_hangs() -> None:
    p = progress.advance(None, Sample(1, 10), "uid-1", T0)
    assert progress.hung(p, None, "2030-01-01T00:00:00Z") is None
