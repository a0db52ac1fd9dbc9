"""`python -m trainium_trainer.torchrun ARGS`: torchrun, exiting 128 + N when told to stop.

torchrun's agent turns the SIGTERM of a node drain or a spot reclaim into a SignalException
traceback and exit 1, and its workers' clean exit 143 into a ChildFailedError and exit 1: read as
the user's code failing, a preemption would fail the job for good. The agent still stops its
workers the same way (they checkpoint and exit 143); this wrapper only changes how it ends: one
`stopped:` line (also in the termination message) and exit 128 + the signal (issue 20).
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from trainium_trainer import contract, rendezvous, termination


def main(argv: Sequence[str] | None = None) -> int:
    """Run torch.distributed.run with this node's argv; map a signal stop to its exit code.

    Node 0 of a cluster gang gets the store host's rendezvous flags here (rendezvous.py).
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    try:
        torchrun(rendezvous.node_argv(sys.argv[1:] if argv is None else argv))
    except SignalException as exc:
        return _stopped(int(exc.sigval), "torchrun got signal")
    except ChildFailedError as exc:
        codes = {failure.exitcode for failure in exc.failures.values()}
        if not codes <= {contract.EXIT_PREEMPTED, -signal.SIGTERM}:
            raise
        return _stopped(signal.SIGTERM, "torchrun's workers got signal")
    return 0


def _stopped(signum: int, what: str) -> int:
    """Say which signal stopped the run, on stderr and in the termination message."""
    name = signal.Signals(signum).name
    line = f"stopped: {what} {signum} ({name}); its workers were told to checkpoint and stop"
    print(line, file=sys.stderr, flush=True)
    with contextlib.suppress(OSError):
        termination.leave_outcome(Path(contract.TERMINATION_LOG), line)
    return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
