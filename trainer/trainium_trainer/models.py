"""Model configs (named sizes or a local JSON file) and the transformers models of each task.

Models are built from configs, never downloaded: pretraining starts from random weights, and the
cluster needs no hub egress (AWS's script called from_pretrained in every rank). Fine-tuning
starts from --pretrained: a local directory, or a hub id already in the $HF_HOME cache.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import nn

from trainium_trainer.config import MODEL_SIZES, UsageError

# hidden, layers, heads, intermediate: BERT's published sizes, plus a test-sized "tiny".
SIZES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (64, 2, 2, 256),
    "mini": (256, 4, 4, 1024),
    "small": (512, 4, 8, 2048),
    "base": (768, 12, 12, 3072),
    "large": (1024, 24, 16, 4096),
}
TINY_VOCAB = 1024
BERT_VOCAB = 30522  # bert-base/large-uncased, the vocabulary of AWS's tokenized wikicorpus shards


def load_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """(named size, config overrides) from `--model-config` (a size name or a JSON file)."""
    if spec in MODEL_SIZES:
        return spec, {}
    path = Path(spec)
    if not path.is_file():
        sizes = "|".join(MODEL_SIZES)
        raise UsageError(f"--model-config {spec!r} is neither {sizes} nor a JSON file")
    try:
        overrides = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"model config {path}: not valid JSON ({exc})") from exc
    if not isinstance(overrides, dict):
        raise UsageError(f"model config {path}: expected a JSON object")
    size = overrides.pop("size", "tiny")
    if size not in SIZES:
        raise UsageError(f"model config {path}: unknown size {size!r}")
    return size, overrides


def _check(config: Any, hidden: int, heads: int, positions: int, seq_len: int) -> Any:
    """Reject configs that would only fail later, deep inside a forward pass."""
    if hidden <= 0 or heads <= 0 or hidden % heads:
        raise UsageError(f"model config: hidden size {hidden} is not a multiple of {heads} heads")
    if positions < seq_len:
        raise UsageError(f"model config: {positions} positions < --seq-len {seq_len}")
    if config.vocab_size <= 0:
        raise UsageError(f"model config: vocab size {config.vocab_size} must be positive")
    return config


def bert_config(spec: str, seq_len: int, vocab_size: int | None = None, **extra: Any) -> Any:
    """A BertConfig; eager attention keeps the traced graph free of data-dependent branches."""
    from transformers import BertConfig

    size, overrides = load_spec(spec)
    hidden, layers, heads, inter = SIZES[size]
    base = {
        "vocab_size": vocab_size or (TINY_VOCAB if size == "tiny" else BERT_VOCAB),
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": inter,
        "max_position_embeddings": max(512, seq_len),
        **extra,
        **overrides,
    }
    try:
        config = BertConfig(**base, attn_implementation="eager")  # type: ignore[call-arg]
    except (TypeError, ValueError) as exc:
        raise UsageError(f"model config: {exc}") from exc
    h, n, p = config.hidden_size, config.num_attention_heads, config.max_position_embeddings
    return _check(config, h, n, p, seq_len)


def gpt2_config(spec: str, seq_len: int, vocab_size: int) -> Any:
    """A small GPT-2 config with the same named sizes."""
    from transformers import GPT2Config

    size, overrides = load_spec(spec)
    hidden, layers, heads, inter = SIZES[size]
    base = {
        "vocab_size": vocab_size,
        "n_embd": hidden,
        "n_layer": layers,
        "n_head": heads,
        "n_inner": inter,
        "n_positions": max(seq_len, 128),
        **overrides,
    }
    try:
        config = GPT2Config(**base, attn_implementation="eager")  # type: ignore[call-arg]
    except (TypeError, ValueError) as exc:
        raise UsageError(f"model config: {exc}") from exc
    return _check(config, config.n_embd, config.n_head, config.n_positions, seq_len)


def bert_pretraining(config: Any) -> nn.Module:
    """BERT with the MLM and NSP heads (phase 1 pretraining)."""
    from transformers import BertForPreTraining

    return BertForPreTraining(config)


def bert_classifier(config: Any) -> nn.Module:
    """BERT with a sequence-classification head."""
    from transformers import BertForSequenceClassification

    return BertForSequenceClassification(config)


def gpt2_lm(config: Any) -> nn.Module:
    """GPT-2 with its LM head."""
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel(config)


def label_config(names: list[str]) -> dict[str, Any]:
    """Label names in the model config, so the saved model says what its outputs mean."""
    return {
        "num_labels": len(names),
        "id2label": dict(enumerate(names)),
        "label2id": {name: i for i, name in enumerate(names)},
    }


def pretrained(kind: str, path: str, allow_download: bool, labels: list[str] | None = None) -> Any:
    """A transformers model from a local dir or the $HF_HOME cache (the hub only if allowed)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    kwargs: dict[str, Any] = {"local_files_only": not allow_download}
    kwargs["attn_implementation"] = "eager"  # no data-dependent SDPA branches in the XLA graph
    try:
        if kind == "causal-lm":
            return AutoModelForCausalLM.from_pretrained(path, **kwargs)
        extra = label_config(labels or [])
        return AutoModelForSequenceClassification.from_pretrained(
            path, **kwargs, **extra, ignore_mismatched_sizes=True
        )
    except (OSError, ValueError) as exc:
        hint = "" if allow_download else " (offline: pass --allow-download for the hub)"
        raise UsageError(f"--pretrained {path}: {str(exc).splitlines()[0]}{hint}") from exc
