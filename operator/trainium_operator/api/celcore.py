"""The compiled CEL core without the `cel` package's interactive CLI.

`cel/__init__.py` imports its CLI (prompt_toolkit, rich, typer, pygments: ~10 MB resident in the
operator) before the compiled core, and the operator only evaluates rules. A CLI that is already
loaded is kept. A shortcut (`shortcuts.py`, "cel-cli"): a stand-in module in `sys.modules`.
"""

from __future__ import annotations

import sys
import types

from trainium_operator.api import shortcuts

if shortcuts.enabled("cel-cli"):
    sys.modules.setdefault("cel.cli", types.ModuleType("cel.cli"))
import cel

__all__ = ["cel"]
