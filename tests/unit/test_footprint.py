"""The operator process does not load what it rarely or never uses (resident memory at 1,000 jobs).

boto3 is imported only for an FSx lookup; the `cel` package's interactive CLI never.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import REPO

from trainium_operator.runtime import footprint

PROBE = """
import sys
import trainium_operator.runtime.handlers
from trainium_operator.api import crd
assert crd.cel.compile("self > 1") is not None  # the compiled core still works
print(sorted({m.split(".")[0] for m in sys.modules} & {"boto3", "botocore", "prompt_toolkit",
                                                       "rich", "typer", "pygments"}))
"""


def test_the_operator_imports_no_aws_sdk_and_no_cel_cli() -> None:
    path = os.pathsep.join(str(REPO / d) for d in ("operator", "trainer"))
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


ARENAS_PROBE = """
import ctypes, threading
from trainium_operator.runtime import footprint
print(footprint.cap_malloc_arenas(1))
def churn():
    for _ in range(200):
        [bytearray(4096) for _ in range(100)]
threads = [threading.Thread(target=churn) for _ in range(16)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL("libc.so.6")
libc.malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


def test_the_operator_caps_malloc_arenas_before_its_threads_start() -> None:
    """Capped at one, 16 busy threads share the main arena (uncapped, glibc adds more)."""
    path = os.pathsep.join(str(REPO / d) for d in ("operator", "trainer"))
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    env["PYTHONPATH"] = path
    out = subprocess.run(
        [sys.executable, "-c", ARENAS_PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "True"
    assert out.stderr.count("Arena ") == 1, out.stderr


class FakeLibc:
    def __init__(self) -> None:
        self.trimmed = 0

    def malloc_trim(self, pad: int) -> int:
        self.trimmed += 1
        return 1


def test_the_trimmer_trims_when_work_goes_idle_at_most_every_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    libc, now, later = FakeLibc(), [100.0], []
    monkeypatch.setattr(footprint, "_glibc", lambda: libc)
    trimmer = footprint.Trimmer(every=10.0, clock=lambda: now[0], later=lambda *a: later.append(a))
    trimmer.idle()
    assert libc.trimmed == 1 and later == []
    for t in (104.0, 109.9):  # idle again inside the window: one trim at its end, not two
        now[0] = t
        trimmer.idle()
    assert libc.trimmed == 1 and len(later) == 1 and later[0][0] == pytest.approx(6.0)
    now[0] = 110.0
    later[0][1]()  # the window ended: the burst's last frees are returned
    assert libc.trimmed == 2
    now[0] = 125.0
    trimmer.idle()
    assert libc.trimmed == 3 and len(later) == 1


def test_a_real_trim_runs_here() -> None:
    """On this glibc machine malloc_trim is found and called (elsewhere: a no-op)."""
    trimmer = footprint.Trimmer(every=0.0)
    trimmer.idle()
    assert trimmer.trims == (1 if footprint._glibc() is not None else 0)
