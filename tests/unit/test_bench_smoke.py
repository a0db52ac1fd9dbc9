"""`make bench-smoke` covers every bench (issue 34 item 9: an unrun bench rots unnoticed)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
_PATH = list(sys.path)
sys.path.insert(0, str(BENCH))
import common  # noqa: E402  (bench/'s own modules; common adds paths of its own)
import smoke  # noqa: E402

sys.path[:] = _PATH  # the rest of the session imports as before


def test_every_bench_script_is_smoke_run_or_named_as_part_of_one() -> None:
    scripts = {p.name for p in BENCH.glob("*.py")}
    covered = {b.script for b in smoke.BENCHES} | set(smoke.NOT_BENCHES)
    assert scripts == covered, "add the new bench to bench/smoke.py's BENCHES (or NOT_BENCHES)"


def test_the_smoke_run_covers_what_make_bench_runs() -> None:
    recipe = re.search(r"^bench:.*?\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)
    assert recipe is not None
    in_make = set(re.findall(r"bench/(\w+\.py)", recipe.group(1)))
    assert in_make and in_make <= {b.script for b in smoke.BENCHES}


@pytest.mark.parametrize("script", sorted({b.script for b in smoke.BENCHES}))
def test_each_smoke_run_bench_takes_smoke(script: str) -> None:
    assert "common.parse(" in (BENCH / script).read_text(), f"{script}: no --smoke sizes"


def test_smoke_replaces_the_sizes_and_names_unknown_ones() -> None:
    def parser() -> argparse.ArgumentParser:
        p = argparse.ArgumentParser()
        p.add_argument("--steps", type=int, default=160)
        return p

    assert common.parse(parser(), ["--steps", "9"], steps=2).steps == 9
    assert common.parse(parser(), ["--steps", "9", "--smoke"], steps=2).steps == 2
    with pytest.raises(AssertionError, match="stpes"):
        common.parse(parser(), ["--smoke"], stpes=2)


def test_xla_and_cluster_benches_are_skipped_with_a_reason_where_they_cannot_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(smoke, "XLA_PYTHON", tmp_path / "no-python")
    xla, cluster = smoke.Bench("xla_graphs.py", "xla"), smoke.Bench("recovery.py", "cluster")
    assert "make test-xla" in str(smoke.command(xla, None))
    assert "TRAINIUM_CLUSTER_ASSETS" in str(smoke.command(cluster, None))
    cmd = smoke.command(cluster, tmp_path)
    assert isinstance(cmd, list) and cmd[-2:] == ["--smoke", f"--cluster={tmp_path}"]
