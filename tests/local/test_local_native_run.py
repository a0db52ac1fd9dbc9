"""`make run-native`: the local job on the native backend, run twice, the second from the cache.

The README's native example (shortened, 1 process): the first run precompiles (torch.compile fills
the job's compile cache) and trains from it; the second finds the cache record, skips the
precompile, and its training compiles nothing new: Inductor's FX-graph cache hits every graph
(the trainer's summary.json counters), and `trainium run` says so in its `[cache]` lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

import procs

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local-tiny-bert-native.yaml"


def shortened(tmp_path: Path) -> Path:
    """The example with 4 steps (a log step, a checkpoint): compiling dominates the run."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    args = doc["spec"]["args"]
    for flag, value in (("--max-steps", 4), ("--checkpoint-every", 4), ("--log-every", 2)):
        args[args.index(flag) + 1] = str(value)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def trainium_run(job: Path, runs: Path) -> subprocess.CompletedProcess[str]:
    """The CLI as `make run-native` calls it."""
    cmd = [sys.executable, "-m", "trainium_operator", "run", "-f", str(job)]
    cmd += ["--runs-dir", str(runs)]
    return procs.run(cmd, timeout=procs.scaled(900))  # no replica left behind on a timeout


def test_the_second_native_run_compiles_nothing_new(tmp_path: Path) -> None:
    job, runs = shortened(tmp_path), tmp_path / "runs"
    root = runs / "local-tiny-bert-native"
    first = trainium_run(job, runs)
    assert first.returncode == 0, first.stdout + first.stderr
    summary = json.loads((root / "summary.json").read_text())
    assert summary["device"] == "native" and summary["world_size"] == 1, summary
    assert summary["precompile_compile_cache"]["fxgraph_cache_miss"] > 0, summary  # it compiled
    assert summary["compile_cache"]["fxgraph_cache_miss"] == 0, summary  # training: from it
    assert "[cache] precompile: compile cache miss, compiled" in first.stdout, first.stdout
    assert "[cache] training: compile cache hit, compiled nothing new" in first.stdout

    second = trainium_run(job, runs)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Precompiling" not in second.stdout and "cache=hit" in second.stdout, second.stdout
    summary = json.loads((root / "summary.json").read_text())
    counts = summary["compile_cache"]
    assert summary["cache_hit"] is True and "precompile_compile_cache" not in summary, summary
    assert counts["fxgraph_cache_miss"] == 0 and counts["autograd_cache_miss"] == 0, counts
    assert counts["fxgraph_cache_hit"] > 0, counts
    assert counts["dir"].startswith(str(root / "volume")), counts  # the job's cache, not ~/.cache
    lines = [ln for ln in second.stdout.splitlines() if ln.startswith("[cache]")]
    hits = counts["fxgraph_cache_hit"]
    assert lines == [
        f"[cache] training: compile cache hit, compiled nothing new ({hits} FX-graph hits, "
        f"0 misses; inductor in {counts['dir']})"
    ], second.stdout
