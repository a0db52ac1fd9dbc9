"""Ctrl-C during `trainium run` (issue 43, item 1): checkpoint, one line, exit 130, then resume.

Before: an 18-line traceback ending in TorchX's SignalException, exit 1, status.json left at
Training and the next run moving the checkpoints to history/ and training afresh.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

from test_local_suspend import (
    STEPS,
    app_logs,
    job_doc,
    metric_steps,
    read_json,
    wait_for,
    write_job,
)

import procs

DEADLINE = 120.0


def test_ctrl_c_checkpoints_says_one_line_exits_130_and_the_next_run_resumes(
    tmp_path: Path,
) -> None:
    job, runs, doc = tmp_path / "job.yaml", tmp_path / "runs", job_doc()
    write_job(job, doc, suspend=False)
    name = doc["metadata"]["name"]
    root, output = runs / name, runs / name / "volume" / "output" / name
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
    with (
        (tmp_path / "stdout").open("w") as out,
        (tmp_path / "stderr").open("w") as err,
        procs.spawned([*cmd, "-q"], stdout=out, stderr=err) as proc,
    ):
        wait_for(lambda: max(metric_steps(output / "metrics.jsonl"), default=0) >= 3 or None,
                 proc, "step 3")  # fmt: skip
        proc.send_signal(signal.SIGINT)  # what the terminal sends to the foreground process
        proc.wait(timeout=DEADLINE)
    stderr = (tmp_path / "stderr").read_text()
    assert proc.returncode == 130, stderr
    [line] = stderr.splitlines()
    status: dict[str, Any] = read_json(root / "status.json")
    assert status["phase"] == "Suspended", status
    [running] = [c for c in status["conditions"] if c["type"] == "Running"]
    assert running["reason"] == "Interrupted", running
    step = status["lastCheckpoint"]["step"]
    assert 3 <= step < STEPS and status["lastCheckpoint"]["path"].endswith(f"ckpt-{step:08d}.pt")
    assert line == (
        f"[interrupted] interrupted (Ctrl-C); checkpoint at step {step}: the next "
        f"`trainium run` of {name} resumes from it"
    )
    assert running["message"] == line.removeprefix("[interrupted] ")

    again = procs.run([*cmd, "-q"], timeout=DEADLINE * 2)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resuming the interrupted run from its checkpoint at step {step}" in again.stdout
    second = app_logs(root, "stdout")[-1]
    assert '"event": "resumed"' in second and f'"step": {step}' in second, second[-2000:]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["resumed_from_step"] == step, summary
    assert json.loads((root / "status.json").read_text())["phase"] == "Succeeded"
