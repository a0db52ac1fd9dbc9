"""The three tasks: each pairs the data shards with a model whose forward returns a loss.

Batch keys equal the model's forward arguments, so one step function (`model(**batch).loss`)
serves every task.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from trainium_trainer import data, models, text
from trainium_trainer.config import RunConfig, UsageError

Batch = dict[str, torch.Tensor]


@dataclasses.dataclass
class Task:
    """A task: its model (unwrapped, on CPU) and its data shards (the same on every rank)."""

    name: str
    model: nn.Module
    shards: list[data.Shard]
    vocab_size: int
    #: What save_pretrained writes beside the model (text tasks), and the held-out split.
    tokenizer: Any = None
    eval_arrays: data.Arrays | None = None
    #: Where the tokenizer came from (summary.json says it); None: the export has none.
    tokenizer_source: str | None = None

    def batches(self, cfg: RunConfig, rank: int, world: int, start: int) -> Iterator[Batch]:
        """This rank's torch batches from global sample `start` on; the first is checked at once."""
        order = data.GlobalOrder(self.shards, cfg.seed)
        b, accum = cfg.batch_size, cfg.grad_accum_steps
        stream = data.rank_stream(order, b, world, rank, accum, start)
        first = next(stream)
        top = int(first["input_ids"].max())
        if top >= self.vocab_size:
            raise UsageError(f"token id {top} >= model vocab size {self.vocab_size}")
        return itertools.chain([_to_torch(first)], map(_to_torch, stream))


def _to_torch(arrays: data.Arrays) -> Batch:
    """numpy to (CPU) torch, without copies."""
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}


def _bert_pretrain(cfg: RunConfig) -> Task:
    """BERT phase 1 (MLM + NSP) on AWS-layout HDF5 shards."""
    shards = data.bert_shards(cfg.data_dir, cfg.seq_len)
    tok, source = text.pretraining_tokenizer(cfg.tokenizer, cfg.data_dir, cfg.allow_download)
    config = models.bert_config(cfg.model_config, cfg.seq_len)
    if tok is not None and tok.vocab_size > config.vocab_size:
        raise UsageError(
            f"tokenizer {source} has {tok.vocab_size} tokens, the model only {config.vocab_size}"
        )
    model = models.bert_pretraining(config)
    return Task(cfg.task, model, shards, config.vocab_size, tok, tokenizer_source=source)


def _text_classification(cfg: RunConfig) -> Task:
    """BERT (or --pretrained) sequence classification on local CSV/JSONL."""
    texts, labels = text.read_labelled(cfg.data_dir)
    names = sorted(set(labels))
    tok = text.load_tokenizer(cfg.tokenizer or cfg.pretrained, texts, "word", cfg.allow_download)
    arrays = text.classification_arrays(texts, labels, tok, cfg.seq_len)
    if cfg.pretrained:
        model = models.pretrained("classification", cfg.pretrained, cfg.allow_download, names)
    else:
        extra = models.label_config(names)
        config = models.bert_config(cfg.model_config, cfg.seq_len, tok.vocab_size, **extra)
        model = models.bert_classifier(config)
    return _text_task(cfg, model, tok, arrays)


def _causal_lm(cfg: RunConfig) -> Task:
    """GPT-2 (or --pretrained) next-token prediction on local .txt files."""
    docs = text.read_corpus(cfg.data_dir)
    tok = text.load_tokenizer(cfg.tokenizer or cfg.pretrained, docs, "char", cfg.allow_download)
    arrays = text.lm_arrays(docs, tok, cfg.seq_len)
    if cfg.pretrained:
        model = models.pretrained("causal-lm", cfg.pretrained, cfg.allow_download)
    else:
        model = models.gpt2_lm(models.gpt2_config(cfg.model_config, cfg.seq_len, tok.vocab_size))
    return _text_task(cfg, model, tok, arrays)


def _text_task(cfg: RunConfig, model: nn.Module, tok: Any, arrays: data.Arrays) -> Task:
    """Hold out the evaluation split; the rest is one shard that every rank reads from."""
    vocab = int(model.get_input_embeddings().num_embeddings)  # type: ignore[operator]
    if tok.vocab_size > vocab:
        raise UsageError(f"tokenizer has {tok.vocab_size} tokens, the model only {vocab}")
    train, held_out = data.split_rows(arrays, cfg.eval_fraction, cfg.seed)
    shards = [data.memory_shard(train, cfg.task)]
    source = cfg.tokenizer or cfg.pretrained or "built-in"
    return Task(cfg.task, model, shards, vocab, tok, held_out, source)


BUILDERS: dict[str, Callable[[RunConfig], Task]] = {
    "bert-pretrain": _bert_pretrain,
    "text-classification": _text_classification,
    "causal-lm": _causal_lm,
}


def build_task(cfg: RunConfig) -> Task:
    """Data first (cheap checks fail fast), then the model, seeded so all ranks start equal."""
    if cfg.task not in BUILDERS:
        raise UsageError(f"unknown task {cfg.task!r}")
    torch.manual_seed(cfg.seed)
    return BUILDERS[cfg.task](cfg)
