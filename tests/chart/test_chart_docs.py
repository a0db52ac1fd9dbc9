"""The chart's README.md is generated from values.yaml's `# --` comments and documents every
value (helm-docs style): `make chart-docs` regenerates it."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import yaml

from helmchart import CHART, REPO


def chart_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_docs", REPO / "scripts" / "chart-docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def leaves(node: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every value that is not a non-empty mapping."""
    if isinstance(node, dict) and node:
        return [p for k, v in node.items() for p in leaves(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")]


def test_readme_is_generated_from_values() -> None:
    assert (CHART / "README.md").read_text() == chart_docs().render(), (
        "charts/trainium-operator/README.md is stale: run `make chart-docs`"
    )


def test_every_value_is_documented_by_itself_or_a_parent() -> None:
    text = (CHART / "values.yaml").read_text()
    keys = {k for k, _ in chart_docs().documented(text)}
    undocumented = [
        leaf for leaf in leaves(yaml.safe_load(text))
        if not any(leaf == k or leaf.startswith(k + ".") for k in keys)
    ]  # fmt: skip
    assert not undocumented, f"add a `# --` comment in values.yaml for: {undocumented}"


def test_descriptions_are_not_empty() -> None:
    docs = chart_docs().documented((CHART / "values.yaml").read_text())
    assert docs and all(desc for _, desc in docs)
