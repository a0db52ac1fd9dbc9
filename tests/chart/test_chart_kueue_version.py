"""The minimum Kueue version has one source, the chart's `trainium.dev/kueue-min-version`
annotation (Chart.yaml); README's Kueue section states the same release."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "trainium-operator" / "Chart.yaml"
ANNOTATION = "trainium.dev/kueue-min-version"


def minimum() -> tuple[int, int, int]:
    """The chart's minimum Kueue version as (major, minor, patch)."""
    text = yaml.safe_load(CHART.read_text())["annotations"][ANNOTATION]
    major, minor, patch = (int(p) for p in str(text).split("."))
    return major, minor, patch


def test_readme_states_the_charts_minimum_kueue_version() -> None:
    major, minor, patch = minimum()
    readme = REPO.joinpath("README.md").read_text()
    stated = set(re.findall(r"Kueue v(\d+)\.(\d+)(?:\.(\d+))? or later", readme))
    assert stated, "README states no 'Kueue vX.Y or later'"
    want = {(str(major), str(minor), str(patch) if patch else "")}
    assert stated <= want | {(str(major), str(minor), "")}, (stated, want)


def test_readme_names_the_annotation() -> None:
    assert ANNOTATION in REPO.joinpath("README.md").read_text()
