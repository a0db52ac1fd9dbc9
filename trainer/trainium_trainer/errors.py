"""How a run ends early on purpose (no torch import: __main__ maps these to exit codes)."""

from __future__ import annotations


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
