"""The one switch for the operator's uses of libraries' internals, each measured (BENCHMARKS.md).

`TRAINIUM_LIBRARY_SHORTCUTS` is "all" (the default), "none", or a comma-separated list of the
names below. Each shortcut is a measured win that leans on a library's internals; turning one
off gives the library's own behaviour (the A/B in BENCHMARKS.md, issue 18), e.g. to rule a
shortcut out when a library upgrade changes what it leans on. The names, and the upstream issue
each one works around:

- `essence`: kopf's diff-base deep-copies every watched body to diff it, for kinds no changing
  handler reads (`essence.LeanDiffBase`; no upstream issue found in nolar/kopf).
- `cel-cli`: `import cel` loads its interactive CLI (`celcore`; no upstream issue found in
  hardbyte/python-common-expression-language).

A third, `model-configuration` (one shared client Configuration per build), was removed with
kubernetes 37: its models copy nothing, and builds measured the same with it on and off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ENV = "TRAINIUM_LIBRARY_SHORTCUTS"
NAMES = frozenset({"essence", "cel-cli"})


def enabled(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the shortcut `name` is on (read at each use: cheap, and a test can flip it)."""
    assert name in NAMES, name
    value = (os.environ if environ is None else environ).get(ENV, "all").strip().lower()
    if value in ("all", ""):
        return True
    if value == "none":
        return False
    return name in {part.strip() for part in value.split(",")}
