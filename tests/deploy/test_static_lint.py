"""hadolint on every Dockerfile, yamllint on hand-written YAML (values.yaml and deploy/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# docker/trainer.Dockerfile belongs to the trainer; linted here too once it exists.
DOCKERFILES = sorted((REPO / "docker").glob("*.Dockerfile"))


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


def test_the_operator_dockerfile_exists() -> None:
    assert REPO / "docker" / "operator.Dockerfile" in DOCKERFILES


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=[p.name for p in DOCKERFILES])
def test_hadolint(dockerfile: Path) -> None:
    proc = run(str(BIN / "hadolint"), str(dockerfile.relative_to(REPO)))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_yamllint_values_and_deploy() -> None:
    proc = run(str(BIN / "yamllint"), "--strict", "charts/trainium-operator/values.yaml", "deploy/")
    assert proc.returncode == 0, proc.stdout + proc.stderr
