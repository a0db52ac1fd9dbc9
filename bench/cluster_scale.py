"""operator_scale.py --cluster: the same burst on a real API server (tests/cluster's control plane).

etcd, kube-apiserver (audit log on) and kube-controller-manager (the PV binder binds the claim)
from the tier's assets, a fresh control plane per run. Volcano's CRDs are installed but none of
its processes run: the bench's own stand-in moves each Volcano job Running then Completed, as
the emulator bench does, so the two benches differ only in the API server. Requests are the
operator's token's lines in the audit log; latencies come from the driver's watches.
"""

from __future__ import annotations

import datetime
import heapq
import threading
import time
import urllib.error
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import common
import yaml

from cluster import Api, Cluster, kubeconfig, wait_until
from fleet import WRITES, good_spec
from harness import OperatorProcess
from jobs import fsx_claim
from trainium_operator.api import naming

Obj = dict[str, Any]
NS, QUEUE, SA = "bench", "bench-queue", "bench-operator"
TJS = "/apis/trainium.dev/v1alpha1"
VCJOBS = "/apis/batch.volcano.sh/v1alpha1"
CRD = common.REPO / "crds" / "trainiumjobs.trainium.dev.yaml"
VALUES = common.REPO / "charts" / "trainium-operator" / "values.yaml"


def chart_env() -> dict[str, str]:
    """The operator environment the chart's values.yaml sets (resync, progress interval)."""
    operator = yaml.safe_load(VALUES.read_text())["operator"]
    return {
        "TRAINIUM_RESYNC_SECONDS": str(operator["resyncSeconds"]),
        "TRAINIUM_PROGRESS_INTERVAL_SECONDS": str(operator["progressIntervalSeconds"]),
    }


class BenchCluster(Cluster):
    """The tier's control plane without Volcano's processes: its CRDs and one Open queue."""

    def _volcano(self) -> None:
        self.kubectl("apply", "--server-side", "-f", str(self.assets / "volcano" / "crds"))
        self.kubectl("apply", "--server-side", "-f", str(CRD))
        self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                 "metadata": {"name": QUEUE}, "spec": {"weight": 1}}  # fmt: skip
        self.apply(queue)
        path = f"/apis/scheduling.volcano.sh/v1beta1/queues/{QUEUE}/status"
        self.api.merge_patch(path, {"status": {"state": "Open"}})
        self.kubectl("create", "namespace", NS)
        fsx_claim(self, NS)

    def operator_kubeconfig(self) -> Path:
        """A ServiceAccount token (cluster-admin): the audit log's name for the operator."""
        self.kubectl("create", "serviceaccount", SA, "-n", NS)
        self.kubectl("create", "clusterrolebinding", SA, "--clusterrole=cluster-admin",
                     f"--serviceaccount={NS}:{SA}")  # fmt: skip
        token = self.kubectl("create", "token", SA, "-n", NS, "--duration=4h").stdout.strip()
        path = self.root / "operator.kubeconfig"
        path.write_text(kubeconfig(self.server, self.pki.ca_file, token))
        return path


class Watcher:
    """The driver's view: when each object was first seen, TrainiumJob phases, phase history."""

    def __init__(self, api: Api, path: str, on_added: Callable[[Obj], None] | None = None) -> None:
        self.api, self.path, self.on_added = api, path, on_added
        self.added: dict[str, float] = {}
        self.phases: dict[str, str | None] = {}
        self.history: dict[str, list[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch {path}")

    def start(self) -> None:
        listed = wait_until(self._list, 60, f"a list of {self.path}")
        self._rv = listed["metadata"]["resourceVersion"]
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _list(self) -> Obj | None:
        """The collection; None while a new CRD's storage still answers 429."""
        try:
            return self.api.request("GET", self.path)
        except urllib.error.HTTPError as err:
            if err.code == 429:
                return None
            raise

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for event in self.api.watch(self.path, self._rv, timeout=30):
                    self._see(event)
                    if self._stop.is_set():
                        return
            except Exception as exc:  # a dropped watch: resume from the last version
                print(f"# watch {self.path}: {exc}", flush=True)
                time.sleep(0.5)

    def _see(self, event: Obj) -> None:
        obj = event["object"]
        md = obj.get("metadata") or {}
        if "resourceVersion" in md:
            self._rv = md["resourceVersion"]
        if event["type"] not in ("ADDED", "MODIFIED"):
            return
        name = md["name"]
        if name not in self.added:
            self.added[name] = time.monotonic()
            if self.on_added is not None:
                self.on_added(obj)
        phase = (obj.get("status") or {}).get("phase")
        self.phases[name] = phase
        seen = self.history.setdefault(name, [])
        if phase and (not seen or seen[-1] != phase):
            seen.append(phase)


class VolcanoStandIn:
    """Each new Volcano job to Running, then Completed, 0.2 s apart (the emulator bench's pace)."""

    def __init__(self, api: Api, step: float = 0.2) -> None:
        self.api, self.step = api, step
        self._due: list[tuple[float, int, str, str]] = []
        self._seq = 0
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(4)
        self._thread = threading.Thread(target=self._run, daemon=True, name="volcano stand-in")
        self.errors: list[str] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def added(self, job: Obj) -> None:
        self._after(job["metadata"]["name"], "Running")

    def _after(self, name: str, phase: str) -> None:
        """Patch phase in a step (Completed only once Running is stored: never out of order)."""
        with self._lock:
            self._seq += 1
            heapq.heappush(self._due, (time.monotonic() + self.step, self._seq, name, phase))
            self._lock.notify()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                wait = self._due[0][0] - time.monotonic() if self._due else 1.0
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                _, _, name, phase = heapq.heappop(self._due)
            self._pool.submit(self._patch, name, phase)

    def _patch(self, name: str, phase: str) -> None:
        path = f"{VCJOBS}/namespaces/{NS}/jobs/{name}/status"
        try:
            self.api.merge_patch(path, {"status": {"state": {"phase": phase}}})
        except Exception as exc:  # deleted meanwhile: keep a note
            self.errors.append(f"{name} {phase}: {exc}")
            return
        if phase == "Running":
            self._after(name, "Completed")


def _start(
    kind: str, command: list[str], assets: Path, workdir: Path, env: dict[str, str]
) -> tuple[Any, ...]:
    """A fresh control plane, the driver's watches, the stand-in and the operator, listing."""
    cluster = BenchCluster(assets, workdir)
    try:
        return _start_on(cluster, kind, command, workdir, env)
    except BaseException:
        cluster.stop()
        raise


def _start_on(
    cluster: BenchCluster, kind: str, command: list[str], workdir: Path, env: dict[str, str]
) -> tuple[Any, ...]:
    cluster.start()
    config = cluster.operator_kubeconfig()
    op = OperatorProcess(command, workdir / f"{kind}.log", env={"KUBECONFIG": str(config), **env})
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        op.env.pop(key, None)
    op.env.update(AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE="/nonexistent",
                  AWS_SHARED_CREDENTIALS_FILE="/nonexistent")  # fmt: skip
    volcano = VolcanoStandIn(cluster.api)
    vcjobs = Watcher(cluster.api, f"{VCJOBS}/namespaces/{NS}/jobs", on_added=volcano.added)
    tjs = Watcher(cluster.api, f"{TJS}/namespaces/{NS}/trainiumjobs")
    vcjobs.start()
    tjs.start()
    volcano.start()
    op.start(timeout=90)
    time.sleep(1)  # the initial listings are start-up cost, not per job
    return cluster, op, volcano, vcjobs, tjs


def operator_requests(cluster: Cluster, since: str) -> list[Obj]:
    """The operator token's audited requests received at or after `since` (one per auditID)."""
    user = f"system:serviceaccount:{NS}:{SA}"
    out: dict[str, Obj] = {}
    for event in cluster.audit():
        if (event.get("user") or {}).get("username") != user:
            continue
        if event["requestReceivedTimestamp"] >= since:
            out[event["auditID"]] = event
    return list(out.values())


def count(requests: list[Obj]) -> dict[str, int]:
    """reads, writes, watches and 404s, as fleet.count_by_verb counts the emulator's."""
    out = Counter[str]()
    for r in requests:
        verb = r["verb"]
        out["writes" if verb in WRITES else "watches" if verb == "watch" else "reads"] += 1
        out["404s"] += (r.get("responseStatus") or {}).get("code") == 404
    return dict(out)


def utc_now() -> str:
    """Now as the audit log writes it (RFC 3339, microseconds, Z), comparable as text."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def burst(
    kind: str, command: list[str], final: str, n: int, assets: Path, workdir: Path,
    env: dict[str, str],
) -> dict[str, Any]:  # fmt: skip
    """operator_scale.burst on a real API server: n jobs at once, create -> precompile job."""
    cluster, op, volcano, vcjobs, tjs = _start(kind, command, assets, workdir, env)
    pid = op.process.pid
    cpu0, rss0, since = common.cpu_seconds(pid), common.rss_mb(pid), utc_now()
    specs = {f"j{i:04d}": good_spec(QUEUE, f"c{i:04d}") for i in range(n)}
    t0 = time.monotonic()
    create_jobs(cluster.api, specs)

    def precompiled(name: str) -> float | None:
        return vcjobs.added.get(naming.vcjob_name(name, "precompile"))

    try:
        wait(lambda: all(precompiled(j) for j in specs), 1800, "every precompile job")
        drained = time.monotonic() - t0
        wait(lambda: all(tjs.phases.get(j) == final for j in specs), 1800, f"all {final}")
        lifecycle = time.monotonic() - t0
        cpu1, rss1, peak = common.cpu_seconds(pid), common.rss_mb(pid), common.rss_mb(pid, "VmHWM")
        creates = {"product": 3, "minimal": 1}[kind]
        min_writes = creates + 2 * len(tjs.history[next(iter(specs))])
        time.sleep(2)  # the audit log's last lines of this burst
        requests = operator_requests(cluster, since)
    finally:
        op.stop()
        vcjobs.stop()
        tjs.stop()
        volcano.stop()
        cluster.stop()
    latencies = [precompiled(j) - tjs.added[j] for j in specs]  # type: ignore[operator]
    per_job = {k: v / n for k, v in count(requests).items()}
    return {
        "operator": kind, "jobs": n,
        "p50_s": common.percentile(latencies, 50), "p99_s": common.percentile(latencies, 99),
        "drain_s": drained, "lifecycle_s": lifecycle,
        "writes": per_job.get("writes", 0), "min_writes": min_writes,
        "reads": per_job.get("reads", 0),
        "watches": per_job.get("watches", 0), "404s": per_job.get("404s", 0),
        "cpu_ms_per_job": (cpu1 - cpu0) * 1000 / n,
        "rss_start_mb": rss0, "rss_end_mb": rss1, "rss_peak_mb": peak,
        "rss_kb_per_job": (rss1 - rss0) * 1024 / n,
    }  # fmt: skip


def waiting(
    command: list[str], seconds: float, assets: Path, workdir: Path, env: dict[str, str]
) -> Obj:
    """Requests per hour one job waiting for a missing queue costs, with the chart's settings."""
    env = {**env, **chart_env()}
    cluster, op, volcano, vcjobs, tjs = _start("waiting", command, assets, workdir, env)
    try:
        create_jobs(cluster.api, {"waiting": good_spec("no-such-queue", "w")})
        wait(lambda: tjs.phases.get("waiting") == "Pending", 60, "Pending")
        time.sleep(2)  # the job's first passes settle
        since = utc_now()
        time.sleep(seconds)
        requests = [r for r in operator_requests(cluster, since) if r["verb"] != "watch"]
    finally:
        op.stop()
        vcjobs.stop()
        tjs.stop()
        volcano.stop()
        cluster.stop()
    per_hour = len(requests) * 3600 / seconds
    return {"seconds": seconds, "requests": len(requests), "per_hour": per_hour,
            "settings": " ".join(f"{k}={v}" for k, v in chart_env().items())}  # fmt: skip


def create_jobs(api: Api, specs: dict[str, Obj], threads: int = 8) -> None:
    """Create many jobs at once (a burst), from a few client threads, as the admin."""

    def one(item: tuple[str, Obj]) -> None:
        name, spec = item
        body = {"apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob",
                "metadata": {"name": name, "namespace": NS}, "spec": spec}  # fmt: skip
        api.request("POST", f"{TJS}/namespaces/{NS}/trainiumjobs", body)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, specs.items()))


def wait(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)
