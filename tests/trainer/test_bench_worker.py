"""bench/trainer_worker.py's bare loop against the trainer's current task API (issue 34 item 9).

The elastic change altered build_task's and Task.batches' signatures and nothing ran the bench:
`make bench` died with a TypeError. `make bench-smoke` runs the whole bench; this runs the bare
loop in-process, in a few seconds, with the trainer suite.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainium_trainer.config import parse_args
from trainium_trainer.device import make_runtime
from trainium_trainer.synth import write_bert_shards

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_bench_workers_bare_loop_runs_on_the_current_task_api(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import trainer_worker
    finally:
        sys.path.remove(str(BENCH))
    write_bert_shards(tmp_path / "data", shards=2, samples_per_shard=16, seq_len=32, seed=1)
    args = ["bert-pretrain", "--data-dir", str(tmp_path / "data"), "--seq-len", "32"]
    args += ["--output-dir", str(tmp_path / "out"), "--max-steps", "2", "--batch-size", "2"]
    rt = make_runtime("cpu")
    steps: list[int] = []
    try:
        trainer_worker.bare(parse_args(args), rt, steps.append)
    finally:
        rt.close()
    assert steps == [1, 2]
