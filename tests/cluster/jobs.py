"""TrainiumJobs and storage for tier scenarios, written the way a user would write them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from cluster import Cluster, wait_until

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TJ = "trainiumjobs.trainium.dev"
VCJOB = "jobs.v1alpha1.batch.volcano.sh"
FSX_ID = "fs-0123456789abcdef0"


def example(name: str, namespace: str) -> Obj:
    """examples/<name>.yaml, moved to namespace."""
    body: Obj = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    body["metadata"]["namespace"] = namespace
    return body


def small_job(name: str, namespace: str, claim: str = "fsx-claim", **spec: Any) -> Obj:
    """A one-node trn1.32xlarge job on an existing claim, precompile off unless asked."""
    body: Obj = {
        "apiVersion": "trainium.dev/v1alpha1",
        "kind": "TrainiumJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": "registry.example/trainer:1",
            "instanceType": "trn1.32xlarge",
            "nodes": 1,
            "module": "trainium_trainer",
            "args": ["bert-pretrain", "--max-steps", "10"],
            "storage": {"claimName": claim},
            "precompile": {"policy": "Never"},
            "scheduling": {"queue": "test"},
        },
    }
    body["spec"].update(copy.deepcopy(spec))
    return body


def fsx_claim(cluster: Cluster, namespace: str, name: str = "fsx-claim") -> None:
    """A static FSx PV and a ReadWriteMany claim on it, bound by the real PV binder."""
    pv_name = f"{namespace}-{name}"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name},
            "spec": {
                "capacity": {"storage": "1200Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": namespace, "name": name},
                "csi": {
                    "driver": "fsx.csi.aws.com",
                    "volumeHandle": FSX_ID,
                    "volumeAttributes": {
                        "dnsname": f"{FSX_ID}.fsx.us-west-2.amazonaws.com",
                        "mountname": "abcdefgh",
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": pv_name,
                "resources": {"requests": {"storage": "1200Gi"}},
            },
        },
    )
    wait_until(lambda: phase(cluster, "pvc", name, namespace) == "Bound", 60, f"claim {name} Bound")


def create(cluster: Cluster, body: Obj) -> None:
    """`kubectl create -f -` as a user does."""
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(body))


def get(cluster: Cluster, kind: str, name: str, namespace: str) -> Obj | None:
    proc = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def phase(cluster: Cluster, kind: str, name: str, namespace: str) -> str | None:
    obj = get(cluster, kind, name, namespace) or {}
    return (obj.get("status") or {}).get("phase")


def condition(obj: Obj | None, kind: str) -> Obj:
    """The condition of `kind` in obj.status.conditions ({} when absent)."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


def wait_condition(
    cluster: Cluster, name: str, namespace: str, kind: str, timeout: int = 120
) -> Obj:
    """`kubectl wait --for=condition=KIND` on a TrainiumJob; returns the job afterwards."""
    proc = cluster.kubectl(
        "wait", "-n", namespace, f"--for=condition={kind}", f"{TJ}/{name}",
        f"--timeout={timeout}s", check=False, timeout=timeout + 30,
    )  # fmt: skip
    job = get(cluster, TJ, name, namespace)
    if proc.returncode != 0:
        status = json.dumps((job or {}).get("status"), indent=1)[:3000]
        raise AssertionError(f"{name} never {kind}: {proc.stderr.strip()}\nstatus: {status}")
    assert job is not None
    return job


def children(cluster: Cluster, kind: str, namespace: str, job: str) -> list[Obj]:
    """Objects of kind in namespace labelled as job's children."""
    proc = cluster.kubectl(
        "get", kind, "-n", namespace, "-l", f"trainium.dev/job-name={job}", "-o", "json"
    )
    return list(json.loads(proc.stdout)["items"])


def events(cluster: Cluster, namespace: str, name: str) -> list[Obj]:
    proc = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}",
        "-o", "json",
    )  # fmt: skip
    return list(json.loads(proc.stdout)["items"])


def get_json(cluster: Cluster, *args: str) -> Obj:
    """`kubectl get ... -o json` as the admin, parsed."""
    result: Obj = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return result
