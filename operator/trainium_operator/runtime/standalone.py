"""Two `--standalone` operators by mistake (a `kubectl scale`, two releases): say so, loudly.

Standalone kopf never looks for peers, so two copies double every write and Event in silence.
Each standalone process keeps a presence Lease (labelled, renewed every PERIOD seconds, in its
own namespace: POD_NAMESPACE, else "default") and lists the others' each time: another live
holder is an ERROR line (when it appears, and every REPEAT seconds while it lasts) and the gauge
trainium_operator_standalone_peers. Nothing is paused: kopf peering (the chart's default) is
the way to run more than one; this only makes the mistake visible. Lease verbs are the ones
the operator already has for compile-cache writers. Only in a pod (POD_NAME set, as the chart
does): a laptop's `trainium operator` against a test cluster keeps no presence.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException
from prometheus_client import Gauge

from trainium_operator.cluster import k8s

Json = dict[str, Any]
LABEL = "trainium.dev/standalone-presence"
#: Seconds between renewals; a presence not renewed for DURATION is gone.
PERIOD, DURATION, REPEAT = 15.0, 45, 600.0
PEERS = Gauge(
    "trainium_operator_standalone_peers",
    "Other live --standalone trainium operators seen on the cluster (should be 0: both act)",
)
log = logging.getLogger(__name__)


class LeaseApi(Protocol):
    def put(self, body: Json) -> None: ...

    def list(self, namespace: str) -> list[Json]: ...

    def delete(self, namespace: str, name: str) -> None: ...


class KubeLeases:
    """The presence Leases through the API (the operator's client, retries included)."""

    def put(self, body: Json) -> None:
        api, md = k8s.coordination(), body["metadata"]
        try:
            k8s.request(api.create_namespaced_lease, md["namespace"], body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            patch = {"spec": body["spec"]}
            k8s.request(api.patch_namespaced_lease, md["name"], md["namespace"], patch,
                        _content_type=k8s.MERGE_PATCH)  # fmt: skip

    def list(self, namespace: str) -> list[Json]:
        found = k8s.request(k8s.coordination().list_namespaced_lease, namespace,
                            label_selector=f"{LABEL}=true")  # fmt: skip
        return [k8s.to_dict(item) or {} for item in found.items]

    def delete(self, namespace: str, name: str) -> None:
        with contextlib.suppress(ApiException):
            k8s.coordination().delete_namespaced_lease(name, namespace)


def micro(at: datetime.datetime) -> str:
    """A Lease MicroTime."""
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def live_others(leases: Iterable[Json], me: str, now: datetime.datetime) -> list[str]:
    """Holders of presence Leases other than me, renewed within their duration."""
    out = []
    for lease in leases:
        spec = lease.get("spec") or {}
        holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
        if not holder or holder == me or renewed is None:
            continue
        if isinstance(renewed, str):
            renewed = datetime.datetime.fromisoformat(renewed.replace("Z", "+00:00"))
        left = float(spec.get("leaseDurationSeconds") or DURATION)
        if (now - renewed).total_seconds() <= left:
            out.append(str(holder))
    return sorted(out)


class Presence:
    """This standalone process's presence, and what it sees of others."""

    def __init__(
        self,
        api: LeaseApi | None = None,
        *,
        identity: str | None = None,
        namespace: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api or KubeLeases()
        self.identity = identity or os.environ.get("POD_NAME") or socket.gethostname()
        self.namespace = namespace or os.environ.get("POD_NAMESPACE") or "default"
        self.name = "trainium-standalone-" + _dns(self.identity)
        self._clock, self._said_at = clock, -REPEAT
        self._said: tuple[str, ...] = ()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trainium-presence", daemon=True)

    def check(self, now: datetime.datetime | None = None) -> list[str]:
        """Renew our presence, read the others'; say so when there are any."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        self.api.put(self._body(now))
        others = live_others(self.api.list(self.namespace), self.identity, now)
        PEERS.set(len(others))
        if others and (tuple(others) != self._said or self._clock() - self._said_at >= REPEAT):
            log.error("another --standalone trainium operator is running (%s, seen through "
                      "Leases in %r): every job is reconciled twice, each write and Event "
                      "doubled. Run one, or run them all with --peering (the chart's default)",
                      ", ".join(others), self.namespace)  # fmt: skip
            self._said_at = self._clock()
        self._said = tuple(others)
        return others

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.api.delete(self.namespace, self.name)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.check()
            except Exception as exc:  # never the operator's end: the check is advice
                log.warning("cannot check for other standalone operators: %s", exc)
                if isinstance(exc, ApiException) and exc.status == 403:
                    return  # no Lease rights in this namespace: said once, not every period
            self._stop.wait(PERIOD)

    def _body(self, now: datetime.datetime) -> Json:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {LABEL: "true"},
            },
            "spec": {
                "holderIdentity": self.identity,
                "renewTime": micro(now),
                "leaseDurationSeconds": DURATION,
            },
        }


def _dns(text: str) -> str:
    """A DNS-1123 name part from a host or pod name."""
    cleaned = "".join(c if c.isalnum() or c == "-" else "-" for c in text.lower()).strip("-")
    return cleaned[:40] or "operator"
