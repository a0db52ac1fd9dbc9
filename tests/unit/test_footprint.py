"""The operator process does not load what it rarely or never uses (resident memory at 1,000 jobs).

boto3 is imported only for an FSx lookup; the `cel` package's interactive CLI never.
"""

from __future__ import annotations

import os
import subprocess
import sys

from support import REPO

PROBE = """
import sys
import trainium_operator.handlers
from trainium_operator import crd
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
from trainium_operator import footprint
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
