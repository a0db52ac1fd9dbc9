"""The container's termination message: the last complete checkpoint, and the outcome line.

The kubelet reads the file once the container has exited and keeps its last 4096 bytes
(kuberuntime getTerminationMessage: tail.ReadAtMost), so the checkpoint line goes last and the
whole message stays well under that. The file is a bind mount of a fresh per-container file:
rename cannot replace a mount point, so each update is one write at offset 0, then a truncate
to its length; a process killed between the two leaves the new text whole, ahead of stale bytes.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping
from pathlib import Path

from trainium_trainer import contract

#: A report longer than this drops its path (an --output-dir of any length stays within budget).
MAX_REPORT = 1024
#: What is left of the kubelet's 4096 bytes for the outcome line, with room to spare.
MAX_OUTCOME = contract.TERMINATION_MESSAGE_LIMIT - MAX_REPORT - 512
_PREFIX = '{"' + contract.CHECKPOINT_REPORT_KEY + '"'


def now() -> str:
    """RFC 3339 UTC, second precision, as Kubernetes writes timestamps."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def report_line(step: int, path: Path, when: str, extra: Mapping[str, int] | None = None) -> str:
    """One JSON line naming a complete checkpoint; without its path if that is too long.

    extra: more facts of the checkpoint (contract.REPORT_SAMPLES, REPORT_WORLD_SIZE).
    """
    body: dict[str, object] = {"step": step, "time": when, "path": str(path), **(extra or {})}
    line = json.dumps({contract.CHECKPOINT_REPORT_KEY: body})
    if len(line) > MAX_REPORT:
        del body["path"]
        line = json.dumps({contract.CHECKPOINT_REPORT_KEY: body})
    return line


def is_report(line: str) -> bool:
    """Whether a line is a checkpoint report (the operator parses it; the rest is prose)."""
    return line.startswith(_PREFIX)


def overwrite(fd: int, text: str) -> None:
    """Replace the file's contents in one write, then cut what an older, longer text left."""
    data = text.encode("utf-8")
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))


def report_checkpoint(
    target: Path | None, step: int, path: Path, extra: Mapping[str, int] | None = None
) -> None:
    """After a complete checkpoint: leave its report as the whole message (None: no report)."""
    if target is None:
        return
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        overwrite(fd, report_line(step, path, now(), extra) + "\n")
    finally:
        os.close(fd)


def leave_outcome(target: Path, line: str) -> None:
    """The outcome line first (cut to fit), then the checkpoint report already there, if any.

    Only a file that exists is written (Kubernetes mounts it): outside a pod this is a no-op,
    raising FileNotFoundError for the caller to ignore.
    """
    fd = os.open(target, os.O_RDWR)
    try:
        old = os.pread(fd, contract.TERMINATION_MESSAGE_LIMIT, 0).decode("utf-8", "replace")
        reports = [ln for ln in old.splitlines() if is_report(ln)]
        text = line[:MAX_OUTCOME] + "\n" + "".join(f"{r}\n" for r in reports[-1:])
        overwrite(fd, text)
    finally:
        os.close(fd)
