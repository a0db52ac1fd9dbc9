"""What a kube-apiserver does to a custom resource around its OpenAPI check, done offline.

JSON Schema alone disagrees with the server: Python's `re` is not Go's RE2, nulls are pruned
and defaulted there, integers are int64 (and 2.0 is an integer), list types forbid duplicates.
Each step mirrors k8s.io/apiextensions-apiserver (decode, prunenulls.go, algorithm.go,
listtype validation) so that a spec the server stored is never refused here, and vice versa.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import re2

Json = dict[str, Any]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Go's OpenAPI validator takes a float as an integer only within +-(2^53 - 1)
#: (go-openapi/swag IsFloat64AJSONInteger), as JSON has one number type.
FLOAT_INT_MAX = 2**53 - 1
#: No stored object nests this deep (our schema is 7 levels; managedFields about 12), and a
#: bound keeps every walk below Python's recursion limit.
MAX_DEPTH = 64
#: More values than etcd's 1.5 MiB object limit can hold; a YAML alias bomb exceeds it at once.
MAX_VALUES = 1_000_000


def is_integer(value: Any) -> bool:
    """An integer as the API server decodes and checks one: int64, or an integral float."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return INT64_MIN <= value <= INT64_MAX
    return isinstance(value, float) and value.is_integer() and abs(value) <= FLOAT_INT_MAX


def shape_problem(obj: Any) -> str | None:
    """Why obj cannot be a stored object (too deep, too big, a loop), or None.

    Iterative and memoised by identity, so YAML aliases (shared or even cyclic nodes) cost
    their size once instead of exponentially, and deep nesting never hits the recursion limit.
    """
    stats: dict[int, tuple[int, int]] = {}  # id -> (values, height)
    active: set[int] = set()  # the current path: meeting one again is a loop
    stack: list[tuple[Any, int, str, bool]] = [(obj, 0, "", False)]
    while stack:
        value, depth, path, done = stack.pop()
        nested = [v for v in _values(value) if isinstance(v, (dict, list))]
        if done:
            size = 1 + len(value) - len(nested) + sum(stats[id(v)][0] for v in nested)
            height = 1 + max((stats[id(v)][1] for v in nested), default=0)
            stats[id(value)] = (min(size, MAX_VALUES + 1), height)
            active.discard(id(value))
            if depth + height > MAX_DEPTH:
                return f"{path or '<root>'}: nested more than {MAX_DEPTH} levels deep"
            if size > MAX_VALUES:
                return f"{path or '<root>'}: more than {MAX_VALUES} values"
        elif id(value) in active:
            return f"{path or '<root>'}: contains itself (a YAML alias loop)"
        elif id(value) not in stats:
            active.add(id(value))
            stack.append((value, depth, path, True))
            for key, child in _entries(value):
                if isinstance(child, (dict, list)) and id(child) not in stats:
                    stack.append((child, depth + 1, _child_path(path, key), False))
    return None


def _values(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, list) else []


def _entries(value: dict[Any, Any] | list[Any]) -> Iterator[tuple[Any, Any]]:
    return iter(value.items()) if isinstance(value, dict) else enumerate(value)


def _child_path(path: str, key: Any) -> str:
    """Field paths stop after three parts: enough to find the field, short enough for one line."""
    if path.endswith("...") or path.count(".") + path.count("[") >= 2:
        return path if path.endswith("...") else path + "..."
    part = f"[{key}]" if isinstance(key, int) else f".{key}"
    return (path + part).lstrip(".")


def decode(obj: Any) -> Any:
    """A copy of obj as Go's JSON decoder yields it: lone surrogates become U+FFFD."""
    if isinstance(obj, str):
        return go_string(obj)
    if isinstance(obj, dict):
        return {decode(k): decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return copy.copy(obj)


def go_string(text: str) -> str:
    """text with invalid UTF-16 (lone surrogates) replaced, as Go's decoder does."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def children(value: Any, schema: Json) -> Iterator[tuple[str | int, Any, Json]]:
    """(key, child, child schema) for the children of value that the schema describes."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                yield key, child, sub
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, child in enumerate(value):
            yield i, child, schema["items"]


def prune_nulls_and_default(obj: Any, schema: Json) -> None:
    """In place: drop nulls the schema neither allows nor defaults, then apply defaults."""
    if isinstance(obj, dict):
        for key, child, sub in list(children(obj, schema)):
            if child is None and not sub.get("nullable") and "default" not in sub:
                del obj[key]
        for key, sub in schema.get("properties", {}).items():
            has_default = "default" in sub
            if has_default and (key not in obj or (obj[key] is None and not sub.get("nullable"))):
                obj[key] = copy.deepcopy(sub["default"])
    for _, child, sub in children(obj, schema):
        prune_nulls_and_default(child, sub)


def refused_nulls(obj: Any, schema: Json, path: str = "") -> Iterator[str]:
    """Fields set to null that have no default and are not nullable: server-side apply refuses
    them (`must be of type string: "null"`), where a create or client-side apply drops them.
    """
    for key, child, sub in children(obj, schema):
        where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"
        if child is None and not sub.get("nullable") and "default" not in sub:
            yield where.lstrip(".")
        else:
            yield from refused_nulls(child, sub, where)


def integers_to_int(obj: Any, schema: Json) -> None:
    """In place: an integral float where the schema wants an integer is stored as that int."""
    for key, child, sub in list(children(obj, schema)):
        if sub.get("type") == "integer" and isinstance(child, float) and is_integer(child):
            obj[key] = int(child)
        else:
            integers_to_int(child, sub)


def list_type_errors(obj: Any, schema: Json, path: str = "") -> Iterator[str]:
    """Duplicates in x-kubernetes-list-type map (by its keys) and set lists, as the server says."""
    kind = schema.get("x-kubernetes-list-type")
    if isinstance(obj, list) and kind in ("map", "set"):
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen: set[str] = set()
        for i, item in enumerate(obj):
            if kind == "map" and isinstance(item, dict):
                identity: Any = {k: item.get(k) for k in keys}
            else:
                identity = item
            text = json.dumps(identity, sort_keys=True, default=str)
            if text in seen:
                yield f"{path}[{i}]: Duplicate value: {text}"
            seen.add(text)
    for key, child, sub in children(obj, schema):
        where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"
        yield from list_type_errors(child, sub, where)


@functools.lru_cache(maxsize=512)
def _re2(pattern: str) -> Any:
    return re2.compile(pattern)


def re2_search(pattern: str, text: str) -> bool:
    """Go's regexp.MatchString: RE2 syntax, ASCII \\s \\d \\w, `$` only at the very end."""
    return _re2(pattern).search(go_string(text)) is not None


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: Json
) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and not re2_search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _integer(checker: Any, instance: Any) -> bool:
    return is_integer(instance)


#: Draft 2020-12 with the server's integers and RE2 patterns.
ServerValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    validators={"pattern": _pattern},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _integer),
)
