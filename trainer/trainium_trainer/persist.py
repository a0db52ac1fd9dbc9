"""A run's state on disk: checkpoint writes (a step closure), resume, and summary.json."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainium_trainer import checkpoint, optim, termination
from trainium_trainer.config import RunConfig
from trainium_trainer.errors import DiskFull
from trainium_trainer.metrics import merge_summary

if TYPE_CHECKING:
    from trainium_trainer.loop import Trainer


def save(t: Trainer, step: int) -> None:
    """Step closure: rank 0 writes a complete, checksummed checkpoint and prunes old ones.

    It runs after the step's log closure, which raised already if the loss was not finite.
    """
    previous, t.state.last_checkpoint = t.state.last_checkpoint, step
    if not t.rt.is_main or t.cfg.extract_graphs_only:
        t.live.checkpoint(step)  # other nodes: rank 0 writes it in this same step
        return
    st = t.state
    # One batched device-to-host transfer for the model and the optimizer together.
    tensors = t.rt.to_cpu({"model": t.model.state_dict(), "optimizer": t.optimizer.state_dict()})
    payload = {
        "format": checkpoint.FORMAT,
        "step": step,
        **tensors,
        "scheduler": t.scheduler.state_dict(),
        "data_position": step * t.cfg.grad_accum_steps,
        "world_size": t.rt.world_size,
        "rng": {**checkpoint.rng_state(), **t.rt.rng_state()},
        "losses": {"initial": st.initial_loss, "final": st.final_loss},
    }
    path = checkpoint.checkpoint_path(t.cfg.checkpoint_dir, step)
    try:
        checkpoint.write(path, step, lambda temp: torch.save(payload, temp))
    except (OSError, RuntimeError) as exc:
        cause = checkpoint.write_failure(exc)
        if cause is None:
            raise
        free = shutil.disk_usage(path.parent).free
        raise DiskFull(path, free, cause, previous) from exc
    checkpoint.prune(t.cfg.checkpoint_dir, t.cfg.keep_checkpoints)
    t.live.checkpoint(step)
    t.metrics.event("checkpoint", step=step, path=str(path))
    _report(t.cfg, step, path)


def _report(cfg: RunConfig, step: int, path: Path) -> None:
    """Name the checkpoint in the termination message; a failed report never stops training."""
    try:
        termination.report_checkpoint(cfg.checkpoint_report, step, path)
    except OSError as exc:
        print(f"warning: checkpoint report {cfg.checkpoint_report}: {exc}", file=sys.stderr)


def resolve_resume(cfg: RunConfig, is_main: bool) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint to resume from (rank 0 also sets aside the ones that fail to verify)."""
    return checkpoint.resolve_resume(cfg, is_main)


def restore(t: Trainer, path: Path, saved: dict[str, Any]) -> None:
    """Put model, optimizer, schedule, RNG and loss bookkeeping back where the checkpoint was."""
    t.task.model.load_state_dict(saved["model"])
    t.optimizer.load_state_dict(saved["optimizer"])
    t.scheduler.load_state_dict(saved["scheduler"])
    replaced = optim.set_peak_lr(t.scheduler, t.cfg.lr)
    checkpoint.restore_rng(saved["rng"])
    t.rt.set_rng_state(saved["rng"])
    st, losses = t.state, saved["losses"]
    st.step = st.resumed_from = st.logged_step = st.last_checkpoint = int(saved["step"])
    st.initial_loss, st.final_loss = losses["initial"], losses["final"]
    if not t.rt.is_main:
        return
    t.metrics.event("resumed", step=st.step, path=str(path))
    if replaced is not None:  # the command line wins over the checkpoint, and says so
        t.metrics.event("lr_changed", step=st.step, checkpoint_lr=replaced, lr=t.cfg.lr)


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
        **t.rt.report(),
        **(extra or {}),
    }
    if t.rt.is_main and not t.cfg.extract_graphs_only:
        return merge_summary(t.cfg.output_dir, values)
    return values
