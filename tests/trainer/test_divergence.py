"""A diverged loss stops the run: exit 3, one line naming the step, no non-finite checkpoint."""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch
from trainer_utils import events, run_trainer

from trainium_trainer import checkpoint, contract

NON_FINITE = re.compile(
    r"^error: (non-finite loss (nan|inf|-inf) \(mean over ranks\)|\d+ non-finite weights) "
    r"at step (\d+); nothing saved from it \(latest good checkpoint: (step \d+|none)\)$"
)


def test_diverging_run_exits_3_and_never_saves_a_non_finite_checkpoint(
    bert_data: Path, tmp_path: Path
) -> None:
    # lr 1e4 without clipping blows the tiny model up within a few steps.
    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(tmp_path)]
    args += ["--max-steps", "30", "--lr", "1e4", "--max-grad-norm", "0", "--precision", "fp32"]
    proc = run_trainer([*args, "--log-every", "10", "--checkpoint-every", "1"])
    assert proc.returncode == contract.EXIT_DIVERGED, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    match = NON_FINITE.match(line)
    assert match, line
    step = int(match.group(3))
    saved = [s for s, _ in checkpoint.complete_checkpoints(tmp_path / "checkpoints")]
    assert saved == list(range(1, step)), (saved, step)
    assert [e["step"] for e in events(proc.stdout, "checkpoint")][-1:] == saved[-1:]
    for _, path in checkpoint.complete_checkpoints(tmp_path / "checkpoints"):
        state = checkpoint.load(path)
        assert math.isfinite(state["losses"]["final"])
        assert all(torch.isfinite(t).all() for t in state["model"].values()), path.name
