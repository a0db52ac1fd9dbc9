"""Pure builders of every manifest the operator creates: PV/PVC, Volcano jobs, cache records.

TorchX's Kubernetes scheduler (dry run, no API server) turns our AppDef into the Volcano Job;
we overlay only what TorchX cannot express: deterministic names, gang size, labels, owner,
user resources, tolerations, node selectors and network placement.

The one reshape: TorchX writes one Volcano task per replica (one full pod template per node:
3.65 KiB a node, past etcd's 1.5 MiB request limit at ~408 nodes), because its macros may make
replicas differ. Ours differ only by the node's index, so the overlay keeps TorchX's template of
replica 0 as one task of `nodes` replicas, and each pod gets its index from Volcano at run time
(`one_task`, `_one_task`): every pod runs what TorchX would have written for its replica.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import warnings
from typing import Any

from kubernetes.client import ApiClient
from torchx.schedulers.kubernetes_scheduler import PLACEHOLDER_FIELD_PATH, KubernetesScheduler
from torchx.specs import AppDef, runopts
from torchx.specs.overlays import set_overlay

from trainium_operator.api import naming
from trainium_operator.api.instances import INSTANCE_TYPE_LABEL
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.domain import nodes
from trainium_operator.domain.cachekey import LABEL_CACHE_ENTRY, cache_key, cache_name, identity
from trainium_operator.manifests import appdef, dra, gangsize, placement, spares
from trainium_operator.manifests.appdef import StageContext
from trainium_operator.manifests.ownership import (
    LABEL_CACHE_KEY,
    LABEL_CACHE_NAME,
    Owner,
    labels,
    owner_annotations,
)
from trainium_trainer import contract

Json = dict[str, Any]

FSX_DRIVER = "fsx.csi.aws.com"


def claim_for(spec: TrainiumJobSpec, owner: Owner) -> str:
    """The PVC every pod mounts: the user's, or the one we create for an FSx file system."""
    return spec.storage.claimName or naming.claim_name(owner.name)


def build_fsx_volume(spec: TrainiumJobSpec, owner: Owner, dns_name: str, mount_name: str) -> Json:
    """Static PV for the FSx file system; flock because the Neuron cache uses file locks."""
    fsx = spec.storage.fsx
    assert fsx is not None
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": naming.volume_name(owner.namespace, owner.name),
            "labels": labels(owner),
            "annotations": owner_annotations(owner),
        },
        "spec": {
            "capacity": {"storage": fsx.capacity},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": ["flock"],
            "claimRef": {"namespace": owner.namespace, "name": naming.claim_name(owner.name)},
            "csi": {
                "driver": FSX_DRIVER,
                "volumeHandle": fsx.fileSystemId,
                "volumeAttributes": {"dnsname": dns_name, "mountname": mount_name},
            },
        },
    }


def build_fsx_claim(spec: TrainiumJobSpec, owner: Owner) -> Json:
    """PVC bound to the static PV by name, owned by the job."""
    fsx = spec.storage.fsx
    assert fsx is not None
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": naming.claim_name(owner.name),
            "namespace": owner.namespace,
            "labels": labels(owner),
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": naming.volume_name(owner.namespace, owner.name),
            "resources": {"requests": {"storage": fsx.capacity}},
        },
    }


def stage_context(spec: TrainiumJobSpec, owner: Owner, stage: str) -> StageContext:
    """The cluster StageContext of one stage: pod 0's DNS name, the claim at mountPath."""
    vcjob = naming.stage_job(owner.name, stage, spec.precompile_size, owner.train_gang)
    return StageContext(
        job_name=owner.name,
        stage=stage,
        cache_name=cache_name(spec, cache_key(spec)),
        run_id=vcjob,
        rank0_host=naming.rank0_host(vcjob),
        mount_root=spec.storage.mountPath,
        claim=claim_for(spec, owner),
        compile_launcher=appdef.compile_launcher(spec),
        # The kubelet's default terminationMessagePath (the pods set no other).
        checkpoint_report=contract.TERMINATION_LOG,
        metrics_port=contract.METRICS_PORT,
        one_task=True,
    )


def pod_overlay(
    spec: TrainiumJobSpec, owner: Owner, stage: str, excluded: tuple[str, ...] = ()
) -> Json:
    """Pod fields TorchX cannot express, applied through its own overlay mechanism."""
    sched = spec.scheduling
    pod_spec: Json = {
        "nodeSelector": {**sched.nodeSelector, INSTANCE_TYPE_LABEL: spec.instanceType}
    }
    if excluded:  # nodes a failure pointed at (status.excludedNodes)
        pod_spec["affinity"] = nodes.affinity(excluded)
    if sched.tolerations:
        pod_spec["tolerations"] = copy.deepcopy(sched.tolerations)
    if sched.priorityClassName:
        pod_spec["priorityClassName"] = sched.priorityClassName
    if dra.uses_dra(spec):
        pod_spec["resourceClaims"] = dra.pod_claims(owner.name)
    return {"metadata": {"labels": labels(owner, stage)}, "spec": pod_spec}


def build_claim_template(spec: TrainiumJobSpec, owner: Owner) -> Json:
    """The job's ResourceClaimTemplate (spec.devices dra), owned by it like the other children."""
    metadata = {
        "name": naming.claim_template_name(owner.name),
        "namespace": owner.namespace,
        "labels": labels(owner),
        "annotations": owner_annotations(owner),
        "ownerReferences": [owner.reference()],
    }
    return dra.build_claim_template(spec, metadata)


class _DryRunScheduler(KubernetesScheduler):
    """TorchX's Kubernetes scheduler with its run options built once, not on every dry run.

    TorchX derives them from `inspect.getsource` + `ast.parse` of its own 1,136-line module per
    call: a third of the operator's CPU, and concurrent `ast.parse` raised CPython 3.11
    SystemErrors under load.
    """

    def __init__(self) -> None:
        super().__init__(session_name=naming.ROLE)
        self._opts = super().run_opts()

    def run_opts(self) -> runopts:
        """The options table read once at construction (resolve() only reads it)."""
        return self._opts


_DRY_RUN_LOCK = threading.Lock()
_dry_run: list[_DryRunScheduler] = []  # built on first use, under the lock
_serializer = ApiClient()


def _submit_dryrun(app: AppDef, cfg: dict[str, Any]) -> Any:
    """One dry run at a time: catch_warnings swaps process-global state, unsafe across threads."""
    with _DRY_RUN_LOCK, warnings.catch_warnings():
        # TorchX warns on every build that Volcano < 1.4 mishandles retries; we need Volcano >= 1.6.
        warnings.simplefilter("ignore", UserWarning)
        if not _dry_run:
            _dry_run.append(_DryRunScheduler())
        return _dry_run[0].submit_dryrun(app, cfg)


def build_vcjob(
    spec: TrainiumJobSpec, owner: Owner, stage: str, excluded: tuple[str, ...] = ()
) -> Json:
    """The Volcano Job of one stage, built by TorchX and overlaid; excluded: nodes kept out."""
    ctx = stage_context(spec, owner, stage)
    app = appdef.build_appdef(spec, ctx)
    overlay = pod_overlay(spec, owner, stage, excluded)
    set_overlay(app.roles[0], "kubernetes", "V1Pod", overlay)
    # TorchX's replica 0 alone: it depends on its replica id only, not on how many follow.
    app = dataclasses.replace(app, roles=[dataclasses.replace(app.roles[0], num_replicas=1)])
    cfg: dict[str, Any] = {
        "queue": spec.scheduling.queue,
        "namespace": owner.namespace,
        "validate_spec": False,
    }
    if spec.scheduling.priorityClassName:
        cfg["priority_class"] = spec.scheduling.priorityClassName
    info = _submit_dryrun(app, cfg)
    job: Json = _serializer.sanitize_for_serialization(info.request.resource)
    job = _overlay_job(job, spec, owner, stage, ctx.run_id)
    (task,) = job["spec"]["tasks"]
    job["spec"]["tasks"] = [_one_task(task, spec.nodes)]
    # spec.spares stand by beside the training world (manifests/spares.py); a compile has none.
    return spares.with_spares(job, spec) if stage == appdef.TRAIN else job


def _overlay_job(job: Json, spec: TrainiumJobSpec, owner: Owner, stage: str, name: str) -> Json:
    key = cache_key(spec)
    job["metadata"] = {
        "name": name,
        "namespace": owner.namespace,
        "labels": {
            **labels(owner, stage),
            LABEL_CACHE_KEY: key,
            LABEL_CACHE_NAME: cache_name(spec, key),
            # A running compile of an entry is found by this label even if its Lease is gone.
            **({LABEL_CACHE_ENTRY: identity(spec).record_name} if stage == "precompile" else {}),
        },
        "annotations": owner_annotations(owner),
        "ownerReferences": [owner.reference()],
    }
    job["spec"]["minAvailable"] = spec.nodes
    job["spec"].update(placement.job_fields(spec))  # both gangs: the same nodes, the same network
    for task in job["spec"]["tasks"]:
        _overlay_pod(task["template"], spec, owner, stage, name)
    return job


def _one_task(replica0: Json, nodes: int) -> Json:
    """TorchX's task of replica 0 as the task of every node: what made it replica 0's goes.

    Its name and container's (TorchX's `node-0`) become the role's (pods: naming.pod_name);
    its replica-id label and TORCHX_RANK0_HOST (`localhost`, for TorchX's rank0_env macro, which
    our argv does not use) were replica 0's alone. The node's index comes first in the env, from
    Volcano's annotation, for the `$(TRAINIUM_NODE_INDEX)` in the values after it; node 0's
    store-host flags are set at run time (rendezvous.py).
    """
    task = {**replica0, "name": naming.TASK, "replicas": nodes, "minAvailable": nodes}
    pod = task["template"]
    pod["metadata"]["labels"].pop(LABEL_TORCHX_REPLICA, None)
    for container in pod["spec"]["containers"]:
        container["name"] = naming.ROLE
        env = [e for e in container.get("env", []) if e["name"] != TORCHX_RANK0_ENV]
        container["env"] = [_NODE_INDEX_ENV, *env]
    return task


#: TorchX's per-replica label and replica 0's env var (kubernetes_scheduler.py).
LABEL_TORCHX_REPLICA = "torchx.pytorch.org/replica-id"
TORCHX_RANK0_ENV = "TORCHX_RANK0_HOST"
_NODE_INDEX_ENV: Json = {
    "name": contract.ENV_NODE_INDEX,
    "valueFrom": {
        "fieldRef": {"fieldPath": f"metadata.annotations['{naming.TASK_INDEX_ANNOTATION}']"}
    },
}


def _overlay_pod(pod: Json, spec: TrainiumJobSpec, owner: Owner, stage: str, vcjob: str) -> None:
    """Fix TorchX's bookkeeping labels to our deterministic names; add user resources."""
    pod["metadata"]["labels"].update(labels(owner, stage))
    pod["metadata"]["labels"]["app.kubernetes.io/instance"] = vcjob
    annotations = pod["metadata"].setdefault("annotations", {})
    annotations.update(owner_annotations(owner))  # pod events find the job
    for container in pod["spec"]["containers"]:
        _restore_field_path_env(container)
        container["terminationMessagePolicy"] = LOGS_ON_ERROR
        res = container.setdefault("resources", {})
        for kind in ("requests", "limits"):
            wanted = getattr(spec.resources, kind)
            if wanted:
                res.setdefault(kind, {}).update({k: str(v) for k, v in wanted.items()})
        gangsize.default_requests(res)  # Volcano sizes the gang's PodGroup from requests
        if dra.uses_dra(spec):
            res["claims"] = dra.container_claims()
    if stage == appdef.TRAIN and spec.preflight:
        pod["spec"]["initContainers"] = [preflight_container(spec, pod["spec"]["containers"][0])]


#: A container that fails without writing its termination message gets its log's tail there
#: (the kubelet's last 80 lines, 2 KiB): the pod's watch event carries the evidence even when
#: Volcano deletes the pod, and its log, within milliseconds (issue 17, bug 5).
LOGS_ON_ERROR = "FallbackToLogsOnError"


def preflight_container(spec: TrainiumJobSpec, trainer: Json) -> Json:
    """The init container that checks the node first (same image, devices and /dev/shm).

    It asks for the trainer's resources: the kubelet hands an init container's devices on to
    the pod's containers, so the Neuron devices it opens are the ones training gets.
    """
    inst = spec.instance
    shm = [m for m in trainer.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"]
    container: Json = {
        "name": contract.PREFLIGHT_CONTAINER,
        "image": spec.image,
        "command": [
            "python3",
            "-m",
            contract.DEFAULT_MODULE,
            contract.PREFLIGHT_COMMAND,
            "--neuron-devices",
            str(inst.neuron_devices),
            "--efa",
            str(inst.efa_interfaces or 0),
        ],
        "env": [
            {
                "name": contract.ENV_NODE_NAME,
                "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
            }
        ],
        "resources": copy.deepcopy(trainer.get("resources") or {}),
        "volumeMounts": copy.deepcopy(shm),
        "terminationMessagePolicy": LOGS_ON_ERROR,
    }
    if trainer.get("securityContext"):
        container["securityContext"] = copy.deepcopy(trainer["securityContext"])
    return container


def _restore_field_path_env(container: Json) -> None:
    """Undo TorchX's `[FIELD_PATH]x` -> fieldRef rewrite: every env value we set is literal."""
    for var in container.get("env", []):
        field_ref = (var.get("valueFrom") or {}).get("fieldRef")
        if field_ref:
            var["value"] = PLACEHOLDER_FIELD_PATH + field_ref["fieldPath"]
            del var["valueFrom"]
