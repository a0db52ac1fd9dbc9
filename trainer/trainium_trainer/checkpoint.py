"""Atomic, checksummed checkpoints on rank 0, pruning, and finding the latest good one.

A checkpoint is written to a temp file in the same directory, fsynced, then renamed; then its
manifest (size and SHA-256) is written the same way. A checkpoint counts only with its manifest,
so a write killed midway is never taken; one whose bytes no longer match is skipped on resume and
set aside, so it neither loads silently nor outranks fresh checkpoints when pruning. A node-local
tier (--local-checkpoint-dir) holds the same files; resume takes the newest complete one of any.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainium_trainer.config import RunConfig, UsageError

FORMAT = 2
NAME = re.compile(r"^ckpt-(\d{8})\.pt$")
TEMP_PREFIX = ".tmp-"
#: Prefix of checkpoints set aside because their bytes do not match their manifest.
CORRUPT_PREFIX = "corrupt-"
_CHUNK = 1 << 24


def checkpoint_path(directory: Path, step: int) -> Path:
    """Zero-padded names sort by step."""
    return directory / f"ckpt-{step:08d}.pt"


def manifest_path(path: Path) -> Path:
    """The manifest beside a checkpoint: ckpt-00000010.pt -> ckpt-00000010.json."""
    return path.with_suffix(".json")


def complete_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of checkpoints with a manifest, oldest first; temp files never match."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := NAME.match(p.name))]
    return sorted((step, p) for step, p in found if manifest_path(p).is_file())


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks (checkpoints are GBs)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write(path: Path, step: int, save: Callable[[Path], None]) -> None:
    """Write a checkpoint atomically, then its manifest: the manifest makes it count.

    A failed write leaves nothing behind (a checkpoint without its manifest would only take
    space), so the disk holds exactly the complete checkpoints it held before.
    """
    atomic_write(path, save)
    try:
        manifest: dict[str, Any] = {"format": FORMAT, "step": step, "bytes": path.stat().st_size}
        manifest["sha256"] = sha256(path)
        text = json.dumps(manifest, sort_keys=True) + "\n"
        atomic_write(manifest_path(path), lambda temp: write_text(temp, text))
    except BaseException:
        path.unlink(missing_ok=True)
        raise


#: torch.save's own words for a failed write (caffe2/serialize/inline_container.cc).
_WRITE_FAILED = ("file write failed", "No space left on device", "Disk quota exceeded")


def copy(source: Path, path: Path) -> None:
    """Copy a complete checkpoint to another tier, atomically, then its manifest (same bytes)."""
    atomic_write(path, lambda temp: _copy_bytes(source, temp))
    try:
        text = manifest_path(source).read_text(encoding="utf-8")
        atomic_write(manifest_path(path), lambda temp: write_text(temp, text))
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _copy_bytes(source: Path, target: Path) -> None:
    """shutil.copyfile without its return value (atomic_write wants a None writer)."""
    shutil.copyfile(source, target)


def write_failure(exc: BaseException) -> str | None:
    """Why a write failed when the storage refused it (full, over quota); None otherwise."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return os.strerror(exc.errno)
    if isinstance(exc, RuntimeError):
        return next((words for words in _WRITE_FAILED if words in str(exc)), None)
    return None


def write_text(path: Path, text: str) -> None:
    """Path.write_text without its return value (atomic_write wants a None writer)."""
    path.write_text(text, encoding="utf-8")


def verify(path: Path) -> None:
    """Raise ValueError unless the file's size and SHA-256 match its manifest."""
    manifest = json.loads(manifest_path(path).read_text(encoding="utf-8"))
    size = path.stat().st_size
    if size != manifest["bytes"]:
        raise ValueError(f"{path.name}: {size} bytes, manifest says {manifest['bytes']}")
    if sha256(path) != manifest["sha256"]:
        raise ValueError(f"{path.name}: SHA-256 does not match its manifest")


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
        manifest_path(path).unlink(missing_ok=True)  # first: without it the file never counts
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
    """Verify one checkpoint against its manifest, then read it (our own files: full unpickle)."""
    verify(path)
    state = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path.name} is not a format-{FORMAT} checkpoint")
    return state


def set_aside(path: Path) -> None:
    """Rename a bad checkpoint and its manifest out of the ckpt-* namespace (kept for forensics)."""
    for item in (path, manifest_path(path)):
        with contextlib.suppress(FileNotFoundError):  # another rank may have moved it already
            item.rename(item.with_name(CORRUPT_PREFIX + item.name))


def newest_first(directories: Sequence[Path], upto: int | None = None) -> list[tuple[int, Path]]:
    """Complete checkpoints of every tier, newest step first (a tie: the earlier tier first)."""
    found = [
        (step, tier, path)
        for tier, directory in enumerate(directories)
        for step, path in complete_checkpoints(directory)
        if upto is None or step <= upto
    ]
    return [(step, path) for step, _, path in sorted(found, key=lambda f: (-f[0], f[1]))]


def load_latest(
    directory: Path | Sequence[Path], quarantine: bool = False, upto: int | None = None
) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint (of any tier, at most step `upto`) that verifies and loads.

    Bad ones are reported (and set aside).
    """
    tiers = [directory] if isinstance(directory, Path) else list(directory)
    for _, path in newest_first(tiers, upto):
        try:
            return path, load(path)
        except Exception as exc:  # any unreadable file: fall back to the previous one
            print(f"warning: skipping unreadable checkpoint {path}: {exc}", file=sys.stderr)
            if quarantine:
                set_aside(path)
    return None


def tiers(cfg: RunConfig) -> list[Path]:
    """Where checkpoints live: the shared volume, then the node-local tier if there is one."""
    local = [cfg.local_checkpoint_dir] if cfg.local_checkpoint_dir else []
    return [cfg.checkpoint_dir, *local]


def resolve_resume(
    cfg: RunConfig, is_main: bool, upto: int | None = None
) -> tuple[Path, dict[str, Any]] | None:
    """What --resume asks for: auto (latest good one of any tier, if any), never, or a PATH."""
    if cfg.resume == "never" or cfg.extract_graphs_only:
        return None  # graph extraction must trace every step from the start
    if cfg.resume == "auto":
        return load_latest(tiers(cfg), quarantine=is_main, upto=upto)
    path = Path(cfg.resume)
    if not path.is_file():
        raise UsageError(f"--resume {cfg.resume}: no such checkpoint file")
    try:
        return path, load(path)
    except Exception as exc:
        raise UsageError(f"--resume {cfg.resume}: unreadable checkpoint ({exc})") from exc
