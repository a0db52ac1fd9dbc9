"""suites.SLOW names what exists: a renamed test would otherwise move back into `make test`."""

from __future__ import annotations

import re
from pathlib import Path

from suites import SLOW

HERE = Path(__file__).parent


def test_every_slow_entry_names_a_directory_file_or_test_that_exists() -> None:
    for entry in SLOW:
        where, _, name = entry.partition("::")
        path = HERE / where
        assert path.is_dir() if where.endswith("/") else path.is_file(), entry
        if name:
            assert re.search(rf"^def {re.escape(name)}\(", path.read_text(), re.M), entry
