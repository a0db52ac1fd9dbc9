"""Fast checks of the pure parts: env contract, config, LAMB, schedule, synth data.

The data order is tested in test_elastic.py.
"""

from __future__ import annotations

import ast
import copy
import os
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
import torch
from trainer_utils import TRAINER_SRC, subprocess_env

from trainium_trainer import config, contract, data, optim, synth

PACKAGE = TRAINER_SRC / "trainium_trainer"


def _env_reads(tree: ast.AST) -> list[ast.expr]:
    """First arguments of os.environ.get / os.getenv / os.environ[...] in a module."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            name = ast.unparse(node.func)
            if name in ("os.environ.get", "os.getenv", "environ.get", "getenv"):
                found.append(node.args[0])
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("os.environ",):
            found.append(node.slice)
    return found


def test_every_env_read_is_declared_in_contract() -> None:
    reads = []
    for path in sorted(PACKAGE.glob("*.py")):
        reads += [(path.name, arg) for arg in _env_reads(ast.parse(path.read_text()))]
    assert reads, "the scan found no env reads at all: it is broken"
    for module, arg in reads:
        source = ast.unparse(arg)
        assert source.startswith("contract."), f"{module}: env name {source} not from contract"
        assert getattr(contract, source.split(".", 1)[1]) in contract.TRAINER_READS, source


def test_package_init_and_config_do_not_import_torch() -> None:
    code = "import sys, trainium_trainer, trainium_trainer.config, trainium_trainer.contract; "
    code += "assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], env=subprocess_env(), check=True, timeout=60)


def test_config_defaults_and_flags() -> None:
    cfg = config.parse_args(["bert-pretrain", "--max-steps", "7", "--resume", "never"])
    assert cfg.max_steps == 7 and cfg.resume == "never" and cfg.grad_accum_steps == 1
    assert contract.MAX_STEPS_FLAG in config.build_parser().format_help()


def test_lamb_decreases_a_quadratic() -> None:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(8, 8))
    opt = optim.Lamb([w], lr=0.05, weight_decay=0.0)
    first = None
    for _ in range(50):
        loss = (w**2).sum()
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert (w**2).sum().item() < 0.2 * first


def test_schedule_warms_up_then_decays_to_zero() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = optim.build_scheduler(opt, warmup_steps=4, max_steps=10)
    lrs = []
    for _ in range(10):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert lrs[4:] == sorted(lrs[4:], reverse=True) and sched.get_last_lr()[0] == 0.0


def test_synth_shards_have_aws_layout_and_a_learnable_nsp(tmp_path: Path) -> None:
    (path,) = synth.write_bert_shards(tmp_path, 1, 200, seq_len=32, seed=0)
    assert path.name == "synth_training_0.hdf5"
    with h5py.File(path) as f:
        assert sorted(f) == sorted(data.BERT_KEYS)
        assert f["input_ids"].shape == (200, 32)
        assert f["masked_lm_positions"].shape == (200, synth.max_predictions(32))
        labels = f["next_sentence_labels"][:]
    assert 0.3 < labels.mean() < 0.7
    inputs = data.bert_inputs({k: h5py.File(path)[k][:] for k in data.BERT_KEYS})
    assert ((inputs["labels"] != data.IGNORE_INDEX).sum(axis=1) > 0).all()


def test_synth_cli(tmp_path: Path) -> None:
    args = ["--out", str(tmp_path), "--shards", "2", "--samples-per-shard", "3", "--seq-len", "16"]
    assert synth.main(args) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "synth_training_0.hdf5",
        "synth_training_1.hdf5",
        "vocab.txt",  # the vocabulary the ids index, saved with the model by bert-pretrain
    ]


@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("name", config.OPTIMIZERS)
def test_optimizer_state_stays_fp32_for_bf16_parameters(name: str, foreach: bool) -> None:
    # One unit gradient, then 1,000 zero ones: the second moment must decay by 0.999**1000.
    # In bf16 it cannot move by less than 1/256 of itself, so it would stay at its first value.
    model = torch.nn.Linear(4, 4, bias=False).to(torch.bfloat16)
    opt = optim.build_optimizer(model, name, lr=1e-3, foreach=foreach)
    model.weight.grad = torch.ones_like(model.weight)
    opt.step()
    first = opt.state[model.weight]["exp_avg_sq"].float().clone()
    for _ in range(1000):
        model.weight.grad = torch.zeros_like(model.weight)
        opt.step()
    state = opt.state[model.weight]
    assert state["exp_avg_sq"].dtype == state["exp_avg"].dtype == torch.float32
    ratio = (state["exp_avg_sq"].float() / first).mean().item()
    assert ratio == pytest.approx(0.999**1000, rel=1e-3)
    assert model.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", config.OPTIMIZERS)
def test_the_multi_tensor_update_is_the_per_parameter_loop_bit_for_bit(
    name: str, dtype: torch.dtype
) -> None:
    """optim.FOREACH is a speed-up only: the same weights and fp32 state as the loop, exactly.

    Two groups (weight decay on and off), and a parameter without a gradient at one step.
    """
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3)
    ).to(dtype)
    twin = copy.deepcopy(model)
    runs = [
        (m, optim.build_optimizer(m, name, 1e-2, foreach=f))
        for m, f in ((model, False), (twin, True))
    ]
    for step in range(6):
        x = torch.randn(4, 8).to(dtype)
        for m, opt in runs:
            m(x).float().pow(2).sum().backward()
            if step == 2:
                m[0].bias.grad = None  # no update, and its step count stays behind
            opt.step()
            opt.zero_grad(set_to_none=True)
    (_, loop), (_, multi) = runs
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q) and p.dtype == dtype
        assert loop.state[p].keys() == multi.state[q].keys()
        for key, value in loop.state[p].items():
            assert torch.equal(value, multi.state[q][key]) and value.dtype == torch.float32
    assert loop.state[model[0].bias]["step"].item() == 5.0


def test_compiler_defaults_are_added_unless_set() -> None:
    flags = config.compiler_flags("--cache_dir=/data/neuron_cache/x_0")
    assert flags == "--cache_dir=/data/neuron_cache/x_0 --model-type=transformer"
    assert config.compiler_flags("--model-type=generic -O1") == "--model-type=generic -O1"
    assert config.compiler_flags("") == "--model-type=transformer"


def test_compiler_defaults_reach_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.ENV_NEURON_CC_FLAGS, "--cache_dir=/c")
    config.apply_compiler_defaults()  # the XLA runtime calls it before importing torch-neuronx
    assert os.environ[contract.ENV_NEURON_CC_FLAGS] == "--cache_dir=/c --model-type=transformer"


def test_set_peak_lr_rescales_the_schedule() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.2)
    sched = optim.build_scheduler(opt, warmup_steps=0, max_steps=10)
    for _ in range(4):
        opt.step()
        sched.step()
    assert optim.set_peak_lr(sched, 0.2) is None
    assert optim.set_peak_lr(sched, 0.1) == 0.2
    assert sched.get_last_lr() == [pytest.approx(0.1 * 6 / 10)]
    assert opt.param_groups[0]["lr"] == pytest.approx(0.06)
    opt.step()
    sched.step()
    assert sched.get_last_lr() == [pytest.approx(0.1 * 5 / 10)]


def test_resumed_optimizer_state_stays_fp32_for_bf16_weights() -> None:
    """torch's load_state_dict casts state to each parameter's dtype: bf16 moments get stuck."""
    w = torch.nn.Parameter(torch.randn(4, 4).to(torch.bfloat16))
    opt = optim.AdamW([w], lr=0.05)
    (w.float() ** 2).sum().backward()
    opt.step()
    saved = opt.state_dict()
    fresh = optim.AdamW([w], lr=0.05)
    fresh.load_state_dict(saved)
    state = fresh.state[w]
    assert {k: v.dtype for k, v in state.items()} == dict.fromkeys(state, torch.float32)
    assert torch.equal(state["exp_avg_sq"], saved["state"][0]["exp_avg_sq"])


def test_optimizer_state_exists_before_the_first_step() -> None:
    """A fresh start's state is set up before step 1, so step 1 traces like any step (#21)."""
    w = torch.nn.Parameter(torch.randn(4, 4))
    opt = optim.AdamW([w], lr=0.05)
    opt.init_state()
    assert set(opt.state[w]) == {"step", "exp_avg", "exp_avg_sq"}
    assert opt.lr_on_device().tolist() == pytest.approx([0.05])


@pytest.mark.parametrize(
    ("args", "steps", "want"),
    [
        ([], 10, ["--log-every", "9"]),
        (["--log-every", "5", "--checkpoint-every=1000"], 10,
         ["--log-every", "5", "--checkpoint-every", "9"]),
        (["--log-every=1", "--checkpoint-every", "0"], 3,
         ["--checkpoint-every", "0", "--log-every", "1"]),
        (["--log-every", "x"], 10, ["--log-every", "x"]),
    ],
)  # fmt: skip
def test_precompile_args_bring_every_step_kind_within_the_limit(
    args: list[str], steps: int, want: list[str]
) -> None:
    got = config.precompile_args(["bert-pretrain", *args], steps)
    assert got == ["bert-pretrain", *want]
    assert config.precompile_steps(1) == config.MIN_PRECOMPILE_STEPS == 3


def test_cpu_reseed_draws_as_manual_seed_without_formatting_a_stack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The per-step reseed (issue 26): torch.manual_seed's lazy CUDA/XPU/MTIA seeding formats
    the caller's stack each time (~0.4 ms a step); the CPU runtime seeds its generator alone."""
    import traceback

    from trainium_trainer.device import Runtime

    torch.manual_seed(1234)
    expected = torch.nn.functional.dropout(torch.ones(64), 0.5)
    stacks: list[int] = []
    real = traceback.format_stack
    monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: stacks.append(1) or real())
    Runtime().reseed(1234)
    assert torch.equal(torch.nn.functional.dropout(torch.ones(64), 0.5), expected)
    assert stacks == []
    torch.manual_seed(1234)  # the reference does format stacks: the probe sees them
    assert stacks
