"""Chart tests: every test here needs helm (fetched from npm by scripts/fetch-helm.sh)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helmchart import helm_bin  # noqa: F401  (the session fixture, shared with tests/e2e)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.chart)
