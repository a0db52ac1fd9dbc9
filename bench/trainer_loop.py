"""Trainer loop overhead: trainium_trainer vs a bare hand-written loop, 1 and 2 processes.

Same task (tiny BERT pretraining on synthetic shards), batch, optimizer (LAMB) and steps, in one
run; the claim is the ratio trainer / bare in steady state (from --warmup to the step before the
last; "to end" also counts the last step, where the trainer writes its final checkpoint). CPU,
plain torch (gloo for 2 processes). The runs are paired and interleaved (bare, trainer, bare,
trainer, ...; 1 then 2 processes within each round), so load from other work on the machine
falls on both sides of a pair. `--loops trainer trainer-perparam` adds the trainer with the
optimizer's per-parameter loop (optim.FOREACH off) to each round: the multi-tensor update's
A/B. Usage:

    python bench/trainer_loop.py [--steps 160 --warmup 10 --pairs 3 --loops trainer ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import common

from trainium_trainer.synth import write_bert_shards

WORKER = str(Path(__file__).with_name("trainer_worker.py"))
#: What can run beside the bare loop (trainer_worker.py's kinds).
LOOPS = ("trainer", "trainer-perparam")


def measure(kind: str, nproc: int, data: Path, out: Path, steps: int, warmup: int) -> dict:
    args = ["bert-pretrain", "--data-dir", str(data), "--output-dir", str(out / f"{kind}{nproc}")]
    args += ["--max-steps", str(steps), "--batch-size", "8", "--precision", "fp32"]
    args += ["--log-every", "20", "--checkpoint-every", "0", "--max-grad-norm", "0"]
    launch = [sys.executable]
    if nproc > 1:
        launch += ["-m", "torch.distributed.run", "--nnodes", "1", f"--nproc_per_node={nproc}"]
        launch += ["--master_addr", "127.0.0.1", "--master_port", str(common.free_port())]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1")
    proc = subprocess.run([*launch, WORKER, kind, str(warmup), *args], env=env,
                          capture_output=True, text=True, timeout=1800, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} x{nproc} failed:\n{proc.stderr[-3000:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith('{"samples_per_s"'))
    return {"loop": kind, "processes": nproc, **json.loads(line)}


def _row(pair: int, nproc: int, r: dict) -> list[object]:
    """One measurement as a table row."""
    ms = r["cpu_s_per_step"] * 1000
    return [pair, r["loop"], nproc, r["samples_per_s"], ms, r["samples_per_s_to_end"]]


def _ratios(trainer: dict, bare: dict) -> list[float]:
    """trainer / bare: samples/s and CPU per step (steady state), and samples/s to the end."""
    keys = ("samples_per_s", "cpu_s_per_step", "samples_per_s_to_end")
    return [trainer[k] / bare[k] for k in keys]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=160)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--pairs", type=int, default=3, help="interleaved bare/trainer pairs per size")
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="sizes to measure")
    p.add_argument("--loops", nargs="+", choices=LOOPS, default=["trainer"],
                   help="what runs beside `bare` in each round, each compared with it; "
                        "trainer-perparam: the trainer with optim.FOREACH off")  # fmt: skip
    # Smoke: 2 processes only (torchrun, DDP, per-rank batches: a superset of 1's code paths).
    args = common.parse(p, argv, steps=4, warmup=1, pairs=1, processes=[2])
    rows, ratios = [], []
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        data = Path(tmp) / "data"
        write_bert_shards(data, shards=4, samples_per_shard=256, seq_len=64, seed=1)
        for pair in range(1, args.pairs + 1):
            for nproc in args.processes:
                out = Path(tmp) / f"pair{pair}"  # a fresh output dir: no resume
                run = {k: measure(k, nproc, data, out, args.steps, args.warmup)
                       for k in ("bare", *args.loops)}  # fmt: skip
                rows += [_row(pair, nproc, r) for r in run.values()]
                ratios += [[nproc, k, pair, *_ratios(run[k], run["bare"])] for k in args.loops]
    header = ["pair", "loop", "processes", "samples/s", "CPU ms/step (rank 0)", "samples/s to end"]
    print(common.table(header, rows))
    print()
    header = ["processes", "loop", "pair", "samples/s loop/bare", "CPU/step loop/bare", "to end"]
    print(common.table(header, sorted(ratios, key=lambda r: (r[0], r[1], r[2]))))
    print()
    medians = [[n, k, *(statistics.median(r[i] for r in ratios if r[:2] == [n, k])
                        for i in (3, 4, 5))]
               for n in args.processes for k in args.loops]  # fmt: skip
    header = ["processes", "loop", "median samples/s / bare", "median CPU/step", "to end"]
    print(common.table(header, medians))
    print(f"\n(load average at the end: {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
