"""The running kubelet's pure parts: $(VAR) expansion, fieldRefs, the gang's hosts, the mounts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import podspec


def pod(name: str = "g-node-0", uid: str = "u0", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid,
                     "annotations": {"volcano.sh/task-index": "1"}, "labels": {"a": "b"}},
        "spec": {"nodeName": "trn1-32xl-0", "hostname": name, "subdomain": "g", **spec},
        "status": {"podIP": "10.1.0.7"},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("$(A)", "1"),
        ("x-$(A)-$(B)", "x-1-two"),
        ("$$(A)", "$(A)"),  # an escaped reference stays literal
        ("$(MISSING)", "$(MISSING)"),  # unknown: kept as written
        ("$(A", "$(A"),  # unclosed: kept
        ("$A", "$A"),  # shell syntax is not the kubelet's
        ("a$", "a$"),
        ("$$$$", "$$"),
    ],
)
def test_expand_as_the_kubelet_does(text: str, want: str) -> None:
    assert podspec.expand(text, {"A": "1", "B": "two"}) == want


def test_env_sees_earlier_values_and_field_refs_and_args_see_all() -> None:
    container = {
        "name": "c",
        "env": [
            {"name": "LATER_USED", "value": "$(IDX)"},  # IDX is defined after: not expanded
            {"name": "IDX", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.annotations['volcano.sh/task-index']"}}},
            {"name": "RANK_ARG", "value": "--node-rank=$(IDX)"},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "LBL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['a']"}}},
        ],
        "command": ["python3", "-m", "x"],
        "args": ["$(RANK_ARG)", "$(NODE)", "$$(IDX)"],
    }  # fmt: skip
    env = podspec.container_env(pod(), container, {"PATH": "/v/bin"}, {})
    assert env["LATER_USED"] == "$(IDX)"
    assert env["IDX"] == "1" and env["RANK_ARG"] == "--node-rank=1"
    assert (env["IP"], env["NODE"], env["LBL"]) == ("10.1.0.7", "trn1-32xl-0", "b")
    argv = podspec.container_argv(container, env)
    assert argv == ["python3", "-m", "x", "--node-rank=1", "trn1-32xl-0", "$(IDX)"]


def test_unknown_field_ref_is_refused() -> None:
    with pytest.raises(ValueError, match=r"status\.nope"):
        podspec.field_ref(pod(), "status.nope")


def test_hosts_name_the_gang_as_the_headless_service_does() -> None:
    me, peer = pod(), pod("g-node-1", "u1")
    other_gang = pod("h-node-0", "u2", subdomain="h")
    text = podspec.hosts_file(me, "10.1.0.7", [(me, "10.1.0.7"), (peer, "10.1.0.8"),
                                               (other_gang, "10.1.0.9")])  # fmt: skip
    lines = text.splitlines()
    assert "127.0.0.1\tlocalhost" in lines
    assert "10.1.0.7\tg-node-0.g.ns.svc.cluster.local\tg-node-0.g\tg-node-0" in lines
    assert "10.1.0.8\tg-node-1.g.ns.svc.cluster.local\tg-node-1.g\tg-node-1" in lines
    assert "10.1.0.9" not in text  # another gang's pods are not this pod's hostnames


def test_volumes_map_to_host_dirs_one_per_pv(tmp_path: Path) -> None:
    pv_dir, pod_dir = tmp_path / "pv", tmp_path / "pod"
    claims = {"fsx-claim": "ns-fsx"}
    volumes = {
        "fsx": {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-claim"}},
        "shm": {"name": "shm", "emptyDir": {"medium": "Memory"}},
        "scratch": {"name": "scratch", "emptyDir": {}},
        "svc": {"name": "svc", "configMap": {"name": "g-svc"}},
    }
    sources = {n: podspec.volume_source(v, pod_dir, pv_dir, claims) for n, v in volumes.items()}
    assert sources == {"fsx": str(pv_dir / "ns-fsx"), "shm": "tmpfs",
                       "scratch": str(pod_dir / "volumes" / "scratch"),
                       "svc": str(pod_dir / "volumes" / "svc")}  # fmt: skip
    container = {"name": "c", "volumeMounts": [
        {"name": "scratch", "mountPath": "/data/a/b"}, {"name": "fsx", "mountPath": "/data"},
        {"name": "svc", "mountPath": "/etc/volcano", "readOnly": True}]}  # fmt: skip
    binds = podspec.mounts(container, sources)
    assert [m.target for m in binds] == ["/data", "/etc/volcano", "/data/a/b"]
    assert [m.read_only for m in binds] == [False, True, False]
    with pytest.raises(ValueError, match="not bound"):
        podspec.volume_source(volumes["fsx"], pod_dir, pv_dir, {})


def test_device_plugins_put_the_limits_devices_in_dev() -> None:
    limits = {"aws.amazon.com/neuron": "2", "vpc.amazonaws.com/efa": "1", "cpu": "4"}
    container = {"name": "c", "resources": {"limits": limits}}
    assert podspec.devices(container) == ["infiniband/uverbs0", "neuron0", "neuron1"]
    assert podspec.devices(container, missing=1) == ["neuron0"]  # a node one device short
    assert podspec.devices({"name": "c"}) == []
