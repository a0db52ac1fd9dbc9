"""Helpers shared by the unit tests: repository paths and TrainiumJob factories."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from trainium_operator.api.spec import TrainiumJobSpec, parse
from trainium_operator.build.builders import Owner

Json = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
CRD_FILE = REPO / "crds" / "trainiumjobs.trainium.dev.yaml"
TRAINER_SRC = REPO / "trainer" / "trainium_trainer"

MINIMAL_SPEC: Json = {
    "image": "registry.example/trainer:1",
    "instanceType": "trn1.32xlarge",
    "storage": {"claimName": "fsx-claim"},
}


def job(name: str = "j", **spec: Any) -> Json:
    """A TrainiumJob document: the minimal valid spec with `spec` keys replaced."""
    body = copy.deepcopy(MINIMAL_SPEC)
    body.update(copy.deepcopy(spec))
    return {
        "apiVersion": "trainium.dev/v1alpha1",
        "kind": "TrainiumJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": body,
    }


def job_without(field: str) -> Json:
    """The minimal job with one required spec field removed."""
    doc = job()
    del doc["spec"][field]
    return doc


def load_example(name: str) -> Json:
    """The single TrainiumJob document of examples/<name>."""
    with (EXAMPLES / name).open(encoding="utf-8") as f:
        doc: Json = yaml.safe_load(f)
    return doc


def example_spec(name: str) -> tuple[TrainiumJobSpec, Owner]:
    """Parsed spec of an example and an Owner with a uid, as the operator would see it."""
    doc = load_example(name)
    meta = doc["metadata"]
    owner = Owner(meta["name"], meta.get("namespace", "default"), f"uid-{meta['name']}")
    return parse(doc), owner


def spec_of(**spec: Any) -> TrainiumJobSpec:
    """Parsed spec of the minimal job with overrides."""
    return parse(job(**spec))
