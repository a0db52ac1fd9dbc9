"""The namespaces this operator watches (`trainium operator -n`), for the watches kopf does not run.

kopf lists and watches per namespace when given namespaces; our own watches (Kueue's Workloads,
DRA claims: runtime/kueuewatch.py, cluster/devicetaints.py) make one request across every
namespace (the chart grants it cluster-wide) and keep only what lies in these. Patterns are
kopf's: globs, and `!glob` to leave a namespace out; no pattern means every namespace.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
from typing import Any

#: `trainium operator -n A -n B` sets it (comma-separated) before kopf starts our handlers.
NAMESPACES_ENV = "TRAINIUM_WATCH_NAMESPACES"


def patterns() -> list[str]:
    """The watched namespaces' patterns from the environment (empty: every namespace)."""
    return [p for p in os.environ.get(NAMESPACES_ENV, "").split(",") if p]


def watched(namespace: str, globs: Sequence[str]) -> bool:
    """Whether kopf, given these patterns, watches `namespace` (cluster-scoped ones always)."""
    if not namespace or not globs:
        return True
    keep = [g for g in globs if not g.startswith("!")]
    drop = [g[1:] for g in globs if g.startswith("!")]
    if any(fnmatch.fnmatchcase(namespace, g) for g in drop):
        return False
    return not keep or any(fnmatch.fnmatchcase(namespace, g) for g in keep)


def in_scope(body: Mapping[str, Any], globs: Sequence[str]) -> bool:
    """Whether an object's namespace is one this operator watches."""
    return watched(str((body.get("metadata") or {}).get("namespace") or ""), globs)
