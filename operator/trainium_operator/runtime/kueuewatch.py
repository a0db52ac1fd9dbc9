"""Kueue's Workloads and ResourceFlavors, watched by our own threads, not kopf (issue 41).

Installing or uninstalling Kueue while the operator runs then stalls nothing and stops nothing
(cluster/ownwatch.py says why kopf would). Each event is what kopf's index and handler did: our
write it shows is let go (reads.Overlay.shown), and a Workload's change wakes the job that owns it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainium_operator.cluster import inuse, kueueio
from trainium_operator.cluster.ownwatch import KindIndex, OwnWatch
from trainium_operator.cluster.reads import Kind, resource, slim
from trainium_operator.manifests.ownership import LABEL_MANAGED_BY, MANAGED_BY
from trainium_operator.runtime import pods, scope
from trainium_operator.runtime.passes import Passes

Json = dict[str, Any]
#: Per kind: (plural, label selector): our Workloads only; every ResourceFlavor.
KINDS = {
    Kind.WORKLOAD: ("workloads", f"{LABEL_MANAGED_BY}={MANAGED_BY}"),
    Kind.FLAVOR: ("resourceflavors", ""),
}


def start(passes: Passes) -> list[OwnWatch]:
    """Watch Kueue's kinds into the passes' indices (served or not, now or later)."""
    watches = [_watch(passes, kind) for kind in KINDS]
    for watch in watches:
        watch.start()
    return watches


def _watch(passes: Passes, kind: Kind) -> OwnWatch:
    plural, selector = KINDS[kind]
    index = KindIndex(lambda body: slim(kind, body))
    passes.reads.indices[kind] = index

    def lister() -> tuple[list[Json], str]:
        return kueueio.list_objects(plural, selector)

    def watcher(since: str, seconds: int) -> Any:
        return kueueio.watch_objects(plural, selector, since, seconds)

    return OwnWatch(
        resource(kind), index, lister, watcher, on_event(passes, kind),
        wants=_wanted(selector, scope.patterns()),
        on_state=lambda failing: passes.reads.unwatched.update(kind, failing),
        crd=lambda seconds: kueueio.crd_appears(plural, seconds),
    )  # fmt: skip


def on_event(passes: Passes, kind: Kind) -> Callable[[str, Json], None]:
    def changed(type: str, body: Json) -> None:
        meta = body.get("metadata") or {}
        if type != "DELETED":
            key = (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            passes.reads.overlay.shown(key, body)
        if kind is Kind.WORKLOAD:  # Kueue admitted or evicted it: its job's pass decides
            owner = pods.owner_key(meta, passes)
            if owner is not None:
                passes.wake(owner)
            if type != "DELETED" and meta.get("deletionTimestamp") and inuse.held(body):
                passes.sweep_workload(str(meta.get("namespace") or ""), str(meta.get("name")))

    return changed


def _wanted(selector: str, globs: list[str]) -> Callable[[Json], bool]:
    """Labelled ours and in a namespace this operator watches (another operator's are its own)."""
    labelled = _labelled(selector)
    return lambda body: labelled(body) and scope.in_scope(body, globs)


def _labelled(selector: str) -> Callable[[Json], bool]:
    """The selector, checked here too (a server that ignores it sends every object)."""
    if not selector:
        return lambda _body: True
    label, _eq, value = selector.partition("=")
    return lambda body: ((body.get("metadata") or {}).get("labels") or {}).get(label) == value
