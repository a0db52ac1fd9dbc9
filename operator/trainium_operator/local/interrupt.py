"""Ctrl-C during `trainium run`: stop as a SIGTERM stops a gang on the cluster, and resume later.

TorchX's local scheduler starts each stage in a session of its own, so the terminal's SIGINT
reaches only `trainium run` (TorchX's handler raises its SignalException there). The run then
cancels the live stage (SIGTERM to torchrun, which the trainer answers with a checkpoint),
writes status.json as `Suspended` with reason `Interrupted` and the last checkpoint, and says so
on one line; exit 130, as a shell reports a command ended by SIGINT. The next `trainium run` of
the same job keeps that output folder, so the trainer resumes from the checkpoint
(`--resume auto`).
"""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainium_operator.domain.lifecycle import Decision
from trainium_operator.domain.model import Condition, Phase

#: The Running condition's reason on a run stopped by Ctrl-C.
REASON = "Interrupted"
#: 128 + SIGINT: what a shell reports for a command ended by Ctrl-C (SIGTERM: 143).
EXIT_CODE = 128 + signal.SIGINT


class Interrupted(Exception):
    """The run was stopped by Ctrl-C (or SIGTERM); the message is the one line to print."""

    def __init__(self, line: str, code: int = EXIT_CODE) -> None:
        super().__init__(line)
        self.code = code


def signal_of(exc: BaseException) -> signal.Signals | None:
    """SIGINT for a KeyboardInterrupt, or TorchX's SignalException's SIGINT or SIGTERM."""
    if isinstance(exc, KeyboardInterrupt):
        return signal.SIGINT
    sigval = getattr(exc, "sigval", None)
    return sigval if sigval in (signal.SIGINT, signal.SIGTERM) else None


def cause(signum: signal.Signals) -> str:
    """How the message names the signal: Ctrl-C is what a person pressed."""
    return "Ctrl-C" if signum == signal.SIGINT else signum.name


def decision(stopped: Decision, message: str) -> Decision:
    """The suspended decision of a stopped run, its Running condition saying Ctrl-C stopped it."""
    conds = tuple(
        Condition("Running", "False", REASON, message) if c.type == "Running" else c
        for c in stopped.conditions
    )
    return replace(stopped, phase=Phase.SUSPENDED, message=message, conditions=conds)


def message(
    name: str, checkpoint: dict[str, Any] | None, stage: str | None, by: str = "Ctrl-C"
) -> str:
    """What status.json and the one line say: where the next run starts."""
    if checkpoint is not None:
        return (
            f"interrupted ({by}); checkpoint at step {checkpoint['step']}: the next "
            f"`trainium run` of {name} resumes from it"
        )
    if stage == "precompile":
        return (
            f"interrupted ({by}) during the precompile: the next `trainium run` of {name} "
            "compiles again"
        )
    return (
        f"interrupted ({by}) before a checkpoint: the next `trainium run` of {name} trains afresh"
    )


def resumable(status_file: Path, key: str) -> dict[str, Any] | None:
    """The checkpoint an interrupted earlier run of these graphs (cache key) left, if any."""
    try:
        status = json.loads(status_file.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(status, dict) or status.get("phase") != Phase.SUSPENDED.value:
        return None
    running = [c for c in status.get("conditions") or [] if c.get("type") == "Running"]
    if not running or running[0].get("reason") != REASON:
        return None
    if (status.get("cache") or {}).get("key") not in (None, key):
        return None  # the job's graphs changed since: train afresh
    checkpoint = status.get("lastCheckpoint")
    return checkpoint if isinstance(checkpoint, dict) else None
