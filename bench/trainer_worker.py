"""One trainer measurement, run by bench/trainer_loop.py (under torchrun for 2 processes).

`trainer` runs trainium_trainer's loop; `bare` is a hand-written loop over the same task (model,
data shards, batch, optimizer): forward, backward, step, zero_grad, DDP when distributed.
`trainer-perparam` is `trainer` with the optimizer's per-parameter loop (optim.FOREACH off).
Prints one JSON line on rank 0: steady-state samples/s and CPU seconds per step, from step
`warmup` to the step before the last (the trainer's last step writes its final checkpoint, a
one-off the bare loop has no counterpart for), and the same up to the last step (`*_to_end`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import common  # noqa: F401  (import path)
import torch

from trainium_trainer import optim
from trainium_trainer.config import RunConfig, parse_args
from trainium_trainer.device import Runtime, make_runtime
from trainium_trainer.loop import train
from trainium_trainer.tasks import build_task


def bare(cfg: RunConfig, rt: Runtime, on_step: Callable[[int], None]) -> None:
    """The hand-written loop: what the trainer must not be much slower than."""
    task = build_task(cfg)
    model: torch.nn.Module = task.model
    if rt.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = optim.build_optimizer(task.model, cfg.optimizer, cfg.lr)
    batches = task.batches(cfg, rt.rank, rt.world_size, start=0)
    model.train()
    for step in range(1, cfg.max_steps + 1):
        loss = model(**next(batches)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        on_step(step)


def _rates(
    start: tuple[float, float], end: tuple[float, float], steps: int, samples_per_step: int
) -> dict[str, float]:
    """samples/s (wall) and CPU seconds per step between two (wall, CPU) marks."""
    return {
        "samples_per_s": steps * samples_per_step / (end[0] - start[0]),
        "cpu_s_per_step": (end[1] - start[1]) / steps,
    }


def main() -> int:
    kind, warmup, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    cfg = parse_args(argv)
    rt = make_runtime()
    marks: dict[int, tuple[float, float]] = {}

    def on_step(step: int) -> None:
        if step in (warmup, cfg.max_steps - 1, cfg.max_steps):
            marks[step] = (time.perf_counter(), time.process_time())

    optim.FOREACH = kind != "trainer-perparam"
    try:
        (bare if kind == "bare" else train)(cfg, rt, on_step)
    finally:
        rt.close()
    samples = cfg.batch_size * rt.world_size
    steady = _rates(marks[warmup], marks[cfg.max_steps - 1], cfg.max_steps - 1 - warmup, samples)
    to_end = _rates(marks[warmup], marks[cfg.max_steps], cfg.max_steps - warmup, samples)
    if rt.is_main:
        result = {**steady, **{f"{k}_to_end": v for k, v in to_end.items()}}
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
