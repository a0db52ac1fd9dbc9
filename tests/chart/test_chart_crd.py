"""The chart's CRD is crds/ plus only the release labels and the keep annotation: no drift."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from helmchart import CHART, CRD_SOURCE, by_kind, one, render

CHART_ANNOTATIONS = {"helm.sh/resource-policy"}
CHART_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
}


def strip_chart_additions(crd: dict) -> dict:  # type: ignore[type-arg]
    out = copy.deepcopy(crd)
    md = out["metadata"]
    for key, added in (("annotations", CHART_ANNOTATIONS), ("labels", CHART_LABELS)):
        kept = {k: v for k, v in (md.get(key) or {}).items() if k not in added}
        if kept:
            md[key] = kept
        else:
            md.pop(key, None)
    return out


def test_rendered_crd_equals_the_source(helm_bin: Path) -> None:
    rendered = one(render(), "CustomResourceDefinition")
    source = yaml.safe_load(CRD_SOURCE.read_text())
    assert strip_chart_additions(rendered) == source, (
        "charts/trainium-operator/templates/crd-trainiumjobs.yaml drifted from "
        f"{CRD_SOURCE.name}: run `make crds`"
    )


def test_generated_template_says_how_it_is_made() -> None:
    text = (CHART / "templates" / "crd-trainiumjobs.yaml").read_text()
    assert "make crds" in text.splitlines()[0]


def test_keep_policy_is_on_by_default_and_can_be_dropped(helm_bin: Path) -> None:
    crd = one(render(), "CustomResourceDefinition")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert set(crd["metadata"]["labels"]) >= CHART_LABELS
    crd = one(render("crds.keep=false"), "CustomResourceDefinition")
    assert "annotations" not in crd["metadata"]


def test_crds_can_be_left_out(helm_bin: Path) -> None:
    assert by_kind(render("crds.enabled=false"), "CustomResourceDefinition") == []
