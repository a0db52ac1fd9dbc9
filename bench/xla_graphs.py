"""XLA graph counts vs steps, per task, with and without grad accumulation and a checkpoint.

Runs in .venv-xla (torch-xla on PJRT CPU; `make test-xla` builds it). For each configuration
it trains N steps and records how many graphs torch_xla compiled anew (UncachedCompile) after
every step: the claim is that the count stops growing after warm-up (a growing count means
shape-driven recompiles). All configurations run in one process, in table order, so a row counts
only graphs that no earlier row compiled (0: it reuses every graph compiled before it).
Usage (from the repository root):

    PJRT_DEVICE=CPU .venv-xla/bin/python bench/xla_graphs.py [--steps 12]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("PJRT_DEVICE", "CPU")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "trainer"))

import common  # noqa: E402
import torch_xla.debug.metrics as met  # noqa: E402

from trainium_trainer.config import parse_args  # noqa: E402
from trainium_trainer.device import make_runtime  # noqa: E402
from trainium_trainer.loop import train  # noqa: E402
from trainium_trainer.synth import write_bert_shards  # noqa: E402

# One layer, no dropout: each graph compiles in tens of seconds on CPU (see tests/xla).
MODEL = {"size": "tiny", "num_hidden_layers": 1, "hidden_dropout_prob": 0.0,
         "attention_probs_dropout_prob": 0.0}  # fmt: skip


#: (grad accumulation, checkpoint every): the table's configurations, in its order.
CONFIGS = ((1, 0), (2, 0), (1, 4), (2, 4))


def data_for(task: str, root: Path) -> Path:
    """Synthetic data in each task's own format (HDF5 shards, labelled CSV, plain text)."""
    out = root / task
    out.mkdir(parents=True)
    words = [f"w{i}" for i in range(50)]
    lines = [" ".join(words[(i * 7 + j) % 50] for j in range(12)) for i in range(256)]
    if task == "bert-pretrain":
        write_bert_shards(out, shards=2, samples_per_shard=64, seq_len=64, seed=0)
    elif task == "text-classification":
        rows = [f"{line},{'ab'[i % 2]}" for i, line in enumerate(lines)]
        (out / "train.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    else:
        (out / "corpus.txt").write_text("\n".join(lines) + "\n")
    return out


def counts(task: str, data: Path, model: Path, out: Path, steps: int, accum: int,
           ckpt: int) -> list[int]:  # fmt: skip
    args = [task, "--data-dir", str(data), "--output-dir", str(out), "--model-config", str(model),
            "--max-steps", str(steps), "--batch-size", "8", "--grad-accum-steps", str(accum),
            "--checkpoint-every", str(ckpt), "--log-every", "4", "--resume", "never",
            "--precision", "fp32", "--lr", "0.01"]  # fmt: skip
    seen: list[int] = []
    before = met.counter_value("UncachedCompile") or 0
    train(
        parse_args(args),
        make_runtime("xla"),
        on_step=lambda _: seen.append((met.counter_value("UncachedCompile") or 0) - before),
    )
    return seen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--tasks", nargs="+", default=["bert-pretrain", "text-classification",
                                                   "causal-lm"])  # fmt: skip
    p.add_argument("--configs", type=int, default=len(CONFIGS), help="the first N of the table's")
    args = common.parse(p, argv, steps=2, tasks=["bert-pretrain"], configs=1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-xla-") as tmp:
        root = Path(tmp)
        model = root / "model.json"
        model.write_text(json.dumps(MODEL))
        for task in args.tasks:
            data = data_for(task, root)
            for accum, ckpt in CONFIGS[: args.configs]:
                out = root / f"{task}-{accum}-{ckpt}"
                seen = counts(task, data, model, out, args.steps, accum, ckpt)
                rows.append((task, accum, ckpt or "-", seen[0], seen[-1], seen))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| task | grad accum | checkpoint every | new graphs: step 1 | last step | per step |")
    print("|---|---|---|---|---|---|")
    for task, accum, ckpt, first, last, seen in rows:
        print(f"| {task} | {accum} | {ckpt} | {first} | {last} | {' '.join(map(str, seen))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
