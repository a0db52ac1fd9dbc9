"""Where a pass reads the cluster from: what the operator's watches stream, plus its own writes.

Every object a pass reads is of a kind the operator already watches, so the event-driven passes
read kopf's indices of them instead of GETting them. A miss in an index is an authoritative
"absent" (up to watch lag): kopf calls no ordinary handler until every index has been filled
from its initial listing (`operator_indexed` in kopf/_core/reactor/processing.py and
queueing.py), and a pass runs only from a handler or after one.

Watches lag our own writes. A pass right after we created, patched or deleted something must not
act on the older picture (a second create, a transition Event emitted twice, a status derived
from the status we just replaced), so each write's response (a tombstone for a delete) stays in
an `Overlay` while the index still shows a version the write supersedes; any other version ends
it (a relist that skips ours too). Older means: a version the writing pass itself read (or one
older still), or, where versions are integers, a lower one: Kubernetes documents them as
comparable integers from 1.35 (KEP-5504), and etcd's revisions always were. Opaque versions are
only compared for equality.

A stale read only ever costs a retry, never a second writer or a lost update, because the
server, not the index, decides every write that matters: children are created with create
(AlreadyExists is "done"); the compile-cache lease is taken by a create the server refuses while
the lease exists, or by a patch guarded by the resourceVersion read, and released by a delete
preconditioned on its uid; a Released PV is repaired by a guarded patch.

Limits: with opaque versions, a third party's write that lands between our read and our write
(kopf adding its finalizer, say) is not known to be older than ours, so a pass may see our write
undone once and repeat it (idempotent). kopf does not report objects deleted while a watch
re-lists after 410 Gone, so the rare backstop passes (`fresh`) GET what the index shows, which
heals such a ghost within one resync (an absence needs no GET: the re-list lists what exists).
An ambiguous index entry (two objects of one name, an old one's deletion not yet processed) is
also read with a GET.

Kueue's kinds are `LATE`: their CRDs may be installed (or deleted) while the operator runs. They
are not kopf's indices but our own watches' (cluster/ownwatch.py), outside kopf's barrier: kopf
would hold every event of every kind until a late kind is listed, and exit on the 404 of a watch
of a deleted CRD (issue 41). An absence in a late kind's index is trusted once its watch has
listed the kind (`proven`); until then (the operator starting, the CRD not served or just
installed) the kind is read with GETs, and Kueue jobs are looked at every `UNWATCHED_LOOK`
seconds (domain/quota.unwatched_look), as no Workload event may wake them. A watch that keeps
failing on a served kind (RBAC, say) is said once (`Unwatched`: a WARNING and a metric).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from trainium_operator.cluster import cacheio, k8s, kueueio, volumes
from trainium_operator.manifests.ownership import Owner, controlled_by
from trainium_operator.manifests.workload import GATE_ANNOTATION

Json = dict[str, Any]
K = TypeVar("K")
V = TypeVar("V")


class Kind(enum.Enum):
    """The kinds a pass reads (each one watched, hence indexed)."""

    TRAINIUMJOB = "trainiumjobs"
    VCJOB = "vcjobs"
    CLAIM = "persistentvolumeclaims"
    VOLUME = "persistentvolumes"
    RECORD = "configmaps"  # compile-cache records
    LEASE = "leases"  # compile-cache writer leases
    QUEUE = "queues"
    PRIORITY = "priorityclasses"  # spec.scheduling.priorityClassName must exist
    WORKLOAD = "workloads"  # Kueue Workloads of our stages (manifests/workload.py)
    FLAVOR = "resourceflavors"  # Kueue ResourceFlavors: an admission's node labels


#: Kinds whose CRDs may come and go while the operator runs: our own watches', not kopf's.
LATE = frozenset({Kind.WORKLOAD, Kind.FLAVOR})
#: Seconds between looks at a Kueue job while its Workloads are not known to be watched: no
#: watch event tells it that Kueue admitted (or evicted) its Workload.
UNWATCHED_LOOK = 5.0
log = logging.getLogger(__name__)

#: (kind, namespace, name); namespace "" for cluster-scoped kinds.
Key = tuple[Kind, str, str]
#: The "version" of an object that does not exist.
ABSENT = ""


def api_get(kind: Kind, namespace: str, name: str) -> Json | None:
    """GET one object (None when it does not exist)."""
    if kind is Kind.TRAINIUMJOB:
        return k8s.get_trainiumjob(namespace, name)
    if kind is Kind.VCJOB:
        return k8s.get_vcjob(namespace, name)
    if kind is Kind.CLAIM:
        return volumes.get_claim(namespace, name)
    if kind is Kind.VOLUME:
        return volumes.get_volume(name)
    if kind is Kind.RECORD:
        return cacheio.get_configmap(namespace, name)
    if kind is Kind.LEASE:
        return cacheio.get_lease(namespace, name)
    if kind is Kind.PRIORITY:
        return k8s.get_priority_class(name)
    if kind is Kind.WORKLOAD:
        return kueueio.get_workload(namespace, name)
    if kind is Kind.FLAVOR:
        return kueueio.get_flavor(name)
    return k8s.get_queue(name)


def version(body: Mapping[str, Any] | None) -> str:
    """An object's resourceVersion; ABSENT for no object."""
    if body is None:
        return ABSENT
    return str((body.get("metadata") or {}).get("resourceVersion") or "?")


class Reader(Protocol):
    """What a pass reads objects through, and tells of its writes."""

    def get(self, kind: Kind, namespace: str, name: str) -> Json | None:
        """The object as this pass should see it; None when it does not exist."""

    def wrote(self, kind: Kind, namespace: str, name: str, response: Json | None) -> None:
        """A write answered with this object (None: it existed already, as it now is)."""

    def deleted(self, kind: Kind, namespace: str, name: str) -> None:
        """A delete was accepted."""

    def watched(self, kind: Kind) -> bool:
        """Whether a change of this kind reaches the operator as a watch event (wakes a job)."""


class ApiReader:
    """Reads with GETs (the CLI, tests, anything outside the operator's watches)."""

    def get(self, kind: Kind, namespace: str, name: str) -> Json | None:
        return api_get(kind, namespace, name)

    def wrote(self, kind: Kind, namespace: str, name: str, response: Json | None) -> None:
        return None

    def deleted(self, kind: Kind, namespace: str, name: str) -> None:
        return None

    def watched(self, kind: Kind) -> bool:
        return True  # outside the operator nothing waits for an event


@dataclass(frozen=True)
class Pending:
    """A write the index has not shown yet: its result, and the versions it supersedes."""

    body: Json | None  # None: a tombstone
    stale: frozenset[str]
    at: float


class Overlay:
    """Our writes, each served until the index shows a version not known to be older."""

    #: Seconds a write is kept at most: a watch this late is broken, and kopf restarts it.
    TTL = 300.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._pending: dict[Key, Pending] = {}
        self._lock = threading.Lock()
        self._swept = clock()

    def __len__(self) -> int:
        return len(self._pending)

    def resolve(self, key: Key, indexed: Json | None) -> tuple[Json | None, frozenset[str]]:
        """What to serve for the indexed body, and the versions known to be no newer than it."""
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None and _superseded(version(indexed), pending):
                return pending.body, pending.stale | {version(pending.body)}
            if pending is not None:
                del self._pending[key]  # the index caught up (or moved past): it is the truth
        return indexed, frozenset({version(indexed)})

    def shown(self, key: Key, indexed: Mapping[str, Any]) -> None:
        """The watch delivered this version: a write it does not supersede is let go now.

        Not only at the next read: a settled job is never read again, and its last status
        patch (a whole TrainiumJob) would otherwise be held until a sweep.
        """
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None and not _superseded(version(indexed), pending):
                del self._pending[key]

    def record(self, key: Key, body: Json | None, stale: frozenset[str]) -> None:
        """A write's result (None: deleted), superseding the versions in `stale`."""
        now = self._clock()
        with self._lock:
            self._pending[key] = Pending(body, stale, now)
            if now - self._swept > self.TTL:
                self._sweep(now)

    def age(self, key: Key) -> float | None:
        """Seconds since our write of key that the index has not shown yet (None: none held)."""
        with self._lock:
            pending = self._pending.get(key)
        return None if pending is None else self._clock() - pending.at

    def forget(self, key: Key) -> None:
        """Nothing known about key beyond what the index says."""
        with self._lock:
            self._pending.pop(key, None)

    def _sweep(self, now: float) -> None:
        self._swept = now
        for key in [k for k, p in self._pending.items() if now - p.at > self.TTL]:
            del self._pending[key]


def _superseded(shown: str, pending: Pending) -> bool:
    """Whether the version the index shows is older than the write (see the module's doc)."""
    if shown in pending.stale:
        return True
    if not shown.isdigit():
        return False
    if pending.body is not None:  # a write: older than its own version
        mine = version(pending.body)
        return mine.isdigit() and int(shown) < int(mine)
    deleted = [int(v) for v in pending.stale if v.isdigit()]  # a tombstone: what we deleted
    return bool(deleted) and int(shown) <= max(deleted)


#: One index per kind: (namespace, name) -> the objects of that name (kopf's Store).
Indices = Mapping[Kind, Mapping[tuple[str, str], Iterable[Json]]]


def proven(kind: Kind, index: Mapping[Any, Any]) -> bool:
    """Whether an absence in the kind's index is trusted: kopf lists every kind it indexes
    before any handler runs; a late kind's own watch says when it has listed (ownwatch.py)."""
    return kind not in LATE or bool(getattr(index, "listed", False))


def resource(kind: Kind) -> str:
    """A late kind as plural.group (what kopf's warning and our metric name)."""
    return f"{kind.value}.{kueueio.GROUP}"


def _say(kind: Kind, unwatched: bool) -> None:
    if unwatched:
        log.warning(
            "%s are served but not watched (the watch keeps failing): Kueue jobs read them "
            "with GETs and are looked at every %.0f s meanwhile",
            resource(kind), UNWATCHED_LOOK,
        )  # fmt: skip
    else:
        log.info("%s are watched now", resource(kind))


class Unwatched:
    """The late kinds whose watch keeps failing: said once each, and to `on_change`."""

    def __init__(self, on_change: Callable[[Kind, bool], None] = lambda _k, _u: None) -> None:
        self._kinds: set[Kind] = set()
        self._on_change = on_change
        self._lock = threading.Lock()

    def __contains__(self, kind: object) -> bool:
        return kind in self._kinds

    def update(self, kind: Kind, unwatched: bool) -> None:
        """The kind's watch keeps failing (True), or listed or watched again (False)."""
        with self._lock:
            changed = (kind in self._kinds) != unwatched
            if unwatched:
                self._kinds.add(kind)
            else:
                self._kinds.discard(kind)
        if changed:
            _say(kind, unwatched)
            self._on_change(kind, unwatched)


class WatchReader:
    """One pass's reader: kopf's indices under the overlay; GETs when `fresh` or ambiguous.

    `fresh` GETs what the index shows (a ghost: deleted while a watch re-listed); an absence is
    trusted (a re-list shows every object that exists): a job waiting on a missing queue cost 8
    requests per backstop, 16 an hour, for objects that were not there (issue 26). Not in a late
    kind's index before its watch has listed it (`proven`).
    """

    def __init__(self, indices: Indices, overlay: Overlay, *, fresh: bool = False) -> None:
        self._indices, self._overlay, self.fresh = indices, overlay, fresh
        #: Per key: versions known to be no newer than what this pass was served.
        self._seen: dict[Key, frozenset[str]] = {}

    def get(self, kind: Kind, namespace: str, name: str) -> Json | None:
        key = (kind, namespace, name)
        if not self.watched(kind):  # not listed yet (or not served): the server says
            body = api_get(kind, namespace, name)
            self._seen[key] = frozenset({version(body)})
            return body
        found = lookup(self._indices[kind], (namespace, name))
        if (self.fresh and found) or len(found) > 1:
            body = api_get(kind, namespace, name)  # every indexed version is no newer than it
            self._seen[key] = frozenset({version(body), *(version(b) for b in found)})
            return body
        body, self._seen[key] = self._overlay.resolve(key, found[0] if found else None)
        return body

    def wrote(self, kind: Kind, namespace: str, name: str, response: Json | None) -> None:
        key = (kind, namespace, name)
        if response is None:
            self._overlay.forget(key)
        else:
            self._overlay.record(key, response, self._seen.get(key, frozenset()))

    def deleted(self, kind: Kind, namespace: str, name: str) -> None:
        key = (kind, namespace, name)
        self._overlay.record(key, None, self._seen.get(key, frozenset()))

    def watched(self, kind: Kind) -> bool:
        return proven(kind, self._indices[kind])


def ours(body: Json | None, owner: Owner) -> tuple[Json | None, Json | None]:
    """(the child if this job controls it, the object holding its name if another does).

    Outside the operator (no uid: the CLI reads whatever holds the name) everything is ours.
    """
    if body is None or not owner.uid or controlled_by(body["metadata"], owner.uid):
        return body, None
    return None, body


def lookup(index: Mapping[K, Iterable[V]], key: K) -> list[V]:
    """One key's indexed values, read from a worker thread while kopf's loop writes the index."""
    for _ in range(5):
        try:
            return list(index.get(key, ()))
        except RuntimeError:  # "changed size during iteration": the loop updated it; read again
            continue
    return list(index.get(key, ()))


# ---- What the indices keep of each object: what observe reads, nothing more ------------------


def _pick(body: Mapping[str, Any], part: str, keys: Iterable[str]) -> Json:
    src = body.get(part)
    if not isinstance(src, Mapping):
        return {}
    return {k: src[k] for k in keys if k in src}


_META = (
    "name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
    "ownerReferences",  # whose child it is: ownership.controlled_by (never the name)
    "finalizers",  # a Workload's resource-in-use (cluster/inuse.py)
)  # fmt: skip
#: Per kind: (part, keys) kept; None keeps the whole part.
_KEEP: dict[Kind, tuple[tuple[str, tuple[str, ...] | None], ...]] = {
    # spec.minAvailable: the spares a training gang reserves (domain/spares.py)
    Kind.VCJOB: (("spec", ("minAvailable",)), ("status", ("state", "retryCount"))),
    Kind.CLAIM: (("status", ("phase",)),),
    Kind.VOLUME: (("spec", ("claimRef",)),),
    Kind.RECORD: (("data", None),),
    Kind.LEASE: (("spec", None),),
    Kind.QUEUE: (("spec", ("parent",)), ("status", ("state",))),
    Kind.PRIORITY: (),  # that it exists
    Kind.WORKLOAD: (("spec", ("active", "queueName")), ("status", ("conditions", "admission"))),
    Kind.FLAVOR: (("spec", ("nodeLabels", "tolerations")),),
}


def slim(kind: Kind, body: Mapping[str, Any]) -> Json:
    """The fields of an object that a pass reads (the whole object for a TrainiumJob)."""
    if kind is Kind.TRAINIUMJOB:  # shallow: the watch event's own dicts, not a copy
        meta = body.get("metadata") or {}
        return {**body, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    out: Json = {"metadata": _pick(body, "metadata", _META)}
    gate = ((body.get("metadata") or {}).get("annotations") or {}).get(GATE_ANNOTATION)
    if kind is Kind.WORKLOAD and gate:  # compile-aware admission: lifted when the cache is Ready
        out["metadata"]["annotations"] = {GATE_ANNOTATION: gate}
    for part, keys in _KEEP[kind]:
        value = body.get(part)
        if isinstance(value, Mapping):
            out[part] = dict(value) if keys is None else _pick(body, part, keys)
    if kind is Kind.VCJOB and isinstance(body.get("spec"), Mapping):
        out.setdefault("spec", {})["tasks"] = _tasks(body["spec"].get("tasks"))
    return out


def _tasks(tasks: Any) -> list[Json]:
    """A Volcano job's tasks without their pod templates: the spares' reservation (spares.py)."""
    keep = ("name", "replicas", "minAvailable")
    return [{k: t[k] for k in keep if k in t} for t in tasks or () if isinstance(t, Mapping)]
