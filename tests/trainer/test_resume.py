"""Checkpoints: SIGKILL then resume equals an unbroken run; torn writes never become latest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from unittest.mock import ANY

import pytest
import torch
from trainer_utils import (
    RUN_TIMEOUT,
    events,
    final_weights,
    run_trainer,
    subprocess_env,
    summary,
)
from trainer_utils import trainer_cmd as cmd

from trainium_trainer import checkpoint
from trainium_trainer.__main__ import main


def _kill_after_checkpoint(args: list[str], step: int) -> None:
    """Start a run, SIGKILL it as soon as it reports the checkpoint of `step`."""
    proc = subprocess.Popen(cmd(args), env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + RUN_TIMEOUT
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if json.loads(line) == {"event": "checkpoint", "step": step, "path": ANY}:
                proc.send_signal(signal.SIGKILL)
                break
            assert time.monotonic() < deadline, "no checkpoint before the deadline"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_then_resume_matches_uninterrupted(bert_data: Path, tmp_path: Path) -> None:
    base = ["bert-pretrain", "--data-dir", str(bert_data), "--max-steps", "40"]
    base += ["--checkpoint-every", "5", "--keep-checkpoints", "2", "--log-every", "5"]
    base += ["--batch-size", "8", "--grad-accum-steps", "2", "--lr", "0.02", "--precision", "fp32"]
    killed, straight = tmp_path / "killed", tmp_path / "straight"
    _kill_after_checkpoint([*base, "--output-dir", str(killed)], step=10)
    steps = [s for s, _ in checkpoint.complete_checkpoints(killed / "checkpoints")]
    assert 10 in steps and 40 not in steps, steps
    resumed = run_trainer([*base, "--output-dir", str(killed)])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [e["step"] for e in events(resumed.stdout, "resumed")] == [10]
    reference = run_trainer([*base, "--output-dir", str(straight)])
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert summary(killed)["resumed_from_step"] >= 10
    assert summary(killed)["initial_loss"] == summary(straight)["initial_loss"]
    got, want = final_weights(killed), final_weights(straight)
    for name, value in want.items():
        assert torch.equal(got[name], value), name
    assert len(checkpoint.complete_checkpoints(killed / "checkpoints")) == 2


def _train(data: Path, out: Path, steps: int, *extra: str) -> int:
    args = ["bert-pretrain", "--data-dir", str(data), "--output-dir", str(out)]
    return main([*args, "--max-steps", str(steps), "--checkpoint-every", "5", *extra])


def test_write_killed_before_rename_keeps_previous_latest(
    bert_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    assert _train(bert_data, out, 10) == 0
    ckpts = out / "checkpoints"

    def die(src: object, dst: object) -> None:
        raise SystemExit("killed between write and rename")

    monkeypatch.setattr(checkpoint.os, "replace", die)
    with pytest.raises(SystemExit):
        _train(bert_data, out, 15)
    monkeypatch.undo()
    assert [s for s, _ in checkpoint.complete_checkpoints(ckpts)] == [5, 10]
    found = checkpoint.load_latest(ckpts)
    assert found is not None and found[1]["step"] == 10


def test_leftover_temp_and_corrupt_checkpoint_are_ignored(bert_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _train(bert_data, out, 10) == 0
    ckpts = out / "checkpoints"
    (ckpts / f"{checkpoint.TEMP_PREFIX}4242-ckpt-00000015.pt").write_bytes(b"\x80half a pickle")
    (ckpts / "ckpt-00000020.pt").write_bytes(b"torn")  # e.g. copied in by hand, not atomic
    found = checkpoint.load_latest(ckpts)
    assert found is not None and found[1]["step"] == 10
    assert _train(bert_data, out, 12) == 0
    assert summary(out)["resumed_from_step"] == 10
    assert not list(ckpts.glob(f"{checkpoint.TEMP_PREFIX}*"))


def test_resume_never_and_explicit_path(bert_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _train(bert_data, out, 10) == 0
    assert _train(bert_data, out, 10, "--resume", "never") == 0
    assert summary(out)["resumed_from_step"] == 0
    path = checkpoint.checkpoint_path(out / "checkpoints", 5)
    assert _train(bert_data, out, 10, "--resume", str(path)) == 0
    assert summary(out)["resumed_from_step"] == 5


def test_atomic_write_failure_leaves_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "ckpt-00000001.pt"
    target.write_bytes(b"old")

    def half_then_crash(temp: Path) -> None:
        temp.write_bytes(b"new but incomplete")
        raise OSError("disk full")

    with pytest.raises(OSError):
        checkpoint.atomic_write(target, half_then_crash)
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == [target.name]
