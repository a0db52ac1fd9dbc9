"""A CEL rule's `fieldPath`, checked and resolved as the API server does (cel.ValidFieldPath).

The server refuses a CRD whose fieldPath is not a relative path to a declared field (`.a.b`,
`['a-b']`, a map's key; no list index), and reports a failed rule at the rule's own path plus
this one: a rule on spec with fieldPath `.elastic.minNodes` fails at spec.elastic.minNodes.
"""

from __future__ import annotations

import re
from typing import Any

Json = dict[str, Any]

#: x-kubernetes-validations reasons the server accepts (FieldValueInvalid when unset).
REASONS = ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_ESCAPES.update({"'": "'", "\\": "\\"})


def _tokens(path: str) -> list[str]:
    """The server's scanner: `.`, `[` and `]` alone, a quoted string whole, other text between."""
    out, i = [], 0
    while i < len(path):
        if path[i] == "'":
            end = next(
                (j for j in range(i + 1, len(path)) if path[j] == "'" and path[j - 1] != "\\"),
                len(path) - 1,
            )
            out.append(path[i : end + 1])
            i = end + 1
        elif path[i] in ".[]":
            out.append(path[i])
            i += 1
        else:
            match = re.compile(r"[^.\[\]]+").match(path, i)
            assert match is not None
            out.append(match.group())
            i = match.end()
    return out


def _unquote(token: str) -> str:
    def escape(match: re.Match[str]) -> str:
        if match.group(1) not in _ESCAPES:
            raise ValueError(f"invalid string literal: invalid escape char {match.group()}")
        return _ESCAPES[match.group(1)]

    return re.sub(r"\\(.)", escape, token[1:-1])


def resolve(path: str, schema: Json) -> str:
    """The field path the server reports for fieldPath `path` under `schema` (`a.b`, `a[key]`).

    Raises ValueError with the server's reason when the CRD would be refused for it.
    """
    tokens, node = _tokens(path), schema
    parts: list[str] = []
    while tokens:
        token = tokens.pop(0)
        if token not in (".", "["):
            raise ValueError(f"expected [ or . but got: {token}")
        if not tokens:
            raise ValueError("unexpected end of JSON path")
        name = tokens.pop(0)
        if token == "[":
            if len(name) < 2 or name[0] != "'" or name[-1] != "'":
                raise ValueError(f"expected single quoted string but got {name}")
            name = _unquote(name)
            if not tokens:
                raise ValueError("unexpected end of JSON path")
            if (close := tokens.pop(0)) != "]":
                raise ValueError(f"expected ] but got {close}")
        if "properties" in node:
            if name not in node["properties"]:
                raise ValueError("does not refer to a valid field")
            node = node["properties"][name]
            parts.append(f".{name}" if parts else name)
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
            parts.append(f"[{name}]")
        else:
            raise ValueError("does not refer to a valid field")
    return "".join(parts)


def rule_field(node_path: str, rule: Json, schema: Json) -> str:
    """Where a failed rule is reported: its node's path, then its fieldPath (if it is valid)."""
    try:
        extra = resolve(rule["fieldPath"], schema) if rule.get("fieldPath") else ""
    except ValueError:
        extra = ""  # the server ignores one it could not compile (and refuses such a CRD)
    return f"{node_path}.{extra}".lstrip(".") if extra else node_path
