"""The trainer interrupted 5 times in a row at seeded random steps resumes every time and ends
with the weights of an uninterrupted run."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

TRAINER_TESTS = Path(__file__).resolve().parents[1] / "trainer"
sys.path.insert(0, str(TRAINER_TESTS))
sys.path.insert(0, str(TRAINER_TESTS.parents[1] / "trainer"))

from trainer_utils import (  # noqa: E402
    RUN_TIMEOUT,
    final_weights,
    run_trainer,
    subprocess_env,
    trainer_cmd,
)

from trainium_trainer import checkpoint  # noqa: E402
from trainium_trainer.synth import write_bert_shards  # noqa: E402

MAX_STEPS = 40
INTERRUPTIONS = 5
SEED = 20261122


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bert")
    write_bert_shards(out, shards=4, samples_per_shard=64, seq_len=64, seed=1)
    return out


def base_args(data: Path, out: Path, checkpoint_every: int) -> list[str]:
    args = ["bert-pretrain", "--data-dir", str(data), "--output-dir", str(out)]
    args += ["--max-steps", str(MAX_STEPS), "--checkpoint-every", str(checkpoint_every)]
    args += ["--log-every", "1", "--batch-size", "8", "--grad-accum-steps", "2"]
    return [*args, "--lr", "0.02", "--precision", "fp32", "--keep-checkpoints", "2"]


def interrupt_at(args: list[str], step: int, sig: signal.Signals) -> tuple[int, str]:
    """Run until the trainer logs `step`, send `sig`; return (exit code, everything it printed)."""
    proc = subprocess.Popen(
        trainer_cmd(args), env=subprocess_env(), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    deadline, printed = time.monotonic() + RUN_TIMEOUT, []
    try:
        for line in proc.stdout:
            printed.append(line)
            if line.startswith("{") and json.loads(line).get("step", 0) >= step:
                proc.send_signal(sig)
                break
            assert time.monotonic() < deadline, f"step {step} not reached before the deadline"
        printed += proc.stdout.readlines()
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    return code, "".join(printed)


def resumed_steps(printed: str) -> set[int]:
    """Steps the trainer said it resumed from (its `{"event": "resumed"}` JSON lines)."""
    steps = set()
    for line in printed.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "resumed":
                steps.add(int(event["step"]))
    return steps


def latest_checkpoint(out: Path) -> int | None:
    found = checkpoint.complete_checkpoints(out / "checkpoints")
    return found[-1][0] if found else None


def interrupted_run(data: Path, out: Path, sig: signal.Signals, every: int) -> list[str]:
    """Interrupt at 5 seeded steps in a row, then finish; check each run resumed where it could.

    Returns one line per run that did not resume from the newest complete checkpoint there was.
    """
    steps = sorted(random.Random(SEED).sample(range(3, MAX_STEPS - 1), INTERRUPTIONS))
    missed = []
    for i, step in enumerate([*steps, None]):
        latest = latest_checkpoint(out)
        if step is None:
            finished = run_trainer(base_args(data, out, every))
            assert finished.returncode == 0, finished.stderr[-3000:]
            printed = finished.stdout
        else:
            code, printed = interrupt_at(base_args(data, out, every), step, sig)
            assert code != 0 or sig == signal.SIGTERM, printed[-2000:]
        if latest is not None and latest not in resumed_steps(printed):
            missed.append(f"run {i} (stop at {step}): not resumed from step {latest}")
        # SIGTERM: the ranks agree on a stop step at or after the one being logged, and save it.
        now = latest_checkpoint(out)
        if sig == signal.SIGTERM and step is not None and (now is None or now < step):
            missed.append(f"run {i}: SIGTERM at step {step} left checkpoint {now}")
    return missed


def assert_same_weights(got: Path, want: Path) -> None:
    a, b = final_weights(got), final_weights(want)
    assert a.keys() == b.keys()
    for name, value in b.items():
        assert torch.equal(a[name], value), name


def test_sigkill_five_times_resumes_and_matches_uninterrupted(data: Path, tmp_path: Path) -> None:
    assert interrupted_run(data, tmp_path / "killed", signal.SIGKILL, every=3) == []
    straight = run_trainer(base_args(data, tmp_path / "straight", 3))
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert_same_weights(tmp_path / "killed", tmp_path / "straight")


def test_sigterm_five_times_checkpoints_resumes_and_matches(data: Path, tmp_path: Path) -> None:
    # No periodic checkpoints: only a checkpoint written on SIGTERM lets a run resume.
    assert interrupted_run(data, tmp_path / "termed", signal.SIGTERM, every=0) == []
    straight = run_trainer(base_args(data, tmp_path / "straight", 0))
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert_same_weights(tmp_path / "termed", tmp_path / "straight")
