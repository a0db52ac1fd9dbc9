"""kopf peering made usable: a missing CRD or peering object is said, not silently waited on.

With `--peering=NAME`, kopf pauses every handler until it sees the peering object, and pauses
all peers of equal priority. So: each process gets a random priority unless one was given (one
acts, the rest stand by and take over when its keep-alive lapses), the peering object is created
when the CRD exists, and a missing CRD is an ERROR line naming the file to apply.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable, Mapping
from functools import partial

from kubernetes.client import ApiextensionsV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster import k8s

GROUP, VERSION = "kopf.dev", "v1"
#: Namespaces (comma-separated) whose KopfPeering objects the operator creates (the chart sets
#: it from watchNamespaces): namespaced peering has no object until someone creates it.
NAMESPACES_ENV = "TRAINIUM_PEERING_NAMESPACES"
#: Seconds a replica's keep-alive counts (env; the chart sets it): a SIGKILLed active replica is
#: taken over at most this long after its last keep-alive. kopf's own default, 60, would miss
#: the 30 s hand-over; kopf renews every LIFETIME - 5..10 s, so below 15 it would renew as often
#: as every second.
LIFETIME_ENV, LIFETIME = "TRAINIUM_PEERING_LIFETIME_SECONDS", 20
log = logging.getLogger(__name__)


def distinct_priority(priority: int) -> int:
    """The given priority, or a random one: equal priorities make kopf pause every peer."""
    return priority or random.randint(1, 2**31 - 1)


def lifetime(environ: Mapping[str, str] = os.environ) -> int:
    """This replica's peering lifetime: the env's (at least 15 s), else LIFETIME."""
    text = environ.get(LIFETIME_ENV, "").strip()
    return max(15, int(text)) if text else LIFETIME


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
    objects = CustomObjectsApi(api)
    if not clusterwide:
        namespaces = [n for n in os.environ.get(NAMESPACES_ENV, "").split(",") if n]
        if not namespaces:
            log.warning("peering %r: create a KopfPeering named %r in each watched namespace "
                        "(or list them in %s)", name, name, NAMESPACES_ENV)  # fmt: skip
        for namespace in namespaces:
            _created(partial(_create_namespaced, objects, plural, name, namespace),
                     f"KopfPeering {namespace}/{name}")  # fmt: skip
        return True
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": name},
    }
    _created(
        lambda: objects.create_cluster_custom_object(GROUP, VERSION, plural, body),
        f"ClusterKopfPeering {name}",
    )
    return True


def _create_namespaced(objects: CustomObjectsApi, plural: str, name: str, ns: str) -> object:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "KopfPeering",
            "metadata": {"name": name, "namespace": ns}}  # fmt: skip
    return objects.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)


def _created(create: Callable[[], object], what: str) -> None:
    """Create a peering object; one that exists already is fine."""
    try:
        create()
        log.warning("created the %s", what)
    except ApiException as exc:
        if exc.status != 409:
            raise
