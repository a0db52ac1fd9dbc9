"""spec.devices dra: the job's ResourceClaimTemplate of Neuron devices, and the pods' claim on it.

The shape is AWS's (Neuron DRA driver, "AWS Neuron Dynamic Resource Allocation" and its support
files, e.g. aws-neuron-eks-samples xl-lnc2-trn2-efa-rct.yaml): DeviceClass neuron.aws.com, devices
selected by the driver's instanceType attribute, and an opaque NeuronConfig carrying the
logicalNeuronCore. Every chip of the node goes to the one pod there, as with the device plugin.

The request tolerates a `NoExecute` device taint for TOLERATION_SECONDS: kube-controller-manager's
device-taint eviction would otherwise delete the pod at once, before the operator's SIGTERM lets
the trainer checkpoint (the operator reads the taint itself: cluster/devicetaints.py). The claims
carry the job's labels and owner annotations (the template's spec.metadata) so a watch finds ours.
"""

from __future__ import annotations

import copy
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.spec import DEVICES_DRA, TrainiumJobSpec

Json = dict[str, Any]

RESOURCE_API = "resource.k8s.io/v1"
DEVICE_CLASS = "neuron.aws.com"
DRIVER = "neuron.aws.com"
NEURON_CONFIG_API = "neuron.aws.com/v1"
#: The request's name in the template, and the claim's name in the pod spec.
REQUEST = "neurons"
CLAIM = "neuron"
#: The pods' termination grace (Kubernetes' default: the pod spec sets none): the trainer's
#: SIGTERM checkpoint must land within it.
POD_GRACE_SECONDS = 30
#: Seconds the operator has to see a NoExecute device taint and stop the gang itself (watch
#: event, pass, the Volcano job's delete), however busy the cluster.
REACTION_SECONDS = 30
#: How long a claim's request tolerates a NoExecute device taint before the eviction deletes
#: the pod: the operator's reaction, then a whole grace period for the checkpoint.
TOLERATION_SECONDS = REACTION_SECONDS + POD_GRACE_SECONDS


def uses_dra(spec: TrainiumJobSpec) -> bool:
    """Whether the pods get their Neuron devices from a claim."""
    return spec.devices == DEVICES_DRA


def _request(spec: TrainiumJobSpec) -> Json:
    inst = spec.instance
    selector = f"device.attributes['{DRIVER}'].instanceType == '{inst.name}'"
    return {
        "name": REQUEST,
        "exactly": {
            "deviceClassName": DEVICE_CLASS,
            "allocationMode": "ExactCount",
            "count": inst.neuron_devices,
            "selectors": [{"cel": {"expression": selector}}],
            "tolerations": [tolerate_eviction()],
        },
    }


def tolerate_eviction() -> Json:
    """Every NoExecute device taint, for a bounded time: the operator's checkpoint first.

    NoSchedule is not tolerated: a new claim is never allocated a device marked faulty.
    """
    return {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": TOLERATION_SECONDS}


def _lnc_config(spec: TrainiumJobSpec) -> list[Json]:
    """The driver's NeuronConfig with the job's LNC; none where the family has no LNC choice."""
    if len(spec.instance.family.lncs) < 2:
        return []
    parameters = {
        "apiVersion": NEURON_CONFIG_API,
        "kind": "NeuronConfig",
        "logicalNeuronCore": spec.effective_lnc,
    }
    return [{"requests": [REQUEST], "opaque": {"driver": DRIVER, "parameters": parameters}}]


def build_claim_template(spec: TrainiumJobSpec, metadata: Json) -> Json:
    """The ResourceClaimTemplate every pod of the job claims from (metadata: name, owner, ...)."""
    devices: Json = {"requests": [_request(spec)]}
    config = _lnc_config(spec)
    if config:
        devices["config"] = config
    claims = {k: copy.deepcopy(metadata[k]) for k in ("labels", "annotations") if k in metadata}
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": copy.deepcopy(metadata),
        "spec": {"metadata": claims, "spec": {"devices": devices}},
    }


def pod_claims(job: str) -> list[Json]:
    """The pod spec's resourceClaims: one claim generated from the job's template per pod."""
    return [{"name": CLAIM, "resourceClaimTemplateName": naming.claim_template_name(job)}]


def container_claims() -> list[Json]:
    """A container's resources.claims: the Neuron devices of the pod's claim."""
    return [{"name": CLAIM}]
