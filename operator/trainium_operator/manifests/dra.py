"""spec.devices dra: the job's ResourceClaimTemplate of Neuron devices, and the pods' claim on it.

The shape is AWS's (Neuron DRA driver, "AWS Neuron Dynamic Resource Allocation" and its support
files, e.g. aws-neuron-eks-samples xl-lnc2-trn2-efa-rct.yaml): DeviceClass neuron.aws.com, devices
selected by the driver's instanceType attribute, and an opaque NeuronConfig carrying the
logicalNeuronCore. Every chip of the node goes to the one pod there, as with the device plugin.
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
        },
    }


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
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": copy.deepcopy(metadata),
        "spec": {"spec": {"devices": devices}},
    }


def pod_claims(job: str) -> list[Json]:
    """The pod spec's resourceClaims: one claim generated from the job's template per pod."""
    return [{"name": CLAIM, "resourceClaimTemplateName": naming.claim_template_name(job)}]


def container_claims() -> list[Json]:
    """A container's resources.claims: the Neuron devices of the pod's claim."""
    return [{"name": CLAIM}]
