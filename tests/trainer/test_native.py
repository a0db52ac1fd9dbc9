"""The native runtime on CPU: torch.compile (Inductor) and gloo, its compile cache, SIGTERM, resume.

One precompile (the module's fixture) fills a fresh cache; every native run after it reads that
cache and must compile nothing new. Native runs are subprocesses with OMP_NUM_THREADS=1, as
torchrun's workers have: Inductor specialises CPU kernels on the thread count, so the precompile
serves 1 and 2 processes alike (on Trainium the operator precompiles in the training topology).
The model is the tiny BERT with one layer and no dropout, to keep compiles short.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_utils import (
    FAST,
    events,
    final_weights,
    run_trainer,
    signal_when_logged,
    summary,
)

from trainium_trainer import contract
from trainium_trainer.__main__ import main
from trainium_trainer.config import parse_args, precompile_args
from trainium_trainer.synth import write_bert_shards

ONE_LAYER = {
    "size": "tiny",
    "num_hidden_layers": 1,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}
STEPS = 40
#: Deadline of the cold precompile: compiling (C++ kernels) takes minutes on a busy 2-core box.
COMPILE_TIMEOUT = 900


@dataclasses.dataclass(frozen=True)
class Setup:
    """What the precompile left: the data, the args, the cache (and a copy of it untouched)."""

    args: list[str]
    cache: Path
    pristine: Path
    precompile: dict[str, Any]


def _env(cache: Path, **extra: str) -> dict[str, str]:
    return {contract.ENV_CACHE_DIR: str(cache), "OMP_NUM_THREADS": "1", **extra}


def _compiled(stdout: str) -> dict[str, Any]:
    """The compile-cache counts of the run's `runtime` event (rank 0)."""
    (event,) = events(stdout, "runtime")
    return dict(event["compile_cache"])


def _assert_nothing_compiled(out: Path) -> None:
    """Every graph came from the cache, and Dynamo traced the step and the update once each."""
    counts = summary(out)["compile_cache"]
    assert counts["fxgraph_cache_miss"] == 0 and counts["autograd_cache_miss"] == 0, counts
    assert counts["fxgraph_cache_hit"] > 0 and counts["autograd_cache_hit"] > 0, counts
    assert counts["unique_graphs"] == 2, counts  # no retrace per lr or per step


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    """Shards of one batch each (2 ranks or 2 micro-batches see all 8 samples), then precompile."""
    root = tmp_path_factory.mktemp("native")
    write_bert_shards(root / "data", shards=2, samples_per_shard=4, seq_len=64, seed=3)
    (root / "one-layer.json").write_text(json.dumps(ONE_LAYER), encoding="utf-8")
    args = ["bert-pretrain", "--data-dir", str(root / "data"), "--batch-size", "4"]
    args += ["--model-config", str(root / "one-layer.json"), "--backend", "native", *FAST]
    # As the operator's precompile stage: the training args, cadences below the limit, its steps.
    training = [*args, "--log-every", "1", "--max-steps", str(STEPS), "--checkpoint-every", "5"]
    steps = 3
    stage = [*precompile_args(training, steps), contract.MAX_STEPS_FLAG, str(steps)]
    out, cache = root / "precompile", root / "cache"
    env = _env(cache, **{contract.ENV_EXTRACT_GRAPHS_ONLY: "1"})
    proc = run_trainer([*stage, "--output-dir", str(out)], env=env, timeout=COMPILE_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not out.exists() or not any(out.iterdir()), "a precompile persists nothing"
    shutil.copytree(cache, root / "pristine")
    return Setup(args, cache, root / "pristine", _compiled(proc.stdout))


def test_the_precompile_compiles_into_the_job_cache(native: Setup) -> None:
    assert native.precompile["fxgraph_cache_miss"] > 0, native.precompile
    assert native.precompile["dir"] == str(native.cache)
    assert native.precompile["compiler"] == "inductor"
    assert any((native.pristine / "inductor").iterdir())


def test_after_the_precompile_three_lrs_and_a_resume_compile_nothing(
    native: Setup, tmp_path: Path
) -> None:
    """The lr reaches the compiled update as a tensor: a new lr is the same graph (cache hit)."""
    cache = tmp_path / "cache"
    shutil.copytree(native.pristine, cache)  # only what the precompile wrote
    common = [*native.args, "--max-steps", "6", "--checkpoint-every", "4"]
    for lr in ("0.01", "0.02", "0.05"):
        out = tmp_path / f"lr-{lr}"
        proc = run_trainer([*common, "--lr", lr, "--output-dir", str(out)], env=_env(cache))
        assert proc.returncode == 0, proc.stderr[-3000:]
        _assert_nothing_compiled(out)
    (out / "checkpoints" / "ckpt-00000006.pt").unlink()  # resume the last one from step 4
    (out / "checkpoints" / "ckpt-00000006.json").unlink()
    proc = run_trainer([*common, "--lr", "0.05", "--output-dir", str(out)], env=_env(cache))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [e["step"] for e in events(proc.stdout, "resumed")] == [4]
    _assert_nothing_compiled(out)


@pytest.fixture(scope="module")
def straight(native: Setup, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An unbroken run: 1 process, both shards as 2 accumulated micro-batches per step."""
    out = tmp_path_factory.mktemp("straight")
    args = [*native.args, "--max-steps", str(STEPS), "--log-every", "1"]
    proc = run_trainer(
        [*args, "--grad-accum-steps", "2", "--output-dir", str(out)], env=_env(native.cache)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_sigterm_then_resume_ends_with_the_weights_of_an_unbroken_run(
    native: Setup, straight: Path, tmp_path: Path
) -> None:
    base = [*native.args, "--max-steps", str(STEPS), "--log-every", "1", "--grad-accum-steps", "2"]
    stopped, env = tmp_path / "stopped", _env(native.cache)
    proc = signal_when_logged([*base, "--output-dir", str(stopped)], step=3, env=env)
    assert proc.returncode == contract.EXIT_PREEMPTED, proc.stderr[-3000:]
    (step,) = [e["step"] for e in events(proc.stdout, "checkpoint")]
    assert 3 <= step < STEPS
    resumed = run_trainer([*base, "--output-dir", str(stopped)], env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [e["step"] for e in events(resumed.stdout, "resumed")] == [step]
    assert summary(straight)["device"] == "native"
    got, want = final_weights(stopped), final_weights(straight)
    for name, value in want.items():
        assert torch.equal(got[name], value), name
    _assert_nothing_compiled(straight)


def test_two_processes_stop_together_and_resume_to_what_one_process_accumulates(
    native: Setup, straight: Path, tmp_path: Path
) -> None:
    """gloo DDP around the compiled model: 2 ranks x 4 samples = 1 rank x 2 micro-batches of 4."""
    base = [*native.args, "--max-steps", str(STEPS), "--log-every", "1", "--output-dir"]
    ddp, env, launcher = tmp_path / "ddp", _env(native.cache), contract.TORCHRUN_MODULE
    stop = signal_when_logged([*base, str(ddp)], 3, 2, launcher=launcher, env=env)
    assert stop.returncode == contract.EXIT_PREEMPTED, stop.stderr[-3000:]
    (step,) = [e["step"] for e in events(stop.stdout, "checkpoint")]  # rank 0 writes it
    resumed = run_trainer([*base, str(ddp)], nproc=2, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [e["step"] for e in events(resumed.stdout, "resumed")] == [step]
    assert summary(ddp)["world_size"] == 2
    _assert_nothing_compiled(ddp)  # the 1-process precompile served 2 processes
    one, two = final_weights(straight), final_weights(ddp)
    for name, value in one.items():
        torch.testing.assert_close(two[name], value, atol=2e-5, rtol=1e-4, msg=name)


def test_a_checkpoint_moves_between_the_cpu_and_the_native_runtime(
    native: Setup, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    cpu = [arg if arg != "native" else "cpu" for arg in native.args]
    cpu += ["--output-dir", str(out), "--checkpoint-every", "2", "--log-every", "2"]
    assert main([*cpu, "--max-steps", "2"]) == 0  # eager CPU writes step 2
    native_args = [*native.args, "--output-dir", str(out), "--log-every", "2", "--max-steps", "4"]
    proc = run_trainer(native_args, env=_env(native.cache))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [e["step"] for e in events(proc.stdout, "resumed")] == [2]
    assert summary(out)["device"] == "native" and summary(out)["steps"] == 4
    assert main([*cpu, "--max-steps", "6"]) == 0  # and eager CPU takes the native checkpoint
    assert summary(out)["device"] == "cpu" and summary(out)["resumed_from_step"] == 4


def test_backend_flag_defaults_to_auto_and_accepts_the_operators_names() -> None:
    assert parse_args(["bert-pretrain"]).backend == "auto"
    for name in contract.BACKENDS:
        assert parse_args(["bert-pretrain", contract.BACKEND_FLAG, name]).backend == name


def test_bf16_is_autocast_over_fp32_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """TorchNeuron's mixed precision: weights (and so checkpoints) stay fp32; nothing compiles."""
    from trainium_trainer import models
    from trainium_trainer.device import make_runtime
    from trainium_trainer.native import CPU_COMPILER, NativeRuntime, _Autocast

    monkeypatch.delenv(contract.ENV_CACHE_DIR, raising=False)
    rt = make_runtime(contract.BACKEND_NATIVE)
    assert isinstance(rt, NativeRuntime) and rt.compiler == CPU_COMPILER
    model = models.bert_pretraining(models.bert_config("tiny", 64))
    rt.prepare_model(model, "bf16")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    wrapped = rt.wrap_model(model)  # torch.compile is lazy: no compile until the first call
    assert isinstance(getattr(wrapped, "_orig_mod", None), _Autocast)
    assert rt.report()["compile_cache"]["fxgraph_cache_miss"] == 0
