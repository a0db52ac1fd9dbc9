"""The CRD's CEL rules stay cheap by construction, so the API server's cost estimate accepts them.

The API server estimates each rule's worst-case cost from the schema and refuses a CRD over
budget (issue 17, bug 1: a `.map()` result walked by `.all()` was estimated >100x the budget,
though every string in it had a maxLength). The offline evaluator does not estimate cost, so
these checks keep every rule inside two shapes the estimator bounds:

- a macro (all, exists, exists_one, map, filter) walks a schema value (`self...`, `oldSelf...`
  or a variable bound by an enclosing macro) or a list literal of constants, never the result
  of a call or a list built from values;
- every string, array and map a rule reads (apart from `has()`) declares maxLength (or enum),
  maxItems or maxProperties, down to its leaves.

tests/cluster proves the real API server accepts the CRD; this runs in `make test`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from trainium_operator.api import crd

Json = dict[str, Any]

MACROS = ("all", "exists", "exists_one", "map", "filter")
_MACRO_CALL = re.compile(r"\.\s*(" + "|".join(MACROS) + r")\s*\(")
_PATH = re.compile(r"(?<![\w.])(self|oldSelf)((?:\.\w+(?![\w(]))*)")
_CONSTANT_LIST = re.compile(r"\[\s*(?:(?:'s'|-?\d+(?:\.\d+)?|true|false|null)\s*,?\s*)*\]")


def _strip_literals(rule: str) -> str:
    """rule with every string literal replaced by 's', so no text inside a literal is read."""
    return crd.CEL_STRING_LITERAL.sub("'s'", rule)


def _receiver(text: str, dot: int) -> str:
    """The expression a `.macro(` at text[dot] is called on (a path, a [...] literal or a call)."""
    end = dot
    while end > 0 and text[end - 1].isspace():
        end -= 1
    closing = text[end - 1] if end else ""
    if closing in ")]":
        opening = "(" if closing == ")" else "["
        depth, start = 0, end - 1
        while start >= 0:
            depth += {closing: 1, opening: -1}.get(text[start], 0)
            if depth == 0:
                break
            start -= 1
        head = start
        while head > 0 and (text[head - 1].isalnum() or text[head - 1] in "_."):
            head -= 1
        return text[head:end]
    start = end
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_."):
        start -= 1
    return text[start:end]


def macro_problems(rule: str) -> list[str]:
    """Macros in rule that walk something the estimator cannot bound."""
    text = _strip_literals(rule)
    out = []
    for call in _MACRO_CALL.finditer(text):
        receiver = _receiver(text, call.start())
        if receiver.startswith("["):
            if not _CONSTANT_LIST.fullmatch(receiver):
                out.append(f".{call.group(1)}() over a list built from values: {receiver}")
        elif not re.fullmatch(r"[A-Za-z_]\w*(\.\w+)*", receiver):
            out.append(f".{call.group(1)}() over a computed value: {receiver}")
    return out


def _has_args(text: str) -> set[tuple[int, int]]:
    """Spans of the paths that are has() arguments (a presence test reads nothing)."""
    return {m.span(1) for m in re.finditer(r"\bhas\(\s*([\w.]+)\s*\)", text)}


def read_paths(rule: str) -> list[list[str]]:
    """The schema paths below self/oldSelf that rule reads (has() arguments left out)."""
    text = _strip_literals(rule)
    skip = _has_args(text)
    return [
        [p for p in m.group(2).split(".") if p]
        for m in _PATH.finditer(text)
        if m.span() not in skip
    ]


def _child(schema: Json, name: str) -> Json | None:
    """The schema of field `name` (as CEL escapes it) under an object schema."""
    for prop, sub in (schema.get("properties") or {}).items():
        if crd.cel_field(prop) == name:
            return sub
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def unbounded(schema: Json, where: str) -> Iterator[str]:
    """Every string, array and map under schema (itself included) with no declared bound."""
    kind = schema.get("type")
    if kind == "string" and "maxLength" not in schema and "enum" not in schema:
        yield f"{where}: string without maxLength"
    if kind == "array":
        if "maxItems" not in schema:
            yield f"{where}: array without maxItems"
        yield from unbounded(schema.get("items") or {}, f"{where}[]")
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            if "maxProperties" not in schema:
                yield f"{where}: map without maxProperties"
            yield from unbounded(extra, f"{where}{{}}")
        for name, sub in (schema.get("properties") or {}).items():
            yield from unbounded(sub, f"{where}.{name}")


def rules(schema: Json, where: str = "") -> Iterator[tuple[str, Json, str]]:
    """(path, schema, rule) for every x-kubernetes-validations rule in the schema."""
    for rule in schema.get("x-kubernetes-validations", []):
        yield where or "<root>", schema, rule["rule"]
    for name, sub in (schema.get("properties") or {}).items():
        yield from rules(sub, f"{where}.{name}".lstrip("."))
    for key in ("items", "additionalProperties"):
        sub = schema.get(key)
        if isinstance(sub, dict):
            yield from rules(sub, f"{where}[]" if key == "items" else f"{where}{{}}")


def rule_problems(schema: Json, rule: str, where: str) -> list[str]:
    """Why rule, declared on schema at `where`, could be estimated over the API server's budget."""
    out = macro_problems(rule)
    for path in read_paths(rule):
        node: Json | None = schema
        for name in path:
            node = _child(node, name) if node is not None else None
        if node is not None:
            out += unbounded(node, ".".join([where, *path]))
    return out


ALL_RULES = list(rules(crd.version_schema()))


def test_the_crd_has_rules() -> None:
    assert len(ALL_RULES) > 20


@pytest.mark.parametrize(("where", "schema", "rule"), ALL_RULES, ids=[r[0] for r in ALL_RULES])
def test_rule_is_cheap_by_construction(where: str, schema: Json, rule: str) -> None:
    assert rule_problems(schema, rule, where) == []


#: The spec.resources rules main shipped: the API server refused them (>100x over budget).
REFUSED = [
    "!has(self.requests) || [[self.requests.cpu, self.limits.cpu].map(q, q.endsWith('m') ? q :"
    " q + '000m')].all(p, size(p[0]) < size(p[1]))",
    "[[self.requests.memory, self.limits.memory]].all(p, ['Ki', 'Mi'].all(u, p[0].endsWith(u)"
    " == p[1].endsWith(u)))",
]


@pytest.mark.parametrize("rule", REFUSED)
def test_rules_the_api_server_refused_are_caught(rule: str) -> None:
    resources = crd.version_schema()["properties"]["spec"]["properties"]["resources"]
    assert rule_problems(resources, rule, "spec.resources")


def test_unbounded_strings_maps_and_lists_are_caught() -> None:
    schema: Json = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "items": {"type": "array", "items": {"type": "string", "maxLength": 3}},
        },
    }
    found = rule_problems(
        schema, "self.name == 'a' && self.labels.all(k, k != '') && has(self.x)", "s"
    )
    assert found == [
        "s.name: string without maxLength",
        "s.labels: map without maxProperties",
        "s.labels{}: string without maxLength",
    ]
    assert rule_problems(schema, "has(self.name)", "s") == []
    assert rule_problems(schema, "self.items.all(i, i != '')", "s") == [
        "s.items: array without maxItems"
    ]
    assert rule_problems(schema, "['a', 'b'].exists(u, has(self.items))", "s") == []
