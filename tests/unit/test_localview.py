"""`trainium run`'s display: a bar with elapsed time and ETA, a precompile line, TensorBoard."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from support import spec_of

from trainium_operator.local import view as localview


def test_tqdm_comes_with_the_trainers_dependencies() -> None:
    from importlib.metadata import requires

    needs = " ".join(requires("transformers") or []) + " ".join(requires("huggingface_hub") or [])
    assert "tqdm" in needs


def test_the_bar_shows_step_of_total_elapsed_eta_loss_and_rate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    view = localview.TrainView(40)
    view.show({"step": 10, "loss": 7.25, "samples_per_second": 12.5, "samples": 40})
    view.show({"step": 20, "loss": 6.5, "samples_per_second": 13.0, "samples": 80})
    view.close()
    err = capsys.readouterr().err
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("[train]") and "20/40" in last
    # 40 samples at 13.0/s: 3.08 s for 10 steps; 20 steps left at 3.25 step/s: 6 s
    assert "elapsed, ETA 00:06, 3.25 step/s, loss 6.5000, 13.0 samples/s]" in last


def test_a_resumed_run_starts_the_bar_where_it_resumed(capsys: pytest.CaptureFixture[str]) -> None:
    view = localview.TrainView(40)
    view.show({"step": 31, "loss": 1.0, "samples_per_second": 1.0})
    view.close()
    assert "31/40" in capsys.readouterr().err


def test_without_tqdm_one_line_per_record(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)
    localview.TrainView(None).show({"step": 3, "loss": 2.0, "samples_per_second": 4.0})
    assert capsys.readouterr().out == "[train] step 3/? loss 2.0000 4.0 samples/s\n"


def test_the_precompile_line_and_the_tensorboard_note(tmp_path: Path) -> None:
    spec = spec_of(nodes=2, instanceType="trn1.2xlarge")
    line = localview.precompile_line(spec, tmp_path / "logs")
    assert (
        line == f"[precompile] extracting graphs: 10 steps on 4 processes; logs in {tmp_path}/logs"
    )
    assert localview.tensorboard_note(tmp_path) == ""
    (tmp_path / "tensorboard").mkdir()
    assert localview.tensorboard_note(tmp_path) == (
        f"; TensorBoard: tensorboard --logdir {tmp_path}/tensorboard"
    )


class Clock:
    """tqdm's clock: 1 us a reading, plus what the test adds (records come seconds apart)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1e-6
        return self.now


def _rates(err: str) -> list[str]:
    return re.findall(r"([\d.?]+) step/s", err.replace("\r", "\n").splitlines()[-1])


def test_the_first_record_shows_no_rate_until_a_second_one_times_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr("tqdm.std.time", clock)
    view = localview.TrainView(60)
    view.show({"step": 1, "loss": 7.0, "samples_per_second": 300.0, "samples": 30})
    assert _rates(capsys.readouterr().err) == ["?"]  # not 1 step in a few microseconds
    clock.now += 2.0
    view.show({"step": 11, "loss": 6.0, "samples_per_second": 150.0, "samples": 330})
    view.close()
    (rate,) = _rates(capsys.readouterr().err)
    assert float(rate) == pytest.approx(5.0, rel=0.01)  # 300 samples at 150/s: 10 steps in 2 s


def test_records_read_in_one_burst_keep_the_trainers_rate(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner reads metrics.jsonl once a pass: records come a microsecond apart (issue 43,
    item 3: `97040.45step/s` at step 10). Rate and ETA follow the trainer's clock instead."""
    monkeypatch.setattr("tqdm.std.time", Clock())
    view = localview.TrainView(100)
    for step in (5, 10, 15, 20):  # 5 steps of 8 samples at 20 samples/s: 2 s a window
        view.show({"step": step, "loss": 7.0, "samples_per_second": 20.0, "samples": step * 8})
    view.close()
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert _rates(last) == ["2.50"]
    assert "ETA 00:32," in last  # 80 steps at 2.5 step/s


def test_a_line_said_while_the_bar_runs_starts_on_a_line_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    screen = io.StringIO()  # stdout and stderr on one terminal
    monkeypatch.setattr(sys, "stdout", screen)
    monkeypatch.setattr(sys, "stderr", screen)
    view = localview.TrainView(20)
    view.show({"step": 20, "loss": 5.0, "samples_per_second": 300.0})
    localview.say(view, "[phase] Succeeded    cache=miss  training completed")
    text = screen.getvalue().replace("\r", "\n")
    before, after = text.split("[phase] Succeeded", 1)
    assert before.endswith("\n") and "20/20" in before
    assert "[train]" not in after  # the finished bar is not drawn again below the line


def test_say_without_a_bar_just_prints(capsys: pytest.CaptureFixture[str]) -> None:
    localview.say(None, "[phase] Pending")
    assert capsys.readouterr().out == "[phase] Pending\n"


@pytest.mark.parametrize(
    ("policy", "cached", "plan"),
    [
        (
            "IfNotCached",
            False,
            "cache c has no entry for this job: precompile (10 steps), then train",
        ),
        ("IfNotCached", True, "cache c has this job's graphs (hit): no precompile, train"),
        ("Always", True, "precompile (10 steps, policy Always), then train"),
        ("Never", False, "no precompile (policy Never): train"),
    ],
)
def test_the_plan_line_says_whether_there_will_be_a_precompile(
    policy: str, cached: bool, plan: str
) -> None:
    spec = spec_of(cache={"name": "c"}, precompile={"policy": policy})
    assert localview.plan_line("j", spec, cached) == f"[run] j: {plan}"


def test_the_train_line_says_what_comes_before_the_bar(tmp_path: Path) -> None:
    spec = spec_of(nodes=2, instanceType="trn1.2xlarge")
    assert localview.train_line(spec, tmp_path / "logs") == (
        "[train] starting 4 processes (torchrun); the bar appears at their first logged step, "
        f"after imports and building the model; logs in {tmp_path}/logs"
    )


def test_one_process_is_singular(tmp_path: Path) -> None:
    spec = spec_of(nprocPerNode=1)
    assert spec.nodes * spec.procs_per_node == 1
    assert "[train] starting 1 process (torchrun);" in localview.train_line(spec, tmp_path)
    assert " steps on 1 process; " in localview.precompile_line(spec, tmp_path)


def test_the_bar_ends_at_the_last_step_so_the_export_does_not_slow_its_rate(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr("tqdm.std.time", clock)
    view = localview.TrainView(20)
    view.show({"step": 10, "loss": 7.0, "samples_per_second": 300.0, "samples": 100})
    clock.now += 2.0
    view.show({"step": 20, "loss": 6.0, "samples_per_second": 50.0, "samples": 200})
    clock.now += 30.0  # evaluation, save_pretrained, torchrun's exit
    view.close()
    (rate,) = _rates(capsys.readouterr().err)
    assert float(rate) == pytest.approx(5.0, rel=0.01)


def test_the_cache_lines_say_hit_or_miss_per_stage_and_nothing_without_counters() -> None:
    counts = {"compiler": "inductor", "dir": "/v/neuron_cache/c_0", "fxgraph_cache_miss": 0}
    summary = {
        "precompile_compile_cache": {**counts, "fxgraph_cache_hit": 0, "fxgraph_cache_miss": 3},
        "compile_cache": {**counts, "fxgraph_cache_hit": 3},
    }
    assert localview.compile_cache_lines(summary) == [
        "[cache] precompile: compile cache miss, compiled 3 FX graphs (0 FX-graph hits, 3 misses; "
        "inductor in /v/neuron_cache/c_0)",
        "[cache] training: compile cache hit, compiled nothing new (3 FX-graph hits, 0 misses; "
        "inductor in /v/neuron_cache/c_0)",
    ]
    # An XLA or CPU run reports no counters; a run that skipped the precompile has none for it.
    assert localview.compile_cache_lines({"precompile_compile_cache": None}) == []


def test_the_precompile_counters_come_from_its_rank_prefixed_log(tmp_path: Path) -> None:
    from trainium_operator.local import logs

    node = tmp_path / "precompile" / "app" / "trainer" / "0"
    node.mkdir(parents=True)
    copy = tmp_path / "precompile" / "app" / "torchelastic" / "attempt_0" / "0"
    copy.mkdir(parents=True)
    event = '{"compile_cache": {"fxgraph_cache_miss": 3}, "event": "runtime"}'
    (node / "stdout.log").write_text(
        f'[default0]:{{"step": 1}}\n[default0]:{event}\nnot json "runtime"\n'
    )
    (copy / "stdout.log").write_text(
        '{"compile_cache": {"fxgraph_cache_miss": 99}, "event": "runtime"}\n'
    )
    assert logs.compile_cache(tmp_path, "precompile") == {"fxgraph_cache_miss": 3}
    assert logs.compile_cache(tmp_path, "train") is None


class Ticks:
    """The heartbeat's clock: moved by hand, never read from the machine."""

    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def test_the_heartbeat_is_due_every_15_s_of_one_quiet_wait_and_restarts_with_another() -> None:
    ticks = Ticks()
    beat = localview.Heartbeat(every=15.0, clock=ticks)
    assert beat.due(localview.PRECOMPILE) is None  # the wait begins
    ticks.now += 14.9
    assert beat.due(localview.PRECOMPILE) is None
    ticks.now += 0.1
    assert beat.due(localview.PRECOMPILE) == pytest.approx(15.0)
    ticks.now += 10.0
    assert beat.due(localview.PRECOMPILE) is None  # 10 s after the last line
    ticks.now += 5.0
    assert beat.due(localview.PRECOMPILE) == pytest.approx(30.0)  # since the wait began
    assert beat.due(localview.TRAIN_START) is None  # another wait: from zero
    ticks.now += 15.0
    assert beat.due(localview.TRAIN_START) == pytest.approx(15.0)
    assert beat.due(None) is None  # the run prints (a bar moves): no wait
    ticks.now += 60.0
    assert beat.due(None) is None


def _local_run(tmp_path: Path, phase: str, backend: str = "native") -> Any:
    """A LocalRun at `phase`, with no TorchX app behind it: the heartbeat reads files only."""
    from trainium_operator.local import localrun

    machine = {"instanceType": "trn2.48xlarge", "nprocPerNode": 2} if backend == "native" else {}
    spec = spec_of(**{"instanceType": "trn1.2xlarge", **machine, "backend": backend})  # 2 procs
    run = localrun.LocalRun(name="j", spec=spec, root=tmp_path, rdzv_port=1)
    run.status = {"phase": phase}
    return run


def _beat_after(seconds: float, wait: str = localview.PRECOMPILE) -> localview.Heartbeat:
    """A heartbeat whose `wait` began `seconds` ago, so the next poll of it is due."""
    ticks = Ticks()
    beat = localview.Heartbeat(every=15.0, clock=ticks)
    beat.due(wait)
    ticks.now += seconds
    return beat


def test_a_quiet_precompile_says_its_step_and_what_it_compiled_so_far(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainium_operator.domain.cachekey import cache_name
    from trainium_operator.local import terminal

    run = _local_run(tmp_path, "Precompiling")
    beat = _beat_after(45.0)
    terminal.heartbeat(run, beat, quiet=False)
    assert capsys.readouterr().err == (
        "[precompile] still running (45 s): no step done yet (imports, the model); "
        "0 compiled kernel files in the cache so far\n"
    )
    node = run.logs / "precompile" / "app" / "node" / "0"
    node.mkdir(parents=True)
    (node / "stdout.log").write_text('[default0]:{"loss": 7.0, "step": 2}\nnoise "step"\n')
    cache = run.volume / run.spec.cache.path / f"{cache_name(run.spec, run.key)}_0" / "inductor"
    (cache / "ab").mkdir(parents=True)
    for name in ("k1.main.so", "k1.main.cpp", "k2.main.so", "x.neff"):
        (cache / "ab" / name).write_text("")
    beat = _beat_after(60.0)
    terminal.heartbeat(run, beat, quiet=False)
    assert capsys.readouterr().err == (
        f"[precompile] still running (60 s): step 2 of {run.spec.precompile.steps} done; "
        "3 compiled kernel files in the cache so far\n"
    )


def test_no_heartbeat_before_it_is_due_nor_while_the_bar_moves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainium_operator.local import terminal

    run = _local_run(tmp_path, "Precompiling")
    terminal.heartbeat(run, _beat_after(14.0), quiet=False)
    run.status = {"phase": "Training"}
    run.view = localview.TrainView(40)  # a bar in progress (not done)
    terminal.heartbeat(run, _beat_after(30.0, localview.TRAIN_END), quiet=False)
    run.view = None
    terminal.heartbeat(
        run, _beat_after(30.0, localview.TRAIN_START), quiet=True
    )  # -q: no bar, nothing to time
    assert capsys.readouterr().err == ""


def test_training_says_it_is_starting_until_the_first_step_then_what_ends_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainium_operator.local import localrun, terminal

    run = _local_run(tmp_path, "Training", backend="xla")
    terminal.heartbeat(run, _beat_after(30.0, localview.TRAIN_START), quiet=False)
    assert capsys.readouterr().err == (
        "[train] still starting (30 s): no step logged yet (imports, building the model)\n"
    )
    run.view = localview.TrainView(40)
    run.view.done = True  # the last step's record was shown
    terminal.heartbeat(run, _beat_after(15.0, localview.TRAIN_END), quiet=False)
    assert capsys.readouterr().err == (
        "[train] still finishing (15 s): the final checkpoint, evaluation and model export\n"
    )
    localrun.train_output(run).mkdir(parents=True)
    (localrun.train_output(run) / "summary.json").write_text("{}")
    terminal.heartbeat(run, _beat_after(30.0, localview.TRAIN_END), quiet=False)
    assert capsys.readouterr().err == (
        "[train] still finishing (30 s): the trainer is done (summary.json written); "
        "waiting for its 2 processes to exit\n"
    )


def test_the_last_step_says_once_what_the_seconds_before_the_end_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ~9 s between the bar's end and `[phase] Succeeded` (issue 34) are the processes' exit."""
    from trainium_operator.local import localrun, terminal

    monkeypatch.setitem(sys.modules, "tqdm", None)  # the bar's lines on stdout, one per record
    run = _local_run(tmp_path, "Training")
    run.spec = spec_of(instanceType="trn1.2xlarge", args=["--max-steps", "20"])
    out = localrun.train_output(run)
    out.mkdir(parents=True)
    metrics = out / "metrics.jsonl"
    metrics.write_text('{"step": 10, "loss": 7.0, "samples_per_second": 3.0}\n')
    seen = terminal.progress(run, 0)
    assert "last step done" not in capsys.readouterr().out
    with metrics.open("a") as f:
        f.write('{"step": 20, "loss": 6.0, "samples_per_second": 3.0}\n')
    seen = terminal.progress(run, seen)
    assert terminal.progress(run, seen) == 2
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "[train] step 20/20 loss 6.0000 3.0 samples/s",
        "[train] last step done: final checkpoint and model export, then 2 processes exit "
        "(Python's teardown of torch takes a few seconds)",
    ]
