"""The real-cluster tier: a control plane from TRAINIUM_CLUSTER_ASSETS, fake nodes, the operator.

Session fixtures: `cluster` (etcd, kube-apiserver, kube-controller-manager, Volcano), `kubelet`
(fake Trainium nodes and the fake kubelet that plays their pods), `installed` (the chart rendered
with `helm template` and applied server-side as a user would, CRD included), `operator` (the
product as a process with the chart's ServiceAccount token). Module fixture `kueue`: real Kueue,
only for the modules that ask for it (its pod webhook would refuse every pod while it is down,
so it leaves nothing registered behind). Without TRAINIUM_CLUSTER_ASSETS
every test here is skipped (tests/conftest.py does not even collect this directory then).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import procs
from cluster import Cluster, install_chart, kubectl_binary, wait_until
from harness import OPERATORS, OperatorProcess
from helmchart import CHART, HELM, REPO, ensure_helm, helm
from kubelet import NODES, FakeKubelet
from kueue import Kueue, admitted_of_finished
from kueuesetup import flavor_fixture, kueue_alive_fixture, queued_fixture  # noqa: F401
from realtrainer import nodes_fixture, running_fixture, shards_fixture, trainer_fixture  # noqa: F401

ASSETS_ENV = "TRAINIUM_CLUSTER_ASSETS"
RELEASE, OPERATOR_NS = "trainium-operator", "trainium-system"
#: The operator reads and writes progress often here (the defaults are 30 s and 60 s).
PROGRESS_ENV = {
    "TRAINIUM_PROGRESS_INTERVAL_SECONDS": "2",
    "TRAINIUM_PROGRESS_WRITE_SECONDS": "4",
    "TRAINIUM_FIRST_STEP_ALLOWANCE_SECONDS": "0",
}


@pytest.fixture(scope="session")
def cluster_dir() -> Path:
    """Where the tier keeps certificates, logs and the audit log (kept after the session)."""
    return Path(tempfile.mkdtemp(prefix="trainium-tier-"))


@pytest.fixture(scope="session")
def cluster(cluster_dir: Path) -> Iterator[Cluster]:
    """The control plane, up until the session ends."""
    assets = os.environ.get(ASSETS_ENV)
    if not assets:
        pytest.skip(f"{ASSETS_ENV} is not set (make test-cluster TRAINIUM_CLUSTER_ASSETS=DIR)")
    control = Cluster(Path(assets).resolve(), cluster_dir)
    try:
        control.start()
        yield control
    finally:
        control.stop()


@pytest.fixture(scope="session")
def kubelet(cluster: Cluster) -> Iterator[FakeKubelet]:
    """The fake kubelet of every fake node (all Ready, untainted, FSx CSI registered)."""
    fake = FakeKubelet(cluster.api, cluster.kubelet_cert)
    for name, kind in NODES.items():
        fake.add_node(name, kind)
    fake.start()
    yield fake
    fake.stop()
    assert not fake.errors, f"the fake kubelet hit errors: {fake.errors[:5]}"


@pytest.fixture(scope="session")
def chart_manifests(cluster: Cluster) -> str:
    """The chart as `helm template` renders it (one operator replica, CRD included)."""
    if ensure_helm() is None:
        pytest.skip("helm missing: make helm")
    return helm("template", RELEASE, str(CHART), "-n", OPERATOR_NS).stdout


def readme_commands() -> list[list[str]]:
    """Each command of the README's bash blocks, continuation lines joined, no comments."""
    text = (REPO / "README.md").read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                out.append(argv)
    return out


@pytest.fixture(scope="session")
def readme_install(cluster: Cluster, chart_manifests: str) -> list[str]:
    """README's install lines, run as written on the tier: `helm install` (then uninstalled)."""
    [install] = [c for c in readme_commands() if c[:2] == ["helm", "install"]]
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
    env["PATH"] = f"{Path(HELM).parent}:{Path(kubectl_binary()).parent}:{env['PATH']}"
    proc = subprocess.run(install, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"{shlex.join(install)}: {proc.stderr}"
    status = helm("status", RELEASE, "-n", OPERATOR_NS, "-o", "json", "--kubeconfig",
                  str(cluster.kubeconfig)).stdout  # fmt: skip
    assert json.loads(status)["info"]["status"] == "deployed"
    helm("uninstall", RELEASE, "-n", OPERATOR_NS, "--wait", "--kubeconfig", str(cluster.kubeconfig))
    return install


@pytest.fixture(scope="session")
def installed(
    cluster: Cluster, kubelet: FakeKubelet, chart_manifests: str, readme_install: list[str]
) -> str:
    """The chart applied server-side as a user would; returns the kubeconfig of its SA.

    README's `helm install` ran first (readme_install) and was uninstalled; its namespace and
    CRD stay, as they do for a user (the chart keeps the CRD on uninstall).
    """
    return str(install_chart(cluster, chart_manifests, RELEASE, OPERATOR_NS))


@pytest.fixture(scope="session")
def operator(cluster: Cluster, installed: str) -> Iterator[OperatorProcess]:
    """The operator process under the chart's RBAC, started once for the session."""
    command = [sys.executable, "-m", "trainium_operator", "operator", "--standalone",
               "--all-namespaces"]  # fmt: skip
    proc = OperatorProcess(command, cluster.root / "operator.log", env={"KUBECONFIG": installed})
    # No AWS region or credentials from the host: FSx lookups fail the same way everywhere.
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        proc.env.pop(name, None)
    proc.env.update(
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=str(cluster.root / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(cluster.root / "no-aws-credentials"),
    )
    # Issue 19 in seconds, not minutes (the chart's progressIntervalSeconds, progressWriteSeconds
    # and firstStepAllowanceSeconds): rank 0 read every 2 s, progress written every 4 s at most.
    proc.env.update(PROGRESS_ENV)
    proc.start(timeout=60)
    yield proc
    proc.stop()


@pytest.fixture
def running_operator(operator: OperatorProcess, request: pytest.FixtureRequest) -> OperatorProcess:
    """The session's operator, running (a test that killed it gets it back); logs on failure."""
    if not operator.running:
        operator.start(timeout=60)
    request.node.stash.setdefault(OPERATORS, []).append(operator)
    return operator


@pytest.fixture
def ns(cluster: Cluster, kubelet: FakeKubelet, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (with the kubelet's plans for it)."""
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:6]
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{digest}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
    kubelet.forget(name)


@pytest.fixture(scope="module")
def kueue(
    cluster: Cluster, operator: OperatorProcess, request: pytest.FixtureRequest
) -> Iterator[Kueue]:
    """Kueue's controller manager for one module (with the module's KUEUE_CONFIG over Kueue's
    defaults, if it has one); its webhooks, objects and CRDs go with it."""
    manager = Kueue(cluster, config=getattr(request.module, "KUEUE_CONFIG", None))
    manager.start()
    try:
        yield manager
    finally:
        uninstall_kueue(manager, operator)


@pytest.fixture(autouse=True)
def _no_quota_held_by_finished_jobs(request: pytest.FixtureRequest) -> Iterator[None]:
    """Issue 41: every test that runs with the module's Kueue ends with no Workload of a
    finished TrainiumJob (Succeeded or Failed) still admitted or reserving quota in its
    namespace (polled to a deadline: the operator finishes them a moment after the job ends)."""
    if "kueue" not in request.fixturenames or "ns" not in request.fixturenames:
        yield
        return
    manager: Kueue = request.getfixturevalue("kueue")
    namespace: str = request.getfixturevalue("ns")  # set up first: torn down after this check
    yield
    if manager.popen is None:
        return
    try:
        wait_until(lambda: not admitted_of_finished(manager, namespace), procs.scaled(30),
                   "no Workload of a finished job admitted", every=0.5)  # fmt: skip
    except TimeoutError:
        held = admitted_of_finished(manager, namespace)
        raise AssertionError(f"Workloads of finished jobs still hold quota: {held}") from None


def uninstall_kueue(manager: Kueue, operator: OperatorProcess) -> None:
    """Kueue stopped and its CRDs deleted while the session's operator runs (issue 41: before,
    kopf re-opened its watch of Workloads on the deleted CRD, met 404 and exited a moment later);
    our own watches of Kueue's kinds empty their indices and look for Kueue again."""
    was = operator.process if operator.running else None
    manager.stop()
    assert was is None or (operator.running and operator.process is was), (
        f"the operator exited when Kueue was uninstalled:\n{operator.log()[-3000:]}"
    )
