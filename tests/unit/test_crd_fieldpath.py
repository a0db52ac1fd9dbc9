"""Each CEL rule of the CRD is reported at its field, as kubectl users expect from built-in types.

Issue 34 item 6: most rules sat on spec without a fieldPath, so the API server reported them at
`spec` (the field was only in the message). A rule's `fieldPath` makes the server report it at
the rule's path plus that one, with `reason` choosing Invalid value / Forbidden / Required value;
the offline harness (crd.cel_violations) reports the same field.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from support import job

from trainium_operator.api import crd, fieldpath

Json = dict[str, Any]

#: Rules that judge their whole node, so their node's path is the field (no fieldPath).
WHOLE_NODE = {
    ("spec", "spec.module, spec.script, spec.args, spec.nprocPerNode"),  # seven fields at once
    ("spec.storage", "spec.storage needs exactly one of claimName"),
    ("spec.resources", "spec.resources: huge pages need a cpu or memory"),
    ("spec.scheduling.nodeSelector", "spec.scheduling.nodeSelector keys must be label keys"),
}


def rules(schema: Json, path: str = "spec") -> Iterator[tuple[str, Json, Json]]:
    """(node path, node schema, rule) for every rule from spec down (items as [*])."""
    for rule in schema.get("x-kubernetes-validations", []):
        yield path, schema, rule
    for name, sub in schema.get("properties", {}).items():
        yield from rules(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from rules(schema["items"], f"{path}[*]")


SPEC = crd.version_schema()["properties"]["spec"]
RULES = list(rules(SPEC))


@pytest.mark.parametrize(
    ("path", "schema", "rule"), RULES, ids=[f"{p}:{i}" for i, (p, _, _) in enumerate(RULES)]
)
def test_the_api_server_would_accept_the_rules_field_path_and_reason(
    path: str, schema: Json, rule: Json
) -> None:
    """As the CRD's validation checks them: a path to a declared field, a known reason."""
    if "fieldPath" in rule:
        fieldpath.resolve(rule["fieldPath"], schema)  # raises as the server refuses
        assert rule["fieldPath"].strip() == rule["fieldPath"] and "\n" not in rule["fieldPath"]
    assert rule.get("reason", "FieldValueInvalid") in fieldpath.REASONS
    assert rule.get("reason") != "FieldValueDuplicate", "the server drops the message for it"


def test_every_rule_on_an_object_names_its_field() -> None:
    """A rule that judges a field inside its node says which one (else it is listed above)."""
    unnamed = [
        (path, rule["message"])
        for path, schema, rule in RULES
        if schema.get("type") == "object"
        and "fieldPath" not in rule
        and rule["rule"] != "self == oldSelf"
    ]
    listed = [
        (path, message)
        for path, message in unnamed
        if any(path == p and message.startswith(prefix) for p, prefix in WHOLE_NODE)
    ]
    assert unnamed == listed


FIELD_CASES = [
    ("elastic-min-nodes", job(nodes=2, elastic={"minNodes": 3, "globalBatchSize": 96,
     "batchSizePerProcess": 1}), "spec.elastic.minNodes", "FieldValueInvalid"),
    ("module-and-script", job(module="a", script="b.py"), "spec.script", "FieldValueForbidden"),
    ("lnc-on-trn1", job(lnc=2), "spec.lnc", "FieldValueInvalid"),
    ("toleration-seconds", job(scheduling={"tolerations": [
        {"operator": "Exists"}, {"operator": "Exists", "tolerationSeconds": 5}]}),
     "spec.scheduling.tolerations[1].effect", "FieldValueInvalid"),
    ("toleration-value", job(scheduling={"tolerations": [{"operator": "Exists", "value": "v"}]}),
     "spec.scheduling.tolerations[0].value", "FieldValueInvalid"),
    ("placement-layer", job(instanceType="trn2.48xlarge", scheduling={"placement": {}}),
     "spec.scheduling.placement.networkNodeLayer", "FieldValueRequired"),
    ("hugepages", job(resources={"requests": {"cpu": "1", "hugepages-2Mi": "2Mi"}}),
     "spec.resources.requests.hugepages-2Mi", "FieldValueInvalid"),
    ("cpu", job(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
     "spec.resources.requests.cpu", "FieldValueInvalid"),
    ("env-owned", job(env=[{"name": "NEURON_CC_FLAGS", "value": "x"}]), "spec.env",
     "FieldValueForbidden"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "field", "reason"), [c[1:] for c in FIELD_CASES], ids=[c[0] for c in FIELD_CASES]
)
def test_a_broken_rule_is_reported_at_its_field(obj: Json, field: str, reason: str) -> None:
    stored, errors = crd.validate(obj)
    found = [(v.field, v.reason) for v in crd.cel_violations(stored)]
    assert (field, reason) in found, found
    assert any(e.startswith(field) for e in errors), errors  # the line names the field first


def test_a_line_does_not_repeat_a_field_its_message_opens_with() -> None:
    violation = crd.Violation(
        "spec.elastic.minNodes", "FieldValueInvalid", "spec.elastic.minNodes may not"
    )
    assert str(violation) == "spec.elastic.minNodes may not"
    other = crd.Violation("spec.scheduling.tolerations[0].value", "FieldValueInvalid", "no value")
    assert str(other) == "spec.scheduling.tolerations[0].value: no value"
    prefix = crd.Violation("spec.env", "FieldValueForbidden", "spec.envFrom is not ours")
    assert str(prefix) == "spec.env: spec.envFrom is not ours"


SCHEMA = {
    "type": "object",
    "properties": {
        "a.c": {"type": "number"},
        "foo": {"type": "object", "properties": {"b.c": {"type": "object", "properties": {}}}},
        "list": {"type": "array", "items": {"type": "object", "properties": {"a": {}}}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "hugepages-2Mi": {"type": "string"},
    },
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".foo", "foo"), ("['a.c']", "a.c"), (".foo['b.c']", "foo.b.c"),
        (".labels.zone", "labels[zone]"), (".labels['a.b/c']", "labels[a.b/c]"),
        (".hugepages-2Mi", "hugepages-2Mi"), ("['hugepages-2Mi']", "hugepages-2Mi"),
    ],
)  # fmt: skip
def test_resolve_gives_the_servers_path(path: str, expected: str) -> None:
    assert fieldpath.resolve(path, SCHEMA) == expected


@pytest.mark.parametrize(
    ("path", "error"),
    [
        (".a.c", "does not refer to a valid field"),  # the server's own test cases
        (".list[0]", "expected single quoted string but got 0"),
        (".list.a", "does not refer to a valid field"),
        ("   ", "expected [ or . but got:    "),
        (".", "unexpected end of JSON path"),
        ("..", "does not refer to a valid field"),
        ("foo", "expected [ or . but got: foo"),
        ("['foo'", "unexpected end of JSON path"),
        ("['a\\qc']", "invalid string literal: invalid escape char \\q"),
    ],
)
def test_resolve_refuses_what_the_server_refuses(path: str, error: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(error)}$"):
        fieldpath.resolve(path, SCHEMA)
