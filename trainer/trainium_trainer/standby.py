"""`python -m trainium_trainer standby`: a spare node's pod, holding its node outside the world.

A spare (TrainiumJob spec.spares) is part of the gang's reservation but never joins torchrun's
world: it waits until it is stopped (SIGTERM when its gang restarts or finishes, SIGINT by
hand) and exits 0, so a spare stopped with its gang is not read as a failure.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from types import FrameType

#: What the pod's log says while it stands by.
READY_LINE = "standby: a spare node of the gang, outside the training world; waiting to be stopped"


def main(argv: Sequence[str] = (), stop: threading.Event | None = None) -> int:
    """Wait until SIGTERM or SIGINT (or `stop`, for tests); exit 0."""
    del argv  # no options
    stop = stop or threading.Event()

    def stopped(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stopped)
        signal.signal(signal.SIGINT, stopped)
    print(READY_LINE, flush=True)
    while not stop.wait(3600):
        pass
    return 0
