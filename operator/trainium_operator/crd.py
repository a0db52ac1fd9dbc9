"""The TrainiumJob CRD as the one source of the API rules: defaults, schema and CEL checks.

The operator, the CLI and the tests validate with the same file `kubectl apply` installs, so a
spec that slips past an API server (or comes from one that does not enforce the schema) gets the
same verdict here. Only core CEL is used in the CRD, so every rule can be evaluated offline.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import cel
import jsonschema
import yaml

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
    return Path(__file__).resolve().parents[2] / "crds" / CRD_FILE


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
    """Return a copy of obj with the schema's defaults filled in, as the API server would."""
    obj = copy.deepcopy(obj)
    _default_into(obj, schema)
    return obj


def _default_into(obj: Any, schema: Json) -> None:
    if isinstance(obj, dict):
        for name, sub in schema.get("properties", {}).items():
            if name not in obj and "default" in sub:
                obj[name] = copy.deepcopy(sub["default"])
            if name in obj:
                _default_into(obj[name], sub)
    elif isinstance(obj, list) and "items" in schema:
        for item in obj:
            _default_into(item, schema["items"])


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
def _validator(version: str) -> jsonschema.Draft202012Validator:
    root = to_jsonschema(version_schema(version))
    return jsonschema.Draft202012Validator(root)


def schema_errors(obj: Json, version: str = VERSION) -> list[str]:
    """JSON-schema violations of a (defaulted) object, each naming its field."""
    errors = sorted(_validator(version).iter_errors(obj), key=lambda e: list(e.absolute_path))
    return [f"{_dotted(e.absolute_path)}: {e.message}" for e in errors]


def _dotted(path: Any) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in path]
    return "".join(parts).lstrip(".") or "<root>"


@functools.cache
def _program(rule: str) -> Any:
    return cel.compile(rule)


def _walk(value: Any, old: Any, schema: Json, path: str) -> Iterator[tuple[str, Json, Any, Any]]:
    """Yield (path, rule, self, oldSelf) for every CEL rule that applies to a present value."""
    for rule in schema.get("x-kubernetes-validations", []):
        yield path, rule, value, old
    if isinstance(value, dict):
        old_map = old if isinstance(old, dict) else {}
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                yield from _walk(value[name], old_map.get(name), sub, f"{path}.{name}")
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            yield from _walk(item, None, schema["items"], f"{path}[{i}]")


def cel_errors(obj: Json, old: Json | None = None, version: str = VERSION) -> list[str]:
    """Messages of the CEL rules obj breaks; transition rules only run when old is given."""
    out = []
    for path, rule, value, old_value in _walk(obj, old, version_schema(version), ""):
        text = rule["rule"]
        is_transition = "oldSelf" in text
        if is_transition and old_value is None:
            continue
        ctx = {"self": value, "oldSelf": old_value} if is_transition else {"self": value}
        try:
            ok = _program(text).execute(cel.Context(ctx))
        except Exception as exc:  # a rule that cannot be evaluated rejects, as the API server does
            out.append(f"{path.lstrip('.')}: rule {text!r} could not be evaluated: {exc}")
            continue
        if ok is not True:
            out.append(rule.get("message") or f"{path.lstrip('.')}: failed rule {text}")
    return out


def validate(obj: Json, old: Json | None = None, version: str = VERSION) -> tuple[Json, list[str]]:
    """Default then validate a whole TrainiumJob as `kubectl apply` would; return (obj, errors)."""
    schema = version_schema(version)
    defaulted = apply_defaults(obj, schema)
    errors = schema_errors(defaulted, version)
    if not errors:
        old_defaulted = apply_defaults(old, schema) if old is not None else None
        errors = cel_errors(defaulted, old_defaulted, version)
    return defaulted, errors


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

    spec = apply_defaults(body, version_schema(version)).get("spec") or {}
    out = {}
    for name in immutable_fields(version):
        blob = json.dumps(spec.get(name), sort_keys=True, separators=(",", ":"))
        out[name] = hashlib.sha256(blob.encode()).hexdigest()[:12]
    return out
