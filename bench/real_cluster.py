"""operator_scale.py --cluster DIR: the same burst on a real kube-apiserver (tests/cluster's tier).

The emulator saturates first at 1000 jobs; here the API server is the real one. Latencies and
request counts come from the API server's audit log (microsecond timestamps, one line per
request, the operator's ServiceAccount as the user), so the latencies do not depend on polling.
The product runs under the chart's RBAC (the minimal operator, under the admin's token, did not
drain here yet: operator_scale.py runs the product only). Only the drain is measured (create ->
precompile Volcano job): no nodes are registered, so gangs wait.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

import common

sys.path.insert(0, str(common.REPO / "tests" / "cluster"))

from cluster import Cluster, install_chart, wait_until
from harness import OPERATOR_COMMAND, OperatorProcess
from helmchart import CHART, helm
from jobs import fsx_claim, small_job
from trainium_operator import naming

MINIMAL = [sys.executable, "-m", "kopf", "run", "--standalone", "--all-namespaces",
           str(Path(__file__).with_name("minimal_operator.py"))]  # fmt: skip
RELEASE, OPERATOR_NS, NS = "trainium-operator", "trainium-system", "bench"


def _when(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def burst(kind: str, n: int, assets: Path, workdir: Path) -> dict[str, Any]:
    """Create n jobs at once on a fresh real control plane; the drain, from the audit log."""
    cluster = Cluster(assets, workdir)
    op = None
    try:
        cluster.start()
        manifests = helm("template", RELEASE, str(CHART), "-n", OPERATOR_NS).stdout
        sa = install_chart(cluster, manifests, RELEASE, OPERATOR_NS)
        user = f"system:serviceaccount:{OPERATOR_NS}:{RELEASE}" if kind == "product" else "admin"
        command = OPERATOR_COMMAND if kind == "product" else MINIMAL
        config = sa if kind == "product" else cluster.kubeconfig
        cluster.kubectl("create", "namespace", NS)
        fsx_claim(cluster, NS)
        op = OperatorProcess(command, workdir / f"{kind}.log", env={"KUBECONFIG": str(config)})
        op.start(timeout=60)
        assert op.process is not None
        time.sleep(2)  # the initial listings are start-up cost, not per job
        pid = op.process.pid
        cpu0, rss0, mark = common.cpu_seconds(pid), common.rss_mb(pid), len(cluster.audit())
        jobs = [small_job(f"j{i:04d}", NS, precompile={"policy": "IfNotCached"},
                          cache={"name": f"c{i:04d}"}) for i in range(n)]  # fmt: skip
        batch = {"apiVersion": "v1", "kind": "List", "items": jobs}
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(batch), timeout=600)
        t0 = time.monotonic()

        def drained() -> bool:
            proc = cluster.kubectl("get", "jobs.batch.volcano.sh", "-n", NS, "-o", "name")
            return len(proc.stdout.split()) >= n

        wait_until(drained, 1800, f"{n} precompile Volcano jobs", every=1)
        drain = time.monotonic() - t0
        cpu1, rss1, peak = common.cpu_seconds(pid), common.rss_mb(pid), common.rss_mb(pid, "VmHWM")
    finally:
        if op is not None:
            op.stop()
        cluster.stop()
    events = cluster.audit()[mark:]
    created: dict[tuple[str, str], float] = {}
    for e in events:
        ref = e.get("objectRef") or {}
        if e["verb"] == "create" and e.get("responseStatus", {}).get("code") == 201:
            created.setdefault((ref.get("resource", ""), ref.get("name", "")), _when(
                e["requestReceivedTimestamp"]))  # fmt: skip
    latencies = [
        created[("jobs", naming.vcjob_name(f"j{i:04d}", "precompile"))]
        - created[("trainiumjobs", f"j{i:04d}")]
        for i in range(n)
    ]
    mine = [e for e in events if e.get("user", {}).get("username") == user]
    verbs = {"writes": ("create", "update", "patch", "delete"), "reads": ("get", "list")}
    per_job = {k: sum(e["verb"] in v for e in mine) / n for k, v in verbs.items()}
    return {
        "operator": kind, "jobs": n,
        "p50_s": common.percentile(latencies, 50), "p99_s": common.percentile(latencies, 99),
        "drain_s": drain, "writes": per_job["writes"], "reads": per_job["reads"],
        "watches": sum(e["verb"] == "watch" for e in mine) / n,
        "403s": sum(e.get("responseStatus", {}).get("code") == 403 for e in mine),
        "cpu_ms_per_job": (cpu1 - cpu0) * 1000 / n,
        "rss_start_mb": rss0, "rss_end_mb": rss1, "rss_peak_mb": peak,
    }  # fmt: skip


COLUMNS = ["operator", "jobs", "p50_s", "p99_s", "drain_s", "writes", "reads", "watches", "403s",
           "cpu_ms_per_job", "rss_start_mb", "rss_end_mb", "rss_peak_mb"]  # fmt: skip


def report(results: list[dict[str, Any]]) -> str:
    rows = [[r[c] for c in COLUMNS] for r in results]
    return "Real API server (tests/cluster tier), create -> precompile Volcano job:\n\n" + (
        common.table(COLUMNS, rows)
    )


def run(jobs: list[int], operators: list[str], assets: Path, tmp: Path) -> str:
    results = []
    for n in jobs:
        for kind in operators:
            results.append(burst(kind, n, assets, tmp / f"cluster-{kind}-{n}"))
            print(f"# cluster {kind} {n}: {results[-1]}", file=sys.stderr, flush=True)
    return report(results)
