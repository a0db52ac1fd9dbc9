"""The API emulator and e2e harness, tested over real HTTP with kubectl, the python client, kopf."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from harness import (
    KUBECTL,
    OPERATORS,
    VCJOB,
    EmulatorServer,
    OperatorProcess,
    apply,
    get,
    kubectl,
    make_emulator,
    simulate_vcjob_phase,
    wait_for,
    write_kubeconfig,
)
from k8s_semantics import match_selector

Obj = dict[str, Any]
TEST_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.emulator.test"},
    "spec": {
        "group": "emulator.test",
        "scope": "Namespaced",
        "names": {
            "kind": "Widget",
            "plural": "widgets",
            "singular": "widget",
            "shortNames": ["wdg"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def vcjob(ns: str, name: str, **metadata: Any) -> Obj:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, **metadata},
        "spec": {"queue": "default", "minAvailable": 1},
    }


def configmap(ns: str, name: str, **metadata: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, **metadata},
    }


@pytest.fixture(scope="module")
def client(k8s: EmulatorServer) -> kubernetes.client.ApiClient:
    """The python kubernetes client, configured from $KUBECONFIG like the operator would be."""
    return kubernetes.config.new_client_from_config()


def raw(
    k8s: EmulatorServer, path: str, method: str = "GET", body: Any = None, ctype: str = ""
) -> tuple[int, Any]:
    """One HTTP request to the emulator; returns (status, parsed JSON)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(k8s.url + path, data=data, method=method)
    req.add_header("Content-Type", ctype or "application/json")
    try:
        with urllib.request.urlopen(req, timeout=5) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_list_has_kind_api_version_and_resource_version(k8s: EmulatorServer, ns: str) -> None:
    apply(configmap(ns, "c1"))
    code, body = raw(k8s, f"/api/v1/namespaces/{ns}/configmaps")
    assert code == 200
    assert (body["kind"], body["apiVersion"]) == ("ConfigMapList", "v1")
    assert body["metadata"]["resourceVersion"].isdigit()
    assert [i["metadata"]["name"] for i in body["items"]] == ["c1"]


def test_core_group_version_and_kubectl_maps_core_kinds(k8s: EmulatorServer, ns: str) -> None:
    assert json.loads(kubectl("get", "--raw", "/api/v1").stdout)["groupVersion"] == "v1"
    pvc = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "p1", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }  # fmt: skip
    apply(pvc)
    assert kubectl("get", "pvc", "-n", ns, "-o", "name").stdout.split() == [
        "persistentvolumeclaim/p1"
    ]
    assert "could also match" not in kubectl("get", "pvc", "-n", ns).stderr
    assert ns in kubectl("get", "namespaces", "-o", "name").stdout


def test_metadata_uid_resource_version_and_generation(k8s: EmulatorServer, ns: str) -> None:
    apply(vcjob(ns, "j1"))
    first = get(VCJOB, "j1", ns)
    assert first is not None
    md = first["metadata"]
    assert md["uid"] and md["creationTimestamp"] and md["generation"] == 1
    assert md["namespace"] == ns
    kubectl("label", VCJOB, "j1", "-n", ns, "x=1")
    simulate_vcjob_phase(ns, "j1", "Running")
    after_meta_and_status = get(VCJOB, "j1", ns)
    assert after_meta_and_status is not None
    assert after_meta_and_status["metadata"]["generation"] == 1  # metadata, status: no bump
    kubectl("patch", VCJOB, "j1", "-n", ns, "--type=merge", "-p", '{"spec":{"minAvailable":2}}')
    changed = get(VCJOB, "j1", ns)
    assert changed is not None
    assert changed["metadata"]["generation"] == 2
    assert changed["metadata"]["uid"] == md["uid"]
    rvs = [int(o["metadata"]["resourceVersion"]) for o in (first, after_meta_and_status, changed)]
    assert rvs == sorted(set(rvs))
    # A no-op patch changes nothing, not even the resourceVersion.
    kubectl("patch", VCJOB, "j1", "-n", ns, "--type=merge", "-p", '{"spec":{"minAvailable":2}}')
    assert get(VCJOB, "j1", ns) == changed


def test_create_answers_201_and_honours_generate_name(
    k8s: EmulatorServer, ns: str, client: kubernetes.client.ApiClient
) -> None:
    api = kubernetes.client.CustomObjectsApi(client)
    body = vcjob(ns, "")
    body["metadata"] = {"generateName": "gen-"}
    created = api.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", ns, "jobs", body)
    assert created["metadata"]["name"].startswith("gen-")  # None on a 200
    assert created["metadata"]["namespace"] == ns  # from the URL
    code, status = raw(
        k8s, f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs", "POST", created
    )
    assert (code, status["reason"]) == (409, "AlreadyExists")
    code, status = raw(k8s, f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/nope")
    assert (code, status["reason"]) == (404, "NotFound")


def test_stale_resource_version_conflicts_and_json_patch_test_is_422(
    k8s: EmulatorServer, ns: str, client: kubernetes.client.ApiClient
) -> None:
    core = kubernetes.client.CoreV1Api(client)
    cm = core.create_namespaced_config_map(ns, configmap(ns, "c1"))
    core.patch_namespaced_config_map("c1", ns, {"data": {"a": "1"}})
    cm.data = {"b": "2"}
    with pytest.raises(kubernetes.client.ApiException) as e:
        core.replace_namespaced_config_map("c1", ns, cm)  # PUT with a stale resourceVersion
    assert (e.value.status, json.loads(e.value.body)["reason"]) == (409, "Conflict")
    path = f"/api/v1/namespaces/{ns}/configmaps/c1"
    test_op = [{"op": "test", "path": "/metadata/resourceVersion", "value": "0"}]
    code, status = raw(k8s, path, "PATCH", test_op, "application/json-patch+json")
    assert (code, status["reason"]) == (422, "Invalid")
    fresh = core.read_namespaced_config_map("c1", ns)
    fresh.data = {"b": "2"}
    assert core.replace_namespaced_config_map("c1", ns, fresh).data == {"b": "2"}


def test_status_subresource_is_isolated(k8s: EmulatorServer, ns: str) -> None:
    apply(vcjob(ns, "j1"))
    simulate_vcjob_phase(ns, "j1", "Pending")
    kubectl(
        "patch", VCJOB, "j1", "-n", ns, "--type=merge",
        "-p", '{"spec":{"minAvailable":3},"status":{"state":{"phase":"Hacked"}}}',
    )  # fmt: skip
    kubectl(
        "patch", VCJOB, "j1", "-n", ns, "--type=merge", "--subresource=status",
        "-p", '{"spec":{"minAvailable":9},"status":{"state":{"phase":"Running"}}}',
    )  # fmt: skip
    job = get(VCJOB, "j1", ns)
    assert job is not None
    assert job["spec"]["minAvailable"] == 3
    assert job["status"]["state"]["phase"] == "Running"


def test_a_status_patch_with_a_stale_resource_version_conflicts(
    k8s: EmulatorServer, ns: str
) -> None:
    """As the API server: the /status subresource checks metadata.resourceVersion too (the
    operator's status writes rely on it; the emulator once let a stale pass write twice)."""
    apply(vcjob(ns, "j2"))
    stale = get(VCJOB, "j2", ns)["metadata"]["resourceVersion"]
    simulate_vcjob_phase(ns, "j2", "Pending")
    path = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/j2/status"
    body = {"metadata": {"resourceVersion": stale}, "status": {"state": {"phase": "Running"}}}
    code, status = raw(k8s, path, "PATCH", body, "application/merge-patch+json")
    assert (code, status["reason"]) == (409, "Conflict")
    assert get(VCJOB, "j2", ns)["status"]["state"]["phase"] == "Pending"
    fresh = get(VCJOB, "j2", ns)["metadata"]["resourceVersion"]
    body["metadata"]["resourceVersion"] = fresh
    code, _ = raw(k8s, path, "PATCH", body, "application/merge-patch+json")
    assert code == 200 and get(VCJOB, "j2", ns)["status"]["state"]["phase"] == "Running"


def test_a_status_apply_merges_conditions_and_drops_what_its_manager_no_longer_applies(
    k8s: EmulatorServer, ns: str
) -> None:
    """Server-side apply as far as Kueue's Workloads need it: conditions are a map by type, and
    a field the same manager applied before and omits now goes (how Kueue clears an
    admission); another manager's apply never removes it."""
    apply(vcjob(ns, "j3"))
    path = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/j3/status"
    ssa = "application/apply-patch+yaml"

    def applied(manager: str, status: Obj) -> Obj:
        body = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "status": status}
        code, out = raw(k8s, f"{path}?fieldManager={manager}&force=true", "PATCH", body, ssa)
        assert code == 200, out
        return out["status"]  # type: ignore[no-any-return]

    a, b = {"type": "A", "status": "True"}, {"type": "B", "status": "True"}
    applied("one", {"admission": {"q": "cq"}, "conditions": [a]})
    got = applied("two", {"conditions": [b]})  # merged by type, "one"'s admission kept
    assert got["conditions"] == [a, b] and got["admission"] == {"q": "cq"}
    got = applied("one", {"conditions": [{**a, "status": "False"}]})
    assert "admission" not in got and got["conditions"][0]["status"] == "False"


def test_label_selectors(k8s: EmulatorServer, ns: str, client: kubernetes.client.ApiClient) -> None:
    for name, labels in {"a": {"app": "x", "tier": "1"}, "b": {"app": "y"}, "c": {}}.items():
        apply(configmap(ns, name, labels=labels))

    def names(selector: str) -> list[str]:
        out = kubectl("get", "configmaps", "-n", ns, "-l", selector, "-o", "name").stdout
        return [n.split("/")[1] for n in out.split()]

    assert names("app=x") == ["a"]
    assert names("app!=x") == ["b", "c"]
    assert names("app in (x,y),tier") == ["a"]
    assert names("app notin (x)") == ["b", "c"]
    assert names("!app") == ["c"]
    listed = kubernetes.client.CoreV1Api(client).list_namespaced_config_map(
        ns, label_selector="app"
    )
    assert [i.metadata.name for i in listed.items] == ["a", "b"]
    assert not match_selector("app==x,tier=2", {"app": "x", "tier": "1"})


def test_crd_becomes_discoverable_on_apply(k8s: EmulatorServer, ns: str) -> None:
    apply(TEST_CRD)
    kubectl("wait", "--for=condition=Established", "crd/widgets.emulator.test", "--timeout=5s")
    apply(
        {
            "apiVersion": "emulator.test/v1",
            "kind": "Widget",
            "metadata": {"name": "w1", "namespace": ns},
        }
    )
    assert kubectl("get", "wdg", "-n", ns, "-o", "name").stdout.strip() == "widget.emulator.test/w1"
    apply(
        {**TEST_CRD, "metadata": {"name": "widgets.emulator.test", "labels": {"v": "2"}}}
    )  # a PATCH


def test_garbage_collection_follows_owner_references(k8s: EmulatorServer, ns: str) -> None:
    apply(vcjob(ns, "owner"))
    apply(configmap(ns, "other-owner"))
    owner, other = get(VCJOB, "owner", ns), get("configmap", "other-owner", ns)
    assert owner is not None and other is not None

    def ref(o: Obj) -> Obj:
        kind, uid = o["kind"], o["metadata"]["uid"]
        return {
            "apiVersion": o["apiVersion"],
            "kind": kind,
            "name": o["metadata"]["name"],
            "uid": uid,
        }

    apply(configmap(ns, "child", ownerReferences=[ref(owner)]))
    apply(vcjob(ns, "child-job", ownerReferences=[ref(owner)]))
    apply(configmap(ns, "grandchild", ownerReferences=[ref(get(VCJOB, "child-job", ns) or {})]))
    apply(configmap(ns, "shared", ownerReferences=[ref(owner), ref(other)]))
    pv = {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"{ns}-pv", "ownerReferences": [ref(owner)]},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"]},
    }  # fmt: skip
    apply(pv)
    kubectl("delete", VCJOB, "owner", "-n", ns, "--wait=false")
    wait_for(lambda: get("configmap", "child", ns) is None, what="child collected")
    assert get(VCJOB, "child-job", ns) is None
    assert get("configmap", "grandchild", ns) is None
    assert get("configmap", "shared", ns) is not None  # another owner is alive
    assert get("pv", f"{ns}-pv") is not None  # cluster-scoped, namespaced owner: not collected


def test_delete_without_wait_then_gone_and_finalizers_hold(k8s: EmulatorServer, ns: str) -> None:
    apply(configmap(ns, "plain"))
    kubectl("delete", "configmap", "plain", "-n", ns, "--wait=false")
    wait_for(lambda: get("configmap", "plain", ns) is None, what="plain deleted")
    apply(configmap(ns, "held", finalizers=["emulator.test/hold"]))
    kubectl("delete", "configmap", "held", "-n", ns, "--wait=false")
    held = get("configmap", "held", ns)
    assert held is not None and held["metadata"]["deletionTimestamp"]
    kubectl(
        "patch",
        "configmap",
        "held",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
    )
    assert get("configmap", "held", ns) is None


def test_kubectl_wait_for_jsonpath(k8s: EmulatorServer, ns: str, api_requests: list[Any]) -> None:
    apply(vcjob(ns, "j1"))
    cache = Path(os.environ["KUBECONFIG"]).parent / "kube-cache"
    cmd = [KUBECTL, f"--cache-dir={cache}", "wait", f"{VCJOB}/j1", "-n", ns, "--timeout=10s"]
    cmd.append("--for=jsonpath={.status.state.phase}=Running")
    plain = {k: v for k, v in os.environ.items() if k != "KUBE_FEATURE_WatchListClient"}
    envs = [
        {**plain, "KUBE_FEATURE_WatchListClient": "false"},  # LIST then WATCH
        plain,  # kubectl >= 1.35 WatchList: waits for the initial-events-end bookmark
    ]
    waiters = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for env in envs]
    watches = lambda: sum(r.verb == "watch" and r.namespace == ns for r in api_requests)  # noqa: E731
    wait_for(lambda: watches() >= 2, what="both kubectl waits watching")  # else no watch is tested
    simulate_vcjob_phase(ns, "j1", "Running")
    for waiter in waiters:
        out, _ = waiter.communicate(timeout=15)
        assert waiter.returncode == 0
        assert "condition met" in out


def test_watch_resumes_from_resource_version(k8s: EmulatorServer, ns: str) -> None:
    apply(configmap(ns, "before"))
    _, listing = raw(k8s, f"/api/v1/namespaces/{ns}/configmaps")
    apply(configmap(ns, "between"))  # after the LIST, before the WATCH: must not be lost
    rv = listing["metadata"]["resourceVersion"]
    query = f"watch=true&resourceVersion={rv}&timeoutSeconds=1"
    url = f"{k8s.url}/api/v1/namespaces/{ns}/configmaps?{query}"
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("application/json")
        events = [json.loads(line) for line in response.read().splitlines() if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "between")]


def test_requests_are_recorded_with_user_agents(
    k8s: EmulatorServer, ns: str, client: kubernetes.client.ApiClient, api_requests: list[Any]
) -> None:
    start = len(api_requests)
    kubernetes.client.CoreV1Api(client).list_namespaced_config_map(ns)
    kubectl("get", "configmaps", "-n", ns)
    seen = {(r.client, r.verb, r.api_group, r.resource, r.namespace) for r in api_requests[start:]}
    assert ("python-client", "list", "", "configmaps", ns) in seen
    assert ("kubectl", "list", "", "configmaps", ns) in seen


HANDLERS = textwrap.dedent(
    """
    import kopf, kubernetes

    @kopf.on.startup()
    def configure(settings, **_):
        kubernetes.config.load_kube_config()
        settings.persistence.finalizer = "emulator.test/kopf"

    @kopf.on.create("v1", "configmaps", labels={"emulator.test/watched": "yes"})
    def create_child(body, namespace, name, **_):
        child = {"metadata": {"name": f"{name}-child", "labels": {"emulator.test/child": "yes"}}}
        kopf.append_owner_reference(child, owner=body)  # adopt() would copy the labels
        kubernetes.client.CoreV1Api().create_namespaced_config_map(namespace, child)
        return {"child": child["metadata"]["name"]}
    """
)


@pytest.fixture
def own_k8s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatorServer]:
    """A private emulator (and $KUBECONFIG) for a throwaway operator.

    Its requests must not land in the session's record, which the RBAC coverage test reads as
    the product operator's.
    """
    server = EmulatorServer(make_emulator())
    server.start()
    kubeconfig = tmp_path / "own-kubeconfig"
    write_kubeconfig(kubeconfig, server.url)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    yield server
    server.stop()


def test_kopf_operator_start_kill_restart(
    own_k8s: EmulatorServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ns = "kopf-trial"
    apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    api_requests = own_k8s.emulator.api_requests
    handlers = tmp_path / "handlers.py"
    handlers.write_text(HANDLERS)
    command = [
        sys.executable,
        "-m",
        "kopf",
        "run",
        "--standalone",
        "--all-namespaces",
        str(handlers),
    ]
    proc = OperatorProcess(command, tmp_path / "kopf.log")
    request.node.stash.setdefault(OPERATORS, []).append(proc)
    proc.start()
    try:
        watched = {"labels": {"emulator.test/watched": "yes"}}
        apply(configmap(ns, "one", **watched))
        wait_for(lambda: get("configmap", "one-child", ns), what="child of one")
        assert proc.kill() == -9
        apply(configmap(ns, "two", **watched))  # created while the operator is down
        proc.start()
        two = wait_for(lambda: get("configmap", "two-child", ns), what="child of two after restart")
        assert two["metadata"]["ownerReferences"][0]["name"] == "two"
        creates = [r for r in api_requests if r.verb == "create" and r.namespace == ns]
        assert [r.code for r in creates if r.client == "python-client"] == [201, 201]  # no re-runs
        assert any(r.client == "kopf" and r.verb == "watch" for r in api_requests)
        kubectl("delete", "configmap", "one", "-n", ns, "--wait=false")
        wait_for(lambda: get("configmap", "one-child", ns) is None, what="child collected")
    finally:
        proc.stop()
