"""Lease pressure (issue 32 item 5): does one replica keep its term under CPU pressure?

One operator replica standing for a Lease against the emulator, with 1,000 jobs kept Training
(Volcano's stand-in holds every gang Running), pinned to one core that busy-loop neighbours share
(`taskset`), and a burst of events every `--burst-every` seconds (an annotation patched on every
job: 1,000 MODIFIED events, each a pass). The emulator and this driver run on the other core.
Reported per variant: lost terms, the gaps between successful Lease writes (the deadline is what
a gap must stay under), and the requests a flap costs, forced at the end twice: a SIGSTOP past
the renew deadline (the replica takes its own Lease back: a continued term) and a takeover (the
bench writes the Lease as another holder's; the replica takes it once that holder is silent).

    python bench/lease_pressure.py --minutes 4 --neighbours 3 \\
        --variant new --variant old PYTHONPATH=/tmp/old/operator:/tmp/old/trainer

A variant is a name and the operator's extra environment (another checkout on PYTHONPATH is
the "before" of an A/B run).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import common

from fleet import DRIVER_AGENT, Cluster, good_spec
from harness import OperatorProcess, make_emulator

LEASE = "bench"
GROUP, VERSION, PLURAL = "trainium.dev", "v1alpha1", "trainiumjobs"
#: Log lines of a missed renew deadline: a lost term (old and new code), a late renewal (new:
#: the Lease was kept, writes were refused until it was renewed).
LOST, LATE = "could not renew within", "renewed past the renew deadline"
LAPSES = (LOST, LATE)
#: cgroup v1's cpu controller: where a `--cpu-millicores` quota is set (as a pod's CPU limit).
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
#: Requests counted as a flap's cost: everything but watches and the Lease's own.
WINDOW_S = 60.0


def command() -> list[str]:
    return [sys.executable, "-m", "trainium_operator", "operator", "--all-namespaces",
            f"--leader-elect={LEASE}"]  # fmt: skip


def quota_group(millicores: int) -> Path:
    """A cgroup whose CFS quota is `millicores` of one CPU (what a pod's CPU limit sets)."""
    group = CGROUP_CPU / f"bench-lease-{os.getpid()}"
    group.mkdir()
    period = int((group / "cpu.cfs_period_us").read_text())
    (group / "cpu.cfs_quota_us").write_text(str(period * millicores // 1000))
    return group


def in_group(group: Path, argv: list[str]) -> list[str]:
    """argv run inside `group`: the process joins it, then execs (no shell; children inherit)."""
    join = (
        "import os,sys; open(sys.argv[1],'w').write(str(os.getpid())); "
        "os.execvp(sys.argv[2], sys.argv[2:])"
    )
    return [sys.executable, "-c", join, str(group / "cgroup.procs"), *argv]


def throttled(group: Path) -> dict[str, float]:
    """The group's CFS accounting: periods, throttled periods, seconds throttled."""
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return {"periods": float(stat["nr_periods"]), "throttled": float(stat["nr_throttled"]),
            "throttled_s": int(stat["throttled_time"]) / 1e9}  # fmt: skip


def lease_writes(cluster: Cluster, since: float) -> list[float]:
    """When each successful PUT of the election's Lease arrived (renewals and takeovers)."""
    return [
        r.at for r in list(cluster.emulator.api_requests)
        if r.resource == "leases" and r.name == LEASE and r.verb == "update" and r.code == 200
        and r.at >= since and r.user_agent != DRIVER_AGENT
    ]  # fmt: skip


def cost(cluster: Cluster, start: float, seconds: float) -> dict[str, int]:
    """The replica's requests in the window after `start` (no watches, no Lease requests)."""
    out = {"gets": 0, "lists": 0, "writes": 0}
    for r in list(cluster.emulator.api_requests):
        if r.user_agent == DRIVER_AGENT or not start <= r.at < start + seconds:
            continue
        if r.resource == "leases" or r.verb == "watch":
            continue
        key = {"get": "gets", "list": "lists"}.get(r.verb, "writes")
        out[key] += 1
    return out


def burst_events(cluster: Cluster, names: list[str], tick: int) -> None:
    """An annotation patched on every job: one MODIFIED event (and a pass) each."""
    body = {"metadata": {"annotations": {"bench/tick": str(tick)}}}

    def patch(name: str) -> None:
        cluster.custom.patch_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, PLURAL, name, body
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(patch, names))


def neighbours(n: int, core: int) -> list[subprocess.Popen[bytes]]:
    """n busy loops pinned to `core` (the operator's)."""
    loop = [sys.executable, "-c", "while True: pass"]
    return [subprocess.Popen(["taskset", "-c", str(core), *loop]) for _ in range(n)]


def take_over(cluster: Cluster) -> float:
    """Write the Lease as another holder's (a takeover by a replica that then goes silent)."""
    import kubernetes

    api = kubernetes.client.CoordinationV1Api(cluster.client)
    for _ in range(20):  # the replica renews meanwhile: read again on a 409
        raw = api.read_namespaced_lease(LEASE, cluster.namespace, _preload_content=False)
        lease = json.loads(raw.data)  # type: ignore[attr-defined]
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = lease["spec"]
        spec.update(holderIdentity="someone-else", renewTime=stamp, acquireTime=stamp,
                    leaseTransitions=int(spec.get("leaseTransitions") or 0) + 1)  # fmt: skip
        try:
            api.replace_namespaced_lease(
                LEASE, cluster.namespace, kubernetes.client.V1Lease.model_validate(lease)
            )
            return time.monotonic()
        except kubernetes.client.exceptions.ApiException as exc:
            if exc.status != 409:
                raise
    raise RuntimeError("could not write the Lease as another holder's")


def run(name: str, env: dict[str, str], args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(workdir, emulator=make_emulator())
    cluster.start()
    busy: list[subprocess.Popen[bytes]] = []
    op_env = {**cluster.operator_env(), "POD_NAME": f"bench-{name}",
              "POD_NAMESPACE": cluster.namespace, **env}  # fmt: skip
    group = quota_group(args.cpu_millicores) if args.cpu_millicores else None
    argv = in_group(group, command()) if group else ["taskset", "-c", str(args.core), *command()]
    op = OperatorProcess(argv, workdir / "op.log", op_env)
    try:
        cluster.start_volcano(steps=("Running",))
        names = [f"j{i:04d}" for i in range(args.jobs)]
        cluster.create_jobs({n: good_spec(cluster.queue, f"c{n}") for n in names})
        op.start(timeout=120)
        cluster.wait(lambda: "acquired by" in op.log(), 120, "the replica acquiring the Lease")
        busy = neighbours(0 if group else args.neighbours, args.core)
        t0 = time.monotonic()
        tick, next_burst = 0, t0
        while time.monotonic() - t0 < args.minutes * 60:
            if time.monotonic() >= next_burst:
                tick += 1
                burst_events(cluster, names, tick)
                next_burst += args.burst_every
            time.sleep(0.5)
        loaded_end = time.monotonic()
        log = op.log()
        lost, late = log.count(LOST), log.count(LATE)
        quota = throttled(group) if group else {}
        writes = lease_writes(cluster, t0)
        gaps = [b - a for a, b in itertools.pairwise(writes)]
        pid = op.process.pid if op.process else 0
        # A forced flap of each kind, at the end, measured in a quiet minute each.
        quiet = time.monotonic()
        time.sleep(args.window)  # the baseline: what a window costs without a flap
        baseline = cost(cluster, quiet, args.window)
        before = len(op.log())
        os.kill(pid, signal.SIGSTOP)
        time.sleep(args.stop_seconds)
        os.kill(pid, signal.SIGCONT)
        stopped_at = time.monotonic()

        def back_line() -> str:
            lines = op.log()[before:].splitlines()
            return next((x for x in lines if "acquired by" in x or LAPSES[1] in x), "")

        cluster.wait(lambda: bool(lease_writes(cluster, stopped_at)), 60, "a Lease write again")
        time.sleep(args.window)
        continued = cost(cluster, stopped_at, args.window)
        line = back_line()  # the code before issue 32 renewed silently, or lost and re-acquired
        resumed = "continued" in line or "goes on" in line or not line
        acquired = op.log().count("acquired by")
        taken = take_over(cluster)
        cluster.wait(lambda: op.log().count("acquired by") > acquired, 120, "the takeover back")
        back = time.monotonic()
        time.sleep(args.window)
        takeover = cost(cluster, taken, back - taken + args.window)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
        op.stop()
        cluster.stop()
        if args.keep_log:
            Path(args.keep_log).with_suffix(f".{name}.log").write_text(op.log())
        if group:
            group.rmdir()
    return {
        "variant": name, "minutes": args.minutes, "jobs": args.jobs,
        "neighbours": args.neighbours, "bursts": tick, "lost_terms": lost, "late_renewals": late,
        "cpu_millicores": args.cpu_millicores, "quota": quota,
        "lease_writes": len(writes),
        "gap_p50_s": common.percentile(gaps, 50) if gaps else 0.0,
        "gap_p99_s": common.percentile(gaps, 99) if gaps else 0.0,
        "gap_max_s": max(gaps, default=0.0), "loaded_s": loaded_end - t0,
        "baseline": baseline, "stop_flap": continued, "stop_flap_continued": resumed,
        "takeover_flap": takeover, "takeover_back_s": back - taken, "window_s": args.window,
    }  # fmt: skip


def report(results: list[dict[str, Any]]) -> str:
    header = ["variant", "jobs", "CPU", "minutes", "bursts", "lost terms", "late renewals",
              "Lease writes", "gap p50 s", "gap p99 s", "gap max s",
              "no flap: GET/LIST/writes (window)", "SIGSTOP flap (window)", "continued",
              "takeover flap: GET/LIST/writes"]  # fmt: skip

    def cpu(r: dict[str, Any]) -> str:
        if not r["cpu_millicores"]:
            return f"1 core, {r['neighbours']} busy neighbours"
        q = r["quota"]
        return (
            f"quota {r['cpu_millicores']}m (throttled {q['throttled']:.0f} of "
            f"{q['periods']:.0f} periods)"
        )

    def triple(c: dict[str, int]) -> str:
        return f"{c['gets']}/{c['lists']}/{c['writes']}"

    rows = [
        [r["variant"], r["jobs"], cpu(r), r["minutes"], r["bursts"], r["lost_terms"],
         r["late_renewals"],
         r["lease_writes"], f"{r['gap_p50_s']:.2f}", f"{r['gap_p99_s']:.2f}",
         f"{r['gap_max_s']:.2f}", triple(r["baseline"]), triple(r["stop_flap"]),
         r["stop_flap_continued"],
         f"{triple(r['takeover_flap'])} over {r['takeover_back_s'] + r['window_s']:.0f} s"]
        for r in results
    ]  # fmt: skip
    return common.table(header, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--minutes", type=float, default=4.0, help="the loaded run, before the flaps")
    p.add_argument("--neighbours", type=int, default=3, help="busy loops on the operator's core")
    p.add_argument("--core", type=int, default=0, help="the operator's (and neighbours') core")
    p.add_argument(
        "--cpu-millicores",
        type=int,
        default=0,
        help="a CFS quota on the operator instead of taskset (cgroup v1 cpu; as the"
        " chart's CPU request were a limit); 0: none",
    )
    p.add_argument(
        "--keep-log", default="", help="keep each variant's operator log at PATH.NAME.log"
    )
    p.add_argument("--burst-every", type=float, default=30.0, help="seconds between bursts")
    p.add_argument("--stop-seconds", type=float, default=12.0,
                   help="the SIGSTOP that forces a lost term (past the renew deadline, within"
                        " the lease: nobody else may take it)")  # fmt: skip
    p.add_argument(
        "--variant",
        nargs="+",
        action="append",
        default=[],
        metavar="NAME [KEY=VALUE ...]",
        help="a named operator environment",
    )
    p.add_argument(
        "--window",
        type=float,
        default=WINDOW_S,
        help="seconds each flap's requests are counted over",
    )
    args = common.parse(p, argv, jobs=20, minutes=0.1, neighbours=1, burst_every=3.0, window=5.0)
    others = sorted(set(range(os.cpu_count() or 1)) - {args.core})
    if others:
        os.sched_setaffinity(0, others)  # the emulator and the driver: off the operator's core
    variants = {v[0]: dict(kv.split("=", 1) for kv in v[1:]) for v in args.variant} or {"-": {}}
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-lease-") as tmp:
        for name, env in variants.items():
            results.append(run(name, env, args, Path(tmp) / name))
            print(f"# {results[-1]}", file=sys.stderr, flush=True)
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
