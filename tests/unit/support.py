"""Helpers shared by the unit tests: repository paths and TrainiumJob factories."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from trainium_operator.api.spec import TrainiumJobSpec, parse
from trainium_operator.manifests.ownership import Owner

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


def node_pods(vcjob: Json) -> list[tuple[int, Json]]:
    """(node, pod) of every node of the gang, each as it runs (its own values resolved).

    Every node is a replica of one Volcano task; Volcano writes the pod's index in its
    annotation, the kubelet expands `$(TRAINIUM_NODE_INDEX)` in the env values after that
    variable and in the argv, and the launcher gives node 0 the store host's rendezvous flags
    (rendezvous.py; `python3 -c <its source>` runs torch.distributed.run). Only the variable
    the operator defines is expanded here: other `$(...)` text is the kubelet's business.
    """
    from trainium_operator.api import naming
    from trainium_operator.manifests import appdef
    from trainium_trainer import contract, rendezvous

    (task,) = vcjob["spec"]["tasks"]
    ref = f"$({contract.ENV_NODE_INDEX})"
    out = []
    for node in range(int(task["replicas"])):
        pod = copy.deepcopy(task["template"])
        pod["metadata"]["name"] = naming.pod_name(vcjob["metadata"]["name"], node)
        pod["metadata"].setdefault("annotations", {})[naming.TASK_INDEX_ANNOTATION] = str(node)
        for container in pod["spec"]["containers"]:
            env: list[Json] = []
            for var in container.get("env", []):
                if var["name"] == contract.ENV_NODE_INDEX:
                    path = var["valueFrom"]["fieldRef"]["fieldPath"]
                    assert path == f"metadata.annotations['{naming.TASK_INDEX_ANNOTATION}']"
                    var = {"name": var["name"], "value": str(node)}
                elif "value" in var:
                    var = {**var, "value": var["value"].replace(ref, str(node))}
                env.append(var)
            container["env"] = env
            argv = [a.replace(ref, str(node)) for a in container.get("command", [])]
            for launcher in (["-m", contract.TORCHRUN_MODULE], ["-c", appdef.RENDEZVOUS_PROGRAM]):
                at = next((i for i in range(len(argv)) if argv[i : i + 2] == launcher), None)
                if at is not None:
                    rest = rendezvous.node_argv(
                        argv[at + 2 :], {e["name"]: e.get("value", "") for e in env}
                    )
                    if launcher[0] == "-c":
                        launcher = ["-m", "torch.distributed.run"]
                    argv = [*argv[:at], *launcher, *rest]
                    break
            container["command"] = argv
        out.append((node, pod))
    return out
