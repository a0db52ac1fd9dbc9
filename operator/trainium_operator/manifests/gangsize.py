"""Pure: the whole gang's resources on its Volcano job, so a gang that cannot fit makes no pods.

Volcano's job controller sizes a job's PodGroup (`minResources`) from its task templates'
container `requests`, minAvailable pods' worth; its enqueue action (the `overcommit` and
`proportion` plugins) admits a PodGroup only if that fits the cluster and its queue, and the
job controller makes pods only of an admitted one. Our pods asked for Neuron and EFA devices under
`limits` only (the API server copies a limit to the request in a pod, never in a template), so the
PodGroup counted pods alone, Volcano admitted a gang that cannot fit and made every pod of it (a
queued 1,024-node job: 1,024 pending pods, a scheduler condition written on each; issue 43). Each
container's requests are now written out as the API server would default them (QoS unchanged),
and the PodGroup Volcano makes carries the whole gang's sum. (Volcano 1.16's Job has no
`spec.minResources` any more: the API server prunes it; the templates are the one source.)
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

Json = dict[str, Any]


def default_requests(resources: Json) -> None:
    """Fill `requests` from `limits` where unset, as the API server defaults a pod's."""
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    missing = {k: v for k, v in limits.items() if k not in requests}
    if missing:
        resources["requests"] = {**requests, **missing}


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """A pod's requests as the scheduler counts them: its containers' sum, or an init
    container's when larger."""
    total: dict[str, Decimal] = {}
    for container in pod_spec.get("containers") or ():
        for name, value in _requests(container).items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(value)
    for init in pod_spec.get("initContainers") or ():
        for name, value in _requests(init).items():
            total[name] = max(total.get(name, Decimal(0)), parse_quantity(value))
    return total


def _requests(container: Mapping[str, Any]) -> Mapping[str, Any]:
    return (container.get("resources") or {}).get("requests") or {}
