"""What pod validation refuses, the CRD (and so `trainium render` and the operator) refuses too.

Each case is a spec field that reaches the pod template: Kubernetes' ValidatePodSpec rejects it,
so the Volcano job would be refused long after `kubectl apply` said yes. Every rule added for
these walks only bounded strings and arrays (maxLength, maxItems, maxProperties): the API server
estimates CEL cost from those bounds.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from support import job

from trainium_operator.api import crd
from trainium_operator.api.instances import LNC_ENV
from trainium_operator.local import render
from trainium_operator.local.render import UsageError
from trainium_trainer import contract

Json = dict[str, Any]


def tolerations(*items: Json) -> Json:
    return job(scheduling={"tolerations": list(items)})


def selector(labels: Json) -> Json:
    return job(scheduling={"nodeSelector": labels})


PREFIX_TOO_LONG = "a key's prefix (before '/') may not exceed 253 characters"
#: (id, TrainiumJob, substring one of the errors must contain).
POD_REFUSES: list[tuple[str, Json, str]] = [
    (
        "toleration-exists-with-value",
        tolerations({"key": "k", "operator": "Exists", "value": "v"}),
        "a toleration with operator Exists may not have a value",
    ),
    (
        "toleration-seconds-without-noexecute",
        tolerations(
            {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60}
        ),
        "tolerationSeconds needs effect NoExecute",
    ),
    (
        "toleration-seconds-without-effect",
        tolerations({"key": "k", "value": "v", "tolerationSeconds": 60}),
        "tolerationSeconds needs effect NoExecute",
    ),
    (
        "toleration-without-key-not-exists",
        tolerations({"operator": "Equal", "value": "v"}),
        "a toleration without a key needs operator Exists",
    ),
    (
        "toleration-bad-key",
        tolerations({"key": "bad key", "operator": "Exists"}),
        "spec.scheduling.tolerations[0].key: 'bad key' does not match",
    ),
    (
        "toleration-bad-value",
        tolerations({"key": "k", "value": "a b"}),
        "spec.scheduling.tolerations[0].value: 'a b' does not match",
    ),
    (
        "toleration-key-prefix-254",
        tolerations({"key": ("a" * 60 + ".") * 4 + "abcdefghij/zone", "operator": "Exists"}),
        PREFIX_TOO_LONG,
    ),
    (
        "node-selector-key-with-space",
        selector({"bad key": "x"}),
        "spec.scheduling.nodeSelector keys must be label keys",
    ),
    (
        "node-selector-key-name-64",
        selector({"a" * 64: "x"}),
        "spec.scheduling.nodeSelector keys must be label keys",
    ),
    (
        "node-selector-key-prefix-uppercase",
        selector({"Example.com/zone": "x"}),
        "spec.scheduling.nodeSelector keys must be label keys",
    ),
    (
        "node-selector-key-prefix-254",
        selector({("a" * 60 + ".") * 4 + "abcdefghij/zone": "x"}),
        "spec.scheduling.nodeSelector keys must be label keys",
    ),
    (
        "node-selector-bad-value",
        selector({"zone": "a b"}),
        "spec.scheduling.nodeSelector.zone: 'a b' does not match",
    ),
    (
        "node-selector-value-64",
        selector({"zone": "a" * 64}),
        "spec.scheduling.nodeSelector.zone: '" + "a" * 64 + "' is too long",
    ),
    (
        "priority-class-uppercase",
        job(scheduling={"priorityClassName": "High"}),
        "spec.scheduling.priorityClassName: 'High' does not match",
    ),
    (
        "priority-class-underscore",
        job(scheduling={"priorityClassName": "high_priority"}),
        "spec.scheduling.priorityClassName: 'high_priority' does not match",
    ),
]

#: Names the operator sets for each stage (contract.OPERATOR_ENV): refused in spec.env.
OWNED_ENV: list[tuple[str, Json, str]] = [
    (
        f"env-owned-{name}",
        job(env=[{"name": "A", "value": "1"}, {"name": name, "value": "x"}]),
        "spec.env may not set names the operator sets",
    )
    for name in contract.OPERATOR_ENV
    if name != contract.ENV_NEURON_CC_FLAGS  # its own rule and message (test_crd_validation)
]

POD_ACCEPTS: list[Json] = [
    tolerations({"operator": "Exists"}),
    tolerations({"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}),
    tolerations({"key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": 30}),
    tolerations({"key": "k", "operator": "Exists", "value": ""}),
    tolerations({"key": "spot", "value": "", "effect": "NoSchedule"}),
    selector({"topology.kubernetes.io/zone": "us-west-2a", "a": "", "b_c.d-e": "x.y_z-1"}),
    selector({("a" * 60 + ".") * 4 + "abcdefgh/" + "n" * 63: "v" * 63}),  # 253 + 1 + 63
    job(scheduling={"priorityClassName": "system-cluster-critical"}),
    job(scheduling={"priorityClassName": "team-a.high"}),
    job(env=[{"name": contract.ENV_HF_OFFLINE, "value": "0"}, {"name": "FI_PROVIDER"}]),
]


@pytest.mark.parametrize(("case_id", "obj", "expected"), POD_REFUSES + OWNED_ENV,
                         ids=[c[0] for c in POD_REFUSES + OWNED_ENV])  # fmt: skip
def test_what_pods_refuse_the_crd_refuses(case_id: str, obj: Json, expected: str) -> None:
    _, errors = crd.validate(obj)
    assert any(expected in e for e in errors), errors


@pytest.mark.parametrize("obj", POD_ACCEPTS, ids=lambda o: str(o["spec"])[-70:])
def test_what_pods_accept_stays_valid(obj: Json) -> None:
    _, errors = crd.validate(obj)
    assert errors == []


@pytest.mark.parametrize(("case_id", "obj", "expected"), POD_REFUSES[:3] + OWNED_ENV[:2],
                         ids=[c[0] for c in POD_REFUSES[:3] + OWNED_ENV[:2]])  # fmt: skip
def test_render_refuses_them_too(case_id: str, obj: Json, expected: str) -> None:
    with pytest.raises(UsageError) as err:
        render.render_job(obj)
    assert any(expected in p for p in err.value.problems), err.value.problems


def test_an_owned_env_name_is_named_in_the_message() -> None:
    _, errors = crd.validate(job(env=[{"name": contract.ENV_OUTPUT_DIR, "value": "/x"}]))
    (error,) = errors
    assert contract.ENV_OUTPUT_DIR in error and contract.ENV_STAGE in error


def test_the_crd_rule_lists_exactly_the_operators_env() -> None:
    """One source: contract.OPERATOR_ENV; the CRD's env rules must name the same set."""
    env_schema = crd.version_schema()["properties"]["spec"]["properties"]["env"]
    named: set[str] = set()
    for rule in env_schema["x-kubernetes-validations"]:
        named |= set(re.findall(r"'([A-Z_][A-Z0-9_]*)'", rule["rule"]))
    # and the Neuron runtime's LNC, which the operator sets from spec.lnc (instances.LNC_ENV).
    assert named == {*contract.OPERATOR_ENV, LNC_ENV}


def test_the_lnc_env_is_refused_with_its_own_message() -> None:
    _, errors = crd.validate(job(env=[{"name": LNC_ENV, "value": "1"}]))
    assert errors == [f"spec.env may not set {LNC_ENV}: the operator sets it from spec.lnc"]


def test_the_operator_env_is_what_the_builders_set_for_the_trainer() -> None:
    """Owned: what each stage must get from the operator; HF_* are defaults a user may change."""
    assert set(contract.OPERATOR_ENV) == {
        *contract.TRAINER_ENV,
        contract.ENV_NEURON_CC_FLAGS,
    } - set(contract.USER_OVERRIDABLE_ENV)


@pytest.mark.parametrize("where", ["env-value", "node-selector", "module"])
def test_a_null_server_side_apply_refuses_is_refused_by_render(where: str) -> None:
    """kubectl apply --server-side refuses null in a field without a default (create prunes it)."""
    obj = {
        "env-value": job(env=[{"name": "A", "value": None}]),
        "node-selector": selector({"zone": None}),
        "module": job(module=None),
    }[where]
    with pytest.raises(UsageError) as err:
        render.render_job(obj)
    (problem,) = err.value.problems
    assert "null" in problem and "omit" in problem, problem


def test_a_null_with_a_default_is_defaulted_as_the_server_does() -> None:
    assert render.render_job(job(nodes=None, cache=None)).manifests
