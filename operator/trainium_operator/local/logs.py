"""What a local run's stages logged: each node's log, why a stage failed, its compile-cache record.

TorchX's local scheduler writes `runs/<job>/logs/<stage>/.../{stdout,stderr}.log` per node, with
each worker line prefixed by its local rank (torchrun --tee).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The folder where torchrun (--tee) keeps a copy of each worker's output, under a TorchX app.
TORCHELASTIC_DIR = "torchelastic"
#: What a compile leaves in the cache per graph: a compiled module (Inductor), a NEFF (Neuron).
COMPILED_SUFFIXES = (".so", ".neff")


def replica_logs(logs: Path, stage: str, stream: str) -> list[Path]:
    """Each node's log of one stream (rank-prefixed by --tee), not torchrun's per-worker copies."""
    paths = (logs / stage).rglob(f"{stream}.log")
    return sorted(p for p in paths if TORCHELASTIC_DIR not in p.parts)


def tail_logs(logs: Path, stage: str, lines: int = 15) -> list[str]:
    """Why a stage failed: its `error:` lines if any, else the last lines of its stderr logs."""
    every: list[str] = []
    for path in replica_logs(logs, stage, "stderr"):
        every += path.read_text(errors="replace").splitlines()
    errors = [line for line in every if "error:" in line.lower()]
    return list(dict.fromkeys(errors))[-lines:] if errors else every[-lines:]


def compile_cache(logs: Path, stage: str) -> dict[str, Any] | None:
    """The compile-cache counters a stage last logged (the trainer's `runtime` event), if any.

    The precompile stage writes no summary (its outputs are invalid), so its log is the record.
    """
    found = None
    for path in replica_logs(logs, stage, "stdout"):
        for line in path.read_text(errors="replace").splitlines():
            if '"runtime"' not in line:
                continue
            try:  # --tee prefixes each line with its local rank: "[default0]:{...}"
                record = json.loads(line[line.find("{") :])
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("event") == "runtime":
                found = record.get("compile_cache") or found
    return found


def last_step(logs: Path, stage: str) -> int | None:
    """The last step rank 0 logged in a stage's stdout (the precompile stage's too), if any."""
    found = None
    for path in replica_logs(logs, stage, "stdout"):
        for line in path.read_text(errors="replace").splitlines():
            if '"step"' not in line or '"loss"' not in line:
                continue
            try:  # "[default0]:{...}", as in compile_cache
                record = json.loads(line[line.find("{") :])
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                found = record["step"] if found is None else max(found, record["step"])
    return found


def compiled_files(cache_dirs: list[Path]) -> int:
    """Compiled files in a stage's cache so far: Inductor's kernels (.so), Neuron's NEFFs.

    One FX graph compiles to many kernels: the heartbeat says kernel files, the [cache] line
    (the compiler's own counters) FX graphs, so the two numbers never read as one count.
    """
    return sum(1 for d in cache_dirs for p in d.rglob("*") if p.suffix in COMPILED_SUFFIXES)
