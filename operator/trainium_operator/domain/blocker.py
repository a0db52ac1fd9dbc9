"""A prerequisite that is not there yet: the one type every decision module waits with."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Blocker:
    """A prerequisite that is not there yet: retried, with a reason naming what is missing."""

    reason: str
    message: str
    #: Post a Warning Event (once); routine waits such as a static claim binding do not.
    warn: bool = True
