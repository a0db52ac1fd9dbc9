"""Never lose a run: SIGTERM checkpoints the step all ranks agree on; time-based checkpoints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from trainer_utils import FAST, events, final_weights, run_trainer, signal_when_logged, summary

from trainium_trainer import checkpoint, contract
from trainium_trainer.config import parse_args
from trainium_trainer.device import make_runtime
from trainium_trainer.loop import train

STOPPED = re.compile(r"^stopped: SIGTERM: stopped after step (\d+), checkpointed")


def test_sigterm_mid_run_checkpoints_then_resume_keeps_the_step_count(
    bert_data: Path, tmp_path: Path
) -> None:
    base = ["bert-pretrain", "--data-dir", str(bert_data), "--max-steps", "40", "--log-every", "1"]
    base += ["--batch-size", "8", "--grad-accum-steps", "2", *FAST]
    stopped, straight = tmp_path / "stopped", tmp_path / "straight"
    proc = signal_when_logged([*base, "--output-dir", str(stopped)], step=3)
    assert proc.returncode == contract.EXIT_PREEMPTED, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    match = STOPPED.match(line)
    assert match, line
    step = int(match.group(1))
    assert 3 <= step < 40
    assert [s for s, _ in checkpoint.complete_checkpoints(stopped / "checkpoints")] == [step]
    assert [e["step"] for e in events(proc.stdout, "checkpoint")] == [step]
    resumed = run_trainer([*base, "--output-dir", str(stopped)])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [e["step"] for e in events(resumed.stdout, "resumed")] == [step]
    assert summary(stopped)["resumed_from_step"] == step and summary(stopped)["steps"] == 40
    reference = run_trainer([*base, "--output-dir", str(straight)])
    assert reference.returncode == 0, reference.stderr[-3000:]
    got, want = final_weights(stopped), final_weights(straight)
    for name, value in want.items():
        assert torch.equal(got[name], value), name


@pytest.mark.parametrize("target", ["torchrun", "one-worker"])
def test_sigterm_stops_every_rank_at_the_same_step(
    target: str, tmp_path: Path, no_dropout_config: Path
) -> None:
    """Kubernetes signals torchrun, which tells every worker; one worker's signal binds all."""
    from trainium_trainer.synth import write_bert_shards

    data = tmp_path / "data"
    write_bert_shards(data, shards=2, samples_per_shard=32, seq_len=64, seed=3)
    out = tmp_path / "out"
    args = ["bert-pretrain", "--data-dir", str(data), "--output-dir", str(out)]
    args += ["--max-steps", "200", "--batch-size", "4", "--log-every", "1"]
    args += ["--model-config", str(no_dropout_config)]
    one = target == "one-worker"
    proc = signal_when_logged([*args, *FAST], step=3, nproc=2, only_one_worker=one)
    assert proc.returncode != 0  # torchrun reports its workers' exit 143 as a failure
    # The signalled rank and rank 0 name one step (torchrun may stop the slower one first).
    steps = {int(m.group(1)) for ln in proc.stderr.splitlines() if (m := STOPPED.search(ln))}
    assert len(steps) == 1, proc.stderr[-3000:]
    (step,) = steps
    # Rank 0 (which may have got no signal) wrote that step: the ranks agreed on it.
    assert [s for s, _ in checkpoint.complete_checkpoints(out / "checkpoints")] == [step]


@pytest.mark.parametrize("launcher", ["torch.distributed.run", contract.TORCHRUN_MODULE])
def test_sigterm_under_torchrun_is_a_disruption(
    launcher: str, tmp_path: Path, no_dropout_config: Path
) -> None:
    """The operator reads torchrun's end as an interruption; the wrapper also exits 143 (#20)."""
    from trainium_operator.domain.failures import classify_pod
    from trainium_trainer.synth import write_bert_shards

    data = tmp_path / "data"
    write_bert_shards(data, shards=2, samples_per_shard=32, seq_len=64, seed=3)
    args = ["bert-pretrain", "--data-dir", str(data), "--output-dir", str(tmp_path / "out")]
    args += ["--max-steps", "200", "--batch-size", "4", "--log-every", "1"]
    args += ["--model-config", str(no_dropout_config), *FAST]
    proc = signal_when_logged(args, step=3, nproc=2, launcher=launcher)
    wrapped = launcher == contract.TORCHRUN_MODULE
    assert proc.returncode == (contract.EXIT_PREEMPTED if wrapped else 1), proc.stderr[-3000:]
    assert ("stopped: torchrun got signal 15 (SIGTERM)" in proc.stderr) == wrapped
    status = {"phase": "Failed", "containerStatuses": [{"name": "node", "state": {
        "terminated": {"exitCode": proc.returncode, "reason": "Error"}}}]}  # fmt: skip
    got = classify_pod({"metadata": {"name": "w-0"}, "status": status}, proc.stderr.splitlines())
    assert got is not None and got.reason == "Interrupted", got
    assert got.retry and not got.counts_against_budget


def test_checkpoint_minutes_uses_the_clock(bert_data: Path, tmp_path: Path) -> None:
    now = [0.0]
    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(tmp_path)]
    args += ["--max-steps", "12", "--checkpoint-minutes", "1", "--keep-checkpoints", "5", *FAST]

    def tick(step: int) -> None:
        now[0] = step * 15.0  # a fake clock: 15 s per step, so 1 minute = 4 steps

    train(parse_args(args), make_runtime("cpu"), on_step=tick, clock=lambda: now[0])
    # decide() at step s reads the clock of step s-1: due at s=5 (60 s), then s=9, plus the end.
    assert [s for s, _ in checkpoint.complete_checkpoints(tmp_path / "checkpoints")] == [5, 9, 12]


def test_periodic_checkpoints_are_on_by_default() -> None:
    cfg = parse_args(["bert-pretrain"])
    assert cfg.checkpoint_minutes > 0


@pytest.mark.parametrize("flag", ["--checkpoint-minutes=-1", "--checkpoint-minutes=x"])
def test_bad_checkpoint_minutes_is_a_usage_error(flag: str) -> None:
    from trainium_trainer.config import UsageError

    with pytest.raises(UsageError, match="checkpoint-minutes"):
        parse_args(["bert-pretrain", flag])
