"""After training: evaluate the held-out split, and save a model transformers can load.

The export is `save_pretrained` (config with label names, safetensors weights) plus the tokenizer
(bert-pretrain: the vocabulary its shards were made with, when it is known), so
`AutoModel*.from_pretrained(<output>/model)` and `AutoTokenizer` work with no trainer code.
"""

from __future__ import annotations

import math
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainium_trainer import text
from trainium_trainer.config import RunConfig
from trainium_trainer.data import Arrays
from trainium_trainer.device import Runtime
from trainium_trainer.tasks import Task

MODEL_DIR = "model"


def _eval_batches(arrays: Arrays, size: int) -> Iterator[dict[str, torch.Tensor]]:
    """Fixed-size batches in order, then the remainder (one more graph on XLA, once per run)."""
    count = len(next(iter(arrays.values())))
    for start in range(0, count, size):
        rows = slice(start, start + size)
        yield {k: torch.from_numpy(np.ascontiguousarray(v[rows])) for k, v in arrays.items()}


@torch.no_grad()
def evaluate(task: Task, cfg: RunConfig, rt: Runtime) -> dict[str, Any]:
    """Loss (and accuracy or perplexity) on the held-out rows; sums stay on device until the end."""
    if task.eval_arrays is None:
        return {}
    model = task.model
    model.eval()
    loss_sum = torch.zeros((), device=rt.device)
    correct = torch.zeros((), device=rt.device)
    rows = 0
    for cpu_batch in _eval_batches(task.eval_arrays, cfg.batch_size):
        batch = {k: v.to(rt.device) for k, v in cpu_batch.items()}
        out = model(**batch)
        n = len(cpu_batch["input_ids"])
        loss_sum = loss_sum + out.loss.detach().float() * n
        if task.name == "text-classification":
            correct = correct + (out.logits.argmax(-1) == batch["labels"]).sum().float()
        rows += n
        rt.mark_step()
    model.train()
    loss = float(loss_sum.item()) / rows
    results: dict[str, Any] = {"eval_samples": rows, "eval_loss": loss}
    if task.name == "text-classification":
        results["eval_accuracy"] = float(correct.item()) / rows
    elif task.name == "causal-lm":
        results["eval_perplexity"] = math.exp(min(loss, 700.0))
    return results


def save_pretrained(task: Task, cfg: RunConfig, rt: Runtime) -> Path:
    """<output>/model in Hugging Face format, replaced whole (written aside, then renamed)."""
    final = cfg.output_dir / MODEL_DIR
    staging = cfg.output_dir / f".{MODEL_DIR}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    state = rt.to_cpu(task.model.state_dict())  # one batched transfer on XLA
    task.model.save_pretrained(str(staging), state_dict=state, safe_serialization=True)  # type: ignore[operator]
    tokenizer = _transformers_tokenizer(task.tokenizer)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(staging))
    else:  # bert-pretrain's shards are ids only: say what is missing and how to add it
        print(
            f"note: {final} has no tokenizer: no {text.VOCAB_FILE} in {cfg.data_dir} and no "
            "--tokenizer; pass --tokenizer with the vocabulary the shards were made with "
            "(AWS's tutorial data: bert-large-uncased's vocab.txt)",
            file=sys.stderr,
            flush=True,
        )
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    return final


def _transformers_tokenizer(tok: Any) -> Any:
    """The transformers tokenizer behind ours (built-in vocabularies are converted)."""
    if tok is None:
        return None
    if hasattr(tok, "to_transformers"):
        return tok.to_transformers()
    return tok.tok
