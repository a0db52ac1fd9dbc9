"""`trainium run`: the local backend of the same lifecycle, through TorchX's local scheduler.

Runs the README's `make run` job (shortened) twice as a user would: the first run precompiles and
trains with 2 gloo processes, the second finds the cache record and skips precompile.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

import procs

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local-tiny-bert.yaml"


def shortened(tmp_path: Path, steps: int) -> Path:
    """The example with fewer steps, so the test stays quick."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    args = doc["spec"]["args"]
    for flag, value in (("--max-steps", steps), ("--checkpoint-every", steps), ("--log-every", 2)):
        args[args.index(flag) + 1] = str(value)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def trainium_run(job: Path, runs: Path) -> subprocess.CompletedProcess[str]:
    """The CLI as `make run` calls it."""
    cmd = [
        sys.executable,
        "-m",
        "trainium_operator",
        "run",
        "-f",
        str(job),
        "--runs-dir",
        str(runs),
    ]
    return procs.run(cmd, timeout=procs.scaled(300))  # no replica left behind on a timeout


def test_local_run_trains_then_hits_the_cache(tmp_path: Path) -> None:
    job, runs = shortened(tmp_path, steps=12), tmp_path / "runs"
    first = trainium_run(job, runs)
    assert first.returncode == 0, first.stdout + first.stderr
    phases = [line.split()[1] for line in first.stdout.splitlines() if line.startswith("[phase]")]
    # Precompiled, the job moves on to Training (never back to Pending) while it creates it.
    assert phases == ["Pending", "Precompiling", "Training", "Succeeded"], first.stdout
    root = runs / "local-tiny-bert"
    summary = json.loads((root / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["world_size"] == 2
    assert summary["final_loss"] < summary["initial_loss"]
    assert summary["cache_hit"] is False
    # What the user sees: a line while precompiling, the bar (elapsed, ETA), where TensorBoard is.
    assert "[precompile] extracting graphs:" in first.stdout, first.stdout
    # Before anything runs, what will: the cache has no entry yet, so a precompile comes first.
    plan = "[run] local-tiny-bert: cache tiny-bert has no entry for this job: precompile (3 steps)"
    assert first.stdout.splitlines()[0].startswith(plan), first.stdout
    # The seconds before the bar are explained: the processes start, then build the model.
    assert "[train] starting 2 processes (torchrun)" in first.stdout, first.stdout
    bar = first.stderr.replace("\r", "\n").splitlines()
    last = [ln for ln in bar if ln.startswith("[train]") and "12/12" in ln][-1]
    # Elapsed, ETA and steps/s by the trainer's own clock (issue 43: not 97,040 step/s).
    rate = re.search(r"elapsed, ETA [\d:]+, ([\d.]+) step/s", last)
    assert rate and 0.01 < float(rate.group(1)) < 1000, first.stderr
    # And the seconds after it (issue 34): the trainer winds down, its processes exit.
    assert "[train] last step done: final checkpoint and model export" in first.stdout
    (done,) = [ln for ln in first.stdout.splitlines() if ln.startswith("[done]")]
    tensorboard = root / "volume" / "output" / "local-tiny-bert" / "tensorboard"
    assert (
        done.endswith(f"TensorBoard: tensorboard --logdir {tensorboard}") and tensorboard.is_dir()
    )
    status = json.loads((root / "status.json").read_text())
    assert status["phase"] == "Succeeded" and status["precompileJob"] == "local-tiny-bert-compile"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Succeeded"] == "True"

    second = trainium_run(job, runs)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Precompiling" not in second.stdout and "cache=hit" in second.stdout
    assert second.stdout.splitlines()[0] == (
        "[run] local-tiny-bert: cache tiny-bert has this job's graphs (hit): no precompile, train"
    ), second.stdout
    assert json.loads((root / "summary.json").read_text())["cache_hit"] is True
    assert list((root / "history").iterdir()), "the first run's outputs were kept"


def test_local_run_reports_a_failing_stage(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["args"] = ["no-such-task"]
    doc["metadata"]["annotations"] = {}
    job = tmp_path / "bad.yaml"
    job.write_text(yaml.safe_dump(doc))
    proc = trainium_run(job, tmp_path / "runs")
    assert proc.returncode == 1
    assert (
        "[phase] Failed" in proc.stdout
        and "PrecompileFailed"
        in (tmp_path / "runs" / "local-tiny-bert" / "status.json").read_text()
    )
    assert "no-such-task" in proc.stderr  # the failing stage's last log lines are shown


def test_local_run_rejects_an_invalid_job(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["nprocPerNode"] = 3
    job = tmp_path / "bad.yaml"
    job.write_text(yaml.safe_dump(doc))
    proc = trainium_run(job, tmp_path / "runs")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "spec.nprocPerNode" in proc.stderr
    assert not (tmp_path / "runs").exists()
