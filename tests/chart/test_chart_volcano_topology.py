"""volcano.networkTopology: the ConfigMaps Volcano reads for spec.scheduling.placement.

Off by default (Volcano's own chart owns both ConfigMaps); on, the controller's label discovery
lists exactly the labels the operator's tier mapping assumes (manifests/placement.py), and the
scheduler's conf enables the network-topology-aware plugin. tests/cluster/test_tier_placement.py
applies the same rendering to a real vc-controller-manager and vc-scheduler.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helmchart import CHART, by_kind, helm, render
from trainium_operator.manifests import placement

Obj = dict[str, Any]
ON = "volcano.networkTopology.enabled=true"


def volcano_configmaps(*sets: str) -> dict[str, Obj]:
    """{name: ConfigMap} of the ConfigMaps rendered outside the release namespace."""
    docs = by_kind(render(*sets), "ConfigMap")
    return {d["metadata"]["name"]: d for d in docs if d["metadata"]["namespace"] != "ops"}


def controller_conf(*sets: str) -> Obj:
    cm = volcano_configmaps(ON, *sets)["volcano-controller-configmap"]
    conf: Obj = yaml.safe_load(cm["data"]["volcano-controller.conf"])
    return conf


def test_off_by_default(helm_bin: Path) -> None:
    assert volcano_configmaps() == {}


def test_discovery_lists_the_labels_the_tier_mapping_assumes(helm_bin: Path) -> None:
    [source] = controller_conf()["networkTopologyDiscovery"]
    assert (source["source"], source["enabled"]) == ("label", True)
    [labels] = source["config"]["networkTopologyTypes"].values()
    assert tuple(item["nodeLabel"] for item in labels) == placement.DISCOVERY_LABELS


def test_the_scheduler_conf_enables_the_plugin_and_keeps_volcanos_defaults(helm_bin: Path) -> None:
    cm = volcano_configmaps(ON)["volcano-scheduler-configmap"]
    conf = yaml.safe_load(cm["data"]["volcano-scheduler.conf"])
    assert [a.strip() for a in conf["actions"].split(",")] == ["enqueue", "allocate", "backfill"]
    names = [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]
    assert "network-topology-aware" in names
    for needed in ("gang", "predicates", "proportion", "binpack"):
        assert needed in names, needed


def test_release_and_namespace_follow_volcanos_install(helm_bin: Path) -> None:
    found = volcano_configmaps(
        ON, "volcano.networkTopology.release=vc", "volcano.networkTopology.namespace=batch"
    )
    assert set(found) == {"vc-controller-configmap", "vc-scheduler-configmap"}
    assert {cm["metadata"]["namespace"] for cm in found.values()} == {"batch"}


def test_rendered_on_it_lints_and_validates(helm_bin: Path) -> None:
    proc = helm("lint", "--strict", str(CHART), "--set", ON, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = yaml.safe_dump_all(list(volcano_configmaps(ON).values()))
    validate = Path(sys.executable).parent / "kubernetes-validate"
    proc = subprocess.run(
        [str(validate), "--strict", "-k", "1.33.0", "-"],
        input=text, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("volcano.networkTopology.enabled=yes", "at '/volcano/networkTopology/enabled'"),
        ("volcano.networkTopology.release=Volcano", "at '/volcano/networkTopology/release'"),
        ("volcano.networkTopology.discovery=true", "additional properties 'discovery'"),
    ],
)
def test_bad_values_fail_the_install(helm_bin: Path, value: str, error: str) -> None:
    proc = helm("template", "t", str(CHART), "--set", value, check=False)
    assert proc.returncode != 0 and error in proc.stderr, proc.stderr
