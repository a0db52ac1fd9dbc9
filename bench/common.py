"""What every bench script shares: the import path, process read-outs, percentiles, tables."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for path in (REPO / "tests", REPO / "tests" / "cluster", REPO / "operator", REPO / "trainer"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident set size in MB (VmRSS; VmHWM: the peak so far)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for pid {pid}")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank), q in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def free_port() -> int:
    """A free loopback TCP port (torchrun's rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SMOKE_HELP = (
    "a smoke size (seconds, not figures): the script still runs end to end (make bench-smoke)"
)


def parse(parser: argparse.ArgumentParser, argv: list[str] | None, **smoke: object) -> Any:
    """parser's arguments, plus --smoke: with it, `smoke`'s sizes replace the given ones."""
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.smoke:
        unknown = set(smoke) - set(vars(args))
        assert not unknown, f"smoke sizes for unknown options: {sorted(unknown)}"
        for name, value in smoke.items():
            setattr(args, name, value)
    return args
