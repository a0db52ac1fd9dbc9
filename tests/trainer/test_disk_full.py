"""A full disk during a checkpoint: one line with the path and the free space, exit 2 (#20)."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_utils import FAST

from trainium_trainer import checkpoint, persist
from trainium_trainer.__main__ import main

#: What torch.save raises when the disk fills mid-write (torch/csrc/.../inline_container.cc).
INLINE = (
    "[enforce fail at inline_container.cc:672] . unexpected pos 1344 vs 1238; "
    "PytorchStreamWriter failed writing file data/3: file write failed"
)


@pytest.mark.parametrize("how", ["torch-save", "oserror"])
def test_disk_full_keeps_the_previous_checkpoint_and_says_where(
    how: str,
    bert_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_save = torch.save
    calls = []

    def save(obj: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(target)
        if len(calls) == 1:
            return real_save(obj, target, *args, **kwargs)
        Path(target).write_bytes(b"partial")  # what a write that ran out of space leaves
        if how == "oserror":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise RuntimeError(INLINE)

    monkeypatch.setattr(persist.torch, "save", save)
    out = tmp_path / "out"
    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(out)]
    args += ["--max-steps", "6", "--checkpoint-every", "2", "--log-every", "1", *FAST]
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("error: "), err
    line = err[0]
    target = checkpoint.checkpoint_path(out / "checkpoints", 4)
    assert str(target) in line and "free" in line and "step 2" in line, line
    assert [s for s, _ in checkpoint.complete_checkpoints(out / "checkpoints")] == [2]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "ckpt-00000002.json",
        "ckpt-00000002.pt",
    ]
    assert checkpoint.load(checkpoint.checkpoint_path(out / "checkpoints", 2))["step"] == 2
