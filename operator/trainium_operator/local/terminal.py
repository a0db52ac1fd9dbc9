"""What a person at the terminal sees while a local run waits: the bar and heartbeat lines."""

from __future__ import annotations

import json
import sys

from trainium_operator.domain.cachekey import cache_name
from trainium_operator.domain.model import Phase
from trainium_operator.local import logs as locallogs
from trainium_operator.local import view as localview
from trainium_operator.local.localrun import LocalRun, flag_value, train_output
from trainium_operator.manifests import appdef
from trainium_trainer import contract


def progress(run: LocalRun, seen: int) -> int:
    """Move the progress bar over the trainer's new metric records; returns records seen."""
    path = train_output(run) / "metrics.jsonl"
    if not path.is_file():
        return seen
    if run.view is None:
        total = flag_value(run.spec.args, "--max-steps", "?")
        run.view = localview.TrainView(int(total) if total.isdigit() else None)
    for line in path.read_text().splitlines()[seen:]:
        try:
            run.view.show(json.loads(line))
        except json.JSONDecodeError:
            return seen
        seen += 1
    if run.view.done and not run.wound_down:
        run.wound_down = True
        print(localview.wind_down_line(run.spec.nodes * run.spec.procs_per_node), flush=True)
    return seen


def quiet_wait(run: LocalRun, quiet: bool) -> str | None:
    """The wait in progress while the run prints nothing of its own (None: none, or a bar)."""
    phase = run.status.get("phase")
    if phase == Phase.PRECOMPILING.value:
        return localview.PRECOMPILE
    if phase != Phase.TRAINING.value or quiet:
        return None
    if run.view is None:
        return localview.TRAIN_START
    return localview.TRAIN_END if run.view.done else None


def doing(run: LocalRun, wait: str) -> str:
    """What the waited-on stage is doing, as far as its logs, cache and outputs show."""
    procs = run.spec.nodes * run.spec.procs_per_node
    if wait == localview.TRAIN_END:
        if (train_output(run) / "summary.json").is_file():
            them = "its process" if procs == 1 else f"its {procs} processes"
            return f"the trainer is done (summary.json written); waiting for {them} to exit"
        return "the final checkpoint, evaluation and model export"
    stage = appdef.PRECOMPILE if wait == localview.PRECOMPILE else appdef.TRAIN
    step = locallogs.last_step(run.logs, stage)
    if wait == localview.PRECOMPILE:
        total = run.spec.precompile.steps
        now = f"step {step} of {total} done" if step else "no step done yet (imports, the model)"
    else:
        now = "no step logged yet (imports, building the model)"
    root = run.volume / run.spec.cache.path
    cache_dirs = sorted(root.glob(f"{cache_name(run.spec, run.key)}_*"))
    compiled = locallogs.compiled_files(cache_dirs)
    if compiled or run.spec.effective_backend == contract.BACKEND_NATIVE:
        return f"{now}; {compiled} compiled kernel files in the cache so far"
    return now


def heartbeat(run: LocalRun, beat: localview.Heartbeat, quiet: bool) -> None:
    """A line on stderr when a quiet wait has gone on for another HEARTBEAT_SECONDS."""
    wait = quiet_wait(run, quiet)
    seconds = beat.due(wait)
    if wait is not None and seconds is not None:
        print(
            localview.heartbeat_line(wait, seconds, doing(run, wait)), file=sys.stderr, flush=True
        )
