"""kopf peering made usable: a missing CRD or peering object is said, not silently waited on.

With `--peering=NAME`, kopf pauses every handler until it sees the peering object, and pauses
all peers of equal priority. So: each process gets a random priority unless one was given (one
acts, the rest stand by and take over when its keep-alive lapses), the peering object is created
when the CRD exists, and a missing CRD is an ERROR line naming the file to apply.
"""

from __future__ import annotations

import logging
import random

from kubernetes.client import ApiextensionsV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from trainium_operator import k8s

GROUP, VERSION = "kopf.dev", "v1"
log = logging.getLogger(__name__)


def distinct_priority(priority: int) -> int:
    """The given priority, or a random one: equal priorities make kopf pause every peer."""
    return priority or random.randint(1, 2**31 - 1)


def ensure(name: str, *, clusterwide: bool) -> bool:
    """Make sure peering can start: the CRD installed and (cluster-wide) the object created."""
    plural = "clusterkopfpeerings" if clusterwide else "kopfpeerings"
    api = k8s.api_client()
    try:
        ApiextensionsV1Api(api).read_custom_resource_definition(f"{plural}.{GROUP}")
    except ApiException as exc:
        if exc.status != 404:
            raise
        log.error(
            "peering %r needs the CRD %s.%s, which is not installed: every handler is paused "
            "until it is (kubectl apply -f crds/kopf-peering.yaml)", name, plural, GROUP,
        )  # fmt: skip
        return False
    if not clusterwide:
        log.warning(
            "peering %r: create a KopfPeering named %r in each watched namespace", name, name
        )
        return True
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": name},
    }
    try:
        CustomObjectsApi(api).create_cluster_custom_object(GROUP, VERSION, plural, body)
        log.warning("created the ClusterKopfPeering %r", name)
    except ApiException as exc:
        if exc.status != 409:
            raise
    return True
