"""A run's state on disk: checkpoint writes (a step closure), resume, and summary.json."""

from __future__ import annotations

import copy
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainium_trainer import checkpoint, contract, optim, termination
from trainium_trainer.config import RunConfig, UsageError
from trainium_trainer.errors import DiskFull
from trainium_trainer.metrics import merge_summary

if TYPE_CHECKING:
    from trainium_trainer.device import Runtime
    from trainium_trainer.loop import Trainer


def save(t: Trainer, step: int) -> None:
    """Step closure: rank 0 checkpoints (in the background with --checkpoint-async).

    It runs after the step's log closure, which raised already if the loss was not finite.
    Async: the stall is a host copy of the state (Runtime.snapshot); the writer makes it durable
    while training goes on, and it counts (event, report) only once it is.
    """
    previous, t.state.last_checkpoint = t.state.last_checkpoint, step
    if not t.rt.is_main or t.cfg.extract_graphs_only:
        t.live.checkpoint(step)  # other nodes: rank 0 writes it in this same step
        return
    if not t.cfg.checkpoint_async:
        # One batched device-to-host transfer for the model and the optimizer together.
        payload = _payload(t, step, t.rt.to_cpu)
        _landed(t, [(step, _persist(t.cfg, step, payload, previous))])
        return
    _landed(t, t.writer.flush())  # the write in flight read the buffers this copy reuses
    payload = _payload(t, step, lambda state: t.rt.snapshot(state, t.writer.buffers))
    _landed(t, t.writer.submit(step, lambda: _persist(t.cfg, step, payload, previous)))


def poll(t: Trainer) -> None:
    """Once a step: count a background write that completed (or raise its error)."""
    _landed(t, t.writer.poll())


def flush(t: Trainer) -> None:
    """Wait for the background write in flight (a SIGTERM stop, the end of the run)."""
    _landed(t, t.writer.flush())


def _payload(t: Trainer, step: int, to_host: Callable[[Any], Any]) -> dict[str, Any]:
    """Everything a resume needs; to_host moves (or copies) the model and optimizer tensors."""
    st = t.state
    tensors = to_host({"model": t.model.state_dict(), "optimizer": t.optimizer.state_dict()})
    return {
        "format": checkpoint.FORMAT,
        "step": step,
        **tensors,
        "scheduler": copy.deepcopy(t.scheduler.state_dict()),
        # Where the data continues (world-size independent), and the shape that consumed it.
        "samples": t.samples_at(step),
        "global_batch_size": t.samples_per_step,
        "batch_size": t.cfg.batch_size,
        "grad_accum_steps": t.cfg.grad_accum_steps,
        "world_size": t.rt.world_size,
        "rng": {**checkpoint.rng_state(), **t.rt.rng_state()},
        "losses": {"initial": st.initial_loss, "final": st.final_loss},
    }


def _persist(cfg: RunConfig, step: int, payload: dict[str, Any], previous: int) -> Path:
    """Write the checkpoint (node-local tier first, if any), atomically; prune; its shared path.

    A refused write (full, over quota) becomes DiskFull naming the shared volume's free space.
    """
    path = checkpoint.checkpoint_path(cfg.checkpoint_dir, step)
    target = path
    try:
        if cfg.local_checkpoint_dir is not None:
            target = checkpoint.checkpoint_path(cfg.local_checkpoint_dir, step)
            checkpoint.write(target, step, lambda temp: torch.save(payload, temp))
            checkpoint.prune(cfg.local_checkpoint_dir, cfg.keep_checkpoints)
            target = path
            checkpoint.copy(checkpoint.checkpoint_path(cfg.local_checkpoint_dir, step), path)
        else:
            checkpoint.write(path, step, lambda temp: torch.save(payload, temp))
    except (OSError, RuntimeError) as exc:
        cause = checkpoint.write_failure(exc)
        if cause is None:
            raise
        free = shutil.disk_usage(target.parent).free
        raise DiskFull(target, free, cause, previous) from exc
    checkpoint.prune(cfg.checkpoint_dir, cfg.keep_checkpoints)
    return path


def _landed(t: Trainer, done: list[tuple[int, Path]]) -> None:
    """A checkpoint is durable on the shared volume: gauge, event, termination report."""
    for step, path in done:
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


def resolve_resume(cfg: RunConfig, rt: Runtime) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint to resume from (rank 0 also sets aside the ones that fail to verify).

    With a node-local tier, ranks on other nodes may see other steps: all ranks agree on the
    newest step every one of them loaded (at most a few rounds, each one step lower or more).
    """
    found = checkpoint.resolve_resume(cfg, rt.is_main)
    if cfg.local_checkpoint_dir is None or cfg.resume != "auto":
        return found  # one shared tier: every rank sees the same files
    while True:
        step = int(found[1]["step"]) if found else 0
        low, high = rt.agree([-step, step])
        if -low == high:
            return found
        found = checkpoint.resolve_resume(cfg, rt.is_main, upto=-low)


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
