"""Every bench at its smoke size, one after another, each under a timeout: `make bench-smoke`.

A bench nobody runs rots (issue 34: trainer_worker.py called build_task with arguments it had
lost, and `make bench` died with a TypeError). Each script's `--smoke` keeps its code paths and
shrinks its sizes (a few steps, a handful of jobs); the figures mean nothing. The XLA bench runs
where .venv-xla exists (`make test-xla` builds it), the real-cluster ones where --cluster names
the tier's binaries (TRAINIUM_CLUSTER_ASSETS); otherwise a line says each was skipped. Usage:

    python bench/smoke.py [--cluster ASSETS] [--only trainer_loop.py ...] [--timeout 300]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
XLA_PYTHON = REPO / ".venv-xla" / "bin" / "python"


@dataclass(frozen=True)
class Bench:
    """One smoke run: the script and what it needs beyond .venv."""

    script: str
    needs: str = ""  # "", "xla" (.venv-xla) or "cluster" (given --cluster ASSETS)

    @property
    def label(self) -> str:
        """The bench's name in the report."""
        return f"{self.script} --cluster" if self.needs == "cluster" else self.script


#: The Makefile's `bench` target, in its order, plus the --cluster variant of operator_scale.
BENCHES = (
    Bench("build_vcjob.py"),
    Bench("gang_size.py"),
    Bench("emulator_growth.py"),
    Bench("operator_scale.py"),
    Bench("compile_cache.py"),
    Bench("trainer_loop.py"),
    Bench("checkpoint_stall.py"),
    Bench("native_compile.py"),
    Bench("lease_pressure.py"),
    Bench("xla_graphs.py", "xla"),
    Bench("recovery.py", "cluster"),
    Bench("fleet_scale.py", "cluster"),
    Bench("fleet_spares.py", "cluster"),
    Bench("operator_scale.py", "cluster"),
)
#: Modules of bench/ that are no bench of their own, and which bench runs (or is) each.
NOT_BENCHES = {
    "common.py": "shared by all",
    "minimal_operator.py": "operator_scale.py",
    "trainer_worker.py": "trainer_loop.py",
    "cluster_scale.py": "operator_scale.py --cluster",
    "recovery_tier.py": "recovery.py",
    "smoke.py": "this driver",
}


def command(bench: Bench, cluster: Path | None) -> list[str] | str:
    """The command line, or why the bench is skipped here."""
    script = str(BENCH / bench.script)
    if bench.needs == "xla":
        if not os.access(XLA_PYTHON, os.X_OK):
            return "no .venv-xla (make test-xla builds it)"
        return [str(XLA_PYTHON), script, "--smoke"]
    if bench.needs == "cluster":
        if cluster is None:
            return "no --cluster ASSETS (TRAINIUM_CLUSTER_ASSETS: the real-cluster tier)"
        return [sys.executable, script, "--smoke", f"--cluster={cluster}"]
    return [sys.executable, script, "--smoke"]


def run(bench: Bench, cmd: list[str], timeout: float) -> tuple[bool, float, str]:
    """(passed, seconds, the output's tail on failure); a bench past its time is stopped whole.

    Each bench runs in a session of its own: on a timeout SIGTERM goes to all it started
    (operators, torchrun's workers, the control plane: their finally blocks stop the rest).
    """
    env = dict(os.environ, PJRT_DEVICE="CPU") if bench.needs == "xla" else None
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    why = ""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        why = f"timed out after {timeout:g} s"
        out = _stop(proc)
    seconds = time.monotonic() - started
    if not why and proc.returncode != 0:
        why = f"exit {proc.returncode}"
    return not why, seconds, f"{why}\n{out[-3000:]}" if why else ""


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM to the bench's session, SIGKILL 30 s later; returns what it printed."""
    for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            return proc.communicate(timeout=grace)[0] or ""
        except subprocess.TimeoutExpired:
            continue
    return ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cluster", metavar="ASSETS", type=Path,
                   default=os.environ.get("TRAINIUM_CLUSTER_ASSETS") or None,
                   help="the tier's binaries (default: $TRAINIUM_CLUSTER_ASSETS)")  # fmt: skip
    p.add_argument("--only", nargs="+", metavar="SCRIPT", help="these scripts only")
    p.add_argument("--timeout", type=float, default=300, help="seconds per bench")
    args = p.parse_args(argv)
    cluster = args.cluster.resolve() if args.cluster else None
    began, failed = time.monotonic(), []
    for bench in BENCHES:
        if args.only and bench.script not in args.only:
            continue
        cmd = command(bench, cluster)
        if isinstance(cmd, str):
            print(f"bench-smoke: {bench.label} skipped: {cmd}", flush=True)
            continue
        ok, seconds, tail = run(bench, cmd, args.timeout)
        print(f"bench-smoke: {bench.label} {'ok' if ok else 'FAILED'} in {seconds:.1f} s",
              flush=True)  # fmt: skip
        if not ok:
            failed.append(bench.label)
            print(tail, file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    total = time.monotonic() - began
    print(f"bench-smoke: {len(failed)} failed; {total:.0f} s in all (load average {load:.1f})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
