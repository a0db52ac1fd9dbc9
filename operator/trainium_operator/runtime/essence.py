"""What kopf diffs on each watch event: only what our changing handlers can use.

For every event of every watched kind, kopf builds the object's "essence" (to diff it against
the last handled one) by deep-copying the whole body, then drops status and metadata. No kind
has a changing handler here any more (so kopf never stores one); for kinds other than
TrainiumJobs it is not even built. Deep-copying Volcano jobs (a pod template each) and job
statuses made this a third of the event loop's CPU. A shortcut (`shortcuts.py`, "essence"): it
overrides the storage's `build`, which kopf calls per event.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import kopf

from trainium_operator.api import shortcuts
from trainium_operator.api.crd import KIND


def diffbase(prefix: str, key: str) -> kopf.AnnotationsDiffBaseStorage:
    """The lean diff-base when the "essence" shortcut is on, kopf's own otherwise."""
    lean = shortcuts.enabled("essence")
    return (LeanDiffBase if lean else kopf.AnnotationsDiffBaseStorage)(prefix=prefix, key=key)


class LeanDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation diff-base, built without copying what the essence discards."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        fields = list(extra_fields or [])
        kind = body.get("kind")
        if kind is not None and kind != KIND and not fields:
            return cast(kopf.BodyEssence, {})  # no changing handler reads it
        if any(_under(f, "status") for f in fields):
            return super().build(body=body, extra_fields=fields)
        meta = body.get("metadata") or {}
        lean = {k: v for k, v in body.items() if k != "status"}
        lean["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
        return super().build(body=kopf.Body(cast(Any, lean)), extra_fields=fields)


def _under(field: Any, stanza: str) -> bool:
    """Whether a kopf field spec ("status.x" or ("status", "x")) lies under a stanza."""
    parts = field.split(".") if isinstance(field, str) else list(field)
    return bool(parts) and parts[0] == stanza
