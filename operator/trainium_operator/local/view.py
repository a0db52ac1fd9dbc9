"""What `trainium run` shows while a job runs: a progress bar over the trainer's metric records.

tqdm (which the trainer's dependencies bring: transformers, huggingface_hub) draws the bar with
elapsed time and ETA on stderr; without it, one line per record goes to stdout as before.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.domain.cachekey import cache_key, cache_name
from trainium_operator.domain.logs import counted


class TrainView:
    """The training stage's bar: step of total, elapsed, ETA, step rate, loss and throughput.

    The step rate is the trainer's, not the bar's: each record's samples/s timed the window
    since the previous record, so window seconds = samples in it / samples/s. Records reach the
    runner in bursts (it reads metrics.jsonl once a pass), so a rate timed by their arrival read
    97,040 step/s (issue 43); the first record's window (imports, the first compile) is left out.
    """

    def __init__(self, total: int | None) -> None:
        self.total = total
        self._bar: Any = None
        #: The last step's record was shown: what follows is the trainer's wind-down.
        self.done = False
        self._last: tuple[int, float] | None = None  # (step, samples) of the previous record
        self._steps = 0  # steps in the timed windows ...
        self._seconds = 0.0  # ... and their seconds, by the trainer's clock

    def show(self, record: dict[str, Any]) -> None:
        """Move the bar to this record's step."""
        step = int(record.get("step", 0))
        loss, rate = float(record.get("loss", 0.0)), float(record.get("samples_per_second", 0.0))
        self._time(step, record.get("samples"), rate)
        self.done = self.total is not None and step >= self.total
        bar = self._bar or self._open(step)
        if bar is None:
            total = self.total or "?"
            print(f"[train] step {step}/{total} loss {loss:.4f} {rate:.1f} samples/s", flush=True)
            return
        bar.update(max(0, step - bar.n))
        bar.set_postfix_str(f"{self.timing(step)}, loss {loss:.4f}, {rate:.1f} samples/s")
        if self.done:
            self.close()  # the last step: evaluation and export must not count into its rate

    def _time(self, step: int, samples: Any, samples_per_second: float) -> None:
        """Add the window this record timed (from the previous record) to the step rate."""
        last, self._last = self._last, (step, float(samples)) if samples is not None else None
        if last is None or self._last is None or samples_per_second <= 0:
            return
        steps, window_samples = step - last[0], self._last[1] - last[1]
        if steps > 0 and window_samples > 0:
            self._steps += steps
            self._seconds += window_samples / samples_per_second

    def steps_per_second(self) -> float | None:
        """Steps a second over the timed windows; None until two records time one."""
        return self._steps / self._seconds if self._seconds > 0 else None

    def timing(self, step: int) -> str:
        """`ETA 00:04, 5.00 step/s`, with `?` for what is not known yet."""
        from tqdm import tqdm

        rate = self.steps_per_second()
        if rate is None:
            return "ETA ?, ? step/s"
        eta = "?" if self.total is None else tqdm.format_interval(max(0, self.total - step) / rate)
        return f"ETA {eta}, {rate:.2f} step/s"

    def _open(self, first_step: int) -> Any:
        """The bar, started at the first record's step (a resumed run starts there)."""
        try:
            from tqdm import tqdm
        except ImportError:
            return None
        left = "{desc} {percentage:3.0f}%|{bar}| " if self.total else "{desc} "
        self._bar = tqdm(
            total=self.total, initial=first_step, desc="[train]", unit="step",
            file=sys.stderr, dynamic_ncols=True, mininterval=0.5,
            bar_format=left + "{n_fmt}/{total_fmt} [{elapsed} elapsed{postfix}]",
        )  # fmt: skip
        return self._bar

    def close(self) -> None:
        """Leave the finished bar on screen."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


#: Seconds between two heartbeat lines while a stage prints nothing of its own.
HEARTBEAT_SECONDS = 15.0
#: The quiet waits a heartbeat covers: the precompile stage, training before its first logged
#: step, and training after its last one (see wind_down_line).
PRECOMPILE, TRAIN_START, TRAIN_END = "precompile", "train-start", "train-end"
_WAITS = {
    PRECOMPILE: "[precompile] still running",
    TRAIN_START: "[train] still starting",
    TRAIN_END: "[train] still finishing",
}


class Heartbeat:
    """When to say that a quiet wait goes on, so that a long stage never looks hung (issue 34).

    Polled once per runner pass with the wait in progress (None: the run is printing, a bar
    moves). The clock is injected: tests move it by hand.
    """

    def __init__(
        self, every: float = HEARTBEAT_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every = every
        self.clock = clock
        self._wait: str | None = None
        self._began = self._said = 0.0

    def due(self, wait: str | None) -> float | None:
        """Seconds `wait` has lasted when a line is due now; None when none is (or no wait)."""
        now = self.clock()
        if wait != self._wait:
            self._wait, self._began, self._said = wait, now, now
            return None
        if wait is None or now - self._said < self.every:
            return None
        self._said = now
        return now - self._began


def heartbeat_line(wait: str, seconds: float, doing: str) -> str:
    """One heartbeat: which wait, for how long, and what the stage is doing as far as we see."""
    return f"{_WAITS[wait]} ({seconds:.0f} s): {doing}"


def wind_down_line(processes: int) -> str:
    """Said when the bar ends: the seconds before the run's end are the trainer winding down.

    Measured (issue 34, make run at load ~10): the final checkpoint, evaluation, export and
    summary.json are done 0.3 s after the last record; the rest is each process's exit, where
    Python's teardown of torch and transformers takes 5-8 s (torch alone 2.5-3 s), then torchrun's.
    """
    return (
        f"[train] last step done: final checkpoint and model export, then {processes} "
        f"{'process exits' if processes == 1 else 'processes exit'} (Python's teardown of torch "
        "takes a few seconds)"
    )


def say(view: TrainView | None, line: str) -> None:
    """Print a line of the run's story on a line of its own: a bar in progress is ended first."""
    if view is not None:
        view.close()
    print(line, flush=True)


def plan_line(name: str, spec: TrainiumJobSpec, cached: bool) -> str:
    """What the run will do, before it starts: whether a precompile comes first, and why."""
    policy, steps = spec.precompile.policy, spec.precompile.steps
    cache = f"cache {cache_name(spec, cache_key(spec))}"
    if policy == "Never":
        plan = "no precompile (policy Never): train"
    elif policy == "Always":
        plan = f"precompile ({steps} steps, policy Always), then train"
    elif cached:
        plan = f"{cache} has this job's graphs (hit): no precompile, train"
    else:
        plan = f"{cache} has no entry for this job: precompile ({steps} steps), then train"
    return f"[run] {name}: {plan}"


def train_line(spec: TrainiumJobSpec, logs: Path) -> str:
    """The line printed when training starts: the bar waits for the first logged step."""
    procs = counted(spec.nodes * spec.procs_per_node, "process", "processes")
    return (
        f"[train] starting {procs} (torchrun); the bar appears at their first logged "
        f"step, after imports and building the model; logs in {logs}"
    )


def precompile_line(spec: TrainiumJobSpec, logs: Path) -> str:
    """The line printed while the precompile stage extracts graphs (it logs no metrics)."""
    procs = counted(spec.nodes * spec.procs_per_node, "process", "processes")
    return (
        f"[precompile] extracting graphs: {spec.precompile.steps} steps on {procs}; logs in {logs}"
    )


def tensorboard_note(output: Path) -> str:
    """Where the run's TensorBoard events are, for the [done] line ("" when there are none)."""
    tb = output / "tensorboard"
    return f"; TensorBoard: tensorboard --logdir {tb}" if tb.is_dir() else ""


def compile_cache_lines(summary: dict[str, Any]) -> list[str]:
    """The `[cache]` lines: whether the precompile's and training's torch.compile hit the cache.

    The native runtime reports its compile-cache counters (summary.json's `compile_cache`; the
    runner adds the precompile's from its log); a hit compiled nothing new. Other runtimes
    report none, and there is no line.
    """
    stages = (("precompile", summary.get("precompile_compile_cache")),
              ("training", summary.get("compile_cache")))  # fmt: skip
    return [compile_cache_line(stage, counts) for stage, counts in stages if counts]


def compile_cache_line(stage: str, counts: dict[str, Any]) -> str:
    """One stage's `[cache]` line: hit (nothing compiled) or miss (how many graphs compiled)."""
    hits, misses = int(counts.get("fxgraph_cache_hit", 0)), int(counts.get("fxgraph_cache_miss", 0))
    outcome = f"miss, compiled {misses} FX graphs" if misses else "hit, compiled nothing new"
    where = f"{counts.get('compiler', '?')} in {counts.get('dir') or 'its default directory'}"
    counted = f"{hits} FX-graph hits, {misses} misses"
    return f"[cache] {stage}: compile cache {outcome} ({counted}; {where})"
