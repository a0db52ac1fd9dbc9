"""Suspend and resume keep the step count, through the lifecycle with the real trainer.

`trainium run` follows runPolicy.suspend in the job file as the operator follows it on a cluster:
the lifecycle decides StopTraining, TorchX's local scheduler cancels the app (SIGTERM to torchrun,
which passes it to its workers), the trainer checkpoints the step it stopped at, and once suspend
is false again the lifecycle creates training anew and the trainer resumes from that checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

import procs

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local-tiny-bert.yaml"
STEPS = 100
DEADLINE = 120.0
TEE_PREFIX = re.compile(r"^\[default\d+\]:")
STOPPED = re.compile(r"stopped: SIGTERM: stopped after step (\d+), checkpointed")
T = TypeVar("T")


def write_job(path: Path, doc: dict[str, Any], suspend: bool) -> None:
    """Replace the job file whole (rename), as an editor saving it would; never half-written."""
    doc["spec"]["runPolicy"] = {"suspend": suspend}
    temp = path.with_suffix(".tmp")
    temp.write_text(yaml.safe_dump(doc))
    os.replace(temp, path)


def job_doc() -> dict[str, Any]:
    """The example: no precompile, a step per log line, no checkpoint before the last step."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    args = doc["spec"]["args"]
    for flag, value in (("--max-steps", STEPS), ("--checkpoint-every", STEPS), ("--log-every", 1)):
        args[args.index(flag) + 1] = str(value)
    doc["spec"]["precompile"] = {"policy": "Never"}
    return doc


def wait_for(check: Callable[[], T | None], proc: subprocess.Popen[str], what: str) -> T:
    """Poll until check() gives a value; fail at the deadline or if the run ended first."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before {what}"
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {DEADLINE} s")


def read_json(path: Path) -> Any:
    """A JSON file the runner replaces as it goes; None while it is missing or being written."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def metric_steps(path: Path) -> list[int]:
    """Steps logged so far in metrics.jsonl (complete lines only)."""
    if not path.is_file():
        return []
    lines = path.read_text().split("\n")[:-1]
    return [json.loads(line)["step"] for line in lines if line.strip()]


def app_logs(root: Path, stream: str) -> list[str]:
    """Each training app's log of one stream, oldest app first."""
    paths = (root / "logs" / "train").rglob(f"{stream}.log")
    paths = (p for p in paths if "torchelastic" not in p.parts)  # torchrun's --tee copies
    return [p.read_text() for p in sorted(paths, key=lambda p: p.stat().st_mtime)]


def test_suspend_then_resume_keeps_the_step_count(tmp_path: Path) -> None:
    job, runs, doc = tmp_path / "job.yaml", tmp_path / "runs", job_doc()
    write_job(job, doc, suspend=False)
    root = runs / doc["metadata"]["name"]
    output = root / "volume" / "output" / doc["metadata"]["name"]
    cmd = [sys.executable, "-m", "trainium_operator", "run", "-f", str(job)]
    with (
        (tmp_path / "stdout").open("w") as out,
        (tmp_path / "stderr").open("w") as err,
        procs.spawned([*cmd, "--runs-dir", str(runs), "-q"], stdout=out, stderr=err) as proc,
    ):
        wait_for(lambda: max(metric_steps(output / "metrics.jsonl"), default=0) >= 3 or None,
                 proc, "step 3 of the first gang")  # fmt: skip
        write_job(job, doc, suspend=True)

        def suspended() -> dict[str, Any] | None:
            st = read_json(root / "status.json") or {}
            return st if st.get("phase") == "Suspended" and "lastCheckpoint" in st else None

        paused = wait_for(suspended, proc, "Suspended with the stop step's checkpoint")
        step = paused["lastCheckpoint"]["step"]
        assert 3 <= step < STEPS, paused
        assert paused["lastCheckpoint"]["path"].endswith(f"ckpt-{step:08d}.pt")
        first_err = app_logs(root, "stderr")
        assert len(first_err) == 1 and (m := STOPPED.search(first_err[0])), first_err
        assert int(m.group(1)) == step
        write_job(job, doc, suspend=False)
        proc.wait(timeout=DEADLINE)
    stdout, stderr = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    assert proc.returncode == 0, stdout + stderr
    phases = [line.split()[1] for line in stdout.splitlines() if line.startswith("[phase]")]
    assert phases[-1] == "Succeeded" and "Suspended" in phases, stdout
    assert phases[phases.index("Suspended") :].count("Training") == 1, stdout  # one new gang

    # The second gang resumed at the stop step and ran the rest, once.
    # torchrun --tee prefixes each worker line with its local rank ("[default0]:").
    second = [TEE_PREFIX.sub("", ln) for ln in app_logs(root, "stdout")[-1].splitlines()]
    events = [json.loads(ln) for ln in second if ln.startswith("{") and '"event"' in ln]
    assert [e["step"] for e in events if e["event"] == "resumed"] == [step]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["resumed_from_step"] == step, summary
    assert metric_steps(output / "metrics.jsonl") == list(range(1, STEPS + 1))
    status = json.loads((root / "status.json").read_text())
    assert status["phase"] == "Succeeded"
    assert status["lastCheckpoint"]["step"] == STEPS


def test_the_run_follows_suspend_in_the_file_and_nothing_it_cannot_read(tmp_path: Path) -> None:
    from trainium_operator.local import runner as local

    job, doc = tmp_path / "job.yaml", job_doc()
    follow = local.follow_file(str(job), doc["metadata"]["name"])
    assert follow is not None
    assert follow() is None  # no file (yet): keep what was last read
    write_job(job, doc, suspend=True)
    assert follow() is True
    del doc["spec"]["runPolicy"]
    job.write_text(yaml.safe_dump(doc))
    assert follow() is False  # suspend removed: the default, running
    job.write_text("spec: [unclosed")
    assert follow() is None
    doc["spec"]["nodes"] = 0
    write_job(job, doc, suspend=True)
    assert follow() is None  # an invalid job says nothing about suspend
    other = local.follow_file(str(job), "another-job")
    assert other is not None and other() is None  # not in the file
    assert local.follow_file("-", doc["metadata"]["name"]) is None  # stdin cannot be read again
