"""What spec a job started with, as one short digest on its status (status.specDigest).

It stays on status, not in an annotation: only the operator writes status (a user's `kubectl
replace` or edit of the metadata cannot drop it and so lift the guard), and an annotation would
cost every job a second write when it starts. It is bookkeeping of a live job alone: a finished
job never runs again, so its status drops it (`settled`) as it drops restartCursor, and `kubectl
describe` of a finished job shows no `Spec Digest` (issue 43).

A graph-defining field changed on a live job holds it (lifecycle: ImmutableFieldChanged). The
digest of each such field used to be on status (status.specDigests, 12 lines in `kubectl
describe`); one string of two parts now: a tag of the fields digested (a CRD that makes another
field immutable changes it: a job started before is then compared with nothing, never held for a
field it never had) and a hash of their digests. An old status's map converts to it exactly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

#: The status field, and the one it replaces (removed at the job's next status write).
FIELD, LEGACY = "specDigest", "specDigests"


def _hex(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def combined(digests: Mapping[str, str]) -> str:
    """One digest of the per-field digests: `<tag of the field names>-<hash of the digests>`."""
    names = sorted(digests)
    return f"{_hex(','.join(names), 6)}-{_hex(','.join(f'{n}={digests[n]}' for n in names), 16)}"


def started(previous: Mapping[str, Any]) -> str | None:
    """The digest the job started with: its status's, or its old per-field map's."""
    mark = previous.get(FIELD)
    if isinstance(mark, str) and mark:
        return mark
    legacy = previous.get(LEGACY)
    if isinstance(legacy, Mapping) and legacy:
        return combined({str(k): str(v) for k, v in legacy.items()})
    return None


def changed(digests: Mapping[str, str], previous: Mapping[str, Any]) -> tuple[str, ...]:
    """The graph-defining fields that may have changed since the job started (() for none).

    An old per-field map names the fields; one digest cannot: every field digested is named.
    """
    legacy = previous.get(LEGACY)
    if isinstance(legacy, Mapping) and legacy and not previous.get(FIELD):
        return tuple(f for f in digests if f in legacy and legacy[f] != digests[f])
    mark, now = started(previous), combined(digests)
    if mark is None or mark == now or mark.split("-")[0] != now.split("-")[0]:
        return ()
    return tuple(digests)


def fragment(previous: Mapping[str, Any], digests: Mapping[str, str]) -> dict[str, Any]:
    """What a status write carries: the started digest (kept), the old map removed."""
    out: dict[str, Any] = {FIELD: started(previous) or combined(digests)}
    if LEGACY in previous:
        out[LEGACY] = None  # a merge-patch null: `kubectl describe` shows one line, not 12
    return out


def settled(previous: Mapping[str, Any]) -> dict[str, Any]:
    """What a finished job's status write removes: the digest guards a live job only."""
    return {key: None for key in (FIELD, LEGACY) if key in previous}
