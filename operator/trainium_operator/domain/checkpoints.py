"""status.lastCheckpoint: the newest complete checkpoint the trainer reported; it never goes back.

After each complete checkpoint, rank 0 of the training stage leaves one JSON line in its
container's termination message (trainium_trainer/termination.py); the kubelet copies the file
into the pod's status when the container ends (state.terminated.message, then
lastState.terminated.message after a restart in place). Everything else in a message (the
trainer's outcome line, a user's own text, a torn write) is ignored: pure, no I/O.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainium_trainer import contract

Json = dict[str, Any]
#: Longest path kept on status; the trainer sends at most about this much anyway.
MAX_PATH = 1024


@dataclass(frozen=True)
class Checkpoint:
    """One reported checkpoint: its step, when it was complete, and where it lies."""

    step: int
    time: str
    path: str = ""

    @property
    def order(self) -> tuple[int, datetime.datetime]:
        """Newest means the highest step, then the latest time."""
        return self.step, _parse_time(self.time) or _EPOCH

    def to_status(self) -> Json:
        """The status.lastCheckpoint object."""
        out: Json = {"step": self.step, "time": self.time}
        if self.path:
            out["path"] = self.path
        return out


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


#: RFC 3339 as the API server's `format: date-time` accepts it: Python's fromisoformat takes more
#: ("2026-11-22 10:00+00:00"), and a status patch carrying such a time is refused (422) forever.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")


def _parse_time(value: str) -> datetime.datetime | None:
    """An RFC 3339 timestamp with its zone ("2026-11-22T10:00:00Z"); None otherwise."""
    if not _RFC3339.fullmatch(value):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def from_fields(value: Any) -> Checkpoint | None:
    """A Checkpoint from {step, time, path?}: a report's body or status; None when malformed."""
    if not isinstance(value, Mapping):
        return None
    step, time, path = value.get("step"), value.get("time"), value.get("path", "")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return None
    if not isinstance(time, str) or _parse_time(time) is None or not isinstance(path, str):
        return None
    return Checkpoint(step, time, path[:MAX_PATH])


def is_report(line: str) -> bool:
    """Whether a message line is meant as a checkpoint report (well-formed or not)."""
    return line.lstrip().startswith('{"' + contract.CHECKPOINT_REPORT_KEY + '"')


def from_message(message: Any) -> Checkpoint | None:
    """The newest well-formed report among a termination message's lines."""
    if not isinstance(message, str):
        return None
    found = []
    for line in message.splitlines():
        if not is_report(line):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            found.append(from_fields(doc.get(contract.CHECKPOINT_REPORT_KEY)))
    return newest(found)


def from_pod(pod: Mapping[str, Any]) -> Checkpoint | None:
    """The newest report in any container's current or previous termination message."""
    status = pod.get("status") or {}
    found = []
    for cs in status.get("containerStatuses") or ():
        for key in ("state", "lastState"):
            term = ((cs or {}).get(key) or {}).get("terminated") or {}
            found.append(from_message(term.get("message")))
    return newest(found)


def newest(found: Iterable[Checkpoint | None]) -> Checkpoint | None:
    """The newest of the checkpoints given (None when there is none)."""
    real = [c for c in found if c is not None]
    return max(real, key=lambda c: c.order) if real else None


def carried(previous: Mapping[str, Any], *seen: Checkpoint | None) -> Checkpoint | None:
    """What status.lastCheckpoint becomes: the one on status unless a newer one was seen."""
    return newest([from_fields(previous.get("lastCheckpoint")), *seen])
