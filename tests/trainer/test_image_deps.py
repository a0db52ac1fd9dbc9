"""The trainer image installs only the trainer, within what the Neuron DLC pins.

pip resolves pyproject's [trainer] extra against docker/trainer-constraints.txt (the DLC's pins),
as the image build does: nothing the DLC pins may move, nothing of the operator may come along.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "docker" / "trainer-constraints.txt"
DOCKERFILE = REPO / "docker" / "trainer.Dockerfile"


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _constraints() -> dict[str, Requirement]:
    lines = CONSTRAINTS.read_text(encoding="utf-8").splitlines()
    reqs = [Requirement(ln) for ln in lines if ln.strip() and not ln.startswith("#")]
    return {canonicalize_name(r.name): r for r in reqs}


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """{name: version} pip picks for the [trainer] extra (torch comes with the DLC)."""
    trainer = _project()["optional-dependencies"]["trainer"]
    reqs = [r for r in trainer if canonicalize_name(Requirement(r).name) != "torch"]
    report = tmp_path_factory.mktemp("pip") / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    cmd += ["--report", str(report), "--constraint", str(CONSTRAINTS), *reqs]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    items = json.loads(report.read_text())["install"]
    return {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


def test_resolved_set_keeps_every_dlc_pin(resolved: dict[str, str]) -> None:
    for name, req in _constraints().items():
        if name in resolved:
            assert req.specifier.contains(resolved[name], prereleases=True), (name, resolved[name])
    assert resolved["numpy"].startswith("1.") and resolved["protobuf"].startswith("3.")
    assert resolved["transformers"].startswith("4.")


def test_resolved_set_has_nothing_of_the_operator(resolved: dict[str, str]) -> None:
    operator = {canonicalize_name(Requirement(r).name) for r in _project()["dependencies"]}
    # pyyaml comes with transformers itself, prometheus-client serves the trainer's live metrics;
    # everything else the operator needs must stay out.
    assert operator & set(resolved) == {"pyyaml", "prometheus-client"}


def test_trainer_extra_admits_the_dlc_torch() -> None:
    torch_req = next(
        Requirement(r)
        for r in _project()["optional-dependencies"]["trainer"]
        if r.startswith("torch")
    )
    pinned = _constraints()["torch"]
    (spec,) = pinned.specifier
    assert torch_req.specifier.contains(spec.version)


def test_dockerfile_installs_the_package_alone_then_the_constrained_extra() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "pip install --no-cache-dir --no-deps ." in text
    assert "--constraint /tmp/trainer-constraints.txt" in text
    assert "--constraint /tmp/dlc-freeze.txt" in text
    assert ".[trainer]" not in text  # that would pull the operator's dependencies in too
