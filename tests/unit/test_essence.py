"""kopf's per-event essence: as kopf's for TrainiumJobs, skipped for kinds nothing diffs."""

from __future__ import annotations

import copy
from typing import Any, cast

import kopf
import pytest

from trainium_operator.runtime.essence import LeanDiffBase

KOPFS = kopf.AnnotationsDiffBaseStorage(prefix="trainium.dev", key="last-handled-configuration")
LEAN = LeanDiffBase(prefix="trainium.dev", key="last-handled-configuration")


def tj(**extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainium.dev/v1alpha1",
        "kind": "TrainiumJob",
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "9",
            "labels": {"team": "a"},
            "annotations": {
                "note": "kept",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "trainium.dev/last-handled-configuration": "{}",
            },
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"image": "i", "storage": {"fsx": {"fileSystemId": "fs-1"}}},
        "status": {"phase": "Training", "history": [{"phase": "Pending"}] * 50},
        **extra,
    }


@pytest.mark.parametrize(
    "fields", [[], [("spec", "image")], [("status", "phase")]], ids=["none", "spec", "status"]
)
def test_a_trainiumjobs_essence_is_kopfs(fields: list[Any]) -> None:
    body = kopf.Body(cast(Any, tj()))
    before = copy.deepcopy(tj())
    assert LEAN.build(body=body, extra_fields=fields) == KOPFS.build(body=body, extra_fields=fields)
    assert dict(body) == before  # nothing changed in place


def test_other_kinds_have_no_essence_to_copy() -> None:
    vcjob = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
             "metadata": {"name": "v"}, "spec": {"tasks": [{"replicas": 2}]}}  # fmt: skip
    assert LEAN.build(body=kopf.Body(cast(Any, vcjob))) == {}
    assert KOPFS.build(body=kopf.Body(cast(Any, vcjob))) != {}  # what kopf copied for nothing


def test_a_body_without_kind_is_built_as_kopf_builds_it() -> None:
    body = tj()
    del body["kind"]
    assert LEAN.build(body=kopf.Body(cast(Any, body))) == KOPFS.build(
        body=kopf.Body(cast(Any, body))
    )
