"""Child processes of the tests: deadlines that grow with the machine's load, none left behind.

Standard library only, so every suite (the XLA one too) can use it. A helper that starts a
process tracks it here and stops it with stop_tree() whatever happens; tests/conftest.py stops
any still tracked when the session ends, and says so, as a last resort.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
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


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> list[tuple[int, str]]:
    """Every process below pid, as (pid, start time): the start time tells a reused pid apart."""
    below: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields is not None and len(fields) > 19:
            below.setdefault(int(fields[1]), []).append((int(entry.name), fields[19]))
    found, todo = [], [pid]
    while todo:
        for child in below.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def stop_tree(proc: subprocess.Popen[Any], grace: float = 10) -> int | None:
    """SIGTERM the process (its whole group when it leads one), SIGKILL after grace; reap it;
    then SIGKILL whatever it had started that is still there. Returns its exit code.

    The group ends children such as torchrun's workers; the descendants found beforehand also
    end TorchX's replicas, which run in sessions of their own.
    """
    group = _leads_group(proc)
    below = descendants(proc.pid) if proc.returncode is None else []
    if proc.poll() is None:
        _signal(proc, signal.SIGTERM, group)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL, group)
            proc.wait(30)
    if group:  # the leader is gone; children that outlived it still have its group id
        _signal(proc, signal.SIGKILL, True)
    for pid, started in below:
        fields = _stat(pid)
        if fields is not None and fields[19] == started and fields[0] != "Z":
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    _LIVE.pop(proc.pid, None)
    return proc.returncode


@contextlib.contextmanager
def spawned(cmd: Sequence[str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """Popen in a session of its own, tracked; its whole group is stopped when the block ends."""
    proc = track(subprocess.Popen(cmd, start_new_session=True, **popen))
    try:
        yield proc
    finally:
        stop_tree(proc, grace=5)


def run(cmd: Sequence[str], timeout: float, **popen: Any) -> subprocess.CompletedProcess[str]:
    """subprocess.run(capture_output=True, text=True) that leaves no child behind.

    subprocess.run kills only the direct child on a timeout, then waits for EOF on pipes that
    its children (torchrun's workers, TorchX's replicas) still hold: a hang. Here the whole
    process group goes, and TimeoutExpired carries what was printed.
    """
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    with spawned(cmd, **pipes, **popen) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_tree(proc, grace=5)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(proc.args, timeout, out, err) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def stop_leftovers() -> list[str]:
    """Stop every tracked process still running; describe each (empty when none was left)."""
    left = []
    for proc, _ in list(_LIVE.values()):
        if proc.poll() is None:
            left.append(f"pid {proc.pid}: {' '.join(map(str, proc.args))}"[:300])
        stop_tree(proc, grace=2)
    return left


def stop_on_sigterm() -> None:
    """A SIGTERM (`timeout`, CI's cut) ends a test run as Ctrl-C does: fixtures tear down and
    the atexit stop below runs. Its default action killed pytest alone, and every control plane
    and trainer a fixture started in a session of its own ran on (issue 41's tier runs)."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


@atexit.register
def _at_exit() -> None:
    for line in stop_leftovers():
        print(f"tests/procs.py: stopped a leftover process, {line}", file=sys.stderr)
