"""Child processes of the tests: deadlines that grow with the machine's load, none left behind.

Standard library only, so every suite (the XLA one too) can use it. A helper that starts a
process tracks it here and stops it with stop_tree() whatever happens; tests/conftest.py stops
any still tracked when the session ends, and says so, as a last resort.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
from typing import Any

#: How many times longer than on an idle machine a start-up may take (load 20 on 2 cores: 10).
MAX_SLOWDOWN = 10.0

#: Tracked processes by pid, with whether each leads a process group of its own.
_LIVE: dict[int, tuple[subprocess.Popen[Any], bool]] = {}


def slowdown() -> float:
    """How much slower than idle this machine runs now: the 1-minute load per core, at least 1."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform: assume idle
        return 1.0
    return min(MAX_SLOWDOWN, max(1.0, load / (os.cpu_count() or 1)))


def scaled(seconds: float) -> float:
    """A deadline measured on an idle machine, stretched by the load (up to MAX_SLOWDOWN)."""
    return seconds * slowdown()


def track(proc: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
    """Remember a started process, so that the session's end can stop it if nothing else did."""
    _LIVE[proc.pid] = (proc, _leads_group(proc))
    return proc


def _leads_group(proc: subprocess.Popen[Any]) -> bool:
    """Whether proc leads a process group (start_new_session=True); its pid is ours until reaped."""
    if proc.returncode is not None:  # reaped: the pid may be another process's by now
        return _LIVE.get(proc.pid, (proc, False))[1]
    try:
        return os.getpgid(proc.pid) == proc.pid
    except ProcessLookupError:
        return False


def _signal(proc: subprocess.Popen[Any], sig: signal.Signals, group: bool) -> None:
    try:
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except ProcessLookupError:
        pass


def stop_tree(proc: subprocess.Popen[Any], grace: float = 10) -> int | None:
    """SIGTERM the process (its whole group when it leads one), SIGKILL after grace; reap it.

    Returns its exit code. The group also ends children such as torchrun's workers, which a
    SIGKILL of the parent alone would leave running.
    """
    group = _leads_group(proc)
    if proc.poll() is None:
        _signal(proc, signal.SIGTERM, group)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL, group)
            proc.wait(30)
    if group:  # the leader is gone; children that outlived it still have its group id
        _signal(proc, signal.SIGKILL, True)
    _LIVE.pop(proc.pid, None)
    return proc.returncode


def stop_leftovers() -> list[str]:
    """Stop every tracked process still running; describe each (empty when none was left)."""
    left = []
    for proc, _ in list(_LIVE.values()):
        if proc.poll() is None:
            left.append(f"pid {proc.pid}: {' '.join(map(str, proc.args))}"[:300])
        stop_tree(proc, grace=2)
    return left


@atexit.register
def _at_exit() -> None:
    for line in stop_leftovers():
        print(f"tests/procs.py: stopped a leftover process, {line}", file=sys.stderr)
