"""Read manifest YAML the way `kubectl apply -f` does, not the way PyYAML's YAML 1.1 does.

kubectl turns each document into JSON (sigs.k8s.io/yaml over go-yaml v2) before the API server
sees it, so a plain scalar's type is go-yaml v2's verdict (its resolve.go), not PyYAML's:

- numbers: `4e-4`, `1e3`, `+.5`, `3.e2`, `0o17`, `08` (a float 8) are numbers to kubectl and
  strings to PyYAML; `12:30` (YAML 1.1 base 60) is a number to PyYAML and a string to kubectl;
- booleans: y/Y/yes/Yes/YES/on/On/ON and n/N/no/No/NO/off/Off/OFF, true/false in three cases
  (PyYAML lacks y and n);
- timestamps (`2026-11-25`) stay strings (PyYAML makes a date); `=` is a string;
- then JSON: map keys become strings (`on:` is "true", `1.5:` is "1.5"), a float that is whole
  reaches the server as an integer (`2.0` is 2), and .inf/.nan cannot be sent at all.
"""

from __future__ import annotations

import base64
import math
import re
import struct
from typing import Any

import yaml
from yaml.constructor import ConstructorError

_TAG = "tag:yaml.org,2002:"
STR, INT, FLOAT, BOOL, NULL, MERGE = (
    _TAG + t for t in ("str", "int", "float", "bool", "null", "merge")
)
INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1

#: go-yaml v2's resolve table: the plain scalars it looks up by their whole text.
_KNOWN: dict[str, tuple[str, Any]] = {
    **dict.fromkeys(["y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE"], (BOOL, True)),
    **dict.fromkeys(["on", "On", "ON"], (BOOL, True)),
    **dict.fromkeys(["n", "N", "no", "No", "NO", "false", "False", "FALSE"], (BOOL, False)),
    **dict.fromkeys(["off", "Off", "OFF"], (BOOL, False)),
    **dict.fromkeys(["", "~", "null", "Null", "NULL"], (NULL, None)),
    **dict.fromkeys([".nan", ".NaN", ".NAN"], (FLOAT, math.nan)),
    **dict.fromkeys([".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"], (FLOAT, math.inf)),
    **dict.fromkeys(["-.inf", "-.Inf", "-.INF"], (FLOAT, -math.inf)),
    "<<": (MERGE, "<<"),
}
#: strconv.ParseInt(s, 0, 64) syntax without underscores: 0b, 0o, 0x, or a leading 0 for octal.
_GO_INT = re.compile(
    r"(?P<sign>[-+]?)(?P<body>0[bB][01]+|0[oO][0-7]+|0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)"
)
#: go-yaml's yamlStyleFloat: a float needs no dot, and its exponent no sign.
_YAML_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
#: strconv.ParseFloat on text that starts with a dot (Go syntax: `_` only between digits).
_DOT_FLOAT = re.compile(r"\.[0-9](?:_?[0-9])*(?:[eE][-+]?[0-9](?:_?[0-9])*)?")


def _go_int(match: re.Match[str]) -> int:
    body = match["body"]
    bases = {"b": 2, "o": 8, "x": 16}
    if body[1:2].lower() in bases:
        value = int(body[2:], bases[body[1].lower()])
    else:
        value = int(body, 8 if body.startswith("0") else 10)
    return -value if match["sign"] == "-" else value


def _finite(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None  # Go's ParseFloat refuses an overflow


def resolve_plain(text: str) -> tuple[str, Any]:
    """(tag, value) of a plain (unquoted, untagged) scalar, as go-yaml v2's resolve() gives it."""
    if text in _KNOWN:
        return _KNOWN[text]
    first = text[:1]
    if first == "." and _DOT_FLOAT.fullmatch(text):
        value = _finite(text.replace("_", ""))
        if value is not None:
            return FLOAT, value
    elif first and first in "+-0123456789":
        # A timestamp comes first in go-yaml, but decoded into interface{} it stays the text.
        plain = text.replace("_", "")
        match = _GO_INT.fullmatch(plain)
        number = _go_int(match) if match else None
        unsigned = match is not None and not match["sign"]
        if number is not None and (
            INT64_MIN <= number <= INT64_MAX or (unsigned and number <= UINT64_MAX)
        ):
            return INT, number
        if _YAML_FLOAT.fullmatch(plain) and _finite(plain) is not None:
            return FLOAT, float(plain)
        if number is not None and unsigned:
            return INT, number  # beyond uint64: go-yaml's big.Int (0x, 0o or 0b only here)
    return STR, text


def _short(tag: str) -> str:
    return tag.replace(_TAG, "!!")


class KubectlLoader(yaml.SafeLoader):
    """SafeLoader with go-yaml v2's scalar types and tags (see the module docstring)."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            return resolve_plain(value)[0]
        return super().resolve(kind, value, implicit)

    def construct_typed(self, node: yaml.ScalarNode) -> Any:
        """An int, float, bool or null scalar; an explicit tag must fit, as go-yaml checks."""
        text = str(self.construct_scalar(node))
        tag, value = resolve_plain(text)
        if tag == node.tag:
            return value
        if node.tag == FLOAT and tag == INT:
            return float(value)
        raise ConstructorError(
            None, None, f"cannot decode {_short(tag)} `{text}` as a {_short(node.tag)}",
            node.start_mark,
        )  # fmt: skip

    def construct_binary_text(self, node: yaml.ScalarNode) -> str:
        """!!binary: go-yaml decodes it to a string, and JSON replaces invalid UTF-8."""
        data = str(self.construct_scalar(node))
        try:
            return base64.b64decode(data, validate=False).decode("utf-8", "replace")
        except ValueError:
            raise ConstructorError(None, None, "!!binary: not base64", node.start_mark) from None

    def construct_any_tag(self, node: yaml.Node) -> Any:
        """A tag go-yaml does not know (`!foo`, !!set, !!omap): the node as if untagged."""
        if isinstance(node, yaml.ScalarNode):
            return self.construct_scalar(node)
        if isinstance(node, yaml.SequenceNode):
            return self.construct_sequence(node, deep=True)
        return self.construct_mapping(node, deep=True)  # type: ignore[arg-type]


for _tag in (INT, FLOAT, BOOL, NULL):
    KubectlLoader.add_constructor(_tag, KubectlLoader.construct_typed)
KubectlLoader.add_constructor(_TAG + "timestamp", KubectlLoader.construct_any_tag)
KubectlLoader.add_constructor(_TAG + "binary", KubectlLoader.construct_binary_text)
for _tag in ("set", "omap", "pairs"):
    KubectlLoader.add_constructor(_TAG + _tag, KubectlLoader.construct_any_tag)
KubectlLoader.add_constructor(None, KubectlLoader.construct_any_tag)


class JsonError(ValueError):
    """A loaded document kubectl cannot turn into JSON (a null key, .inf, .nan)."""


def to_json(obj: Any, path: str = "") -> Any:
    """obj as the API server receives it from kubectl: string keys, whole floats as integers."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        first: dict[str, Any] = {}
        for key, value in obj.items():
            name = _key(key, path)
            if name in out:
                raise JsonError(f"{_at(path)}: keys {first[name]!r} and {key!r} are both {name!r}")
            first[name] = key
            out[name] = to_json(value, f"{path}.{name}" if path else name)
        return out
    if isinstance(obj, list):
        return [to_json(value, f"{path}[{i}]") for i, value in enumerate(obj)]
    if isinstance(obj, float):
        if not math.isfinite(obj):
            text = ".nan" if math.isnan(obj) else ("-.inf" if obj < 0 else ".inf")
            raise JsonError(f"{_at(path)}: {text} is not a JSON number; kubectl cannot send it")
        # Go's encoder writes a whole float below 1e21 without a dot; the server reads an int64.
        return int(obj) if obj.is_integer() and INT64_MIN <= obj <= INT64_MAX else obj
    return obj


def _at(path: str) -> str:
    return path or "<document>"


def _key(key: Any, path: str) -> str:
    """A map key as sigs.k8s.io/yaml writes it to JSON (a float as strconv's 'g' of float32)."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        return float32_g(key)
    raise JsonError(f"{_at(path)}: a {type(key).__name__} map key cannot become JSON")


def float32_g(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32), with go-yaml's .inf/-.inf/.nan."""
    if math.isnan(value):
        return ".nan"
    try:
        single = _float32(value)
    except OverflowError:
        single = math.copysign(math.inf, value)
    if math.isinf(single):
        return ".inf" if single > 0 else "-.inf"
    sign, single = ("-" if math.copysign(1, single) < 0 else ""), abs(single)
    for decimals in range(9):  # the fewest digits that read back as the same float32
        text = f"{single:.{decimals}e}"
        if _float32(float(text)) == single:
            break
    mantissa, exponent = text.split("e")
    digits, exp = mantissa.replace(".", "").rstrip("0") or "0", int(exponent)
    if exp < -4 or exp >= 6:  # Go's %e threshold for the shortest form
        frac = f".{digits[1:]}" if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{frac}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    whole, frac = digits[: exp + 1].ljust(exp + 1, "0"), digits[exp + 1 :]
    return f"{sign}{whole}{'.' + frac if frac else ''}"


def _float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])
