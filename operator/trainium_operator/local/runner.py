"""The local backend: the same spec, lifecycle and TorchX AppDef, run by TorchX's local scheduler.

The job's storage maps to `runs/<job>/volume` (data, Neuron cache, outputs, like the FSx mount),
the installed package stands in for the image, and the run record (status, logs, summary) goes to
`runs/<job>/`. There is no Neuron compiler here: the precompile stage runs the training command
for the step limit in graph-extraction mode, as `neuron_parallel_compile` does first.

While it runs, the job file is read again at each poll and a change of runPolicy.suspend (only
that field) is followed as the operator follows it: suspending cancels the stage's TorchX app
(SIGTERM to torchrun, which the trainer answers with a checkpoint), resuming starts it again
and the trainer resumes from that checkpoint (--resume auto).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from torchx.runner import get_runner
from torchx.schedulers.local_scheduler import SignalException
from torchx.specs import AppState

from trainium_operator.api import naming
from trainium_operator.api.spec import TrainiumJobSpec, parse
from trainium_operator.domain import checkpoints, lifecycle, status
from trainium_operator.domain.cachekey import cache_name
from trainium_operator.domain.lifecycle import Action, Child, Decision, Observed, Phase
from trainium_operator.domain.status import now_iso, read_conditions
from trainium_operator.local import interrupt, render, terminal
from trainium_operator.local import logs as locallogs
from trainium_operator.local import view as localview
from trainium_operator.local.localrun import (
    CHECKPOINT_REPORT,
    LocalRun,
    flag_value,
    free_port,
    stage_context,
)
from trainium_operator.manifests import appdef
from trainium_trainer import rendezvous

Json = dict[str, Any]
SYNTH_ANNOTATION = "trainium.dev/local-synthetic-data"
SCHEDULER = "local_cwd"
POLL_SECONDS = 1.0
#: The job's runPolicy.suspend as the job file says now; None when it cannot be read just now.
SuspendSource = Callable[[], bool | None]


def local_spec(run: LocalRun) -> TrainiumJobSpec:
    """The spec with mount paths in args and env mapped onto the local volume."""
    spec = run.spec
    env = tuple(replace(e, value=run.local_path(e.value)) for e in spec.env)
    return replace(spec, args=tuple(run.local_path(a) for a in spec.args), env=env)


def dryrun(run: LocalRun, stage: str, runner: Any) -> Any:
    """TorchX's local request for one stage (one process per node), replica 0 hosting the store."""
    spec, ctx = local_spec(run), stage_context(run, stage)
    cfg = {"log_dir": str(run.root / "logs" / stage), "prepend_cwd": True}
    info = runner.dryrun(appdef.build_appdef(spec, ctx), SCHEDULER, cfg=cfg)
    host = info.request.role_params[naming.ROLE][appdef.STORE_HOST_REPLICA]
    host.args = rendezvous.store_host_argv(host.args)
    return info


def submit(run: LocalRun, stage: str, runner: Any) -> None:
    """Start one stage as a TorchX local app, logs under runs/<job>/logs."""
    run.apps[stage] = runner.schedule(dryrun(run, stage, runner))


def child_state(run: LocalRun, stage: str, runner: Any) -> Child:
    """Map a TorchX app's state onto the lifecycle's child states."""
    handle = run.apps.get(stage)
    if handle is None:
        return Child.ABSENT
    st = runner.status(handle)
    state = st.state if st else AppState.UNKNOWN
    if state == AppState.SUCCEEDED:
        return Child.SUCCEEDED
    if state in (AppState.FAILED, AppState.CANCELLED):
        return Child.FAILED
    return Child.RUNNING if state == AppState.RUNNING else Child.PENDING


def observe(run: LocalRun, runner: Any) -> Observed:
    """The same Observed the cluster backend builds, from folders and local apps."""
    pre, train = child_state(run, "precompile", runner), child_state(run, "train", runner)
    return Observed(
        policy=run.spec.precompile.policy,
        storage_ready=run.volume.is_dir(),
        cache_recorded=run.cache_record.is_file(),
        precompile=pre,
        precompile_message=_fail_message(run, "precompile", pre),
        training=train,
        training_message=_fail_message(run, "train", train),
        previous_phase=run.status.get("phase"),
        previous_conditions=read_conditions(run.status),
        suspend=run.suspend,
    )


def _fail_message(run: LocalRun, stage: str, state: Child) -> str:
    if state is not Child.FAILED:
        return ""
    return f"{stage} failed; last log lines:\n" + "\n".join(locallogs.tail_logs(run.logs, stage))


def act(run: LocalRun, decision: Decision, runner: Any) -> None:
    """Carry out the lifecycle's actions with local means."""
    for action in decision.actions:
        if action is Action.CREATE_STORAGE:
            run.volume.mkdir(parents=True, exist_ok=True)
        elif action is Action.CREATE_PRECOMPILE:
            submit(run, appdef.PRECOMPILE, runner)
        elif action is Action.RECORD_CACHE:
            run.cache_record.parent.mkdir(parents=True, exist_ok=True)
            tmp = run.cache_record.with_suffix(".tmp")
            tmp.write_text(json.dumps({"key": run.key, "completedAt": now_iso()}))
            os.replace(tmp, run.cache_record)
        elif action is Action.CREATE_TRAINING:
            submit(run, appdef.TRAIN, runner)
        elif action is Action.STOP_PRECOMPILE:
            stop(run, appdef.PRECOMPILE, runner)
        elif action is Action.STOP_TRAINING:
            stop(run, appdef.TRAIN, runner)


def stop(run: LocalRun, stage: str, runner: Any) -> None:
    """Cancel a stage's app, as the cluster deletes its Volcano job; the stage is absent after.

    TorchX's local scheduler sends SIGTERM to torchrun's process group and SIGKILL 10 s later;
    torchrun passes the SIGTERM to its workers, and the trainer checkpoints and exits.
    """
    handle = run.apps.pop(stage, None)
    if handle is not None:
        runner.cancel(handle)
    run.rdzv_port = free_port()  # the next gang gets a store of its own


def follow_file(path: str, name: str) -> SuspendSource | None:
    """runPolicy.suspend of job `name` in the file now (None: unreadable or invalid just now).

    Standard input ("-") cannot be read again: nothing to follow.
    """
    if path == "-":
        return None

    def suspend() -> bool | None:
        try:
            doc = next(d for d in render.load_jobs(path) if d["metadata"]["name"] == name)
            spec, _owner = render.checked(doc)
        except (render.UsageError, StopIteration, KeyError, TypeError, OSError):
            return None
        return spec.runPolicy.suspend

    return suspend


def ensure_synthetic_data(run: LocalRun, where: str) -> None:
    """Seed synthetic BERT shards when the job asks for them and they are missing."""
    from trainium_trainer import synth

    target = Path(run.local_path(where))
    if any(target.glob("*_training_*.hdf5")):
        return
    world = run.spec.nodes * run.spec.procs_per_node
    seq = flag_value(run.spec.args, "--seq-len", "64")
    print(f"[data] writing synthetic BERT shards to {target}", flush=True)
    synth.main(["--out", str(target), "--shards", str(max(4, world)), "--seq-len", seq])


def rotate_outputs(run: LocalRun) -> None:
    """A new local run trains afresh; the previous run's outputs move to history, not away.

    After a run stopped by Ctrl-C the outputs stay: the trainer resumes from their checkpoint.
    """
    out = Path(appdef.output_dir(run.spec, stage_context(run, appdef.TRAIN)))
    resume = interrupt.resumable(run.root / "status.json", run.key)
    if resume is not None and out.exists():
        print(f"[run] {run.name}: resuming the interrupted run from its checkpoint at step "
              f"{resume.get('step')}", flush=True)  # fmt: skip
    elif out.exists():
        dest = run.root / "history" / time.strftime("%Y%m%d-%H%M%S")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(out), str(dest))
    for stale in ("logs", "status.json", "summary.json", CHECKPOINT_REPORT):
        path = run.root / stale
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def render_status(run: LocalRun, decision: Decision) -> Json:
    """status.json's content for this decision, as the status subresource would hold it."""
    previous = run.status
    frame = status.Frame(
        decision, previous, generation=1, now=now_iso(), cache_key=run.key,
        cache_name=cache_name(run.spec, run.key),
        precompile_job=f"{run.name}-compile" if "precompile" in run.apps else None,
        training_job=f"{run.name}-train" if "train" in run.apps else None,
    )  # fmt: skip
    new = status.render(frame)
    if (kept := checkpoints.carried(previous, reported_checkpoint(run))) is not None:
        new["lastCheckpoint"] = kept.to_status()
    return new


def report(run: LocalRun, decision: Decision) -> None:
    """Write status.json like the status subresource and print phase transitions."""
    now = time.monotonic()
    new = render_status(run, decision)
    old_phase = run.status.get("phase")
    if old_phase != new["phase"]:
        if old_phase:
            run.phase_seconds[old_phase] = now - run.phase_started.get(old_phase, now)
        run.phase_started[new["phase"]] = now
        cache = new.get("cache", {}).get("outcome", "-")
        line = f"[phase] {new['phase']:<12} cache={cache:<5} {decision.message}"
        localview.say(run.view, line)  # a bar in progress ends first: the line is not glued to it
        logs = run.logs
        if new["phase"] == Phase.PRECOMPILING.value:
            print(localview.precompile_line(run.spec, logs / "precompile"), flush=True)
        elif new["phase"] == Phase.TRAINING.value:
            print(localview.train_line(run.spec, logs / "train"), flush=True)
    write_status(run, new)


def write_status(run: LocalRun, new: Json) -> None:
    """Keep and write status.json."""
    run.status = new
    (run.root / "status.json").write_text(json.dumps(new, indent=2))


def stop_interrupted(run: LocalRun, runner: Any, by: str) -> str:
    """Ctrl-C: stop the live stage (the trainer checkpoints on SIGTERM), say so on status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the checkpoint
    stage = next(iter(run.apps), None)
    for live in list(run.apps):
        stop(run, live, runner)  # TorchX waits up to 10 s for the SIGTERM, then SIGKILLs
    stopped = lifecycle.decide(replace(observe(run, runner), suspend=True))
    new = render_status(run, stopped)
    message = interrupt.message(run.name, new.get("lastCheckpoint"), stage, by)
    write_status(run, render_status(run, interrupt.decision(stopped, message)))
    if run.view is not None:
        run.view.close()
    return f"[interrupted] {message}"


def reported_checkpoint(run: LocalRun) -> checkpoints.Checkpoint | None:
    """The checkpoint the trainer reported last, as the operator reads it from a pod."""
    try:
        text = run.checkpoint_report.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    return checkpoints.from_message(text)


def finish(run: LocalRun) -> bool:
    """Merge the trainer's summary with cache outcome and phase times into runs/<job>/."""
    out = Path(appdef.output_dir(run.spec, stage_context(run, appdef.TRAIN)))
    summary: Json = {}
    if (out / "summary.json").is_file():
        summary = json.loads((out / "summary.json").read_text())
    summary["phase"] = run.status.get("phase")
    summary["cache_hit"] = (run.status.get("cache") or {}).get("hit")
    summary["phase_seconds"] = {k: round(v, 2) for k, v in run.phase_seconds.items()}
    if appdef.PRECOMPILE in run.apps:  # this run precompiled: what its torch.compile did
        summary["precompile_compile_cache"] = locallogs.compile_cache(run.logs, appdef.PRECOMPILE)
    (run.root / "summary.json").write_text(json.dumps(summary, indent=2))
    ok = run.status.get("phase") == Phase.SUCCEEDED.value
    if run.view is not None:
        run.view.close()
    if ok and "initial_loss" in summary:
        print(f"[done] loss {summary['initial_loss']:.4f} -> {summary['final_loss']:.4f} "
              f"in {summary.get('steps')} steps; {run.root}/summary.json"
              f"{localview.tensorboard_note(out)}")  # fmt: skip
    elif not ok:
        print(f"[failed] {run.status.get('message', '')}", file=sys.stderr)
    for line in localview.compile_cache_lines(summary):
        print(line, flush=True)
    return ok


def run(
    doc: Json,
    runs_dir: Path,
    quiet: bool = False,
    suspend: SuspendSource | None = None,
    beat: localview.Heartbeat | None = None,
) -> bool:
    """Run one TrainiumJob to completion here; True when it succeeded (beat: tests' clock)."""
    name = doc["metadata"]["name"]
    job = LocalRun(name=name, spec=parse(doc), root=(runs_dir / name).resolve())
    job.suspend = job.spec.runPolicy.suspend
    job.root.mkdir(parents=True, exist_ok=True)
    rotate_outputs(job)
    print(localview.plan_line(name, job.spec, job.cache_record.is_file()), flush=True)
    runner = get_runner()
    beat = beat or localview.Heartbeat()
    try:
        loop(job, doc, runner, quiet, suspend, beat)
    except (KeyboardInterrupt, SignalException) as exc:
        if (signum := interrupt.signal_of(exc)) is None:
            raise
        line = stop_interrupted(job, runner, interrupt.cause(signum))
        raise interrupt.Interrupted(line, 128 + signum) from None
    finally:
        runner.close()
    return finish(job)


def loop(
    job: LocalRun,
    doc: Json,
    runner: Any,
    quiet: bool,
    suspend: SuspendSource | None,
    beat: localview.Heartbeat,
) -> None:
    """Observe, decide, report and act once a POLL_SECONDS until the job is finished."""
    seen = 0
    while True:
        now_suspended = suspend() if suspend is not None else None
        job.suspend = job.suspend if now_suspended is None else now_suspended
        decision = lifecycle.decide(observe(job, runner))
        # the bar is current before a phase line
        seen = seen if quiet else terminal.progress(job, seen)
        report(job, decision)
        if decision.phase in lifecycle.TERMINAL:
            return
        terminal.heartbeat(job, beat, quiet)
        act(job, decision, runner)
        if Action.CREATE_STORAGE in decision.actions:
            synth = (doc["metadata"].get("annotations") or {}).get(SYNTH_ANNOTATION)
            if synth:
                ensure_synthetic_data(job, synth)
        time.sleep(POLL_SECONDS)
