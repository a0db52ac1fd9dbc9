"""The compile cache at the lifecycle level: two identical jobs together vs one after the other.

The product operator and the Volcano stand-in on a fresh emulator each; a precompile job takes
--compile-seconds (held Running), training --train-seconds. Reported as they are today:
Volcano jobs, precompile jobs, compile job-seconds and wall time until both Succeeded. Usage:

    python bench/compile_cache.py [--compile-seconds 5 --train-seconds 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import common

from fleet import VCJOBS, Cluster, good_spec
from harness import OPERATOR_COMMAND, OperatorProcess


def run(together: bool, work: Path, compile_s: float, train_s: float) -> list[object]:
    work.mkdir(parents=True)
    cluster = Cluster(work)
    cluster.start()
    op = OperatorProcess(OPERATOR_COMMAND, work / "operator.log", env=cluster.operator_env())
    op.start(timeout=60)
    cluster.start_volcano(hold={"precompile": compile_s, "train": train_s})
    spec = good_spec(cluster.queue, "shared")  # identical specs: one cache key
    try:
        started = time.monotonic()
        for name in ("first", "second"):
            cluster.create_job(name, spec)
            if not together:
                cluster.wait(lambda n=name: cluster.phases().get(n) == "Succeeded", 300, name)
        cluster.wait(lambda: set(cluster.phases().values()) == {"Succeeded"}, 300, "both")
        wall = time.monotonic() - started
        stages = [(j["metadata"].get("labels") or {}).get("trainium.dev/stage")
                  for j in cluster.server.list(VCJOBS)]  # fmt: skip
    finally:
        op.stop()
        cluster.stop()
    compiles = stages.count("precompile")
    label = "together" if together else "one after the other"
    return [label, len(stages), compiles, compiles * compile_s, wall]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--compile-seconds", type=float, default=5)
    p.add_argument("--train-seconds", type=float, default=1)
    args = common.parse(p, argv, compile_seconds=0.5, train_seconds=0.2)
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        rows = [run(t, Path(tmp) / str(t), args.compile_seconds, args.train_seconds)
                for t in (True, False)]  # fmt: skip
    header = ["two identical jobs", "Volcano jobs", "precompile jobs", "compile job-s", "wall s"]
    print(common.table(header, rows))
    print(f"\n(precompile held {args.compile_seconds:g} s, training {args.train_seconds:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
