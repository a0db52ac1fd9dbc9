"""Ctrl-C during `trainium run`: what status.json says and which later run resumes (issue 43)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from torchx.schedulers.local_scheduler import SignalException

from trainium_operator.local import interrupt


def status(phase: str, reason: str, key: str = "k", step: int | None = 20) -> dict[str, object]:
    st: dict[str, object] = {
        "phase": phase,
        "conditions": [{"type": "Running", "status": "False", "reason": reason}],
        "cache": {"key": key},
    }
    if step is not None:
        st["lastCheckpoint"] = {"step": step, "time": "2026-11-29T00:00:00Z", "path": "p"}
    return st


def test_only_an_interrupted_run_of_the_same_graphs_with_a_checkpoint_resumes(
    tmp_path: Path,
) -> None:
    f = tmp_path / "status.json"
    assert interrupt.resumable(f, "k") is None  # no earlier run
    f.write_text(json.dumps(status("Suspended", "Interrupted")))
    assert interrupt.resumable(f, "k") == {"step": 20, "time": "2026-11-29T00:00:00Z", "path": "p"}
    assert interrupt.resumable(f, "other") is None  # the graphs changed: train afresh
    for other in (status("Succeeded", "Completed"), status("Suspended", "Suspended"),
                  status("Suspended", "Interrupted", step=None)):  # fmt: skip
        f.write_text(json.dumps(other))
        assert interrupt.resumable(f, "k") is None, other
    f.write_text("{half")
    assert interrupt.resumable(f, "k") is None


def test_ctrl_c_and_sigterm_are_interrupts_other_signals_are_not() -> None:
    assert interrupt.signal_of(KeyboardInterrupt()) == signal.SIGINT
    assert interrupt.signal_of(SignalException("x", signal.SIGINT)) == signal.SIGINT
    assert interrupt.signal_of(SignalException("x", signal.SIGTERM)) == signal.SIGTERM
    assert interrupt.signal_of(SignalException("x", signal.SIGHUP)) is None
    assert (
        interrupt.cause(signal.SIGINT) == "Ctrl-C" and interrupt.cause(signal.SIGTERM) == "SIGTERM"
    )


def test_the_message_says_where_the_next_run_starts() -> None:
    ckpt = {"step": 30}
    assert interrupt.message("j", ckpt, "train") == (
        "interrupted (Ctrl-C); checkpoint at step 30: the next `trainium run` of j resumes from it"
    )
    assert "compiles again" in interrupt.message("j", None, "precompile")
    assert "trains afresh" in interrupt.message("j", None, "train", "SIGTERM")
