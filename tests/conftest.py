"""Shared test setup: KUBECONFIG pinned before any import of kubernetes; emulator fixtures."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# The kubernetes client reads $KUBECONFIG at import time: set the path now (the file is written
# once the emulator listens), so no test can ever reach a real cluster from ~/.kube/config.
SESSION_DIR = Path(tempfile.mkdtemp(prefix="trainium-tests-"))
os.environ["KUBECONFIG"] = str(SESSION_DIR / "kubeconfig")

import procs  # noqa: E402
from harness import OPERATORS, EmulatorServer, apply, kubectl, make_emulator, write_kubeconfig  # noqa: E402
from k8s_semantics import ApiRequest  # noqa: E402
from suites import SLOW  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    procs.stop_on_sigterm()  # a run cut short still stops what its fixtures started


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reliability", action="store_true",
        help="also collect tests/reliability (minutes long; `make test-reliability`)",
    )  # fmt: skip


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/reliability runs only when asked for: it takes minutes, not seconds; tests/cluster
    only with TRAINIUM_CLUSTER_ASSETS (the real control plane's binaries, `make test-cluster`)."""
    if collection_path == Path(__file__).parent / "reliability":
        return not config.getoption("--reliability")
    if collection_path == Path(__file__).parent / "cluster":
        return not os.environ.get("TRAINIUM_CLUSTER_ASSETS")
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here not in Path(item.path).parents:
            continue
        where = Path(item.path).relative_to(here).as_posix()
        test = f"{where}::{getattr(item, 'originalname', item.name)}"  # parametrized: all
        if any(s in (where, test) or (s.endswith("/") and where.startswith(s)) for s in SLOW):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """os.environ as before each test: an xdist worker runs unit and e2e tests in one process, and
    a variable one test set (the election's Lease) reached every operator started after it."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def k8s() -> Iterator[EmulatorServer]:
    """The API emulator, serving over HTTP for kubectl, the python client and the operator."""
    server = EmulatorServer(make_emulator())
    server.start()
    write_kubeconfig(Path(os.environ["KUBECONFIG"]), server.url)
    yield server
    requests = [dataclasses.asdict(r) for r in server.emulator.api_requests]
    (SESSION_DIR / "api-requests.json").write_text(json.dumps(requests, indent=1))
    server.stop()
    shutil.rmtree(SESSION_DIR / "kube-cache", ignore_errors=True)


@pytest.fixture(scope="session")
def api_requests(k8s: EmulatorServer) -> list[ApiRequest]:
    """Every resource request the emulator served so far (live list; filter by .client)."""
    return k8s.emulator.api_requests


@pytest.fixture
def ns(k8s: EmulatorServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted (with its contents) afterwards."""
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:6]
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{digest}"
    apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """Attach the logs of operators a failed test started to its report."""
    report = yield
    if report.failed:
        for proc in item.stash.get(OPERATORS, []):
            report.sections.append((f"operator log {proc.log_path}", proc.log()[-20000:]))
    return report


LEFTOVERS = pytest.StashKey[list[str]]()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """The last resort: stop any process a helper started and nothing stopped (a harness bug)."""
    session.config.stash[LEFTOVERS] = procs.stop_leftovers()


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    if (SESSION_DIR / "api-requests.json").exists():
        terminalreporter.write_line(f"API emulator requests: {SESSION_DIR / 'api-requests.json'}")
    for line in config.stash.get(LEFTOVERS, []):
        terminalreporter.write_line(f"stopped a process no test stopped: {line}", red=True)
