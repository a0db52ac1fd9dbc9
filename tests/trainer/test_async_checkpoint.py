"""Checkpoints that do not stop training (issue 42): a host copy, then a background write.

A kill mid-write resumes from the last complete checkpoint (of either tier), SIGTERM waits for
what is pending, and the copy a write reads is the state of its step, whatever steps follow.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_utils import FAST, RUN_TIMEOUT, events, final_weights, run_trainer, subprocess_env

import procs
from trainium_trainer import checkpoint, contract
from trainium_trainer.config import parse_args
from trainium_trainer.device import make_runtime
from trainium_trainer.loop import train

#: Runs the trainer with the shared tier's write of one step held: "hang" (the temp file is
#: written, the rename never comes) or a delay in seconds before every shared write.
DRIVER = """
import sys, time
from pathlib import Path
from trainium_trainer import checkpoint
from trainium_trainer.__main__ import main

how, held, marker = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
atomic_write = checkpoint.atomic_write

def held_write(path, write):
    if path.parent.name == "checkpoints" and path.suffix == ".pt":
        if how != "hang":
            time.sleep(float(how))
        elif path.name == f"ckpt-{held:08d}.pt":
            write(path.with_name(checkpoint.TEMP_PREFIX + "held-" + path.name))
            marker.write_text("writing")
            time.sleep(3600)
    return atomic_write(path, write)

checkpoint.atomic_write = held_write
sys.exit(main(sys.argv[4:]))
"""


def _args(data: Path, out: Path, *extra: str) -> list[str]:
    args = ["bert-pretrain", "--data-dir", str(data), "--output-dir", str(out), *FAST]
    return [*args, "--max-steps", "20", "--checkpoint-every", "5", "--log-every", "1", *extra]


def _driver(tmp: Path, how: str, held: int, args: list[str]) -> tuple[list[str], Path]:
    script, marker = tmp / "held_driver.py", tmp / "writing"
    script.write_text(DRIVER, encoding="utf-8")
    return [sys.executable, str(script), how, str(held), str(marker), *args], marker


def _kill_mid_write(tmp: Path, args: list[str], held: int, trained_to: int) -> list[int]:
    """SIGKILL once the shared write of `held` is under way and `trained_to` was logged."""
    cmd, marker = _driver(tmp, "hang", held, args)
    logged: list[int] = []
    with (
        tempfile.TemporaryFile() as err,
        procs.spawned(cmd, env=subprocess_env(), stdout=subprocess.PIPE, stderr=err) as proc,
    ):
        deadline = time.monotonic() + procs.scaled(RUN_TIMEOUT)
        assert proc.stdout is not None
        for raw in proc.stdout:
            record = json.loads(raw)
            assert record.get("event") != "checkpoint" or record["step"] < held, record
            logged += [record["step"]] if "loss" in record else []
            if logged[-1:] == [trained_to]:
                break
            assert time.monotonic() < deadline, "the step never came"
        while not marker.exists():  # the writer thread is inside the held write
            assert time.monotonic() < deadline, "the held write never began"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return logged


@pytest.mark.parametrize("tier", ["shared", "local"])
def test_a_kill_during_a_background_write_resumes_from_the_last_complete_checkpoint(
    tier: str, bert_data: Path, tmp_path: Path
) -> None:
    """Shared only: step 5; with a node-local tier, step 10 landed there before the kill."""
    killed, straight = tmp_path / "killed", tmp_path / "straight"
    local = ["--local-checkpoint-dir", str(killed / "local")] if tier == "local" else []
    logged = _kill_mid_write(tmp_path, _args(bert_data, killed, *local), held=10, trained_to=15)
    assert logged[-1] == 15, "training went on while step 10 was being written"
    shared = [s for s, _ in checkpoint.complete_checkpoints(killed / "checkpoints")]
    assert shared == [5], shared
    want = 10 if tier == "local" else 5
    resumed = run_trainer(_args(bert_data, killed, *local))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (back,) = events(resumed.stdout, "resumed")
    assert back["step"] == want, back
    assert Path(back["path"]).parent == (killed / "local" if local else killed / "checkpoints")
    reference = run_trainer(_args(bert_data, straight))
    assert reference.returncode == 0, reference.stderr[-3000:]
    got, expected = final_weights(killed), final_weights(straight)
    for name, value in expected.items():
        assert torch.equal(got[name], value), name


def test_sigterm_waits_for_the_pending_write_and_checkpoints_the_stop(
    bert_data: Path, tmp_path: Path
) -> None:
    """Each shared write takes 2 s: at the stop, step 2's is still pending; both land."""
    out = tmp_path / "out"
    args = [*_args(bert_data, out), "--checkpoint-every", "2"]
    cmd, _ = _driver(tmp_path, "2", 0, args)
    with (
        tempfile.TemporaryFile() as err,
        procs.spawned(cmd, env=subprocess_env(), stdout=subprocess.PIPE, stderr=err) as proc,
    ):
        assert proc.stdout is not None
        lines = []
        for raw in proc.stdout:
            lines.append(raw.decode())
            if json.loads(raw).get("step") == 3 and "loss" in json.loads(raw):
                proc.send_signal(signal.SIGTERM)
                break
        out_rest, _ = proc.communicate(timeout=procs.scaled(RUN_TIMEOUT))
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    assert proc.returncode == contract.EXIT_PREEMPTED, stderr[-3000:]
    stop = int(stderr.split("stopped after step ")[1].split(",")[0])
    reported = [e["step"] for e in events("".join(lines) + out_rest.decode(), "checkpoint")]
    saved = [s for s, _ in checkpoint.complete_checkpoints(out / "checkpoints")]
    assert 2 in saved and stop in saved and reported == saved, (saved, reported)
    assert not list((out / "checkpoints").glob(f"{checkpoint.TEMP_PREFIX}*"))


def _fake(directory: Path, step: int) -> Path:
    path = checkpoint.checkpoint_path(directory, step)
    state = {"format": checkpoint.FORMAT, "step": step}
    checkpoint.write(path, step, lambda temp: torch.save(state, temp))
    return path


def test_resume_takes_the_newest_complete_checkpoint_of_either_tier(tmp_path: Path) -> None:
    shared, local = tmp_path / "shared", tmp_path / "local"
    for step in (5, 10):
        _fake(shared, step)
    _fake(local, 10)
    newest = _fake(local, 15)
    (local / "ckpt-00000020.pt").write_bytes(b"torn: no manifest")
    found = checkpoint.load_latest([shared, local])
    assert found is not None and found[0] == newest
    tie = checkpoint.load_latest([shared, local], upto=10)
    assert tie is not None and tie[0] == checkpoint.checkpoint_path(shared, 10)  # shared first
    later = _fake(shared, 25)  # a new node's local tier lags: the shared one is newer
    found = checkpoint.load_latest([shared, local])
    assert found is not None and found[0] == later


def test_a_snapshot_never_sees_later_in_place_updates_and_keeps_ties() -> None:
    weight = torch.ones(4, 4)
    state = {"a": weight, "tied": weight, "row": weight[1], "step": 3, "groups": [{"lr": 0.1}]}
    buffers: dict[int, torch.Tensor] = {}
    copy = make_runtime("cpu").snapshot(state, buffers)
    weight.add_(1.0)
    assert torch.equal(copy["a"], torch.ones(4, 4)) and torch.equal(copy["row"], torch.ones(4))
    assert copy["tied"] is copy["a"] and copy["step"] == 3 and copy["groups"] == [{"lr": 0.1}]
    again = make_runtime("cpu").snapshot(state, buffers)  # the next one reuses the buffers
    assert again["a"] is copy["a"] and torch.equal(again["a"], weight)


def _saved(directory: Path) -> dict[int, dict[str, Any]]:
    return {s: checkpoint.load(p) for s, p in checkpoint.complete_checkpoints(directory)}


def test_a_write_held_over_later_steps_saves_the_state_of_its_own_step(
    bert_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each write waits until 2 more steps mutated the weights: the files equal a sync run's."""
    args = ["bert-pretrain", "--data-dir", str(bert_data), *FAST, "--max-steps", "9"]
    args += ["--checkpoint-every", "3", "--keep-checkpoints", "5"]
    sync = parse_args([*args, "--output-dir", str(tmp_path / "sync"), "--no-checkpoint-async"])
    train(sync, make_runtime("cpu"))
    released = {step: threading.Event() for step in range(1, 10)}
    save = torch.save

    def held(obj: Any, target: Any) -> None:
        assert released[obj["step"]].wait(timeout=procs.scaled(RUN_TIMEOUT))
        save(obj, target)

    def release(step: int) -> None:
        released[step - 2].set() if step > 2 else None

    monkeypatch.setattr("trainium_trainer.persist.torch.save", held)
    released[9].set()  # the last step's write is awaited before train returns
    later = dataclasses.replace(sync, output_dir=tmp_path / "async", checkpoint_async=True)
    train(later, make_runtime("cpu"), on_step=release)
    got, want = _saved(later.checkpoint_dir), _saved(sync.checkpoint_dir)
    assert sorted(got) == sorted(want) == [3, 6, 9]
    for step, state in want.items():
        for part in ("model", "optimizer"):
            flat = zip(_leaves(state[part]), _leaves(got[step][part]), strict=True)
            assert all(torch.equal(a, b) for a, b in flat), (step, part)


def _leaves(obj: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]


def test_two_gloo_processes_agree_on_the_step_to_resume_from_either_tier(
    bert_data: Path, tmp_path: Path
) -> None:
    """The local tier is newer than the shared one: both ranks take its step (gloo agreement)."""
    out = tmp_path / "out"
    args = [*_args(bert_data, out, "--local-checkpoint-dir", str(out / "local"))]
    first = run_trainer([*args, "--max-steps", "10"], nproc=2)
    assert first.returncode == 0, first.stderr[-3000:]
    for suffix in (".pt", ".json"):  # as if killed while copying step 10 to the shared volume
        checkpoint.checkpoint_path(out / "checkpoints", 10).with_suffix(suffix).unlink()
    again = run_trainer([*args, "--max-steps", "12"], nproc=2)
    assert again.returncode == 0, again.stderr[-3000:]
    (back,) = events(again.stdout, "resumed")
    assert back["step"] == 10 and Path(back["path"]).parent == out / "local", back
    assert [s for s, _ in checkpoint.complete_checkpoints(out / "checkpoints")] == [5, 12]
