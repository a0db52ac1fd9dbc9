"""`helm rollback` must not drop a TrainiumJob CRD field: the chart's admission policy refuses it.

Helm rollback re-applies the older revision's CRD (helm.sh/resource-policy keep only stops
deletes), and the API server prunes fields the stored schema lacks from every TrainiumJob it
reads, lost at the job's next write. The policy's CEL rule is core CEL, evaluated here with
`common-expression-language` against the real CRD and edited copies;
tests/cluster/test_crd_guard.py has the real API server enforce it.
"""

from __future__ import annotations

import copy
from typing import Any

import cel
import pytest
import yaml

from helmchart import CRD_SOURCE, by_kind, one
from helmchart import render as render_chart

Obj = dict[str, Any]
#: How deep the rule looks (crd-guard.yaml unrolls it); the CRD must stay within it.
DEPTH = 8


def render(*sets: str) -> list[Obj]:
    """The chart without its other admission policy (the queue-name label's, issue 41)."""
    return render_chart("kueue.guardQueueLabel=false", *sets)


def rule(*sets: str) -> str:
    policy = one(render(*sets), "ValidatingAdmissionPolicy")
    [validation] = policy["spec"]["validations"]
    expression: str = validation["expression"]
    return expression


def crd() -> Obj:
    loaded: Obj = yaml.safe_load(CRD_SOURCE.read_text())
    return loaded


def spec_schema(doc: Obj) -> Obj:
    schema: Obj = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def allowed(old: Obj, new: Obj) -> bool:
    return bool(cel.evaluate(rule(), {"oldObject": old, "object": new}))


def depth(schema: Obj) -> int:
    node = schema.get("items", schema)
    children = (node.get("properties") or {}).values()
    return 1 + max((depth(c) for c in children), default=0)


def test_the_rule_reaches_every_field_of_the_crd() -> None:
    for version in crd()["spec"]["versions"]:
        assert depth(version["schema"]["openAPIV3Schema"]) <= DEPTH, "deepen crd-guard.yaml"


def test_the_same_crd_and_a_crd_with_more_fields_pass() -> None:
    old, new = crd(), crd()
    assert allowed(old, new)
    spec_schema(new)["properties"]["newField"] = {"type": "string"}
    assert allowed(old, new)


@pytest.mark.parametrize(
    "path",
    [
        ("image",),  # top level of spec
        ("runPolicy", "maxRetries"),  # nested object
        ("env", "name"),  # inside array items
    ],
    ids=".".join,
)
def test_dropping_a_field_is_refused(path: tuple[str, ...]) -> None:
    old, new = crd(), crd()
    node = spec_schema(new)
    for key in path[:-1]:
        node = node["properties"][key]
        node = node.get("items", node)
    del node["properties"][path[-1]]
    assert not allowed(old, new)
    # The way out the message names: the live CRD annotated by hand.
    marked = copy.deepcopy(old)
    marked["metadata"].setdefault("annotations", {})["trainium.dev/allow-field-removal"] = "true"
    assert allowed(marked, new)


def test_the_policy_matches_only_updates_of_this_crd() -> None:
    docs = render()
    policy = one(docs, "ValidatingAdmissionPolicy")
    [rules] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules["resources"] == ["customresourcedefinitions"]
    assert rules["operations"] == ["UPDATE"]
    assert rules["resourceNames"] == [crd()["metadata"]["name"]]
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    assert not by_kind(render("crds.guardFields=false"), "ValidatingAdmissionPolicy")


def test_the_guard_stays_when_the_crd_leaves_the_release() -> None:
    """README's way to run an older operator (crds.enabled=false) keeps the CRD installed: a
    later upgrade with the CRD back on (an older chart's) must still meet the guard (issue 34)."""
    without = render("crds.enabled=false")
    assert not by_kind(without, "CustomResourceDefinition")
    assert one(without, "ValidatingAdmissionPolicy") == one(render(), "ValidatingAdmissionPolicy")
    assert one(without, "ValidatingAdmissionPolicyBinding")


@pytest.mark.parametrize("sets", [(), ("crds.enabled=false",)], ids=["with-crd", "without-crd"])
def test_the_guard_is_kept_as_long_as_the_crd(sets: tuple[str, ...]) -> None:
    """helm deletes what a revision no longer renders (an older chart, an uninstall): the guard
    carries the CRD's keep policy, so it outlives them as the CRD does."""
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        kept = one(render(*sets), kind)["metadata"]
        assert kept["annotations"] == {"helm.sh/resource-policy": "keep"}, kind
        dropped = one(render(*sets, "crds.keep=false"), kind)["metadata"]
        assert "annotations" not in dropped, kind
