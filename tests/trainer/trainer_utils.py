"""Helpers of the trainer suite: run the trainer in a subprocess and read what it wrote."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import procs

TRAINER_SRC = Path(__file__).resolve().parents[2] / "trainer"
# Deadline for one trainer subprocess; a hang fails loudly instead of stalling the suite.
RUN_TIMEOUT = 180
NO_DROPOUT = {"size": "tiny", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
FAST = ["--lr", "0.05", "--warmup-steps", "5", "--precision", "fp32", "--optimizer", "lamb"]


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment with the trainer importable and no inherited launcher/output vars."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.pop("TRAINIUM_OUTPUT_DIR", None)
    env.pop("NEURON_EXTRACT_GRAPHS_ONLY", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TRAINER_SRC), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def free_port() -> int:
    """A free TCP port on loopback for torchrun's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def trainer_cmd(
    args: Sequence[str], nproc: int = 0, launcher: str = "torch.distributed.run"
) -> list[str]:
    """`python -m trainium_trainer ...`, under torchrun (or its wrapper) when nproc > 0."""
    if nproc:
        launch = ["-m", launcher, "--nnodes", "1", f"--nproc_per_node={nproc}"]
        launch += ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
        return [sys.executable, *launch, "-m", "trainium_trainer", *args]
    return [sys.executable, "-m", "trainium_trainer", *args]


def run_trainer(
    args: Sequence[str],
    nproc: int = 0,
    env: dict[str, str] | None = None,
    timeout: float = RUN_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run the trainer to completion in a subprocess (env: extra variables); the deadline grows
    with the load, and on a timeout no worker is left (procs.run)."""
    return procs.run(trainer_cmd(args, nproc), procs.scaled(timeout), env=subprocess_env(env))


def stdout_records(stdout: str) -> list[dict[str, Any]]:
    """Every stdout line parsed as JSON (it fails on any line that is not: stdout is JSON only)."""
    return [json.loads(line) for line in stdout.splitlines()]


def events(stdout: str, kind: str) -> list[dict[str, Any]]:
    """The run events of one kind (checkpoint, resumed, lr_changed) on stdout."""
    return [r for r in stdout_records(stdout) if r.get("event") == kind]


def summary(output_dir: Path) -> dict[str, Any]:
    """The run's summary.json."""
    return json.loads((output_dir / "summary.json").read_text(encoding="utf-8"))


def final_weights(output_dir: Path) -> dict[str, Any]:
    """Model weights of the newest checkpoint."""
    from trainium_trainer import checkpoint

    found = checkpoint.complete_checkpoints(output_dir / "checkpoints")
    assert found, f"no checkpoint in {output_dir}"
    return checkpoint.load(found[-1][1])["model"]


def _children(pid: int) -> list[int]:
    """PIDs whose parent is pid (torchrun's workers), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def signal_when_logged(
    args: list[str],
    step: int,
    nproc: int = 0,
    only_one_worker: bool = False,
    launcher: str = "torch.distributed.run",
    env: dict[str, str] | None = None,
    timeout: float = RUN_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run the trainer, SIGTERM it (or one torchrun worker) once it logged `step`; wait."""
    cmd, run_env = trainer_cmd(args, nproc, launcher), subprocess_env(env)
    # stderr to a file: a pipe that nobody reads while stdout is followed can fill and block.
    with (
        tempfile.TemporaryFile() as err,
        procs.spawned(cmd, env=run_env, stdout=subprocess.PIPE, stderr=err) as proc,
    ):
        deadline = time.monotonic() + timeout
        assert proc.stdout is not None
        lines: list[str] = []
        for raw in proc.stdout:
            lines.append(raw.decode())
            if stdout_records(lines[-1])[0].get("step") == step:
                if only_one_worker:
                    workers = sorted(_children(proc.pid))
                    assert len(workers) == nproc, workers
                    pid = workers[-1]
                else:
                    pid = proc.pid
                os.kill(pid, signal.SIGTERM)
                break
            assert time.monotonic() < deadline, "the run never logged the step"
        out, _ = proc.communicate(timeout=timeout)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    stdout = "".join(lines) + out.decode()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def kill_workers_after_checkpoint(
    args: list[str], step: int, nproc: int, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run under torchrun; SIGKILL every worker once the checkpoint of `step` is reported.

    As a node lost: no SIGTERM, no agreed stop; torchrun sees its workers die and fails.
    """
    cmd, run_env = trainer_cmd(args, nproc), subprocess_env(env)
    with (
        tempfile.TemporaryFile() as err,  # not a pipe: see signal_when_logged
        procs.spawned(cmd, env=run_env, stdout=subprocess.PIPE, stderr=err, text=True) as proc,
    ):
        deadline = time.monotonic() + RUN_TIMEOUT
        assert proc.stdout is not None
        lines: list[str] = []
        for line in proc.stdout:
            lines.append(line)
            record = stdout_records(line)[0]
            if record.get("event") == "checkpoint" and record["step"] == step:
                for pid in _children(proc.pid):
                    os.kill(pid, signal.SIGKILL)
                break
            assert time.monotonic() < deadline, "the run never reported the checkpoint"
        proc.communicate(timeout=RUN_TIMEOUT)  # what workers printed as they died: dropped
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines), stderr)
