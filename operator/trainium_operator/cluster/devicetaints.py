"""DRA device taints (issue 42): our claims and Neuron's ResourceSlices, watched once a job with
spec.devices dra is seen, read by its passes without a request (domain/devicetaints.py judges).

Two own watches (ownwatch.py), not kopf's: kopf would list both kinds at start for every
operator, DRA or not, and a cluster that serves no resource.k8s.io/v1 (before 1.34) would stall
its barrier. Ours start on the first DRA job's pass (`need`), list our claims only (the labels
the claim template gives them) and the Neuron driver's slices only (a field selector), and while
the API is not served they list again every ownwatch.WATCH_SECONDS, quietly. A claim's event
wakes its job; a slice with a hard taint wakes the jobs with pods on its node or claims in its
pool.
DeviceTaintRules (resource.k8s.io/v1beta2) are not read: their gate is off by default in 1.36.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kubernetes import client, watch

from trainium_operator.cluster import k8s
from trainium_operator.cluster.ownwatch import KindIndex, OwnWatch
from trainium_operator.domain import devicetaints, health
from trainium_operator.manifests import dra
from trainium_operator.manifests.ownership import LABEL_MANAGED_BY, MANAGED_BY, owner_uid

Json = dict[str, Any]
GROUP, VERSION = "resource.k8s.io", "v1"
#: Per plural: (label selector, field selector): our claims; the Neuron driver's slices.
SELECTORS = {
    "resourceclaims": (f"{LABEL_MANAGED_BY}={MANAGED_BY}", ""),
    "resourceslices": ("", f"spec.driver={dra.DRIVER}"),
}
#: Wakes a job by its uid; the jobs with pods bound to a node.
WakeJob = Callable[[str], None]
WakeNode = Callable[[str], None]


class DeviceWatches:
    """Our claims and the Neuron slices, watched from the first DRA job on (`need`)."""

    def __init__(self, wake_job: WakeJob, wake_node: WakeNode, *, start: bool = True) -> None:
        self.claims = KindIndex(devicetaints.slim_claim)
        self.slices = KindIndex(devicetaints.slim_slice)
        self._wake_job, self._wake_node, self._start = wake_job, wake_node, start
        self._lock, self._stopped = threading.Lock(), threading.Event()
        self.watches: list[OwnWatch] = []

    def need(self) -> None:
        """A DRA job exists: watch (once; later calls cost a lock)."""
        with self._lock:
            if self.watches or self._stopped.is_set():
                return
            self.watches = [self._watch("resourceclaims"), self._watch("resourceslices")]
            if self._start:
                for one in self.watches:
                    one.start()

    def stop(self) -> None:
        self._stopped.set()
        for one in self.watches if self._start else ():
            one.stop(timeout=0)  # daemon threads: a watch request ends with the process

    def verdicts(self, namespace: str, pods: Sequence[health.GangPod]) -> dict[str, str]:
        """node -> why, for the job's gang pods (of `namespace`) holding a tainted device."""
        if not (self.claims.listed and self.slices.listed):
            return {}
        claims = [c for (ns, _n), found in self.claims.items() if ns == namespace for c in found]
        slices = [s for found in self.slices.values() for s in found]
        return devicetaints.verdicts(pods, claims, slices)

    def _watch(self, plural: str) -> OwnWatch:
        index = self.claims if plural == "resourceclaims" else self.slices
        on_event = self._on_claim if plural == "resourceclaims" else self._on_slice
        return OwnWatch(
            f"{plural}.{GROUP}", index, lambda: list_objects(plural),
            lambda since, seconds: watch_objects(plural, since, seconds), on_event,
            crd=self._served_later,
        )  # fmt: skip

    def _served_later(self, seconds: int) -> bool:
        """resource.k8s.io/v1 is not served (no CRD to wait for): list again after `seconds`."""
        self._stopped.wait(seconds)
        return False

    def _on_claim(self, _type: str, body: Json) -> None:
        uid = owner_uid(body.get("metadata") or {})
        if uid:
            self._wake_job(uid)

    def _on_slice(self, _type: str, body: Json) -> None:
        if not devicetaints.hard(body):
            return
        spec = body.get("spec") or {}
        if spec.get("nodeName"):
            self._wake_node(str(spec["nodeName"]))
        pool = (spec.get("pool") or {}).get("name")
        for found in list(self.claims.values()):
            for claim in found:
                if any(d.pool == pool for d in health.allocated(claim)):
                    self._on_claim("MODIFIED", claim)


def _client() -> client.ApiClient:
    """Our watches' client, as kueueio's: the audit log names it "(watch)"."""
    return k8s.side_client("watch", 4)


def list_objects(plural: str) -> tuple[list[Json], str]:
    """Every object the kind's selectors match and the list's version; 404 (not served) raised."""
    labels, fields = SELECTORS[plural]
    listing = client.CustomObjectsApi(_client()).list_cluster_custom_object
    out = k8s.request(listing, GROUP, VERSION, plural, label_selector=labels, field_selector=fields)
    meta = out.get("metadata") or {}
    return list(out.get("items") or []), str(meta.get("resourceVersion") or "")


def watch_objects(plural: str, since: str, seconds: int) -> Iterator[Json]:
    """The kind's watch events from `since` until the server ends the request (`seconds`)."""
    labels, fields = SELECTORS[plural]
    stream = watch.Watch().stream(
        client.CustomObjectsApi(_client()).list_cluster_custom_object, GROUP, VERSION, plural,
        label_selector=labels, field_selector=fields, resource_version=since,
        timeout_seconds=seconds, allow_watch_bookmarks=True,
        _request_timeout=(k8s.TIMEOUT, seconds + k8s.TIMEOUT),
    )  # fmt: skip
    for event in stream:
        yield {"type": event["type"], "object": event.get("raw_object", event["object"])}
