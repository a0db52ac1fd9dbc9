"""`python -m trainium_trainer TASK [options]`: parse, pick the device, train, exit.

Mistakes the user can fix exit 2 with one `error:` line and no traceback; anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from trainium_trainer.config import UsageError, parse_args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script and of torchrun's `-m trainium_trainer`."""
    try:
        cfg = parse_args(argv)
        from trainium_trainer.device import make_runtime
        from trainium_trainer.loop import train

        rt = make_runtime()
        try:
            train(cfg, rt)
        finally:
            rt.close()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
