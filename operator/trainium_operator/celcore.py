"""The compiled CEL core without the `cel` package's interactive CLI.

`cel/__init__.py` imports its CLI (prompt_toolkit, rich, typer, pygments: ~10 MB resident in the
operator) before the compiled core, and the operator only evaluates rules. A CLI that is already
loaded is kept.
"""

from __future__ import annotations

import sys
import types

sys.modules.setdefault("cel.cli", types.ModuleType("cel.cli"))
import cel  # noqa: E402

__all__ = ["cel"]
