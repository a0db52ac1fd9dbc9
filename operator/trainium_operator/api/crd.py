"""The TrainiumJob CRD as the one source of the API rules: defaults, schema and CEL checks.

The operator, the CLI and the tests validate with the same file `kubectl apply` installs, so a
spec that slips past an API server (or comes from one that does not enforce the schema) gets the
same verdict here. Only core CEL is used in the CRD, so every rule can be evaluated offline.
"""

from __future__ import annotations

import ast
import difflib
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from trainium_operator.api import fieldpath, structural
from trainium_operator.api.celcore import cel

CRD_FILE = "trainiumjobs.trainium.dev.yaml"
GROUP = "trainium.dev"
VERSION = "v1alpha1"
PLURAL = "trainiumjobs"
KIND = "TrainiumJob"

Json = dict[str, Any]


def crd_path() -> Path:
    """Where the CRD file is: inside the wheel, or at the repository's crds/ in a checkout."""
    packaged = resources.files("trainium_operator") / "crds" / CRD_FILE
    if packaged.is_file():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "crds" / CRD_FILE


@functools.cache
def load_crd() -> Json:
    """The parsed CRD document."""
    with crd_path().open(encoding="utf-8") as f:
        doc: Json = yaml.safe_load(f)
    return doc


def version_schema(version: str = VERSION) -> Json:
    """The openAPIV3Schema of one served version."""
    for v in load_crd()["spec"]["versions"]:
        if v["name"] == version:
            schema: Json = v["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(version)


def apply_defaults(obj: Any, schema: Json) -> Any:
    """Return a copy of obj with nulls pruned and the schema's defaults filled in, as the server."""
    obj = structural.decode(obj)
    structural.prune_nulls_and_default(obj, schema)
    return obj


def server_view(obj: Any, schema: Json) -> Any:
    """obj as the API server validates and stores it: decoded, null-pruned, defaulted, 2.0 -> 2."""
    obj = apply_defaults(obj, schema)
    structural.integers_to_int(obj, schema)
    return obj


def to_jsonschema(schema: Json) -> Json:
    """Convert a structural schema to JSON Schema, with pruning mimicked as unknown-field errors."""
    out: Json = {}
    for key, value in schema.items():
        if key == "properties":
            out[key] = {k: to_jsonschema(v) for k, v in value.items()}
        elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = to_jsonschema(value)
        elif key == "nullable":
            continue
        elif not key.startswith("x-kubernetes-"):
            out[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    return out


@functools.cache
def _validator(version: str) -> Any:
    return structural.ServerValidator(to_jsonschema(version_schema(version)))


def schema_errors(obj: Json, version: str = VERSION) -> list[str]:
    """OpenAPI and list-type violations of a (defaulted) object, each naming its field."""
    errors = sorted(_validator(version).iter_errors(obj), key=lambda e: list(e.absolute_path))
    unknown = [u for e in errors if e.validator == "additionalProperties" for u in _unknown(e)]
    # A typo (spec.imagee) is one line: the field it was meant to be is not also "required".
    meant = {_dotted([*path, name]) for path, _, name in unknown if name}
    found = [_message(e) for e in errors if e.validator != "additionalProperties"]
    found = [f for f in found if f.removesuffix(": required") not in meant]
    found += [_unknown_message(path, field, name) for path, field, name in unknown]
    dupes = structural.list_type_errors(obj, version_schema(version))
    return found + [d.lstrip(".") for d in dupes]


def _message(error: Any) -> str:
    """`field: problem`; a missing field is named itself (spec.image: required)."""
    path = list(error.absolute_path)
    if error.validator == "required":
        name = ast.literal_eval(error.message.removesuffix(" is a required property"))
        return f"{_dotted([*path, name])}: required"
    if error.validator == "type" and error.validator_value == "string":
        kind = {bool: "boolean", int: "number", float: "number"}.get(type(error.instance))
        if kind:  # 4e-4, 1e3, yes, y, on: YAML scalars kubectl reads as numbers and booleans
            return f"{_dotted(path)}: {error.message}; quote it: unquoted, YAML reads a {kind}"
    return f"{_dotted(path)}: {error.message}"


def _unknown(error: Any) -> list[tuple[list[Any], str, str | None]]:
    """(path, unknown field, the declared field it is closest to) for each field pruning drops."""
    declared = list(error.schema.get("properties") or {})
    path = list(error.absolute_path)
    out = []
    for field in sorted(set(error.instance) - set(declared)):
        close = difflib.get_close_matches(str(field), declared, n=1, cutoff=0.75)
        out.append((path, str(field), close[0] if close else None))
    return out


def _unknown_message(path: list[Any], field: str, meant: str | None) -> str:
    """`spec.imagee: unknown field (did you mean spec.image?)`, as kubectl names unknown fields."""
    hint = f" (did you mean {_dotted([*path, meant])}?)" if meant else ""
    return f"{_dotted([*path, field])}: unknown field{hint}"


def _dotted(path: Any) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in path]
    return "".join(parts).lstrip(".") or "<root>"


#: CEL string literals (raw or not, any quotes): `matches` inside them is text, not a call.
CEL_STRING_LITERAL = re.compile(
    r"""[rR]?('''.*?'''|\"\"\".*?\"\"\"|'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")""", re.S
)
_MATCHES = re.compile(r"\bmatches(?=\s*\()")
#: The offline evaluator's own matches() uses Rust's Unicode classes; the server's is Go RE2.
RE2_MATCHES = "re2_matches"


def with_re2(rule: str) -> str:
    """rule with every matches() call routed to RE2, string literals left alone."""
    out, pos = [], 0
    for literal in CEL_STRING_LITERAL.finditer(rule):
        out += [_MATCHES.sub(RE2_MATCHES, rule[pos : literal.start()]), literal.group()]
        pos = literal.end()
    return "".join([*out, _MATCHES.sub(RE2_MATCHES, rule[pos:])])


@functools.cache
def _program(rule: str) -> Any:
    return cel.compile(with_re2(rule))


#: CEL keywords a property may not be called; the server renames them `__name__`.
_CEL_RESERVED = frozenset((
    "true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
    "function", "if", "import", "let", "loop", "package", "namespace", "return", "var",
    "void", "while",
))  # fmt: skip
_ESCAPES = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}
_TO_ESCAPE = re.compile(r"__|[-./]|[^a-zA-Z0-9_]")


def cel_field(name: str) -> str | None:
    """A property name as CEL sees it (hugepages-2Mi -> hugepages__dash__2Mi), or None if hidden.

    The apiserver's escaping rules (k8s.io/apiserver/pkg/cel/escaping.go).
    """
    if not name or name[0].isdigit():
        return None
    if name in _CEL_RESERVED:
        return f"__{name}__"
    if any(c not in _ESCAPES and not (c.isascii() and (c.isalnum() or c == "_")) for c in name):
        return None
    return _TO_ESCAPE.sub(lambda m: _ESCAPES[m.group()], name)


def cel_value(value: Any, schema: Json) -> Any:
    """value as a CEL rule sees it: declared properties escaped, maps' keys as they are."""
    if isinstance(value, dict):
        out = {}
        for key, child, sub in structural.children(value, schema):
            name = cel_field(str(key)) if "properties" in schema else str(key)
            if name is not None:
                out[name] = cel_value(child, sub)
        return out
    if isinstance(value, list):
        return [cel_value(item, schema.get("items") or {}) for item in value]
    return value


Rule = tuple[str, Json, Json, Any, Any]  # (path, schema, rule, self, oldSelf)


def _walk(value: Any, old: Any, schema: Json, path: str) -> Iterator[Rule]:
    """Yield (path, schema, rule, self, oldSelf) for every CEL rule that applies to a value."""
    for rule in schema.get("x-kubernetes-validations", []):
        old_value = None if old is None else cel_value(old, schema)
        yield path, schema, rule, cel_value(value, schema), old_value
    if isinstance(value, dict):
        old_map = old if isinstance(old, dict) else {}
        for name, child, sub in structural.children(value, schema):
            yield from _walk(child, old_map.get(name), sub, f"{path}.{name}")
    elif isinstance(value, list):
        for i, item, sub in structural.children(value, schema):
            yield from _walk(item, None, sub, f"{path}[{i}]")


def evaluate(rule: str, value: Any, old: Any = None) -> Any:
    """The result of one CEL rule with self (and oldSelf) bound, as the API server computes it."""
    ctx = cel.Context({"self": value} if old is None else {"self": value, "oldSelf": old})
    ctx.add_function(RE2_MATCHES, lambda text, pattern: structural.re2_search(pattern, text))
    return _program(rule).execute(ctx)


@dataclass(frozen=True)
class Violation:
    """A failed CEL rule as the API server reports it: at field, with reason and message."""

    field: str  # the rule's node path plus its fieldPath: spec.elastic.minNodes
    reason: str  # FieldValueInvalid (Invalid value), FieldValueForbidden (Forbidden), ...
    message: str

    def __str__(self) -> str:
        """`field: message`, or the message alone when it opens with the field already."""
        text, field = self.message, self.field
        if text.startswith(field) and text[len(field) : len(field) + 1] in ("", " ", ":", ","):
            return text
        return f"{field}: {text}"


def cel_violations(obj: Json, old: Json | None = None, version: str = VERSION) -> list[Violation]:
    """The CEL rules obj breaks, where the server reports them; transitions need old."""
    out = []
    for path, schema, rule, value, old_value in _walk(obj, old, version_schema(version), ""):
        text, node = rule["rule"], path.lstrip(".")
        is_transition = "oldSelf" in text
        if is_transition and old_value is None:
            continue
        try:
            ok = evaluate(text, value, old_value if is_transition else None)
        except Exception as exc:  # a rule that cannot be evaluated rejects, as the API server does
            problem = f"rule {text!r} could not be evaluated: {exc}"
            out.append(Violation(node, fieldpath.REASONS[0], problem))
            continue
        if ok is not True:
            field = fieldpath.rule_field(node, rule, schema)
            reason = rule.get("reason", fieldpath.REASONS[0])
            out.append(Violation(field, reason, rule.get("message") or f"failed rule: {text}"))
    return out


def cel_errors(obj: Json, old: Json | None = None, version: str = VERSION) -> list[str]:
    """One line per CEL rule obj breaks, naming its field; transition rules need old."""
    return [str(v) for v in cel_violations(obj, old, version)]


def validate(obj: Any, old: Any = None, version: str = VERSION) -> tuple[Any, list[str]]:
    """Decode, prune, default, then validate a whole TrainiumJob as the API server would.

    Returns (the object as the server would store it, problems); a shape no stored object can
    have (too deep, too big, a YAML alias loop) is one problem, found before anything walks it.
    """
    shape = structural.shape_problem(obj)
    if shape:
        return obj, [shape]
    schema = version_schema(version)
    stored = server_view(obj, schema)
    errors = schema_errors(stored, version)
    if not errors:
        old_shape = None if old is None else structural.shape_problem(old)
        old_stored = None if old is None or old_shape else server_view(old, schema)
        errors = cel_errors(stored, old_stored, version)
    return stored, errors


@functools.cache
def immutable_fields(version: str = VERSION) -> tuple[str, ...]:
    """spec fields the CRD makes immutable (a `self == oldSelf` rule): they define the graphs."""
    spec = version_schema(version)["properties"]["spec"]["properties"]
    return tuple(
        name
        for name, sub in spec.items()
        if any(r["rule"] == "self == oldSelf" for r in sub.get("x-kubernetes-validations", []))
    )


def spec_digests(body: Json, version: str = VERSION) -> dict[str, str]:
    """A short digest of each immutable spec field as defaulted: what the job started with."""
    import hashlib
    import json

    stored = server_view(body, version_schema(version))
    spec = (stored.get("spec") if isinstance(stored, dict) else None) or {}
    out = {}
    for name in immutable_fields(version):
        blob = json.dumps(spec.get(name), sort_keys=True, separators=(",", ":"))
        out[name] = hashlib.sha256(blob.encode()).hexdigest()[:12]
    return out
