"""Typed run configuration and the shared command line (no torch import: the operator reads it)."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from trainium_trainer import contract

TASKS = ("bert-pretrain", "text-classification", "causal-lm")
MODEL_SIZES = ("tiny", "mini", "small", "base", "large")
PRECISIONS = ("bf16", "fp32")
OPTIMIZERS = ("lamb", "adamw")
#: --backend values: the operator's (contract.BACKENDS), plain CPU, and auto (XLA if importable).
BACKEND_CHOICES = ("auto", "cpu", *contract.BACKENDS)
DEFAULT_OUTPUT_DIR = "./output"
#: neuronx-cc flags every task here needs (all are transformers), as AWS's BERT script adds them.
COMPILER_DEFAULTS = ("--model-type=transformer",)


class UsageError(Exception):
    """A mistake the user can fix (bad flag, missing data): one line on stderr, exit code 2."""


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything one training run needs; built once from argv and the environment."""

    task: str
    data_dir: Path | None
    output_dir: Path
    batch_size: int = 8
    grad_accum_steps: int = 1
    max_steps: int = 100
    seq_len: int = 64
    lr: float = 1e-3
    model_config: str = "tiny"
    checkpoint_every: int = 0
    checkpoint_minutes: float = 30.0
    keep_checkpoints: int = 3
    #: Checkpoint by a host copy and a background write (the stall: the copy only).
    checkpoint_async: bool = True
    #: A node-local tier rank 0 writes first (resume takes the newest of either); None: none.
    local_checkpoint_dir: Path | None = None
    resume: str = "auto"
    seed: int = 0
    log_every: int = 10
    precision: str = "bf16"
    optimizer: str = "adamw"
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    allow_download: bool = False
    tokenizer: str | None = None
    pretrained: str | None = None
    eval_fraction: float = 0.1
    extract_graphs_only: bool = False
    #: Where rank 0 reports each complete checkpoint (the termination-message file); None: nowhere.
    checkpoint_report: Path | None = None
    #: The port this process serves live metrics on (each node's local rank 0); None: no server.
    metrics_port: int | None = None
    #: The device layer's runtime: auto, cpu, xla or native (device.make_runtime).
    backend: str = "auto"
    #: Samples per optimizer step over all ranks; None: batch x accumulation x world, unkept.
    global_batch_size: int | None = None
    #: Whether --grad-accum-steps was given (it must then agree with --global-batch-size).
    grad_accum_given: bool = False
    #: Resume a checkpoint trained with another global batch (the data continues by samples).
    allow_global_batch_change: bool = False

    @property
    def checkpoint_dir(self) -> Path:
        """Checkpoints live beside metrics so one volume holds a job's whole state."""
        return self.output_dir / "checkpoints"


class _Parser(argparse.ArgumentParser):
    """Argparse that raises UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _positive(
    kind: type[int] | type[float], allow_zero: bool = False
) -> Callable[[str], int | float]:
    """Argparse type that rejects negative (and, unless allowed, zero) values."""

    def parse(text: str) -> int | float:
        value = kind(text)
        if value < 0 or (value == 0 and not allow_zero):
            bound = ">= 0" if allow_zero else "> 0"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    """The trainer's command line; the flag names are the contract with the operator."""
    p = _Parser(prog="python -m trainium_trainer", description=__doc__)
    p.add_argument("task", help=f"one of: {', '.join(TASKS)}")
    p.add_argument("--data-dir", type=Path, help="HDF5 shards / text files for the task")
    out_help = f"default ${contract.ENV_OUTPUT_DIR} or {DEFAULT_OUTPUT_DIR}"
    p.add_argument("--output-dir", type=Path, help=out_help)
    _add_batch_flags(p)
    p.add_argument(contract.MAX_STEPS_FLAG, dest="max_steps", type=_positive(int), default=100)
    p.add_argument("--seq-len", type=_positive(int), default=64)
    p.add_argument("--lr", type=_positive(float), default=1e-3)
    p.add_argument("--model-config", default="tiny", help=f"{'|'.join(MODEL_SIZES)} or a JSON file")
    p.add_argument("--checkpoint-every", type=_positive(int, True), default=0, help="steps; 0: off")
    p.add_argument(
        "--checkpoint-minutes",
        type=_positive(float, True),
        default=30.0,
        help="also checkpoint when this many minutes passed since the last one; 0: off",
    )
    p.add_argument("--keep-checkpoints", type=_positive(int), default=3)
    _add_async_flags(p)
    p.add_argument("--resume", default="auto", help="auto | never | PATH to a checkpoint")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=_positive(int), default=10)
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help=f"default ${contract.ENV_PRECISION} (the TrainiumJob's spec.precision) or bf16",
    )
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw", help="state kept in fp32")
    p.add_argument("--warmup-steps", type=_positive(int, True), default=0)
    p.add_argument("--max-grad-norm", type=_positive(float, True), default=1.0, help="0: off")
    p.add_argument("--allow-download", action="store_true", help="let transformers use the hub")
    _add_backend_flag(p)
    _add_text_flags(p)
    return p


def _add_batch_flags(p: argparse.ArgumentParser) -> None:
    """Per-process batch, accumulation, and the global batch that elastic runs keep."""
    p.add_argument(
        contract.BATCH_SIZE_FLAG,
        dest="batch_size",
        type=_positive(int),
        help=f"samples per process per micro-step; default ${contract.ENV_BATCH_SIZE} or 8",
    )
    p.add_argument(
        contract.GRAD_ACCUM_FLAG,
        dest="grad_accum_steps",
        type=_positive(int),
        help=f"micro-steps per optimizer step; default 1, or derived from "
        f"{contract.GLOBAL_BATCH_SIZE_FLAG} (then, if given, it must agree)",
    )
    p.add_argument(
        contract.GLOBAL_BATCH_SIZE_FLAG,
        dest="global_batch_size",
        type=_positive(int),
        help=f"samples per optimizer step over all ranks; default ${contract.ENV_GLOBAL_BATCH_SIZE}"
        f" or unset. Set: accumulation = G / (batch size x world size), from the world size at "
        "start, so a run resumes on another world size with the same batch and data order; a "
        "size that cannot keep G is refused, and so is a checkpoint trained with another G",
    )
    p.add_argument(
        contract.ALLOW_GLOBAL_BATCH_CHANGE_FLAG,
        dest="allow_global_batch_change",
        action="store_true",
        help="resume a checkpoint trained with another global batch (the data continues at the "
        "samples it consumed)",
    )


def _add_async_flags(p: argparse.ArgumentParser) -> None:
    """Checkpoints that do not stop training: a host copy, then a background write (issue 42)."""
    p.add_argument(
        "--checkpoint-async",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="copy the state to host memory and write it in the background (the step waits "
        "for the copy only; SIGTERM and the last step wait for the write); --no-checkpoint-async:"
        " write before the next step",
    )
    p.add_argument(
        "--local-checkpoint-dir",
        type=Path,
        help="node-local tier (e.g. an emptyDir) written before the shared volume; resume "
        "takes the newest complete checkpoint of either",
    )


def _add_backend_flag(p: argparse.ArgumentParser) -> None:
    """--backend: which runtime of the device layer trains (contract.BACKENDS, cpu, auto)."""
    p.add_argument(
        contract.BACKEND_FLAG,
        dest="backend",
        choices=BACKEND_CHOICES,
        default=None,
        help=f"default ${contract.ENV_BACKEND} (the TrainiumJob's spec.backend) or auto. auto: "
        "PyTorch/XLA when torch_xla imports, else CPU; native: TorchNeuron (torch.compile on "
        "the neuron device; CPU and gloo where torch-neuronx is absent)",
    )


def _add_text_flags(p: argparse.ArgumentParser) -> None:
    """Flags of the text tasks (text-classification, causal-lm); --tokenizer serves every task."""
    p.add_argument(
        "--tokenizer",
        help="local tokenizer dir (text tasks; default: built-in vocab), or the vocab.txt or "
        "tokenizer dir bert-pretrain's shards were made with (default: <data-dir>/vocab.txt)",
    )
    p.add_argument(
        "--pretrained",
        help="text tasks: start from this model (local dir, or a hub id cached in $HF_HOME)",
    )
    p.add_argument(
        "--eval-fraction",
        type=_fraction,
        default=0.1,
        help="text tasks: share of the samples held out for evaluation (0: none)",
    )


def _fraction(text: str) -> float:
    """Argparse type for a share in [0, 0.5]: at least half the data must stay for training."""
    value = float(text)
    if not 0.0 <= value <= 0.5:
        raise argparse.ArgumentTypeError(f"must be between 0 and 0.5, got {text}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> RunConfig:
    """Parse argv into a RunConfig; raises UsageError for anything the user got wrong."""
    ns = build_parser().parse_args(argv)
    if ns.task not in TASKS:
        raise UsageError(f"unknown task {ns.task!r}; expected one of: {', '.join(TASKS)}")
    output = ns.output_dir or Path(os.environ.get(contract.ENV_OUTPUT_DIR) or DEFAULT_OUTPUT_DIR)
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    values = {k: v for k, v in vars(ns).items() if k in fields}
    values["output_dir"] = output
    values["precision"] = ns.precision or _env_precision()
    values["backend"] = ns.backend or _env_backend()
    env_batch = _count(contract.ENV_BATCH_SIZE, os.environ.get(contract.ENV_BATCH_SIZE, ""))
    env_global = os.environ.get(contract.ENV_GLOBAL_BATCH_SIZE, "")
    values["batch_size"] = ns.batch_size or env_batch or 8
    values["global_batch_size"] = ns.global_batch_size or _count(
        contract.ENV_GLOBAL_BATCH_SIZE, env_global
    )
    values["grad_accum_steps"] = ns.grad_accum_steps or 1
    values["grad_accum_given"] = ns.grad_accum_steps is not None
    values["extract_graphs_only"] = extract_graphs_only()
    report = os.environ.get(contract.ENV_CHECKPOINT_REPORT)
    values["checkpoint_report"] = Path(report) if report else None
    values["metrics_port"] = _metrics_port()
    return RunConfig(**values)


#: The fewest steps in which a run meets every step kind: step 1 and the last one log, and a
#: plain step lies between them.
MIN_PRECOMPILE_STEPS = 3
#: Flags whose period decides which steps log (every checkpoint step logs too).
CADENCE_FLAGS = ("--log-every", "--checkpoint-every")


def precompile_steps(steps: int) -> int:
    """The step limit of a precompile run: at least MIN_PRECOMPILE_STEPS."""
    return max(steps, MIN_PRECOMPILE_STEPS)


def precompile_args(args: Sequence[str], steps: int) -> list[str]:
    """Training args for a precompile of `steps` steps that traces every step kind training has.

    A step's graph depends only on whether it logs (the loop keeps everything else device data),
    so the periods of --log-every and --checkpoint-every are brought below the limit: a periodic
    log and checkpoint step, the steps after them and a plain step all come before its end
    (issue 21). Graphs do not depend on the periods, so the cache entry serves training as is.
    """
    out = list(args)
    parser = build_parser()
    for flag in CADENCE_FLAGS:
        text = _flag_text(out, flag)
        default = parser.get_default(flag[2:].replace("-", "_"))
        value = int(text) if text is not None and text.isdigit() else default
        if text is not None and not text.isdigit():
            continue  # the trainer refuses it, in the precompile as in training
        if value > 0:
            out = [*without_flag(out, flag), flag, str(min(value, steps - 1))]
    return out


def _flag_text(args: Sequence[str], flag: str) -> str | None:
    """The value of the last `flag V` / `flag=V` in args (None: absent)."""
    found: str | None = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(f"{flag}="):
            found = arg.split("=", 1)[1]
    return found


def without_flag(args: Sequence[str], flag: str) -> list[str]:
    """args without any `flag V` / `flag=V`."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(f"{flag}="):
            out.append(arg)
    return out


def _metrics_port() -> int | None:
    """The operator's metrics port, served by each node's local rank 0 only (one per pod)."""
    port = os.environ.get(contract.ENV_METRICS_PORT, "")
    if not port or os.environ.get(contract.ENV_LOCAL_RANK, "0") != "0":
        return None
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"{contract.ENV_METRICS_PORT}={port!r}; expected a port number")
    return int(port)


def _count(name: str, text: str) -> int | None:
    """A positive integer the operator passes in the environment variable name; empty: None."""
    if not text:
        return None
    if not text.isdigit() or int(text) == 0:
        raise UsageError(f"{name}={text!r}; expected a positive integer")
    return int(text)


def accumulation_steps(global_batch: int, batch_size: int, world_size: int) -> int | None:
    """Micro-steps that make global_batch from batch_size on world_size ranks; None: none can."""
    steps, rest = divmod(global_batch, batch_size * world_size)
    return steps if steps > 0 and rest == 0 else None


def for_world_size(cfg: RunConfig, world_size: int) -> RunConfig:
    """cfg with the accumulation that keeps --global-batch-size on this (real) world size."""
    g, b = cfg.global_batch_size, cfg.batch_size
    if g is None:
        return cfg
    steps = accumulation_steps(g, b, world_size)
    per_micro = f"--batch-size {b} x world size {world_size} = {b * world_size}"
    if steps is None:
        raise UsageError(f"--global-batch-size {g} is not a multiple of {per_micro}")
    if cfg.grad_accum_given and cfg.grad_accum_steps != steps:
        raise UsageError(
            f"--grad-accum-steps {cfg.grad_accum_steps} disagrees with --global-batch-size {g}: "
            f"{g} / ({per_micro}) = {steps}"
        )
    return dataclasses.replace(cfg, grad_accum_steps=steps)


def _env_backend() -> str:
    """The operator passes spec.backend through the environment; unset: auto."""
    value = os.environ.get(contract.ENV_BACKEND) or "auto"
    if value not in BACKEND_CHOICES:
        raise UsageError(f"{contract.ENV_BACKEND}={value!r}; expected one of {BACKEND_CHOICES}")
    return value


def _env_precision() -> str:
    """The operator passes spec.precision (part of the cache key) through the environment."""
    value = os.environ.get(contract.ENV_PRECISION) or "bf16"
    if value not in PRECISIONS:
        raise UsageError(f"{contract.ENV_PRECISION}={value!r}; expected one of {PRECISIONS}")
    return value


def compiler_flags(current: str) -> str:
    """NEURON_CC_FLAGS plus COMPILER_DEFAULTS whose option the operator or user did not set."""
    given = {flag.split("=", 1)[0] for flag in current.split()}
    extra = [f for f in COMPILER_DEFAULTS if f.split("=", 1)[0] not in given]
    return " ".join([*current.split(), *extra])


def apply_compiler_defaults() -> None:
    """Export the task's neuronx-cc defaults before torch-neuronx reads NEURON_CC_FLAGS."""
    current = os.environ.get(contract.ENV_NEURON_CC_FLAGS, "")
    os.environ[contract.ENV_NEURON_CC_FLAGS] = compiler_flags(current)


def extract_graphs_only() -> bool:
    """True under neuron_parallel_compile or TorchNeuron's compile-only mode: persist nothing.

    Both mark a precompile run whose outputs are invalid (XLA's empty stubs, or native graphs
    compiled without being run).
    """
    values = (
        os.environ.get(contract.ENV_EXTRACT_GRAPHS_ONLY, ""),
        os.environ.get(contract.ENV_NEURONX_COMPILE_ONLY, ""),
    )
    return any(value not in ("", "0", "false") for value in values)
