"""One flag turns each library-internals shortcut off, back to the library's own behaviour."""

from __future__ import annotations

import os
import subprocess
import sys

import kopf
import pytest
from support import REPO
from test_footprint import PROBE

from trainium_operator.api import shortcuts
from trainium_operator.api.shortcuts import ENV
from trainium_operator.runtime import essence


@pytest.mark.parametrize(
    ("value", "on"),
    [
        (None, {"essence", "cel-cli"}),
        ("all", {"essence", "cel-cli"}),
        ("none", set()),
        ("essence, cel-cli", {"essence", "cel-cli"}),
        ("cel-cli", {"cel-cli"}),
    ],
)
def test_the_flag_names_the_shortcuts_that_are_on(value: str | None, on: set[str]) -> None:
    environ = {} if value is None else {ENV: value}
    assert {n for n in shortcuts.NAMES if shortcuts.enabled(n, environ)} == on


def test_off_kopf_builds_its_own_essence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "none")
    assert type(essence.diffbase("p", "k")) is kopf.AnnotationsDiffBaseStorage
    monkeypatch.setenv(ENV, "essence")
    assert type(essence.diffbase("p", "k")) is essence.LeanDiffBase


def test_off_the_cel_cli_is_loaded() -> None:
    path = os.pathsep.join(str(REPO / d) for d in ("operator", "trainer"))
    env = {**os.environ, "PYTHONPATH": path, ENV: "none"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert "rich" in out.stdout, out.stdout
