"""A run's state on disk: checkpoint writes (a step closure), resume, and summary.json."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainium_trainer import checkpoint, contract, optim, termination
from trainium_trainer.config import RunConfig, UsageError
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
        # Where the data continues (world-size independent), and the shape that consumed it.
        "samples": t.samples_at(step),
        "global_batch_size": t.samples_per_step,
        "batch_size": t.cfg.batch_size,
        "grad_accum_steps": t.cfg.grad_accum_steps,
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
    extra = {
        contract.REPORT_SAMPLES: t.samples_at(step),
        contract.REPORT_WORLD_SIZE: t.rt.world_size,
    }
    _report(t.cfg, step, path, extra)


def _report(cfg: RunConfig, step: int, path: Path, extra: dict[str, int]) -> None:
    """Name the checkpoint in the termination message; a failed report never stops training."""
    try:
        termination.report_checkpoint(cfg.checkpoint_report, step, path, extra)
    except OSError as exc:
        print(f"warning: checkpoint report {cfg.checkpoint_report}: {exc}", file=sys.stderr)


def resolve_resume(cfg: RunConfig, is_main: bool) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint to resume from (rank 0 also sets aside the ones that fail to verify)."""
    return checkpoint.resolve_resume(cfg, is_main)


def saved_global_batch(saved: dict[str, Any], batch_size: int) -> int:
    """The global batch a checkpoint was trained with.

    Checkpoints before issue 28 lack it: their data_position counted micro-batches per rank, so
    it is batch x (data_position / step) x world size, with today's --batch-size.
    """
    if "global_batch_size" in saved:
        return int(saved["global_batch_size"])
    accum = int(saved["data_position"]) // max(int(saved["step"]), 1)
    return batch_size * accum * int(saved["world_size"])


def resume_samples(cfg: RunConfig, path: Path, saved: dict[str, Any], global_batch: int) -> int:
    """Global samples the checkpoint consumed: where the data continues, on any world size.

    A global batch other than the checkpoint's is refused (one line) unless
    --allow-global-batch-change: it would change the optimisation under the same schedule.
    """
    was = saved_global_batch(saved, cfg.batch_size)
    if was != global_batch and not cfg.allow_global_batch_change:
        raise UsageError(
            f"{path.name} was trained with global batch {was} "
            f"({saved.get('world_size')} ranks), this run's is {global_batch}: keep "
            f"{contract.GLOBAL_BATCH_SIZE_FLAG} {was}, or pass "
            f"{contract.ALLOW_GLOBAL_BATCH_CHANGE_FLAG}"
        )
    return int(saved.get("samples", int(saved["step"]) * was))


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
    saved_world = int(saved["world_size"])
    t.metrics.event(
        "resumed",
        step=st.step,
        path=str(path),
        samples=st.resumed_samples,
        world_size=t.rt.world_size,
        checkpoint_world_size=saved_world,
    )
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
        "samples": t.samples_at(st.step),
        "world_size": t.rt.world_size,
        "global_batch_size": t.samples_per_step,
        "grad_accum_steps": t.cfg.grad_accum_steps,
        "device": t.rt.kind,
        "precision": t.cfg.precision,
        **t.rt.report(),
        **(extra or {}),
    }
    if t.rt.is_main and not t.cfg.extract_graphs_only:
        return merge_summary(t.cfg.output_dir, values)
    return values
