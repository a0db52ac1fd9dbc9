"""Install as a user would: the chart (CRD included) is accepted by a real API server."""

from __future__ import annotations

from cluster import Cluster
from jobs import REPO, get_json
from kubelet import FakeKubelet


def test_fake_nodes_are_ready_and_schedulable(cluster: Cluster, kubelet: FakeKubelet) -> None:
    nodes = get_json(cluster, "nodes")["items"]
    assert {n["metadata"]["name"] for n in nodes} == set(kubelet.nodes)
    for node in nodes:
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert ready["Ready"] == "True"
        assert not node["spec"].get("taints")
    drivers = get_json(cluster, "csinodes")["items"]
    assert all(d["spec"]["drivers"][0]["name"] == "fsx.csi.aws.com" for d in drivers)


def test_chart_and_crd_are_accepted(cluster: Cluster, installed: str) -> None:
    crd = get_json(cluster, "crd", "trainiumjobs.trainium.dev")
    established = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert established["Established"] == "True"
    assert established.get("NonStructuralSchema", "False") == "False"
    sa = get_json(cluster, "serviceaccount", "-n", "trainium-system", "trainium-operator")
    assert sa["metadata"]["name"] == "trainium-operator"


def test_kubectl_explain_documents_the_spec(cluster: Cluster, installed: str) -> None:
    text = cluster.kubectl("explain", "trainiumjob.spec").stdout
    for field in ("image", "instanceType", "nodes", "storage", "runPolicy", "resources"):
        assert f"  {field}\t" in text or f"  {field} " in text, field
    deep = cluster.kubectl("explain", "trainiumjob.spec.runPolicy.maxRetries").stdout
    assert "MaxRetriesExceeded" in deep


def test_pods_logs_reach_the_fake_kubelet(cluster: Cluster, kubelet: FakeKubelet, ns: str) -> None:
    """The tier's own check: a pod bound to a fake node runs, succeeds and has logs."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "hello",
            "namespace": ns,
            "annotations": {"tier.trainium.dev/logs": "hello\nworld"},
        },
        "spec": {
            "nodeName": "trn1-2xl-0",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }
    cluster.apply(pod)
    cluster.kubectl("wait", "-n", ns, "--for=jsonpath={.status.phase}=Succeeded", "pod/hello",
                    "--timeout=30s")  # fmt: skip
    assert cluster.kubectl("logs", "-n", ns, "hello").stdout == "hello\nworld\n"
    assert cluster.kubectl("logs", "-n", ns, "hello", "--tail=1").stdout == "world\n"
    cluster.kubectl("delete", "-n", ns, "pod/hello", "--timeout=30s")


def test_readme_helm_install_line_works_on_the_tier(readme_install: list[str]) -> None:
    """The fixture ran README's `helm install` as written (deployed, then uninstalled)."""
    assert readme_install[:3] == ["helm", "install", "trainium-operator"]


def test_readme_kubectl_apply_crds_line_works(cluster: Cluster, installed: str) -> None:
    """README's path without Helm: `kubectl apply -f crds/` installs the CRDs."""
    assert "`kubectl apply -f crds/`" in (REPO / "README.md").read_text()
    proc = cluster.kubectl("apply", "-f", str(REPO / "crds"))
    assert "trainiumjobs.trainium.dev" in proc.stdout
    assert "kopf" not in proc.stdout  # the replicas elect through a Lease: no peering CRDs
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/trainiumjobs.trainium.dev", "--timeout=30s"
    )
