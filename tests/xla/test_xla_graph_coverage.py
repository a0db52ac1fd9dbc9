"""The precompile traces every graph training runs, whatever the lr (issue 21).

One subprocess (a fresh torch_xla with PT_XLA_DEBUG_LEVEL=2, which prints the hash of every
graph it executes) runs, per lr: the precompile stage as the operator launches it (graph
extraction only, its step limit and the args the operator gives it), then the training run, and
for one lr a resumed run. Training's graph set must be a subset of the precompile's, and every
graph must first run within the precompile's step limit. At lr 0.05 the scheduled lr passes
through the weight decay (0.01) at step 42; at 0.01 the warm-up ends on it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch_xla")

from trainium_trainer import config

LRS = ("0.01", "0.05", "0.06")
TRAIN_STEPS = 50
#: The CRD's default precompile.steps.
PRECOMPILE_STEPS = config.precompile_steps(10)
#: What the trainer gets on a cluster (bf16, AdamW), with accumulation, a checkpoint and logs.
ARGS = [
    *("--batch-size", "8", "--grad-accum-steps", "2", "--warmup-steps", "5"),
    *("--checkpoint-every", "10", "--log-every", "5", "--precision", "bf16"),
    *("--optimizer", "adamw", "--resume", "auto"),
]
HASH = re.compile(r"Execution Analysis:\s+Graph Hash: (\w+)")
Runs = dict[str, dict[str, int]]


def _runs(setup: tuple[Path, Path], out: Path) -> list[tuple[str, list[str], bool]]:
    """(name, trainer argv, extract graphs only) of every run, in order."""
    data, model = setup
    runs = []
    for lr in LRS:
        base = ["bert-pretrain", "--data-dir", str(data), "--model-config", str(model)]
        base += [*ARGS, "--lr", lr]
        pre = config.precompile_args([*base, "--output-dir", str(out / f"pre-{lr}")], 10)
        runs.append((f"precompile {lr}", [*pre, "--max-steps", str(PRECOMPILE_STEPS)], True))
        train = [*base, "--output-dir", str(out / f"train-{lr}")]
        runs.append((f"train {lr}", [*train, "--max-steps", str(TRAIN_STEPS)], False))
        if lr == LRS[1]:  # picks up the step-50 checkpoint: the first step after a resume
            runs.append((f"resume {lr}", [*train, "--max-steps", str(TRAIN_STEPS + 5)], False))
    return runs


def _drive(plan: Path) -> None:
    """In the subprocess: run the plan, printing a marker before each run and after each step."""
    from trainium_trainer.device import make_runtime
    from trainium_trainer.loop import train

    def say(marker: str) -> None:
        print(marker, file=sys.stderr, flush=True)  # where torch_xla prints its analysis

    rt = make_runtime("xla")
    for name, argv, extract in json.loads(plan.read_text()):
        os.environ["NEURON_EXTRACT_GRAPHS_ONLY"] = "1" if extract else ""
        say(f"@@run {name}")
        train(config.parse_args(argv), rt, on_step=lambda s: say(f"@@step {s}"))


def _first_steps(output: str) -> Runs:
    """Per run: each graph hash and the step of the run it first ran in (set-up counts as 1)."""
    runs: Runs = {}
    name, done = "", 0
    for line in output.splitlines():
        if line.startswith("@@run "):
            name, done = line[6:], 0
            runs[name] = {}
        elif line.startswith("@@step "):
            done += 1
        elif (m := HASH.search(line)) and name:
            runs[name].setdefault(m.group(1), done + 1)
    return runs


def test_precompile_traces_every_graph_training_runs(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_runs(setup, tmp_path)))
    env = {**os.environ, "PT_XLA_DEBUG_LEVEL": "2", "PJRT_DEVICE": "CPU"}
    env["PYTHONPATH"] = os.pathsep.join([str(config.__file__).rsplit("/", 2)[0], *sys.path])
    proc = subprocess.run(
        [sys.executable, __file__, str(plan)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, so markers and graph hashes stay in order
        text=True,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    runs = _first_steps(proc.stdout)
    assert len(runs) == 2 * len(LRS) + 1, list(runs)
    for name, graphs in runs.items():
        lr = name.split()[1]
        pre = runs[f"precompile {lr}"]
        missing = {h: step for h, step in graphs.items() if h not in pre}
        assert not missing, f"{name}: graphs the precompile never traced, by first step: {missing}"
        late = {h: step for h, step in graphs.items() if step > PRECOMPILE_STEPS}
        assert not late, f"{name}: graphs first run after step {PRECOMPILE_STEPS}: {late}"
    # One graph set for every lr: graph identity does not depend on the lr's values.
    assert len({frozenset(runs[f"train {lr}"]) for lr in LRS}) == 1


if __name__ == "__main__":
    _drive(Path(sys.argv[1]))
