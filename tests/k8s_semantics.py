"""Pure Kubernetes API semantics the emulator needs: merge patches, selectors, request records.

Kept apart from tests/emulator.py (kmock plumbing) so each stays small and these are unit-tested
on their own.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import re
from collections.abc import Iterator
from typing import Any

Obj = dict[str, Any]


class SelectorError(ValueError):
    """A label or field selector that does not parse (the API server answers 400)."""


@dataclasses.dataclass
class ApiRequest:
    """One resource request as RBAC sees it, for checking the chart's ClusterRole."""

    verb: str
    api_group: str
    resource: str
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    user_agent: str = ""
    code: int = 0
    #: time.monotonic() when the request arrived (bench/ derives latencies from it).
    at: float = 0.0
    #: the fault tests/faults.py injected instead of the answer ("500", "429", "reset", ...).
    fault: str = ""
    #: the bearer token it carried: who sent it, as an audit log's user (one per replica in tests).
    token: str = ""

    @property
    def client(self) -> str:
        """Who sent it: "kopf", "trainium-operator" (the operator), "kubectl", "python-client"."""
        for prefix, client in (
            ("kopf/", "kopf"),
            ("trainium-operator/", "trainium-operator"),
            ("kubectl", "kubectl"),
        ):
            if self.user_agent.startswith(prefix):
                return client
        return "python-client" if self.user_agent.startswith("OpenAPI-Generator") else "other"


# The API server's generateName alphabet (no vowels, no look-alikes): 27**5 = 14M suffixes.
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_random = random.Random()


def _suffix() -> str:
    """Five random characters, as k8s.io/apiserver/pkg/storage/names.SimpleNameGenerator."""
    return "".join(_random.choice(NAME_ALPHABET) for _ in range(5))


def generated_name(prefix: str) -> str:
    """metadata.generateName plus a random suffix, the prefix cut so the name fits 63 chars."""
    return prefix[:58] + _suffix()


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (kmock's own raises on dict-vs-scalar instead of replacing)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue  # strategic-merge directives ($patch, $setElementOrder/...): lists replaced
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def apply_merge(target: Any, patch: Any) -> Any:
    """A server-side apply's merge: as a merge patch, but `conditions` lists (listType=map,
    keyed by type) merge item by item instead of being replaced."""
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return merge_patch(target, patch)
    result = dict(target)
    for k, v in patch.items():
        if k == "conditions" and isinstance(v, list) and isinstance(result.get(k), list):
            merged = {c.get("type"): c for c in result[k] if isinstance(c, dict)}
            merged.update({c.get("type"): copy.deepcopy(c) for c in v if isinstance(c, dict)})
            result[k] = list(merged.values())
        elif isinstance(v, dict):
            result[k] = apply_merge(result.get(k), v)
        elif v is not None:
            result[k] = copy.deepcopy(v)
    return result


def _split(selector: str) -> Iterator[str]:
    """Split a selector on commas outside parentheses (`a in (x,y),b`)."""
    yield from (p for p in re.split(r",(?![^()]*\))", selector) if p.strip())


_REQUIREMENT = re.compile(
    r"\s*(?P<neg>!)?\s*(?P<key>[^\s!=,()]+)\s*"
    r"(?:(?P<op>==|!=|=)\s*(?P<val>[^\s,()]*)|\s(?P<set>in|notin)\s*\((?P<vals>[^)]*)\))?\s*"
)


def match_selector(selector: str, values: dict[str, str]) -> bool:
    """Label-selector semantics (=, ==, !=, in, notin, exists, !exists) over a flat mapping."""
    for req in _split(selector):
        m = _REQUIREMENT.fullmatch(req)
        if m is None:
            raise SelectorError(f"unable to parse requirement: {req!r}")
        present, value = m["key"] in values, values.get(m["key"])
        if m["set"]:
            wanted = {v.strip() for v in m["vals"].split(",")}
            ok = (value in wanted) if m["set"] == "in" else (value not in wanted)
        elif m["op"]:
            ok = (value == m["val"]) if m["op"] != "!=" else (value != m["val"])
        else:
            ok = present != bool(m["neg"])
        if not ok:
            return False
    return True


def field_values(obj: Obj, selector: str) -> dict[str, str]:
    """The dotted-path values a field selector asks about, as strings."""
    out: dict[str, str] = {}
    for req in _split(selector):
        path = re.split(r"!=|==|=", req, maxsplit=1)[0].strip()
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out[path] = "" if value is None else str(value)
    return out
