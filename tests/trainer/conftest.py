"""Shared fixtures of the trainer suite: the import path and synthetic shards."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

TRAINER_SRC = Path(__file__).resolve().parents[2] / "trainer"
if str(TRAINER_SRC) not in sys.path:
    sys.path.insert(0, str(TRAINER_SRC))

from trainer_utils import NO_DROPOUT  # noqa: E402

from trainium_trainer.synth import write_bert_shards  # noqa: E402


@pytest.fixture(scope="session")
def bert_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four learnable shards of 64 samples, seq_len 64 (the tiny model's shape)."""
    out = tmp_path_factory.mktemp("bert")
    write_bert_shards(out, shards=4, samples_per_shard=64, seq_len=64, seed=1)
    return out


@pytest.fixture
def no_dropout_config(tmp_path: Path) -> Path:
    """A model-config file: tiny, dropout off, so runs differing only in layout compare exactly."""
    path = tmp_path / "tiny-nodropout.json"
    path.write_text(json.dumps(NO_DROPOUT), encoding="utf-8")
    return path
