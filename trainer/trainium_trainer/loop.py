"""The training loop: XLA-friendly steps, closures for logging and checkpoints, exact resume.

XLA discipline: fixed batch shapes, one graph per step kind, no host reads in the hot loop (the
loss is summed on device and read in a step closure), logging and checkpoints in step closures.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainium_trainer import checkpoint, optim
from trainium_trainer.config import RunConfig
from trainium_trainer.device import Batch, Runtime
from trainium_trainer.metrics import MetricsWriter, merge_summary
from trainium_trainer.tasks import Task, build_task

StepHook = Callable[[int], None]


@dataclasses.dataclass
class TrainState:
    """Host-side bookkeeping, updated only inside step closures."""

    step: int = 0
    resumed_from: int = 0
    initial_loss: float | None = None
    final_loss: float | None = None
    clock: float = dataclasses.field(default_factory=time.perf_counter)
    started: float = dataclasses.field(default_factory=time.perf_counter)
    logged_step: int = 0


@dataclasses.dataclass
class Trainer:
    """One run: model, optimizer, schedule and the runtime they live on."""

    cfg: RunConfig
    rt: Runtime
    task: Task
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    metrics: MetricsWriter
    state: TrainState

    @property
    def samples_per_step(self) -> int:
        """Global samples per optimizer step: batch x accumulation x ranks."""
        return self.cfg.batch_size * self.cfg.grad_accum_steps * self.rt.world_size


def step_seed(seed: int, rank: int, step: int) -> int:
    """Dropout seed of one (rank, step): a resumed run draws the same masks as an unbroken one."""
    return (seed * 1_000_003 + rank * 10_007 + step) % (2**63)


def train_step(model: nn.Module, batches: Iterator[Batch], t: Trainer) -> torch.Tensor:
    """Accumulate gradients over micro-batches, reduce, clip, update; returns the loss on device."""
    cfg, rt = t.cfg, t.rt
    total = torch.zeros((), device=rt.device)
    for micro in range(cfg.grad_accum_steps):
        batch = next(batches)
        with rt.no_sync(model, sync=micro == cfg.grad_accum_steps - 1):
            loss = model(**batch).loss / cfg.grad_accum_steps
            loss.backward()
        total = total + loss.detach().float()
    rt.reduce_gradients(t.optimizer)
    if cfg.max_grad_norm > 0:
        nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    t.optimizer.step()
    t.scheduler.step()
    t.optimizer.zero_grad(set_to_none=True)
    return total


def _log(t: Trainer, step: int, loss_sum: torch.Tensor, lr: float) -> None:
    """Step closure: read the device loss sum (the only host read) and emit one record."""
    st = t.state
    loss = float(loss_sum.item()) / (step - st.logged_step)
    now = time.perf_counter()
    samples = t.samples_per_step * (step - st.logged_step)
    sps = samples / max(now - st.clock, 1e-9)
    st.logged_step, st.clock = step, now
    st.final_loss = loss
    if st.initial_loss is None:
        st.initial_loss = loss
    if t.rt.is_main:
        record = {"step": step, "loss": loss, "lr": lr, "samples_per_second": sps}
        t.metrics.log({**record, "tokens_per_second": sps * t.cfg.seq_len})


def _save(t: Trainer, step: int) -> None:
    """Step closure: rank 0 writes a complete checkpoint atomically and prunes old ones."""
    if not t.rt.is_main or t.cfg.extract_graphs_only:
        return
    st = t.state
    payload = {
        "format": checkpoint.FORMAT,
        "step": step,
        "model": t.rt.to_cpu(t.task.model.state_dict()),
        "optimizer": t.rt.to_cpu(t.optimizer.state_dict()),
        "scheduler": t.scheduler.state_dict(),
        "data_position": step * t.cfg.grad_accum_steps,
        "world_size": t.rt.world_size,
        "rng": {**checkpoint.rng_state(), **t.rt.rng_state()},
        "losses": {"initial": st.initial_loss, "final": st.final_loss},
    }
    path = checkpoint.checkpoint_path(t.cfg.checkpoint_dir, step)
    checkpoint.atomic_write(path, lambda temp: t.rt.save(payload, temp))
    checkpoint.prune(t.cfg.checkpoint_dir, t.cfg.keep_checkpoints)
    print(f"checkpoint step={step} path={path}", flush=True)


def _due(step: int, every: int, last: int) -> bool:
    """Every `every` steps, and always at the last step."""
    return step == last or (every > 0 and step % every == 0)


def run(t: Trainer, batches: Iterator[Batch], on_step: StepHook | None = None) -> None:
    """The hot loop from the resumed step to --max-steps."""
    cfg, rt, st = t.cfg, t.rt, t.state
    model = rt.wrap_model(t.task.model)
    model.train()
    window: torch.Tensor | None = None  # loss summed on device since the last log
    for step in range(st.step + 1, cfg.max_steps + 1):
        rt.reseed(step_seed(cfg.seed, rt.rank, step))
        loss = train_step(model, batches, t)
        window = loss if window is None else window + loss
        if step == st.step + 1 or _due(step, cfg.log_every, cfg.max_steps):
            rt.step_closure(_log, (t, step, window, t.scheduler.get_last_lr()[0]))
            window = None
        if _due(step, cfg.checkpoint_every, cfg.max_steps):
            rt.step_closure(_save, (t, step))
        rt.mark_step()
        if on_step is not None:
            on_step(step)
    st.step = max(st.step, cfg.max_steps)


def _restore(t: Trainer, path: Path, saved: dict[str, Any]) -> None:
    """Put model, optimizer, schedule, RNG and loss bookkeeping back where the checkpoint was."""
    t.task.model.load_state_dict(saved["model"])
    t.optimizer.load_state_dict(saved["optimizer"])
    t.scheduler.load_state_dict(saved["scheduler"])
    checkpoint.restore_rng(saved["rng"])
    t.rt.set_rng_state(saved["rng"])
    st, losses = t.state, saved["losses"]
    st.step = st.resumed_from = st.logged_step = int(saved["step"])
    st.initial_loss, st.final_loss = losses["initial"], losses["final"]
    if t.rt.is_main:
        print(f"resumed step={st.step} path={path}", flush=True)


def build_trainer(cfg: RunConfig, rt: Runtime) -> Trainer:
    """Task, device placement, precision, optimizer and schedule, then resume if asked."""
    task = build_task(cfg, rt.rank, rt.world_size)
    if cfg.precision == "bf16":  # cast the model, not XLA_DOWNCAST_BF16 (deprecated in 2.4+)
        task.model.to(torch.bfloat16)
    task.model.to(rt.device)
    optimizer = optim.build_optimizer(task.model, cfg.optimizer, cfg.lr)
    scheduler = optim.build_scheduler(optimizer, cfg.warmup_steps, cfg.max_steps)
    resume = checkpoint.resolve_resume(cfg)
    state = TrainState()
    writer_enabled = rt.is_main and not cfg.extract_graphs_only
    resumed_from = int(resume[1]["step"]) if resume else 0
    metrics = MetricsWriter(cfg.output_dir, writer_enabled, resumed_from)
    trainer = Trainer(cfg, rt, task, task.model, optimizer, scheduler, metrics, state)
    if resume is not None:
        _restore(trainer, *resume)
    return trainer


def summarize(t: Trainer, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """summary.json on rank 0 (skipped when extracting graphs: those outputs are invalid)."""
    st = t.state
    steps_run = st.step - st.resumed_from
    elapsed = max(time.perf_counter() - st.started, 1e-9)
    values = {
        "task": t.cfg.task,
        "initial_loss": st.initial_loss,
        "final_loss": st.final_loss,
        "steps": st.step,
        "samples_per_second": t.samples_per_step * steps_run / elapsed,
        "resumed_from_step": st.resumed_from,
        "world_size": t.rt.world_size,
        "device": t.rt.kind,
        "precision": t.cfg.precision,
        **(extra or {}),
    }
    if t.rt.is_main and not t.cfg.extract_graphs_only:
        return merge_summary(t.cfg.output_dir, values)
    return values


def train(cfg: RunConfig, rt: Runtime, on_step: StepHook | None = None) -> dict[str, Any]:
    """Build, resume, run to --max-steps, write the summary (on_step: tests observe steps)."""
    t = build_trainer(cfg, rt)
    batches = t.task.batches(cfg, start=t.state.step * cfg.grad_accum_steps)
    try:
        run(t, rt.loader(batches), on_step)
    finally:
        t.metrics.close()
    rt.barrier()
    return summarize(t)
