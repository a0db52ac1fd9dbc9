"""Checkpoints: SIGKILL then resume equals an unbroken run; torn writes never become latest."""

from __future__ import annotations

import hashlib
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


def _flip_bytes_inside_a_tensor(path: Path) -> None:
    """Overwrite bytes in the middle of the largest stored tensor (the zip stays readable)."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        info = max(z.infolist(), key=lambda i: i.file_size)
    with path.open("r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = (int.from_bytes(f.read(2), "little") for _ in range(2))
        f.seek(info.header_offset + 30 + name_len + extra_len + info.file_size // 2)
        f.write(b"\xff" * 16)


def test_bytes_flipped_in_the_newest_checkpoint_fall_back_to_the_previous(
    bert_data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert _train(bert_data, out, 10) == 0
    ckpts = out / "checkpoints"
    _flip_bytes_inside_a_tensor(checkpoint.checkpoint_path(ckpts, 10))
    found = checkpoint.load_latest(ckpts)
    assert found is not None and found[1]["step"] == 5
    assert _train(bert_data, out, 12) == 0
    assert summary(out)["resumed_from_step"] == 5
    assert (ckpts / f"{checkpoint.CORRUPT_PREFIX}ckpt-00000010.pt").is_file()  # kept aside


def test_fresh_checkpoints_survive_when_every_old_one_is_unreadable(
    bert_data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert _train(bert_data, out, 20, "--keep-checkpoints", "2") == 0
    ckpts = out / "checkpoints"
    for _, path in checkpoint.complete_checkpoints(ckpts):
        path.write_bytes(path.read_bytes()[:1000])  # truncated: unreadable by any reader
    assert _train(bert_data, out, 10, "--keep-checkpoints", "2") == 0
    assert summary(out)["resumed_from_step"] == 0
    assert [s for s, _ in checkpoint.complete_checkpoints(ckpts)] == [5, 10]


def test_manifest_records_size_and_checksum(tmp_path: Path) -> None:
    path = checkpoint.checkpoint_path(tmp_path, 7)
    checkpoint.write(path, 7, lambda temp: temp.write_bytes(b"payload"))
    manifest = json.loads(checkpoint.manifest_path(path).read_text())
    assert manifest["step"] == 7 and manifest["bytes"] == 7
    assert manifest["sha256"] == hashlib.sha256(b"payload").hexdigest()
    checkpoint.verify(path)
    path.write_bytes(b"paylOad")
    with pytest.raises(ValueError, match="SHA-256"):
        checkpoint.verify(path)


def test_resume_with_a_new_lr_applies_it_and_says_so(bert_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(out)]
    args += ["--max-steps", "10", "--checkpoint-every", "5", "--log-every", "1"]
    first = run_trainer([*args, "--lr", "0.02", "--max-steps", "5"])
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_trainer([*args, "--lr", "0.01"])
    assert again.returncode == 0, again.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    by_step = {r["step"]: r["lr"] for r in records}
    # Linear decay without warm-up: lr * (10 - step) / 10 after `step` scheduler steps.
    assert by_step[6] == pytest.approx(0.01 * (10 - 6) / 10)
    (changed,) = events(again.stdout, "lr_changed")
    assert changed == {"event": "lr_changed", "step": 5, "checkpoint_lr": 0.02, "lr": 0.01}
