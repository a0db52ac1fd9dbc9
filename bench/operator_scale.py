"""Operator scale: N TrainiumJobs created at once; the product beside a minimal kopf operator.

Both run as real processes against the same emulator code in the same run (a fresh emulator
each, with the same Volcano stand-in), and the claims are their ratios. Usage:

    python bench/operator_scale.py --jobs 100 500 1000 [--waiting-seconds 60]
    python bench/operator_scale.py --cluster ASSETS --jobs 100 500   # a real API server

--cluster takes the real-cluster tier's binaries (TRAINIUM_CLUSTER_ASSETS, see
bench/cluster_scale.py): a fresh etcd + kube-apiserver + kube-controller-manager per run, the
same Volcano stand-in, requests counted from the audit log, the waiting job at the chart's
settings.

A/B runs of the product in one session, alternating (e.g. a flag on and off, or another
checkout on PYTHONPATH), each variant a name and its operator environment:

    python bench/operator_scale.py --jobs 200 --operators product --rounds 2 \
        --variant on TRAINIUM_LIBRARY_SHORTCUTS=all --variant off TRAINIUM_LIBRARY_SHORTCUTS=none
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import common
import kmock

from emulator import K8sEmulator
from fleet import DRIVER_AGENT, TJS, VCJOBS, Cluster, count_by_verb, good_spec
from harness import OPERATOR_COMMAND, OperatorProcess, make_emulator
from trainium_operator.api import naming

MINIMAL = [sys.executable, "-m", "kopf", "run", "--standalone", "--all-namespaces",
           str(Path(__file__).with_name("minimal_operator.py"))]  # fmt: skip
FINAL_PHASE = {"product": "Succeeded", "minimal": "Precompiling"}


class TimedEmulator(K8sEmulator):
    """Notes when each object was first stored: create -> child latency without polling."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.added_at: dict[tuple[str, str | None, str], float] = {}

    async def _store(self, key: Any, obj: dict[str, Any], event: str) -> dict[str, Any]:
        res: kmock.resource = key[0]
        path = f"{res.group}/{res.version}/{res.plural}".lstrip("/")
        self.added_at.setdefault((path, key[1], key[2]), time.monotonic())
        return await super()._store(key, obj, event)


def start(kind: str, workdir: Path, env: dict[str, str] | None = None) -> tuple[Cluster, Any]:
    """A fresh emulator and the chosen operator, up and listing."""
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(workdir, emulator=make_emulator(TimedEmulator))
    cluster.start()
    command = OPERATOR_COMMAND if kind == "product" else MINIMAL
    env = {**cluster.operator_env(), **(env or {})}
    op = OperatorProcess(command, workdir / f"{kind}.log", env=env)
    op.start(timeout=60)
    time.sleep(1)  # the initial listings are start-up cost, not per job
    return cluster, op


def burst(kind: str, n: int, workdir: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Create n jobs at once; time create -> precompile job and the whole lifecycle."""
    cluster, op = start(kind, workdir, env)
    emu = cluster.emulator
    assert isinstance(emu, TimedEmulator) and op.process is not None
    pid, ns = op.process.pid, cluster.namespace
    cpu0, rss0, mark = common.cpu_seconds(pid), common.rss_mb(pid), len(emu.api_requests)
    # The same cluster for both: Volcano's stand-in moves every Volcano job Running, Completed
    # (the minimal operator ignores it; its jobs load the emulator as the product's do).
    cluster.start_volcano()
    specs = {f"j{i:04d}": good_spec(cluster.queue, f"c{i:04d}") for i in range(n)}
    t0 = time.monotonic()
    cluster.create_jobs(specs)

    def precompiled(name: str) -> float | None:
        return emu.added_at.get((VCJOBS, ns, naming.vcjob_name(name, "precompile")))

    try:
        cluster.wait(lambda: all(precompiled(j) for j in specs), 1800, "every precompile job")
        drained = time.monotonic() - t0
        final = FINAL_PHASE[kind]
        cluster.wait(lambda: set(cluster.phases().values()) == {final}, 1800, f"all {final}")
        lifecycle = time.monotonic() - t0
        cpu1, rss1, peak = common.cpu_seconds(pid), common.rss_mb(pid), common.rss_mb(pid, "VmHWM")
        # The floor for writes: its creates, one status patch and one Event per phase it took.
        creates = {"product": 3, "minimal": 1}[kind]
        min_writes = creates + 2 * len(cluster.phase_history(next(iter(specs))))
    finally:
        op.stop()
        cluster.stop()
    latencies = [precompiled(j) - emu.added_at[(TJS, ns, j)] for j in specs]  # type: ignore[operator]
    requests = [r for r in emu.api_requests[mark:] if r.user_agent != DRIVER_AGENT]
    per_job = {k: v / n for k, v in count_by_verb(requests).items()}
    _print_reads(kind, n, requests)
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


def _print_reads(kind: str, n: int, requests: list[Any]) -> None:
    """Where the reads and 404s of a run went, per job (a read figure says nothing of its cause)."""
    reads = Counter((r.verb, r.resource) for r in requests if r.verb in ("get", "list"))
    missing = Counter((r.verb, r.resource) for r in requests if r.code == 404)
    show = ", ".join(f"{v} {res} {c / n:.2f}" for (v, res), c in reads.most_common(6))
    gone = ", ".join(f"{v} {res} {c / n:.2f}" for (v, res), c in missing.most_common(4))
    print(f"# {kind} {n}: reads per job: {show or 'none'}; 404s: {gone or 'none'}", file=sys.stderr)


def waiting(seconds: float, workdir: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Requests per hour that one job waiting for a missing queue costs (env: the settings)."""
    cluster, op = start("product", workdir, env)
    try:
        cluster.create_job("waiting", good_spec("no-such-queue", "w"))
        cluster.wait(lambda: cluster.phases().get("waiting") == "Pending", 60, "Pending")
        mark = len(cluster.emulator.api_requests)
        time.sleep(seconds)
        requests = [r for r in cluster.emulator.api_requests[mark:] if r.user_agent != DRIVER_AGENT]
    finally:
        op.stop()
        cluster.stop()
    per_hour = len(requests) * 3600 / seconds
    return {"seconds": seconds, "requests": len(requests), "per_hour": per_hour}


def on_cluster(
    kind: str, n: int, assets: Path, workdir: Path, env: dict[str, str]
) -> dict[str, Any]:
    """burst() on a real API server (bench/cluster_scale.py)."""
    import cluster_scale

    command = OPERATOR_COMMAND if kind == "product" else MINIMAL
    return cluster_scale.burst(kind, command, FINAL_PHASE[kind], n, assets, workdir, env)


COLUMNS = ["variant", "operator", "jobs", "p50_s", "p99_s", "drain_s", "lifecycle_s", "writes",
           "min_writes", "reads", "watches", "404s", "cpu_ms_per_job", "rss_start_mb", "rss_end_mb",
           "rss_peak_mb", "rss_kb_per_job"]  # fmt: skip


def report(results: list[dict[str, Any]], wait: dict[str, dict[str, Any]] | None) -> str:
    rows = [[r[c] for c in COLUMNS] for r in results]
    out = [common.table(COLUMNS, rows), ""]
    ratio_cols = ["p50_s", "p99_s", "drain_s", "writes", "reads", "cpu_ms_per_job"]
    ratios = []
    for n in sorted({r["jobs"] for r in results}):
        pair = {r["operator"]: r for r in results if r["jobs"] == n and r["variant"] == "-"}
        if {"product", "minimal"} <= pair.keys():
            p, m = pair["product"], pair["minimal"]
            ratios.append([n, *(p[c] / m[c] if m[c] else float("inf") for c in ratio_cols)])
    if ratios:
        out += ["Ratios product / minimal:", "", common.table(["jobs", *ratio_cols], ratios), ""]
    for name, w in (wait or {}).items():
        out.append(
            f"Waiting job (missing queue), variant {name}, {w['seconds']:.0f} s observed: "
            f"{w['requests']} requests = {w['per_hour']:.0f} requests per hour"
            + (f" ({w['settings']}, the chart's)" if "settings" in w else "")
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, nargs="+", default=[100, 500, 1000])
    p.add_argument("--operators", nargs="+", default=["product", "minimal"])
    p.add_argument("--waiting-seconds", type=float, default=60, help="0: skip")
    p.add_argument("--operator-env", nargs="*", default=[], metavar="KEY=VALUE",
                   help="extra environment of the operator processes (A/B runs: MALLOC_ARENA_MAX,"
                        " PYTHONPATH of another checkout)")  # fmt: skip
    p.add_argument(
        "--cluster",
        metavar="ASSETS",
        type=Path,
        help="a real API server from these binaries (the tier's), not the emulator",
    )
    p.add_argument("--variant", nargs="+", action="append", default=[],
                   metavar="NAME [KEY=VALUE ...]",
                   help="a named operator environment; with several, the product runs once per"
                        " variant, alternating (A/B in one session)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=1, help="repeat the alternation")
    args = common.parse(p, argv, jobs=[3], waiting_seconds=3)
    if args.cluster:  # a timeout's SIGTERM still stops the control plane (finally blocks)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    env = dict(kv.split("=", 1) for kv in args.operator_env)
    variants = {v[0]: {**env, **dict(kv.split("=", 1) for kv in v[1:])} for v in args.variant}
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for r in range(args.rounds):
            for n in args.jobs:
                for kind in args.operators:
                    runs = variants.items() if variants and kind == "product" else [("-", env)]
                    for name, venv in runs:
                        out = Path(tmp) / f"{kind}-{n}-{name}-{r}"
                        if args.cluster:
                            got = on_cluster(kind, n, args.cluster.resolve(), out, venv)
                        else:
                            got = burst(kind, n, out, venv)
                        results.append({"variant": name, **got})
                        print(f"# {name} {kind} {n}: {results[-1]}", file=sys.stderr, flush=True)
        seconds, wait = args.waiting_seconds, {}
        for name, venv in (variants or {"-": env}).items() if seconds else ():
            if args.cluster:
                import cluster_scale

                where = Path(tmp) / f"waiting-{name}"
                assets = args.cluster.resolve()
                wait[name] = cluster_scale.waiting(OPERATOR_COMMAND, seconds, assets, where, venv)
            else:
                wait[name] = waiting(seconds, Path(tmp) / f"waiting-{name}", venv)
            print(f"# waiting {name}: {wait[name]}", file=sys.stderr, flush=True)
    print(report(results, wait))
    return 0


if __name__ == "__main__":
    sys.exit(main())
