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
