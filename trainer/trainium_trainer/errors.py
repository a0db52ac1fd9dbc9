"""How a run ends early on purpose (no torch import: __main__ maps these to exit codes)."""

from __future__ import annotations

from pathlib import Path


class NonFiniteLoss(Exception):
    """The loss (or weights) became NaN/inf: stop before anything non-finite is saved."""

    def __init__(self, step: int, what: str, last_checkpoint: int) -> None:
        kept = f"step {last_checkpoint}" if last_checkpoint else "none"
        super().__init__(
            f"{what} at step {step}; nothing saved from it (latest good checkpoint: {kept})"
        )
        self.step = step


class Preempted(Exception):
    """SIGTERM arrived: every rank stopped at the same step, after its checkpoint was written."""

    def __init__(self, step: int) -> None:
        super().__init__(f"SIGTERM: stopped after step {step}, checkpointed; a rerun resumes there")
        self.step = step


class DiskFull(Exception):
    """A checkpoint could not be written for lack of space: the previous one stays (exit 2)."""

    def __init__(self, path: Path, free: int, cause: str, last_checkpoint: int) -> None:
        kept = (
            f"the previous one (step {last_checkpoint}) is kept" if last_checkpoint else "none yet"
        )
        super().__init__(
            f"cannot write checkpoint {path}: {cause} ({_size(free)} free on {path.parent}); "
            f"{kept}; free space or lower --keep-checkpoints"
        )
        self.path = path


def _size(n: int) -> str:
    """Bytes in binary units, one decimal: what df -h shows."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
