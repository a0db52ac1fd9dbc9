"""Shared setup of the XLA tests: the trainer on sys.path, PJRT on CPU, shards and a model file.

No torch_xla import here: each module skips itself where torch_xla is absent (`make test`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("PJRT_DEVICE", "CPU")
TRAINER_SRC = Path(__file__).resolve().parents[2] / "trainer"
if str(TRAINER_SRC) not in sys.path:
    sys.path.insert(0, str(TRAINER_SRC))

# One layer and no dropout: compiling on CPU costs ~30 s per graph, and tests share graphs.
MODEL = {
    "size": "tiny",
    "num_hidden_layers": 1,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}


@pytest.fixture(scope="session")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Shards and a model-config file shared by the XLA tests."""
    from trainium_trainer.synth import write_bert_shards

    root = tmp_path_factory.mktemp("xla")
    write_bert_shards(root / "data", shards=2, samples_per_shard=64, seq_len=64, seed=0)
    (root / "model.json").write_text(json.dumps(MODEL), encoding="utf-8")
    return root / "data", root / "model.json"
