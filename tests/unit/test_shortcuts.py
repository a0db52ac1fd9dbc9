"""One flag turns each library-internals shortcut off, back to the library's own behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import kopf
import pytest
from kubernetes.client import Configuration
from support import REPO, example_spec
from test_footprint import PROBE

from trainium_operator.api import shortcuts
from trainium_operator.api.shortcuts import ENV
from trainium_operator.build import builders
from trainium_operator.runtime import essence


@pytest.mark.parametrize(
    ("value", "on"),
    [
        (None, {"essence", "model-configuration", "cel-cli"}),
        ("all", {"essence", "model-configuration", "cel-cli"}),
        ("none", set()),
        ("essence, cel-cli", {"essence", "cel-cli"}),
        ("model-configuration", {"model-configuration"}),
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


def _copies_in_one_build(monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """How often a train-stage build deep-copies the client Configuration, and the job."""
    spec, owner = example_spec("bert-large-pretrain.yaml")
    monkeypatch.setattr(Configuration, "_default", Configuration())
    copies = []
    real_copy = Configuration.__deepcopy__

    def counting_copy(self: Configuration, memo: Any) -> Any:
        copies.append(1)
        return real_copy(self, memo)

    monkeypatch.setattr(Configuration, "__deepcopy__", counting_copy)
    job = builders.build_vcjob(spec, owner, "train")
    return len(copies), json.dumps(job, sort_keys=True)


def test_off_each_model_copies_the_configuration_and_the_job_is_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, "none")
    off, job_off = _copies_in_one_build(monkeypatch)
    monkeypatch.setenv(ENV, "model-configuration")
    on, job_on = _copies_in_one_build(monkeypatch)
    assert (on, job_on) == (1, job_off)
    assert off >= 2  # one per ApiClient TorchX makes for the pod overlay (per model before 37)


def test_off_the_cel_cli_is_loaded() -> None:
    path = os.pathsep.join(str(REPO / d) for d in ("operator", "trainer"))
    env = {**os.environ, "PYTHONPATH": path, ENV: "none"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert "rich" in out.stdout, out.stdout
