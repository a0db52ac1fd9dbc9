"""The examples train the way AWS does and never lose a run (read through the trainer's parser)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainium_operator.api.instances import instance_type
from trainium_trainer import contract
from trainium_trainer.config import RunConfig, parse_args

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _jobs() -> list[tuple[str, dict]]:
    """(file name, spec) of every example that runs this trainer."""
    found = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))  # kueue-setup: several
        doc = docs[0] if len(docs) == 1 else {}
        if doc.get("kind") != "TrainiumJob":  # tensorboard.yaml goes with a job
            continue
        spec = doc["spec"]
        if "script" not in spec and spec.get("module", contract.DEFAULT_MODULE) == (
            contract.DEFAULT_MODULE
        ):
            found.append((path.name, spec))
    return found


def _config(spec: dict) -> RunConfig:
    return parse_args([str(a) for a in spec["args"]])


def test_the_trainer_examples_are_found() -> None:
    assert {"bert-large-pretrain.yaml", "bert-claim.yaml"} <= {name for name, _ in _jobs()}


@pytest.mark.parametrize(("name", "spec"), _jobs(), ids=lambda v: v if isinstance(v, str) else "")
def test_example_checkpoints_periodically(name: str, spec: dict) -> None:
    cfg = _config(spec)
    assert cfg.checkpoint_every > 0, f"{name}: no --checkpoint-every"
    assert cfg.checkpoint_minutes > 0, name


@pytest.mark.parametrize("name", ["bert-large-pretrain.yaml", "bert-claim.yaml"])
def test_bert_large_examples_follow_aws_recipe(name: str) -> None:
    spec = dict(_jobs())[name]
    cfg = _config(spec)
    assert (cfg.optimizer, cfg.lr, cfg.warmup_steps, cfg.max_steps) == ("adamw", 4e-4, 2000, 28125)
    assert (cfg.model_config, cfg.seq_len, cfg.batch_size) == ("large", 128, 16)
    ranks = spec["nodes"] * instance_type(spec["instanceType"]).neuron_cores
    # The tutorial's global batch: batch_size x world_size x grad_accum_usteps = 16 x 64 x 32.
    assert cfg.batch_size * ranks * cfg.grad_accum_steps == 32768
