"""XLA fidelity (PJRT_DEVICE=CPU): tied weights, batched checkpoint transfers, no per-step sync.

Run by `make test-xla` in .venv-xla; skipped where torch_xla is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("torch_xla")

import torch
import torch_xla.debug.metrics as met

from trainium_trainer import contract, persist
from trainium_trainer.config import parse_args
from trainium_trainer.device import make_runtime
from trainium_trainer.loop import build_trainer, train


def _args(setup: tuple[Path, Path], out: Path, steps: int, *extra: str) -> list[str]:
    data, model = setup
    return [
        "bert-pretrain",
        *("--data-dir", str(data), "--output-dir", str(out), "--model-config", str(model)),
        *("--max-steps", str(steps), "--batch-size", "8", "--resume", "never"),
        *("--precision", "fp32", "--lr", "0.01", *extra),
    ]


def _transfers() -> int:
    """Device-to-host transfers so far (each `.cpu()`/`.item()` or one batched copy)."""
    data = met.metric_data("TransferFromDeviceTime")
    return int(data[0]) if data else 0


def test_parameter_count_is_the_same_on_cpu_and_xla(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    counts = {}
    for kind in ("cpu", "xla"):
        args = [*_args(setup, tmp_path / kind, 2), "--model-config", "tiny"]  # 2 layers
        t = build_trainer(parse_args(args), make_runtime(kind))
        params = list(t.model.parameters())
        counts[kind] = (len(params), sum(p.numel() for p in params))
        decoder = t.model.cls.predictions.decoder  # type: ignore[union-attr]
        assert decoder.weight is t.model.bert.embeddings.word_embeddings.weight, kind  # type: ignore[union-attr]
        assert decoder.bias is t.model.cls.predictions.bias, kind  # type: ignore[union-attr]
    print(f"parameters cpu={counts['cpu']} xla={counts['xla']}")
    assert counts["xla"] == counts["cpu"]


def test_checkpoint_moves_tensors_to_the_host_in_one_batch(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    rt = make_runtime("xla")
    t = build_trainer(parse_args(_args(setup, tmp_path, 2)), rt)
    for p in t.model.parameters():  # one update, so the optimizer holds its moments too
        p.grad = torch.zeros_like(p)
    t.optimizer.step()
    rt.mark_step()
    tensors = len(t.model.state_dict()) + 3 * len(list(t.model.parameters()))
    before = _transfers()
    persist.save(t, 1)
    moved = _transfers() - before
    print(f"checkpoint of {tensors} tensors: {moved} device-to-host transfers")
    assert moved == 1


def test_no_host_read_between_log_steps(setup: tuple[Path, Path], tmp_path: Path) -> None:
    """The NaN check and transformers' attention masks never read the device per step."""
    reads: dict[int, int] = {}
    cfg = parse_args(_args(setup, tmp_path, 20, "--log-every", "10"))
    train(cfg, make_runtime("xla"), on_step=lambda step: reads.setdefault(step, _transfers()))
    per_step = [reads[s + 1] - reads[s] for s in range(2, 9)]  # steps 3..9: no log, no save
    print(f"device-to-host transfers per plain step: {per_step}")
    assert per_step == [0] * 7


def test_xla_runtime_exports_the_compiler_defaults() -> None:
    make_runtime("xla")
    assert "--model-type=transformer" in os.environ[contract.ENV_NEURON_CC_FLAGS].split()
