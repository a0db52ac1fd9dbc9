"""Checkpoint stall: how long a step waits for a checkpoint, synchronous save vs background write.

The state is the causal-lm example's (examples/trn2-causal-lm.yaml's args: GPT-2 `base`, seq len
2048, bf16, AdamW with fp32 moments; the char tokenizer of a generated corpus, as the example's
text files give), built by the trainer on CPU. Each round times persist.save on the same Trainer
three ways, in rotating order so load from other work falls on all: `sync` (--no-checkpoint-async:
to host, torch.save, fsync, SHA-256, manifest, prune, report), `async` (the default: a host copy,
then the writer thread) and `async+local` (--local-checkpoint-dir: the node-local tier is
written first, in the background too). The stall is the time save() holds the step; `landed` is
until the checkpoint is durable (flush). The claim: median async stall / median sync stall. Both
write to this machine's disk (a job's shared volume, FSx, is slower: the sync stall only grows).
Between checkpoints the write has landed (the example checkpoints every 500 steps); a checkpoint
due while the previous write is in flight waits for it. Usage:

    python bench/checkpoint_stall.py [--rounds 5] [--model-config base --seq-len 2048]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import common
import yaml

from trainium_trainer import persist
from trainium_trainer.config import parse_args
from trainium_trainer.device import make_runtime
from trainium_trainer.loop import Trainer, build_trainer

EXAMPLE = common.REPO / "examples" / "trn2-causal-lm.yaml"
MODES = ("sync", "async", "async+local")


def example_args(corpus: Path, out: Path, model: str | None, seq_len: int | None) -> list[str]:
    """The example's trainer args with a local corpus and output dir (and smoke sizes if given)."""
    args = list(yaml.safe_load(EXAMPLE.read_text())["spec"]["args"])
    replace = {"--data-dir": str(corpus), "--model-config": model, "--seq-len": seq_len}
    for flag, value in replace.items():
        if value is not None and flag in args:
            args[args.index(flag) + 1] = str(value)
    return [*args, "--output-dir", str(out), "--precision", "bf16", "--backend", "cpu"]


def write_corpus(path: Path, words: int) -> None:
    """Random words over a small alphabet: enough text for the example's sequence length."""
    rng = random.Random(1)
    vocab = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 8)))
             for _ in range(500)]  # fmt: skip
    path.mkdir(parents=True, exist_ok=True)
    (path / "corpus.txt").write_text(" ".join(rng.choices(vocab, k=words)), encoding="utf-8")


def build(tmp: Path, model: str | None, seq_len: int | None, words: int) -> Trainer:
    """A Trainer with the example's model and optimizer state (moments set up, as at step 1)."""
    write_corpus(tmp / "corpus", words)
    cfg = parse_args(example_args(tmp / "corpus", tmp / "out", model, seq_len))
    with contextlib.redirect_stdout(io.StringIO()):
        t = build_trainer(cfg, make_runtime("cpu"))
    init = getattr(t.optimizer, "init_state", None)
    if callable(init):
        init()
    return t


def measure(t: Trainer, mode: str, step: int, local: Path) -> tuple[float, float]:
    """(stall, landed) seconds of one checkpoint in one mode."""
    t.cfg = dataclasses.replace(
        t.cfg,
        checkpoint_async=mode != "sync",
        local_checkpoint_dir=local if mode == "async+local" else None,
    )
    with contextlib.redirect_stdout(io.StringIO()):  # the checkpoint events
        began = time.perf_counter()
        persist.save(t, step)
        stall = time.perf_counter() - began
        persist.flush(t)
        landed = time.perf_counter() - began
    return stall, landed


def state_mb(t: Trainer) -> float:
    """Bytes of the model's and optimizer's tensors, in MB."""
    import torch
    from torch.utils._pytree import tree_flatten

    state = {"model": t.model.state_dict(), "optimizer": t.optimizer.state_dict()}
    leaves = [x for x in tree_flatten(state)[0] if isinstance(x, torch.Tensor)]
    return sum(x.numel() * x.element_size() for x in leaves) / 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=5, help="rounds of one checkpoint per mode")
    p.add_argument("--model-config", default=None, help="default: the example's (base)")
    p.add_argument("--seq-len", type=int, default=None, help="default: the example's (2048)")
    p.add_argument("--words", type=int, default=60_000, help="words in the generated corpus")
    args = common.parse(p, argv, rounds=2, model_config="tiny", seq_len=64, words=2_000)
    samples: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as tmp:
        t = build(Path(tmp), args.model_config, args.seq_len, args.words)
        step = 0
        for round_ in range(args.rounds):
            for mode in MODES[round_ % 3 :] + MODES[: round_ % 3]:
                step += 1
                samples[mode].append(measure(t, mode, step, Path(tmp) / "local"))
        t.writer.close()
    sync = statistics.median(s for s, _ in samples["sync"])
    rows = [
        [mode, statistics.median(s for s, _ in samples[mode]) * 1e3,
         statistics.median(w for _, w in samples[mode]) * 1e3,
         statistics.median(s for s, _ in samples[mode]) / sync]
        for mode in MODES
    ]  # fmt: skip
    cfg = t.cfg
    print(f"state: {state_mb(t):,.0f} MB (causal-lm {cfg.model_config}, seq len {cfg.seq_len}, "
          f"{cfg.precision}, {cfg.optimizer}); {args.rounds} rounds")  # fmt: skip
    per_round = [[r + 1, *(samples[m][r][0] * 1e3 for m in MODES)] for r in range(args.rounds)]
    print(common.table(["round", *(f"{m} stall ms" for m in MODES)], per_round))
    print()
    header = ["mode", "median stall ms", "median landed ms", "stall / sync stall"]
    print(common.table(header, rows))
    print(f"\n(load average at the end: {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
