"""PyTorch/XLA resumes a checkpoint of another world size at the same global batch (issue 28).

Multi-process XLA does not run on CPU (harness §5), so 2 gloo processes (the CPU runtime, the
same loop and data code) write the checkpoint, and one XLA process continues it with twice the
accumulation: the data continues at the samples consumed, and the loss curve and the weights
follow the unbroken 2-process run within float summation order (measured: 3.6e-7 at most).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch_xla")

import torch

from trainium_trainer import checkpoint, contract
from trainium_trainer.config import parse_args
from trainium_trainer.device import make_runtime
from trainium_trainer.loop import train

TRAINER_SRC = Path(__file__).resolve().parents[2] / "trainer"
STEPS, AT = 6, 3


def _args(setup: tuple[Path, Path], out: Path) -> list[str]:
    data, model = setup
    return [
        "bert-pretrain",
        *("--data-dir", str(data), "--output-dir", str(out), "--model-config", str(model)),
        *("--max-steps", str(STEPS), "--batch-size", "4", contract.GLOBAL_BATCH_SIZE_FLAG, "8"),
        *("--lr", "0.05", "--warmup-steps", "2", "--log-every", "1", "--precision", "fp32"),
        *("--checkpoint-every", str(AT), "--optimizer", "lamb"),
    ]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _losses(out: Path) -> dict[int, float]:
    lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines)}


def test_one_xla_process_continues_what_two_gloo_processes_checkpointed(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    gloo, xla = tmp_path / "gloo", tmp_path / "xla"
    launch = ["-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2"]
    launch += ["--master_addr", "127.0.0.1", "--master_port", str(_port())]
    cmd = [sys.executable, *launch, "-m", "trainium_trainer", *_args(setup, gloo)]
    env = {**os.environ, "PYTHONPATH": str(TRAINER_SRC), contract.ENV_BACKEND: "cpu"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = checkpoint.checkpoint_path(gloo / "checkpoints", AT)
    (xla / "checkpoints").mkdir(parents=True)
    for path in (saved, checkpoint.manifest_path(saved)):
        shutil.copy(path, xla / "checkpoints" / path.name)
    result = train(parse_args(_args(setup, xla)), make_runtime("xla"))
    assert result["device"] == "xla" and result["resumed_from_step"] == AT
    assert (result["world_size"], result["grad_accum_steps"]) == (1, 2)
    assert result["samples"] == STEPS * 8
    got, want = _losses(xla), _losses(gloo)
    assert sorted(got) == list(range(AT + 1, STEPS + 1))
    for step, loss in got.items():
        assert loss == pytest.approx(want[step], rel=1e-4, abs=1e-5), step
    a = checkpoint.load(checkpoint.checkpoint_path(xla / "checkpoints", STEPS))["model"]
    b = checkpoint.load(checkpoint.checkpoint_path(gloo / "checkpoints", STEPS))["model"]
    worst = max(float((a[k] - v).abs().max()) for k, v in b.items())
    print(f"largest weight difference, XLA (1 process) vs gloo (2): {worst:.2e}")
    for name, value in b.items():
        torch.testing.assert_close(a[name], value, atol=1e-5, rtol=1e-4, msg=name)
