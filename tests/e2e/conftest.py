"""End-to-end fixtures: the real operator process against the API emulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import OPERATOR_COMMAND, EmulatorServer, OperatorProcess, kubectl, started

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "crds" / "trainiumjobs.trainium.dev.yaml"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def crd(k8s: EmulatorServer) -> Path:
    """The TrainiumJob CRD applied once per session, as `helm install` or `make crds` would."""
    kubectl("apply", "--validate=false", "-f", str(CRD))
    kubectl("wait", "--for=condition=Established", "crd/trainiumjobs.trainium.dev", "--timeout=10s")
    return CRD


@pytest.fixture
def operator(crd: Path, request: pytest.FixtureRequest, tmp_path: Path) -> OperatorProcess:
    """The operator running (liveness answered 200); stopped after the test, log on failure."""
    # The production resync (a rare backstop): events, not polling, must drive every test.
    return started(request, OperatorProcess(OPERATOR_COMMAND, tmp_path / "operator.log"))
