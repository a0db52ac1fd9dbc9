"""Real PyTorch/XLA (PJRT_DEVICE=CPU) runs of the trainer: graph counts settle after warm-up.

Run by `make test-xla` in .venv-xla (torch 2.9.0 + torch-xla 2.9.0); skipped where torch_xla is
absent, so `make test` never runs them. Multi-process XLA does not work on CPU (harness §5): the
collectives are tested with gloo in tests/trainer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch_xla")

import torch
import torch_xla.debug.metrics as met

from trainium_trainer import checkpoint
from trainium_trainer.config import parse_args
from trainium_trainer.device import make_runtime
from trainium_trainer.loop import train


def _args(setup: tuple[Path, Path], out: Path, steps: int) -> list[str]:
    data, model = setup
    return [
        "bert-pretrain",
        *("--data-dir", str(data), "--output-dir", str(out), "--model-config", str(model)),
        *("--max-steps", str(steps), "--batch-size", "8", "--grad-accum-steps", "2"),
        *("--lr", "0.05", "--warmup-steps", "3", "--log-every", "5", "--resume", "never"),
        *("--precision", "fp32"),
    ]


def test_compiled_graph_count_stops_growing(setup: tuple[Path, Path], tmp_path: Path) -> None:
    cfg = parse_args([*_args(setup, tmp_path, 30), "--checkpoint-every", "10"])
    rt = make_runtime("xla")
    assert rt.kind == "xla" and str(rt.device).startswith("xla")
    compiles: list[int] = []
    result = train(
        cfg, rt, on_step=lambda step: compiles.append(met.counter_value("UncachedCompile"))
    )
    assert len(compiles) == 30
    warm = 5
    assert compiles[warm:] == [compiles[warm]] * (30 - warm), compiles
    assert met.metric_data("CompileTime")[0] == compiles[-1]
    assert [s for s, _ in checkpoint.complete_checkpoints(cfg.checkpoint_dir)] == [10, 20, 30]
    saved = checkpoint.load(checkpoint.checkpoint_path(cfg.checkpoint_dir, 30))
    assert all(t.device.type == "cpu" for t in saved["model"].values())
    assert result["final_loss"] < result["initial_loss"]


def test_same_step_code_runs_on_both_device_layers(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    losses = {}
    for kind in ("cpu", "xla"):
        out = tmp_path / kind
        result = train(parse_args(_args(setup, out, 6)), make_runtime(kind))
        assert result["device"] == kind
        losses[kind] = (result["initial_loss"], result["final_loss"])
    torch.testing.assert_close(losses["xla"], losses["cpu"], atol=2e-2, rtol=1e-2)
