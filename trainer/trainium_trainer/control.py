"""When to stop and when to checkpoint besides --checkpoint-every: SIGTERM and a wall clock.

Kubernetes sends SIGTERM and waits the grace period before SIGKILL (torchrun forwards it to every
worker and waits too). Ranks receive it at different moments, so each step every rank offers its
local view (signal seen? checkpoint minutes passed?) and all take the element-wise max over ranks:
every rank stops, and checkpoints, at the same step. The exchange is host-only (a few ints over
gloo), so it never reads the device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import time
from collections.abc import Callable, Iterator
from types import FrameType

from trainium_trainer.device import Runtime

Clock = Callable[[], float]


@dataclasses.dataclass
class Decision:
    """What all ranks agreed on for one step."""

    stop: bool
    save: bool


class Control:
    """The SIGTERM flag and the checkpoint timer, agreed on across ranks once per step."""

    def __init__(self, rt: Runtime, minutes: float, clock: Clock = time.monotonic) -> None:
        self.rt = rt
        self.period = minutes * 60.0
        self.clock = clock
        self.last_save = clock()
        self.signalled = False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """Only set a flag: the step in flight finishes, then all ranks agree to stop."""
        self.signalled = True

    @contextlib.contextmanager
    def handling_sigterm(self) -> Iterator[None]:
        """Catch SIGTERM for the run's duration; the previous handler comes back afterwards."""
        previous = signal.signal(signal.SIGTERM, self._on_signal)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    def decide(self) -> Decision:
        """Agree with every rank on stopping and saving after this step."""
        due = self.period > 0 and self.clock() - self.last_save >= self.period
        stop, save = self.rt.agree([int(self.signalled), int(due)])
        return Decision(stop=bool(stop), save=bool(save or stop))

    def saved(self) -> None:
        """Restart the checkpoint timer (a checkpoint was just scheduled)."""
        self.last_save = self.clock()
