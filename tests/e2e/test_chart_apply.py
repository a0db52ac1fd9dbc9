"""`kubectl apply` of the rendered chart into the API emulator: every object is accepted and
stored as rendered (the emulator has no /openapi, so schema checks are kubernetes-validate's job:
tests/chart/test_chart_render.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import EmulatorServer, get, kubectl
from helmchart import helm_bin, render, render_text  # noqa: F401  (helm_bin is a fixture)

# kubectl resource names for each kind the chart renders (the emulator knows all of these).
RESOURCE = {
    "ServiceAccount": "serviceaccounts",
    "Service": "services",
    "Deployment": "deployments.v1.apps",
    "ClusterRole": "clusterroles.v1.rbac.authorization.k8s.io",
    "ClusterRoleBinding": "clusterrolebindings.v1.rbac.authorization.k8s.io",
    "Role": "roles.v1.rbac.authorization.k8s.io",
    "RoleBinding": "rolebindings.v1.rbac.authorization.k8s.io",
    "CustomResourceDefinition": "customresourcedefinitions.v1.apiextensions.k8s.io",
    "ConfigMap": "configmaps",
    "PodDisruptionBudget": "poddisruptionbudgets.v1.policy",
    "NetworkPolicy": "networkpolicies.v1.networking.k8s.io",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies.v1.admissionregistration.k8s.io",
    "ValidatingAdmissionPolicyBinding": (
        "validatingadmissionpolicybindings.v1.admissionregistration.k8s.io"
    ),
}


@pytest.mark.parametrize(
    "sets",
    [(), ("metrics.dashboard.enabled=true", "crds.keep=false")],
    ids=["defaults", "dashboard"],
)
def test_apply_default_chart(
    helm_bin: Path,  # noqa: F811
    crd: Path,
    ns: str,
    k8s: EmulatorServer,
    sets: tuple[str, ...],
) -> None:
    # ns ends in a per-test digest: cluster-scoped names (ClusterRoles) must not collide.
    release = f"r{len(sets)}-{ns[-6:]}"
    text = render_text(*sets, release=release, namespace=ns)
    proc = kubectl("apply", "--validate=false", "-f", "-", input=text)
    docs = render(*sets, release=release, namespace=ns)
    for doc in docs:
        md = doc["metadata"]
        assert f"{md['name']}" in proc.stdout, proc.stdout
        live = get(RESOURCE[doc["kind"]], md["name"], md.get("namespace"))
        assert live is not None, f"{doc['kind']} {md['name']} not stored"
        assert live["metadata"].get("labels", {}).items() >= md.get("labels", {}).items()
    deployment = get(RESOURCE["Deployment"], f"{release}-trainium-operator", ns)
    assert deployment is not None
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate"}  # peered replicas


def test_apply_namespaced_rbac(helm_bin: Path, crd: Path, ns: str) -> None:  # noqa: F811
    release = f"n-{ns[-6:]}"
    sets = (f"watchNamespaces={{{ns}}}", "crds.enabled=false")
    text = render_text(*sets, release=release, namespace=ns)
    kubectl("apply", "--validate=false", "-f", "-", input=text)
    role = get(RESOURCE["Role"], f"{release}-trainium-operator-application", ns)
    assert role is not None
    assert {r["resources"][0] for r in role["rules"]} >= {"trainiumjobs", "jobs", "configmaps"}
    binding = get(RESOURCE["RoleBinding"], f"{release}-trainium-operator-application", ns)
    assert binding is not None and binding["roleRef"]["kind"] == "Role"
    deployment = get(RESOURCE["Deployment"], f"{release}-trainium-operator", ns)
    assert deployment is not None
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert f"--namespace={ns}" in container["command"]
