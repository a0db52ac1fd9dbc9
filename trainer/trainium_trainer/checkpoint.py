"""Atomic checkpoints on rank 0, pruning, and finding the latest complete one to resume from.

A checkpoint is written to a temp file in the same directory, fsynced, then renamed: a write
killed midway leaves only a temp file, which is never taken as a checkpoint.
"""

from __future__ import annotations

import os
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainium_trainer.config import RunConfig, UsageError

FORMAT = 1
NAME = re.compile(r"^ckpt-(\d{8})\.pt$")
TEMP_PREFIX = ".tmp-"


def checkpoint_path(directory: Path, step: int) -> Path:
    """Zero-padded names sort by step."""
    return directory / f"ckpt-{step:08d}.pt"


def complete_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of finished checkpoints, oldest first; temp files never match."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := NAME.match(p.name))]
    return sorted(found)


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself (the directory entry), not only the file's bytes."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """write(temp) then fsync and rename over path; path either stays old or becomes whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f"{TEMP_PREFIX}{os.getpid()}-{path.name}")
    try:
        write(temp)
        with temp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def prune(directory: Path, keep: int) -> None:
    """Keep the newest `keep` checkpoints and drop stale temp files of killed writers."""
    for _, path in complete_checkpoints(directory)[:-keep]:
        path.unlink(missing_ok=True)
    for path in directory.glob(f"{TEMP_PREFIX}*"):
        if not path.name.startswith(f"{TEMP_PREFIX}{os.getpid()}-"):
            path.unlink(missing_ok=True)


def rng_state() -> dict[str, Any]:
    """Host generator states (python, numpy, torch CPU)."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }


def restore_rng(state: dict[str, Any]) -> None:
    """Undo rng_state()."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def load(path: Path) -> dict[str, Any]:
    """Read one checkpoint (our own files, so full unpickling is allowed)."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path.name} is not a format-{FORMAT} checkpoint")
    return state


def load_latest(directory: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that loads; a corrupt one is reported and skipped."""
    for _, path in reversed(complete_checkpoints(directory)):
        try:
            return path, load(path)
        except Exception as exc:  # any unreadable file: fall back to the previous one
            print(f"warning: skipping unreadable checkpoint {path}: {exc}", file=sys.stderr)
    return None


def resolve_resume(cfg: RunConfig) -> tuple[Path, dict[str, Any]] | None:
    """What --resume asks for: auto (latest complete, if any), never, or an explicit PATH."""
    if cfg.resume == "never" or cfg.extract_graphs_only:
        return None  # graph extraction must trace every step from the start
    if cfg.resume == "auto":
        return load_latest(cfg.checkpoint_dir)
    path = Path(cfg.resume)
    if not path.is_file():
        raise UsageError(f"--resume {cfg.resume}: no such checkpoint file")
    try:
        return path, load(path)
    except Exception as exc:
        raise UsageError(f"--resume {cfg.resume}: unreadable checkpoint ({exc})") from exc
