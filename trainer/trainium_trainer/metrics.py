"""Metrics on rank 0: JSON lines (file and stdout), TensorBoard events, and summary.json.

summary.json is merged, never clobbered: a caller (the local runner) may add its own keys, such as
cache_hit and phase times, before or after the trainer writes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from trainium_trainer.checkpoint import atomic_write, write_text

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
TENSORBOARD_DIR = "tensorboard"


class MetricsWriter:
    """Writes one JSON object per logging step; a disabled writer only prints."""

    def __init__(self, output_dir: Path, enabled: bool, resumed_from: int = 0) -> None:
        self.enabled = enabled
        self.path = output_dir / METRICS_FILE
        self._tb: Any = None
        if not enabled:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        self._truncate_after(resumed_from)
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # tensorboard is optional: JSON lines are the record
            return
        self._tb = SummaryWriter(str(output_dir / TENSORBOARD_DIR), purge_step=resumed_from + 1)

    def _truncate_after(self, step: int) -> None:
        """Drop records a killed run logged past the checkpoint it resumes from."""
        if not self.path.exists():
            return
        lines = self.path.read_text(encoding="utf-8").splitlines()
        kept = [ln for ln in lines if ln.strip() and json.loads(ln).get("step", 0) <= step]
        self.path.write_text("".join(f"{ln}\n" for ln in kept), encoding="utf-8")

    def log(self, record: dict[str, Any]) -> None:
        """Append record to metrics.jsonl and TensorBoard, and echo it on stdout."""
        line = json.dumps(record, sort_keys=True)
        print(line, flush=True)
        if not self.enabled:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float) and math.isfinite(value):
                    self._tb.add_scalar(f"train/{key}", value, record["step"])

    def event(self, kind: str, **fields: Any) -> None:
        """One JSON line on stdout for a run event (checkpoint, resume): stdout stays JSON only."""
        print(json.dumps({"event": kind, **fields}, sort_keys=True, default=str), flush=True)

    def close(self) -> None:
        """Flush TensorBoard events."""
        if self._tb is not None:
            self._tb.close()


def merge_summary(output_dir: Path, values: dict[str, Any]) -> dict[str, Any]:
    """Merge values into <output>/summary.json (atomically) and return the whole summary."""
    path = output_dir / SUMMARY_FILE
    summary: dict[str, Any] = {}
    if path.exists():
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            summary = {}
    summary.update(values)
    text = json.dumps(summary, indent=2, sort_keys=True) + "\n"
    atomic_write(path, lambda temp: write_text(temp, text))
    return summary
