"""The training loop: XLA-friendly steps, closures for logging and checkpoints, exact resume.

XLA discipline: fixed batch shapes, one graph per step kind, no host reads in the hot loop (the
loss is summed on device and read in a step closure), logging and checkpoints in step closures.
A step's graph depends only on whether it logs: everything the step reads (weights, optimizer
state, the loss window, the lr) is device data before the first step, fresh or resumed, and no
per-step value enters as a Python scalar. So training has two step kinds, a plain and a log
(checkpoint) step, plus the state set-up of a fresh start: the precompile stage meets them all
(issue 21).
The loss is checked for NaN/inf only where it is read anyway: at log steps, and every checkpoint
step is a log step, so nothing non-finite is ever saved.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from trainium_trainer import contract, export, optim, persist
from trainium_trainer.background import Writer
from trainium_trainer.config import RunConfig, for_world_size
from trainium_trainer.control import Clock, Control
from trainium_trainer.device import Batch, Runtime
from trainium_trainer.errors import NonFiniteLoss, Preempted
from trainium_trainer.live import LiveMetrics
from trainium_trainer.metrics import MetricsWriter
from trainium_trainer.tasks import Task, build_task

StepHook = Callable[[int], None]


@dataclasses.dataclass
class TrainState:
    """Host-side bookkeeping, updated only inside step closures."""

    step: int = 0
    resumed_from: int = 0
    #: Global samples consumed at resumed_from (0 on a fresh start): where the data continues.
    resumed_samples: int = 0
    initial_loss: float | None = None
    final_loss: float | None = None
    clock: float = dataclasses.field(default_factory=time.perf_counter)
    started: float = dataclasses.field(default_factory=time.perf_counter)
    logged_step: int = 0
    last_checkpoint: int = 0
    #: Host seconds this rank spent in its steps since the last log before their gradient sync
    #: (data, forward, accumulation micro-steps): its rank-local share of the step time.
    local_seconds: float = 0.0


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
    control: Control
    live: LiveMetrics = dataclasses.field(default_factory=LiveMetrics)
    writer: Writer = dataclasses.field(default_factory=Writer)

    @property
    def samples_per_step(self) -> int:
        """Global samples per optimizer step: batch x accumulation x ranks."""
        return self.cfg.batch_size * self.cfg.grad_accum_steps * self.rt.world_size

    def samples_at(self, step: int) -> int:
        """Global samples consumed once `step` is done (the global batch is constant in a run)."""
        st = self.state
        return st.resumed_samples + (step - st.resumed_from) * self.samples_per_step


def step_seed(seed: int, rank: int, step: int) -> int:
    """Dropout seed of one (rank, step): a resumed run draws the same masks as an unbroken one.

    Never 0 or 1: torch_xla embeds those scalars as constants, which would change the graph.
    """
    return (seed * 1_000_003 + rank * 10_007 + step) % (2**63 - 2) + 2


def train_step(model: nn.Module, batches: Iterator[Batch], t: Trainer) -> torch.Tensor:
    """Accumulate gradients over micro-batches, reduce, clip, update; returns the loss on device."""
    cfg, rt = t.cfg, t.rt
    began = time.perf_counter()
    total = torch.zeros((), device=rt.device)
    for micro in range(cfg.grad_accum_steps):
        batch = next(batches)
        last = micro == cfg.grad_accum_steps - 1
        with rt.no_sync(model, sync=last):
            loss = model(**batch).loss / cfg.grad_accum_steps
            if last:  # the backward that waits for the other ranks comes next
                t.state.local_seconds += time.perf_counter() - began
            loss.backward()
        total = total + loss.detach().float()
    rt.reduce_gradients(t.optimizer)
    if cfg.max_grad_norm > 0:
        nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    t.optimizer.step()
    t.scheduler.step()
    t.optimizer.zero_grad(set_to_none=True)
    return total


def _nonfinite(model: nn.Module) -> torch.Tensor:
    """How many weights are NaN/inf, on device: a step's update can break a finite-loss model."""
    return torch.stack([(~torch.isfinite(p.detach())).sum() for p in model.parameters()]).sum()


def _checks(rt: Runtime, window: torch.Tensor, model: nn.Module) -> torch.Tensor:
    """[rank-mean loss sum, non-finite weight count] on device, read in one transfer."""
    return torch.stack([rt.mean_over_ranks(window).reshape(()), _nonfinite(model).float()])


def _prepare(t: Trainer) -> torch.Tensor:
    """Optimizer state and a zero loss window as device data; returns the window.

    The window comes from the host as a 1-element tensor (fresh device data, no graph); the
    state of a fresh start is set up in one small graph here, so that the first step traces like
    every later one, and like the first step after a resume.
    """
    init = getattr(t.optimizer, "init_state", None)
    if callable(init):
        init()
    window = torch.zeros(1, dtype=torch.float32).to(t.rt.device)
    t.rt.mark_step()
    return window


def _log(t: Trainer, step: int, checks: torch.Tensor, lr: float) -> None:
    """Step closure: read the rank-mean loss and the non-finite weight count, check, log.

    This is the loop's only host read; every checkpoint step is a log step, so nothing
    non-finite is saved. Weights are equal on all ranks, so every rank stops at the same step.
    """
    st = t.state
    loss_sum, bad = checks.tolist()
    loss = loss_sum / (step - st.logged_step)
    if not math.isfinite(loss):
        raise NonFiniteLoss(step, f"non-finite loss {loss} (mean over ranks)", st.last_checkpoint)
    if bad:
        raise NonFiniteLoss(step, f"{int(bad)} non-finite weights", st.last_checkpoint)
    now = time.perf_counter()
    samples = t.samples_per_step * (step - st.logged_step)
    sps = samples / max(now - st.clock, 1e-9)
    st.logged_step, st.clock = step, now
    st.final_loss = loss
    if st.initial_loss is None:
        st.initial_loss = loss
    t.live.node_steps(node_step_seconds(t, step - st.logged_step))
    st.local_seconds = 0.0
    record = {"step": step, "loss": loss, "lr": lr, "samples_per_second": sps}
    record["samples"] = t.samples_at(step)
    record["tokens_per_second"] = sps * t.cfg.seq_len
    t.live.log(record)  # every rank: each node's server shows the same rank-mean loss
    if t.rt.is_main:
        t.metrics.log(record)


def node_step_seconds(t: Trainer, steps: int) -> dict[int, float]:
    """Each node's rank-local seconds per step since the last log (its slowest rank), by the
    node's index in the gang: every rank offers its own, every rank learns all (stragglers)."""
    index = float(os.environ.get(contract.ENV_NODE_INDEX, "") or -1)
    mine = [index, t.state.local_seconds / max(steps, 1)]
    out: dict[int, float] = {}
    for node, seconds in t.rt.gather_host(mine):
        if node >= 0:
            out[int(node)] = max(out.get(int(node), 0.0), seconds)
    return out


def _due(step: int, every: int, last: int) -> bool:
    """Every `every` steps, and always at the last step."""
    return step == last or (every > 0 and step % every == 0)


def run(t: Trainer, batches: Iterator[Batch], on_step: StepHook | None = None) -> None:
    """The hot loop from the resumed step to --max-steps (or to an agreed SIGTERM stop).

    A background checkpoint write still in flight is waited for on the way out, however it ends.
    """
    try:
        _steps(t, batches, on_step)
        persist.flush(t)  # the last step's checkpoint is durable before evaluation and export
    except BaseException:
        with contextlib.suppress(Exception):  # it still lands; the first error is the outcome
            persist.flush(t)
        raise
    finally:
        t.writer.close()


def _steps(t: Trainer, batches: Iterator[Batch], on_step: StepHook | None) -> None:
    """The steps themselves: train, agree, log, checkpoint (closures), stop when agreed."""
    cfg, rt, st = t.cfg, t.rt, t.state
    model = rt.wrap_model(t.task.model)
    model.train()
    window = _prepare(t)  # loss summed on device since the last log
    for step in range(st.step + 1, cfg.max_steps + 1):
        rt.reseed(step_seed(cfg.seed, rt.rank, step))
        loss = train_step(model, batches, t)
        window = window + loss
        agreed = t.control.decide()
        save = agreed.save or _due(step, cfg.checkpoint_every, cfg.max_steps)
        if save or step == st.step + 1 or _due(step, cfg.log_every, cfg.max_steps):
            lr = t.scheduler.get_last_lr()[0]
            # Every log step checks the weights too: log and checkpoint steps share one graph.
            rt.step_closure(_log, (t, step, _checks(rt, window, t.model), lr))
            window = torch.zeros_like(window)  # an output of this step: device data for the next
        if save:
            rt.step_closure(persist.save, (t, step))
            t.control.saved()
        rt.mark_step()
        persist.poll(t)  # a background write that landed counts from here (event, report)
        if on_step is not None:
            on_step(step)
        if agreed.stop:
            persist.flush(t)  # SIGTERM: what is pending lands before the grace period ends
            rt.barrier()  # rank 0's checkpoint is on disk before any rank exits
            raise Preempted(step)
    st.step = max(st.step, cfg.max_steps)


def build_trainer(cfg: RunConfig, rt: Runtime, clock: Clock = time.monotonic) -> Trainer:
    """Accumulation for this world size, task, device, optimizer and schedule, then resume."""
    cfg = for_world_size(cfg, rt.world_size)
    global_batch = cfg.batch_size * cfg.grad_accum_steps * rt.world_size
    resume = persist.resolve_resume(cfg, rt)
    samples = persist.resume_samples(cfg, *resume, global_batch) if resume else 0
    task = build_task(cfg)
    rt.prepare_model(task.model, cfg.precision)
    _tie_weights(task.model)
    optimizer = optim.build_optimizer(task.model, cfg.optimizer, cfg.lr)
    rt.wrap_optimizer(optimizer)
    scheduler = optim.build_scheduler(optimizer, cfg.warmup_steps, cfg.max_steps)
    writer_enabled = rt.is_main and not cfg.extract_graphs_only
    resumed_from = int(resume[1]["step"]) if resume else 0
    metrics = MetricsWriter(cfg.output_dir, writer_enabled, resumed_from)
    control = Control(rt, cfg.checkpoint_minutes, clock)
    state = TrainState(resumed_samples=samples)
    t = Trainer(cfg, rt, task, task.model, optimizer, scheduler, metrics, state, control)
    if resume is not None:
        persist.restore(t, *resume)
    t.live.start(state.step, cfg.max_steps, state.last_checkpoint, samples)
    t.live.shape(rt.world_size, global_batch, cfg.grad_accum_steps)
    return t


def _tie_weights(model: nn.Module) -> None:
    """Re-tie shared weights after the move to the device, as AWS's BERT script does.

    Moving to XLA replaces each parameter with a new one, which unties BERT's decoder from the
    word embeddings (48 parameters instead of 46; ~31 M extra, drifting, at BERT-large).
    """
    tie = getattr(model, "tie_weights", None)
    if callable(tie):
        tie()


def train(
    cfg: RunConfig, rt: Runtime, on_step: StepHook | None = None, clock: Clock = time.monotonic
) -> dict[str, Any]:
    """Build, resume, run to --max-steps, evaluate, export, summarize (on_step: tests observe)."""
    t = build_trainer(cfg, rt, clock)
    cfg = t.cfg  # with the accumulation of this world size
    batches = t.task.batches(cfg, rt.rank, rt.world_size, start=t.state.resumed_samples)
    if cfg.metrics_port is not None and not cfg.extract_graphs_only:
        t.live.serve(cfg.metrics_port)
    try:
        with t.control.handling_sigterm():
            run(t, rt.loader(batches), on_step)
    finally:
        t.metrics.close()
        t.live.close()
        if rt.is_main and (report := rt.report()):
            t.metrics.event("runtime", **report)  # also when stopped (compile-cache hits)
    results = export.evaluate(t.task, cfg, rt) if not cfg.extract_graphs_only else {}
    if rt.is_main and not cfg.extract_graphs_only:
        results["model_dir"] = str(export.save_pretrained(t.task, cfg, rt))
        results["tokenizer"] = t.task.tokenizer_source
    rt.barrier()
    return persist.summarize(t, results)
