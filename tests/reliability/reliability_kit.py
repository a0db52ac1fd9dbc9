"""Helpers of the reliability suite (a module of its own: `conftest` names are ambiguous)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from fleet import Cluster
from harness import OperatorProcess

StartOperator = Callable[[Cluster], OperatorProcess]


def sigkill(proc: OperatorProcess) -> Callable[[], None]:
    """A kill switch's action: SIGKILL the operator's current process, right now."""

    def kill() -> None:
        assert proc.process is not None
        os.kill(proc.process.pid, signal.SIGKILL)

    return kill
