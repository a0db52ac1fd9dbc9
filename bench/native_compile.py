"""Native runtime on CPU: compiled vs eager steps/s, and time to first step without/with the cache.

Three trainer runs in one go, 1 process, the same task (tiny BERT pretraining on synthetic
shards), batch, optimizer (LAMB), fp32 and steps:
  eager     --backend cpu (the eager CPU runtime)
  compiled  --backend native, an empty compile cache (Inductor compiles every graph)
  compiled  --backend native, the cache the run above left (what a precompile leaves)
Time to first step: process start until step 1 is logged. Steps/s: the steps after --warmup, from
when their log lines arrive. One thread (OMP_NUM_THREADS=1, as torchrun's workers), so a busy
machine's other processes skew the two kinds of run alike. Usage:

    python bench/native_compile.py [--steps 60 --warmup 10 --model-config tiny]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

from trainium_trainer import contract
from trainium_trainer.synth import write_bert_shards

#: --smoke runs all three on the eager CPU backend: a cold Inductor compile of the tiny BERT
#: alone takes minutes on a busy 2-core machine (over 10 at load 10), too long for a smoke run,
#: and torch.compile(fullgraph=True) refuses TORCH_COMPILE_DISABLE. Compiling is
#: tests/trainer/test_native.py's to check; the smoke run checks this script.
SMOKE_BACKEND = "cpu"


def measure(backend: str, cache: Path, out: Path, args: list[str], warmup: int) -> dict[str, Any]:
    """Run the trainer once; when step 1, step `warmup` and the last step were logged."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1")
    env[contract.ENV_CACHE_DIR] = str(cache)
    cmd = [sys.executable, "-m", "trainium_trainer", *args, "--backend", backend]
    started = time.monotonic()
    proc = subprocess.Popen([*cmd, "--output-dir", str(out)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    seen: dict[int, float] = {}
    runtime: dict[str, Any] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        record = json.loads(line)
        if "loss" in record:
            seen[record["step"]] = time.monotonic()
        elif record.get("event") == "runtime":
            runtime = record["compile_cache"]
    _, err = proc.communicate(timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{backend} failed:\n{err[-3000:]}")
    last = max(seen)
    return {
        "first_step_s": seen[1] - started,
        "steps_per_s": (last - warmup) / (seen[last] - seen[warmup]),
        "hits": runtime.get("fxgraph_cache_hit", "-"),
        "misses": runtime.get("fxgraph_cache_miss", "-"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=60, help="timed steps after the warm-up")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--model-config", default="tiny")
    ns = common.parse(p, argv, steps=2, warmup=1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-native-") as tmp:
        root = Path(tmp)
        write_bert_shards(root / "data", shards=4, samples_per_shard=256, seq_len=64, seed=1)
        args = ["bert-pretrain", "--data-dir", str(root / "data"), "--batch-size", "8"]
        args += ["--max-steps", str(ns.warmup + ns.steps), "--log-every", str(ns.warmup)]
        args += ["--model-config", ns.model_config, "--precision", "fp32", "--optimizer", "lamb"]
        args += ["--checkpoint-every", "0", "--checkpoint-minutes", "0"]
        runs = [("eager (cpu)", "cpu"), ("compiled, empty cache", "native"),
                ("compiled, cache filled", "native")]  # fmt: skip
        for i, (label, backend) in enumerate(runs):
            backend = SMOKE_BACKEND if ns.smoke else backend
            r = measure(backend, root / "cache", root / f"out{i}", args, ns.warmup)
            rows.append([label, r["first_step_s"], r["steps_per_s"], r["hits"], r["misses"]])
    header = ["run", "time to first step s", "steps/s", "FX-graph hits", "misses"]
    print(common.table(header, rows))
    eager, cold, warm = rows
    print(f"\ncompiled / eager steps/s: {warm[2] / eager[2]:.2f}x; first step with the cache "
          f"{warm[1]:.1f} s vs {cold[1]:.1f} s without")  # fmt: skip
    shape = f"batch 8, seq 64, model {ns.model_config}, {ns.steps} timed steps"
    print(f"(1 process, 1 thread, {shape})")
    if ns.smoke:
        print("(--smoke: every run was eager (--backend cpu): these figures mean nothing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
