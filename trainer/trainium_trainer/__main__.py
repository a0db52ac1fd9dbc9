"""`python -m trainium_trainer TASK [options]`: parse, pick the device, train, exit.

Outcomes a caller must tell apart get their own exit code and one line on stderr (no traceback):
a mistake the user can fix (2; a full disk at a checkpoint too), a diverged loss (3), a SIGTERM
stop after checkpointing (143).
Anything else is a bug and keeps its traceback. The line also goes to the container's termination
log, where Kubernetes shows it in the pod status, ahead of the last checkpoint's report.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path

from trainium_trainer import contract, termination
from trainium_trainer.config import UsageError, parse_args
from trainium_trainer.errors import DiskFull, NonFiniteLoss, Preempted


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script and of torchrun's `-m trainium_trainer`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [contract.PREFLIGHT_COMMAND]:
        from trainium_trainer import preflight

        return preflight.main(args[1:])
    if args[:1] == [contract.STANDBY_COMMAND]:
        from trainium_trainer import standby

        return standby.main(args[1:])
    try:
        cfg = parse_args(argv)
        from trainium_trainer.device import make_runtime
        from trainium_trainer.loop import train

        rt = make_runtime(cfg.backend)
        try:
            train(cfg, rt)
        finally:
            rt.close()
    except (UsageError, DiskFull) as exc:
        return _fail(f"error: {exc}", contract.EXIT_USAGE)
    except NonFiniteLoss as exc:
        return _fail(f"error: {exc}", contract.EXIT_DIVERGED)
    except Preempted as exc:
        return _fail(f"stopped: {exc}", contract.EXIT_PREEMPTED)
    return 0


def _fail(line: str, code: int) -> int:
    """Print the one line and leave it where Kubernetes picks up a termination message.

    The checkpoint report already there stays after it; outside a pod there is no file.
    """
    print(line, file=sys.stderr, flush=True)
    with contextlib.suppress(OSError):
        termination.leave_outcome(Path(contract.TERMINATION_LOG), line)
    return code


if __name__ == "__main__":
    sys.exit(main())
