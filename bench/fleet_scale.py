"""Fleet-size gangs on the real-cluster tier: what one job of N nodes costs, at 8, 128 and 1,024.

    python bench/fleet_scale.py --cluster ASSETS [--sizes 8 128 1024] [--warm-up 2]

ASSETS is the tier's TRAINIUM_CLUSTER_ASSETS (default: that variable). One control plane with
real Volcano (tests/cluster/cluster.py), fake trn1.32xlarge nodes played by the tier's kubelet
(tests/cluster/kubelet.py), and the operator as a process under a ServiceAccount token of its own
(cluster-admin), so the API server's audit log names its requests. A warm-up job (2 nodes, not
measured; none with --smoke) takes the operator's first-use costs. The sizes run one after the
other in one run: before each, the fleet grows to N nodes; then one TrainiumJob of N nodes
(precompile IfNotCached, a cache of its own: a miss, so both stages run) goes from create to
Succeeded, in a namespace of its own. Every time is the bench's monotonic clock when a watch
event reached it (watches on pods, Volcano jobs, PodGroups and TrainiumJobs); nothing is read from
the operator's log.

- sizes: the largest version of each object as a watch delivered it, compact JSON (as etcd
  stores it): both Volcano jobs, their PodGroups (Volcano's), the TrainiumJob (and its status);
  and the largest request body the operator sent per resource and verb (the audit log keeps the
  operator's writes at level Request).
- create -> bound, per stage: (a) the operator's share: TrainiumJob ADDED -> precompile Volcano
  job ADDED (training: precompile Volcano job shown Completed -> training Volcano job ADDED);
  (b) Volcano's share: the Volcano job ADDED -> the last of its pods shown with spec.nodeName.
- the operator's CPU (utime + stime from /proc) from create to Succeeded, and per pod event (the
  pod watch events of the job's namespace the bench saw); its RSS at create, peak (VmHWM, reset
  through /proc/PID/clear_refs at create) and at Succeeded.
- requests per job: the operator token's audit lines from create to Succeeded, by verb.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common
from recovery import machine

from cluster import Api, Cluster, kubeconfig, wait_until
from harness import OperatorProcess
from jobs import fsx_claim, small_job
from kubelet import TRN1_32XLARGE, FakeKubelet

Obj = dict[str, Any]
CRD = common.REPO / "crds" / "trainiumjobs.trainium.dev.yaml"
TJS = "/apis/trainium.dev/v1alpha1"
SA_NS, SA = "fleet-bench", "fleet-operator"
USER = f"system:serviceaccount:{SA_NS}:{SA}"
WRITES = ("create", "update", "patch", "delete", "deletecollection")
#: What the bench watches (all namespaces), by the short name the tables use.
WATCHED = {
    "pods": "/api/v1/pods",
    "vcjobs": "/apis/batch.volcano.sh/v1alpha1/jobs",
    "podgroups": "/apis/scheduling.volcano.sh/v1beta1/podgroups",
    "tjs": f"{TJS}/trainiumjobs",
}
#: The operator's writes at level Request (their bodies), everything else at Metadata.
AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  users: ["{USER}"]
  verbs: ["create", "update", "patch"]
- level: Metadata
"""


def size(obj: Obj) -> int:
    """Bytes of compact JSON: how etcd stores a custom resource (and roughly a built-in)."""
    return len(json.dumps(obj, separators=(",", ":")))


class FleetCluster(Cluster):
    """The tier's control plane, auditing the operator's write bodies (level Request)."""

    def _spawn(self, name: str, args: Any, cwd: Path | None = None) -> Any:
        if name == "kube-apiserver":
            (self.root / "audit-policy.yaml").write_text(AUDIT_POLICY)
        return super()._spawn(name, args, cwd)

    def operator_kubeconfig(self) -> Path:
        """A ServiceAccount token bound to cluster-admin: the audit log's name for the operator."""
        self.kubectl("create", "namespace", SA_NS)
        self.kubectl("create", "serviceaccount", SA, "-n", SA_NS)
        self.kubectl("create", "clusterrolebinding", SA, "--clusterrole=cluster-admin",
                     f"--serviceaccount={SA_NS}:{SA}")  # fmt: skip
        token = self.kubectl("create", "token", SA, "-n", SA_NS, "--duration=4h").stdout.strip()
        path = self.root / "operator.kubeconfig"
        path.write_text(kubeconfig(self.server, self.pki.ca_file, token))
        return path


# ---- what the watches saw -----------------------------------------------------------------------


@dataclass
class Seen:
    """One namespace's timeline and sizes, as the bench's watches delivered them."""

    #: name -> when first seen, per kind ("tjs", "vcjobs", "podgroups").
    added: dict[tuple[str, str], float] = field(default_factory=dict)
    #: (kind, name, phase) -> when first seen in that phase.
    phases: dict[tuple[str, str, str], float] = field(default_factory=dict)
    #: (kind, name) -> the largest version's bytes; ("tjs-status", name) the largest status.
    sizes: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Volcano job name -> {pod uid: when first shown bound}.
    bound: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    #: Volcano job name -> its stage label; pod events of the namespace.
    stages: dict[str, str] = field(default_factory=dict)
    pod_events: int = 0
    vcjob_events: int = 0


def phase_of(kind: str, obj: Obj) -> str | None:
    status = obj.get("status") or {}
    if kind == "vcjobs":
        return (status.get("state") or {}).get("phase")
    return status.get("phase")


class Watches:
    """The four watches on threads of their own; `seen[namespace]` what they delivered."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.seen: dict[str, Seen] = defaultdict(Seen)
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(kind, path), daemon=True,
                                          name=f"watch {kind}")
                         for kind, path in WATCHED.items()]  # fmt: skip
        self._listed: set[str] = set()

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        wait_until(lambda: len(self._listed) == len(WATCHED), 60, "the bench's listings")

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(40)

    def _run(self, kind: str, path: str) -> None:
        while not self._stop.is_set():
            try:
                listing = self.api.request("GET", path)
                rv = listing["metadata"]["resourceVersion"]
                self._listed.add(kind)
                while not self._stop.is_set():
                    for event in self.api.watch(path, rv, timeout=5):
                        if event["type"] == "ERROR":
                            raise LookupError(str(event.get("object"))[:200])
                        rv = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._see(kind, event["object"], time.monotonic())
            except (LookupError, urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                if self._stop.is_set():
                    return
                time.sleep(0.2)  # a back-off before the next listing

    def _see(self, kind: str, obj: Obj, at: float) -> None:
        meta = obj["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        with self.lock:
            seen = self.seen[ns]
            if kind == "pods":
                seen.pod_events += 1
                job = (meta.get("labels") or {}).get("volcano.sh/job-name")
                if job and obj["spec"].get("nodeName"):
                    seen.bound[job].setdefault(meta["uid"], at)
                return
            seen.added.setdefault((kind, name), at)
            seen.vcjob_events += kind == "vcjobs"
            phase = phase_of(kind, obj)
            if phase:
                seen.phases.setdefault((kind, name, phase), at)
            key = (kind, name)
            seen.sizes[key] = max(seen.sizes.get(key, 0), size(obj))
            if kind == "tjs":
                status = ("tjs-status", name)
                seen.sizes[status] = max(seen.sizes.get(status, 0), size(obj.get("status") or {}))
            if kind == "vcjobs":
                seen.stages[name] = (meta.get("labels") or {}).get("trainium.dev/stage", "")

    def get(self, ns: str) -> Seen:
        with self.lock:
            return self.seen[ns]


# ---- the operator's requests --------------------------------------------------------------------


class Audit:
    """The operator token's audited requests, read on from where the last read stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.events: dict[str, Obj] = {}

    def read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        needle = USER.encode()
        for line in data[:end].splitlines():
            if needle in line and line.startswith(b"{"):
                event = json.loads(line)
                if (event.get("user") or {}).get("username") == USER:
                    self.events[event["auditID"]] = event

    def between(self, since: str, until: str) -> list[Obj]:
        return [e for e in self.events.values()
                if since <= e["requestReceivedTimestamp"] <= until]  # fmt: skip


def utc_now() -> str:
    """Now as the audit log writes it (RFC 3339, microseconds, Z), comparable as text."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def resource(event: Obj) -> str:
    ref = event.get("objectRef") or {}
    sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
    return f"{ref.get('resource', '?')}{sub}"


# ---- one job of N nodes -------------------------------------------------------------------------


@dataclass
class Result:
    """One size's figures."""

    nodes: int
    seen: Seen
    job: str
    requests: list[Obj]
    cpu_s: float
    rss_start_mb: float
    rss_peak_mb: float
    rss_end_mb: float
    life_s: float
    passes: int
    notes: list[str] = field(default_factory=list)

    @property
    def vcjob(self) -> dict[str, str]:
        """stage -> the Volcano job's name (the first of each stage)."""
        out: dict[str, str] = {}
        for name, stage in sorted(self.seen.stages.items(), key=lambda kv: self.seen.added[
                ("vcjobs", kv[0])]):  # fmt: skip
            out.setdefault(stage, name)
        return out


def quiet(pid: int, timeout: float = 60.0) -> None:
    """Until the process spends under 5% of a core for a second (it digested what came)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = common.cpu_seconds(pid)
        time.sleep(1)
        if common.cpu_seconds(pid) - before < 0.05:
            return


class Stage:
    """The control plane, the fleet's nodes, the bench's watches and the operator."""

    def __init__(
        self, assets: Path, workdir: Path, env: dict[str, str], profiler: str | None = None
    ) -> None:
        self.cluster = FleetCluster(assets, workdir)
        self.workdir, self.env, self.profiler = workdir, env, profiler
        self.kubelet: FakeKubelet | None = None
        self.operator: OperatorProcess | None = None
        self.watches = Watches(self.cluster.api)
        self.audit = Audit(self.cluster.audit_log)

    def __enter__(self) -> Stage:
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        cluster = self.cluster
        cluster.start()
        cluster.kubectl("apply", "--server-side", "-f", str(CRD))
        cluster.wait_established("crd", "--all")
        config = cluster.operator_kubeconfig()
        self.kubelet = FakeKubelet(cluster.api, cluster.kubelet_cert)
        self.kubelet.start()
        self.watches.start()
        command = [sys.executable, "-m", "trainium_operator", "operator", "--standalone",
                   "--all-namespaces"]  # fmt: skip
        env = {"KUBECONFIG": str(config), **self.env}
        op = OperatorProcess(command, self.workdir / "operator.log", env=env)
        for key in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
            op.env.pop(key, None)
        op.env.update(AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE="/nonexistent",
                      AWS_SHARED_CREDENTIALS_FILE="/nonexistent")  # fmt: skip
        self.operator = op
        op.start(timeout=90)

    def __exit__(self, *exc: object) -> None:
        if self.operator is not None:
            self.operator.stop()
        self.watches.stop()
        if self.kubelet is not None:
            self.kubelet.stop()
        self.cluster.stop()

    @property
    def pid(self) -> int:
        assert self.operator is not None and self.operator.process is not None
        return self.operator.process.pid

    def grow(self, nodes: int) -> None:
        """Register fake trn1.32xlarge nodes until the fleet has `nodes` (8 at a time), with
        their CSINodes (Volcano finds no room for the FSx volume without one) and without
        heartbeats (the tier runs no node lifecycle controller to read them)."""
        kubelet = self.kubelet
        assert kubelet is not None
        add = functools.partial(kubelet.add_node, kind=TRN1_32XLARGE, heartbeat=False)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(add, [f"trn1-32xl-{i}" for i in range(len(kubelet.nodes), nodes)]))

    def run(self, nodes: int, name: str = "fleet") -> Result:
        """One job of `nodes` nodes from create to Succeeded; its figures."""
        self.grow(nodes)
        ns = job = f"{name}-{nodes}"
        self.cluster.kubectl("create", "namespace", ns)
        fsx_claim(self.cluster, ns)
        body = small_job(job, ns, nodes=nodes, precompile={"policy": "IfNotCached"},
                         cache={"name": job})  # fmt: skip
        pid = self.pid
        quiet(pid)  # the new nodes' and the claim's events are not the job's
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM from here on
        cpu0, rss0, since = common.cpu_seconds(pid), common.rss_mb(pid), utc_now()
        spy = self._profile(pid, nodes)
        passes0 = self._passes()
        began = time.monotonic()
        self.cluster.api.request("POST", f"{TJS}/namespaces/{ns}/trainiumjobs", body)
        seen = self.watches.get(ns)
        timeout = 180 + nodes * 1.0
        try:
            wait_until(lambda: self._phase(seen, job) in ("Succeeded", "Failed"), timeout,
                       f"{job} Succeeded", every=0.2)  # fmt: skip
        finally:
            done = time.monotonic()
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
        cpu1 = common.cpu_seconds(pid)
        peak, rss1 = common.rss_mb(pid, "VmHWM"), common.rss_mb(pid)
        passes = self._passes() - passes0
        until = utc_now()
        time.sleep(2)  # the audit log's last lines of this job
        self.audit.read()
        result = Result(nodes, seen, job, self.audit.between(since, until), cpu1 - cpu0, rss0,
                        peak, rss1, done - began, passes)  # fmt: skip
        if self._phase(seen, job) != "Succeeded":
            result.notes.append(f"{job} ended {self._phase(seen, job)}")
        return result

    def _passes(self) -> int:
        """The operator's reconcile passes so far (any job), from its /metrics."""
        assert self.operator is not None
        return self.operator.passes()

    def _profile(self, pid: int, nodes: int) -> subprocess.Popen[bytes] | None:
        """py-spy sampling the operator (collapsed stacks, all threads) until the job ends."""
        if self.profiler is None:
            return None
        out = self.workdir / f"profile-{nodes}.txt"
        cmd = [self.profiler, "record", "--pid", str(pid), "--format", "raw", "--nonblocking",
               "--rate", "50", "-o", str(out)]  # fmt: skip
        with (self.workdir / "py-spy.log").open("ab") as log:
            return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def _phase(self, seen: Seen, job: str) -> str | None:
        with self.watches.lock:
            phases = [(at, p) for (k, n, p), at in seen.phases.items() if k == "tjs" and n == job]
        return max(phases)[1] if phases else None


# ---- the tables ---------------------------------------------------------------------------------


def shares(r: Result) -> list[object]:
    """(a) and (b) per stage, and the whole life, in seconds."""
    s, vc = r.seen, r.vcjob
    tj = s.added[("tjs", r.job)]
    pre = vc.get("precompile")
    out: list[object] = [r.nodes]
    for stage, start in (("precompile", tj), ("train", None)):
        name = vc.get(stage)
        if name is None:
            out += ["-", "-"]
            continue
        if start is None:  # training starts from the precompile job's Completed
            start = s.phases.get(("vcjobs", pre or "", "Completed"))
        added = s.added[("vcjobs", name)]
        pods = s.bound.get(name) or {}
        last = max(pods.values()) if len(pods) >= r.nodes else None
        out += [added - start if start else "-", last - added if last else f"{len(pods)} bound"]
    out += [r.life_s]
    return out


def timeline(r: Result) -> str:
    """Seconds after the TrainiumJob's ADDED of each phase the bench saw, in order."""
    s = r.seen
    t0 = s.added[("tjs", r.job)]
    marks = [(at, f"{k} {n} {p}") for (k, n, p), at in s.phases.items() if k != "podgroups"]
    for name, pods in s.bound.items():
        if pods:
            marks.append((max(pods.values()), f"{name} {len(pods)} bound"))
    return ", ".join(f"{what} +{at - t0:.1f}" for at, what in sorted(marks))


SHARES = ["nodes", "(a) precompile s", "(b) precompile s", "(a) train s", "(b) train s",
          "create -> Succeeded s"]  # fmt: skip


def sizes(r: Result) -> list[object]:
    s, vc = r.seen, r.vcjob
    groups = {stage: max((b for (k, n), b in s.sizes.items()
                          if k == "podgroups" and n.startswith(f"{name}-")), default=0)
              for stage, name in vc.items()}  # fmt: skip
    return [r.nodes, s.sizes.get(("vcjobs", vc.get("precompile", "")), 0),
            s.sizes.get(("vcjobs", vc.get("train", "")), 0), groups.get("precompile", 0),
            groups.get("train", 0), s.sizes.get(("tjs", r.job), 0),
            s.sizes.get(("tjs-status", r.job), 0)]  # fmt: skip


SIZES = ["nodes", "precompile vcjob B", "train vcjob B", "precompile PodGroup B",
         "train PodGroup B", "TrainiumJob B", "its status B"]  # fmt: skip


def bodies(r: Result) -> dict[str, int]:
    """resource verb -> the largest body the operator sent (its writes at level Request)."""
    out: dict[str, int] = {}
    for e in r.requests:
        if "requestObject" in e:
            key = f"{resource(e)} {e['verb']}"
            out[key] = max(out.get(key, 0), size(e["requestObject"]))
    return out


def costs(r: Result) -> list[object]:
    events = r.seen.pod_events
    return [r.nodes, r.cpu_s, events, r.cpu_s * 1000 / events if events else "-",
            r.seen.vcjob_events, r.passes,
            r.cpu_s * 1000 / r.passes if r.passes else "-",
            r.rss_start_mb, r.rss_peak_mb, r.rss_end_mb,
            (r.rss_peak_mb - r.rss_start_mb) * 1024 / r.nodes]  # fmt: skip


COSTS = ["nodes", "operator CPU s", "pod events", "CPU ms / pod event", "vcjob events", "passes",
         "CPU ms / pass", "RSS start MB",
         "RSS peak MB", "RSS end MB", "peak - start KB / pod"]  # fmt: skip


def requests(r: Result) -> list[int]:
    """Reads (get, list), writes, and watches (kopf's, started again when the server ends one)."""
    counted = verbs(r)
    writes = sum(n for v, n in counted.items() if v in WRITES)
    return [counted["get"] + counted["list"], writes, counted["watch"]]


def verbs(r: Result) -> Counter[str]:
    return Counter(e["verb"] for e in r.requests)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cluster", metavar="ASSETS", type=Path,
                   default=os.environ.get("TRAINIUM_CLUSTER_ASSETS") or None,
                   help="the tier's binaries (default: $TRAINIUM_CLUSTER_ASSETS)")  # fmt: skip
    p.add_argument("--sizes", nargs="+", type=int, default=[8, 128, 1024])
    p.add_argument("--warm-up", type=int, default=2, metavar="NODES",
                   help="a job of this size first, not measured (0: none)")  # fmt: skip
    p.add_argument("--operator-env", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument("--profile", metavar="PY_SPY", help="sample the operator with this py-spy "
                   "binary: profile-N.txt (collapsed stacks) in the logs' directory")  # fmt: skip
    args = common.parse(p, argv, sizes=[8], warm_up=0)
    if args.cluster is None:
        p.error("--cluster ASSETS or TRAINIUM_CLUSTER_ASSETS is required")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally blocks stop the cluster
    env = dict(kv.split("=", 1) for kv in args.operator_env)
    started = datetime.datetime.now(datetime.timezone.utc)
    began, results = time.monotonic(), []
    work = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    with Stage(args.cluster.resolve(), work, env, args.profile) as stage:
        if args.warm_up:  # the operator's first-use costs (imports, first build) go here
            stage.run(args.warm_up, "warm-up")
        for nodes in sorted(args.sizes):
            result = stage.run(nodes)
            print(f"# {nodes} nodes: {shares(result)} {costs(result)} {dict(verbs(result))}"
                  f"{' ' + '; '.join(result.notes) if result.notes else ''}",
                  file=sys.stderr, flush=True)  # fmt: skip
            results.append(result)
            print(f"# {nodes} nodes: {timeline(result)}", file=sys.stderr, flush=True)
    print(f"# {' '.join(sys.argv)}\n# {started:%Y-%m-%d %H:%M} UTC; {machine()}")
    print(f"# wall time {time.monotonic() - began:.0f} s; logs in {work}\n")
    print(common.table(SHARES, [shares(r) for r in results]), end="\n\n")
    print(common.table(SIZES, [sizes(r) for r in results]), end="\n\n")
    keys = sorted({k for r in results for k in bodies(r)})
    print(common.table(["nodes", *[f"{k} B" for k in keys]],
                       [[r.nodes, *[bodies(r).get(k, "-") for k in keys]] for r in results]),
          end="\n\n")  # fmt: skip
    print(common.table(COSTS, [costs(r) for r in results]), end="\n\n")
    names = sorted({v for r in results for v in verbs(r)} - {"watch"})
    rows = [[r.nodes, *requests(r), *[verbs(r).get(v, 0) for v in names]] for r in results]
    print(common.table(["nodes", "reads", "writes", "watches (re)started", *names], rows),
          end="\n\n")  # fmt: skip
    per = sorted({f"{e['verb']} {resource(e)}" for r in results for e in r.requests})
    counted = [Counter(f"{e['verb']} {resource(e)}" for e in r.requests) for r in results]
    print(common.table(["request", *[f"{r.nodes} nodes" for r in results]],
                       [[k, *[c.get(k, 0) for c in counted]] for k in per]))  # fmt: skip
    notes = [n for r in results for n in r.notes]
    for note in notes:
        print(f"# {note}")
    return 1 if notes else 0


if __name__ == "__main__":
    sys.exit(main())
