"""`helm lint --strict`: template errors and warnings fail, with and without the optional parts."""

from __future__ import annotations

from pathlib import Path

import pytest

from helmchart import CHART, NON_DEFAULT, helm


@pytest.mark.parametrize("sets", [(), NON_DEFAULT], ids=["defaults", "non-default"])
def test_lint_strict(helm_bin: Path, sets: tuple[str, ...]) -> None:
    args = [arg for s in sets for arg in ("--set", s)]
    proc = helm("lint", "--strict", str(CHART), *args, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout
