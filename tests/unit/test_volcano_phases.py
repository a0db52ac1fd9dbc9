"""The operator maps exactly Volcano's own Job phases, as upstream declares them (test data)."""

from __future__ import annotations

from pathlib import Path

from trainium_operator.domain.lifecycle import VOLCANO_PHASES

UPSTREAM = Path(__file__).with_name("volcano_job_phases.txt")


def upstream_phases() -> list[str]:
    """The JobPhase constants of Volcano's job.go, as committed in volcano_job_phases.txt."""
    lines = (line.strip() for line in UPSTREAM.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_every_volcano_job_phase_is_mapped_and_nothing_else() -> None:
    assert set(VOLCANO_PHASES) == set(upstream_phases())
