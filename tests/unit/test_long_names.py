"""TrainiumJob names of 64-253 characters: every child is valid and still finds its owner."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from support import job

from trainium_operator.api import naming
from trainium_operator.local import render
from trainium_operator.manifests import ownership
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LONG = "team-a.bert-large-pretrain." + "x" * 200 + ".v1"  # 230 characters, dots included


def _metadata(obj: Any) -> Iterator[Json]:
    """Every metadata block of a manifest, pod templates included."""
    if isinstance(obj, dict):
        if isinstance(obj.get("metadata"), dict):
            yield obj["metadata"]
        for value in obj.values():
            yield from _metadata(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from _metadata(item)


def _manifests(name: str) -> list[Json]:
    doc = job(name=name, storage={"fsx": {"fileSystemId": "fs-0123456789abcdef0"}})
    doc["spec"]["storage"]["fsx"].update(dnsName="fs.example", mountName="abcdef")
    return list(render.render_job(doc).manifests)


def test_the_long_name_is_a_valid_object_name() -> None:
    assert 63 < len(LONG) <= 253


@pytest.mark.parametrize("name", [LONG, "j" * 253, "a" * 64])
def test_every_label_value_of_every_child_is_valid(name: str) -> None:
    manifests = _manifests(name)
    assert [m["kind"] for m in manifests] == [
        "PersistentVolume",
        "PersistentVolumeClaim",
        "Job",
        "Job",
    ]
    for meta in (m for manifest in manifests for m in _metadata(manifest)):
        for key, value in (meta.get("labels") or {}).items():
            assert len(value) <= 63 and LABEL_VALUE.match(value), (key, value)
    for manifest in manifests:
        assert DNS_LABEL.match(manifest["metadata"]["name"]), manifest["metadata"]["name"]


def test_volcano_jobs_name_their_owner_in_full() -> None:
    for vcjob in _manifests(LONG)[2:]:
        meta = vcjob["metadata"]
        assert meta["labels"][ownership.LABEL_JOB] == naming.label_value(LONG) != LONG
        assert meta["annotations"][ownership.ANNOTATION_OWNER].partition("/")[2] == LONG
        assert ownership.owner_name(meta) == LONG


def test_short_names_are_labels_as_before() -> None:
    labels = ownership.labels(Owner("bert", "default", "u"), "train")
    assert labels[ownership.LABEL_JOB] == "bert"
    assert labels["app.kubernetes.io/instance"] == "bert"


# --- owner_name: what handlers call to find a child's TrainiumJob -----------------------------


def _ref(**over: Any) -> Json:
    ref = {"apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob", "name": LONG}
    return {**ref, "uid": "u", "controller": True, **over}


def test_owner_name_prefers_the_annotation() -> None:
    meta = {
        "annotations": {ownership.ANNOTATION_OWNER: f"default/{LONG}"},
        "labels": {ownership.LABEL_JOB: naming.label_value(LONG)},
        "ownerReferences": [_ref(name="other")],
    }
    assert ownership.owner_name(meta) == LONG


def test_owner_name_falls_back_to_the_controller_owner_reference() -> None:
    refs = [_ref(kind="Queue", name="q"), _ref(controller=False, name="x"), _ref()]
    meta = {"labels": {ownership.LABEL_JOB: naming.label_value(LONG)}, "ownerReferences": refs}
    assert ownership.owner_name(meta) == LONG


def test_owner_name_ignores_owners_of_another_group() -> None:
    refs = [_ref(apiVersion="example.com/v1", name="impostor")]
    meta = {"labels": {ownership.LABEL_JOB: "bert"}, "ownerReferences": refs}
    assert ownership.owner_name(meta) == "bert"


def test_owner_name_of_a_child_made_before_the_annotation_is_its_label() -> None:
    assert ownership.owner_name({"labels": {ownership.LABEL_JOB: "bert"}}) == "bert"


def test_owner_name_without_any_owner_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"trainium\.dev/job-name"):
        ownership.owner_name({"labels": {}, "annotations": None})
