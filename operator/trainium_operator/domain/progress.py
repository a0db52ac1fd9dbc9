"""Pure: a training gang's progress from rank 0's metrics text, and whether it is hung.

The trainer serves its gauges in Prometheus text (trainer/trainium_trainer/live.py, names in
contract.py); the operator reads them (scrape.py, the thin part) and this module turns a reading
into status.progress: step, total, percent, throughput, loss, an ETA from the step rate between
two readings, and when the step last moved, which runPolicy.progressDeadlineSeconds counts from.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from trainium_trainer import contract

Json = dict[str, Any]
#: At most one status write a minute per job for progress alone (the chart's progressWriteSeconds).
WRITE_EVERY_SECONDS = 60.0
#: Extra time before the first step counts as hung: graphs load (and a cache miss compiles);
#: the chart's firstStepAllowanceSeconds.
FIRST_STEP_ALLOWANCE_SECONDS = 900
#: The read interval when the chart sets none (TRAINIUM_PROGRESS_INTERVAL_SECONDS).
DEFAULT_INTERVAL_SECONDS = 30.0


@dataclass(frozen=True)
class Sample:
    """One reading of the trainer's gauges."""

    step: int
    total_steps: int
    loss: float | None = None
    samples_per_second: float | None = None
    checkpoint_step: int | None = None


def parse(text: str) -> Sample | None:
    """The trainer's gauges from Prometheus text; None when they are not (yet) all there."""
    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                values[sample.name] = float(sample.value)
    except (ValueError, TypeError, IndexError):
        return None
    step, total = values.get(contract.METRIC_STEP), values.get(contract.METRIC_TOTAL_STEPS)
    if step is None or total is None or not _finite(step) or not _finite(total):
        return None
    ckpt = values.get(contract.METRIC_CHECKPOINT_STEP)
    return Sample(
        step=int(step),
        total_steps=int(total),
        loss=_maybe(values.get(contract.METRIC_LOSS)),
        samples_per_second=_maybe(values.get(contract.METRIC_SAMPLES_PER_SECOND)),
        checkpoint_step=int(ckpt) if ckpt is not None and _finite(ckpt) else None,
    )


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))


def _maybe(value: float | None) -> float | None:
    return round(value, 6) if value is not None and _finite(value) else None


def seconds_between(start: str, end: str) -> float:
    """Seconds between two RFC 3339 timestamps."""
    parse_ts = datetime.datetime.fromisoformat
    delta = parse_ts(end.replace("Z", "+00:00")) - parse_ts(start.replace("Z", "+00:00"))
    return delta.total_seconds()


def advance(previous: Mapping[str, Any] | None, sample: Sample | None, gang: str, now: str) -> Json:
    """status.progress after one reading (sample None: nothing read) of the gang `gang`.

    A new gang starts afresh (its first sight anchors the first-step allowance); a step that
    moves sets advancedAt and, with the previous reading, the ETA; a step that went back is a
    gang restarted in place (Volcano keeps the uid), which starts afresh too.
    """
    same = dict(previous) if previous and previous.get("gang") == gang else None
    if sample is None:
        return same or {"gang": gang, "advancedAt": now, "observedAt": now}
    base = same or {"gang": gang, "advancedAt": now}
    before = base.get("step")
    restarted = isinstance(before, int) and sample.step < before
    moved = isinstance(before, int) and sample.step > before
    out: Json = {
        "gang": gang,
        "step": sample.step,
        "totalSteps": sample.total_steps,
        "observedAt": now,
        "advancedAt": now if moved or restarted else base["advancedAt"],
        "firstStep": sample.step if restarted or "firstStep" not in base else base["firstStep"],
    }
    if sample.total_steps > 0:
        out["percent"] = round(min(100.0, 100.0 * sample.step / sample.total_steps), 1)
    if sample.samples_per_second is not None:
        out["samplesPerSecond"] = round(sample.samples_per_second, 2)
    if sample.loss is not None:
        out["loss"] = round(sample.loss, 4)
    if sample.checkpoint_step is not None:  # an elastic job grows at the next checkpoint
        out["checkpointStep"] = sample.checkpoint_step
    eta = _eta(base, sample, now) if moved else None if restarted else base.get("etaSeconds")
    if eta is not None:
        out["etaSeconds"] = eta
    out["display"] = display(out)
    out["eta"] = eta_text(out.get("etaSeconds"))
    return out


def _eta(base: Mapping[str, Any], sample: Sample, now: str) -> int | None:
    """Seconds left at the step rate since the previous reading."""
    then = base.get("observedAt")
    if not isinstance(then, str):
        return None
    elapsed = seconds_between(then, now)
    if elapsed <= 0:
        return None
    rate = (sample.step - int(base["step"])) / elapsed
    return max(0, round((sample.total_steps - sample.step) / rate))


def finished(previous: Mapping[str, Any] | None) -> Json | None:
    """The progress a Succeeded gang leaves on status: its total reached, no ETA (None: keep)."""
    total = (previous or {}).get("totalSteps")
    if not isinstance(total, int) or total <= 0 or (previous or {}).get("percent") == 100.0:
        return None
    done: Json = dict(previous or {})
    done.update(step=total, percent=100.0, etaSeconds=None)  # a merge-patch null removes it
    done.update(display=display(done), eta=eta_text(None))
    return done


def settled(progress: Mapping[str, Any] | None) -> Json | None:
    """The progress a finished job keeps: its figures without the gang's uid, which only told
    a live gang's readings from its predecessor's (None: nothing to change)."""
    if not isinstance(progress, Mapping) or progress.get("gang") is None:
        return None
    return {**progress, "gang": None}  # a merge-patch null removes it


def display(progress: Mapping[str, Any]) -> str:
    """`step/total (percent%)` for kubectl get; `starting` before the first reading."""
    if "step" not in progress:
        return "starting"
    text = f"{progress['step']}/{progress['totalSteps']}"
    return f"{text} ({progress['percent']:.0f}%)" if "percent" in progress else text


def eta_text(seconds: Any) -> str:
    """1h05m, 12m, 45s; `-` when unknown."""
    if not isinstance(seconds, int):
        return "-"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m" if minutes else f"{secs}s"


def write_due(
    previous: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    now: str,
    every: float = WRITE_EVERY_SECONDS,
) -> bool:
    """Whether this reading goes on status: a new gang at once, else at most once per `every`.

    Never before the first step is read: a gang's first sight alone (advancedAt, observedAt)
    is bookkeeping `kubectl describe` showed on a job that never logged a step (issue 43); the
    reading stays in the job's record for the next one.
    """
    if new == previous or "step" not in new:
        return False
    if not previous or previous.get("gang") != new.get("gang") or "step" not in previous:
        return True
    last = previous.get("observedAt")
    return not isinstance(last, str) or seconds_between(last, now) >= every


def hung(
    progress: Mapping[str, Any] | None,
    deadline: int | None,
    now: str,
    first_step: int = FIRST_STEP_ALLOWANCE_SECONDS,
) -> str | None:
    """Why the gang counts as hung (runPolicy.progressDeadlineSeconds), or None.

    Only a gang whose trainer answered once is judged: the trainer serves its start step before
    the first one, so a gang never heard from is unreachable (a NetworkPolicy), not hung.
    """
    if deadline is None or not progress or not isinstance(progress.get("advancedAt"), str):
        return None
    step = progress.get("step")
    if not isinstance(step, int):
        return None
    moved = step > progress.get("firstStep", step)
    allowance = 0 if moved else first_step
    still = seconds_between(progress["advancedAt"], now)
    if still <= deadline + allowance:
        return None
    where = f"step {display(progress)}"
    extra = [f"{k} {progress[k]}" for k in ("loss", "samplesPerSecond") if k in progress]
    last = f" (last: {', '.join(extra)})" if extra else ""
    first = "" if moved else f" plus {first_step}s for the first step"
    return (
        f"the training gang made no progress for {still:.0f}s, past "
        f"runPolicy.progressDeadlineSeconds ({deadline}s{first}): {where}{last}"
    )
