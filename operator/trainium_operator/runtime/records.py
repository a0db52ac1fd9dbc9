"""What passes remember of a job between events: one record per object (uid), dropped in one place.

The uid is the key of everything the runtime remembers or schedules, as it is kopf's: a job
deleted and created again under the same name is another object, with a record of its own, and
the old one's late events (its delete, its pods) touch only the old record. A name resolves to
a uid here and nowhere else (`resolve`). The pod watch, the job watch and the passes all change
records, from kopf's loop and the workers, so every change is a method under the store's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from trainium_operator.cluster.memory import Memory
from trainium_operator.domain import checkpoints
from trainium_operator.domain.checkpoints import Checkpoint

#: A job's uid: the key of its record, its queue entry and its timers.
Key = str
Json = dict[str, Any]
#: Forgotten uids remembered, so a gone job's late pod events start no record.
_GONE_KEPT = 4096
#: Log tails kept per job (oldest dropped): a read one is never read again, so a 404 or an
#: empty read after Volcano deleted the pod cannot replace it (issue 25, bug 5).
_LOGS_KEPT = 64
#: Log reads per gang instance of pods killed by their deletion (the peers Volcano stops when
#: one pod fails): a few say what all would; one each is 1,023 reads at 1,024 nodes (issue 35).
PEER_LOGS = 8
#: Gang instances whose peer reads are counted per job (the newest kept).
_INSTANCES_KEPT = 4
#: Pods whose logs are known gone, per job (oldest dropped): two 1,024-pod gang instances.
_GONE_LOGS_KEPT = 2048


@dataclass
class JobRecord:
    """One job's memory: what the watches told, what our passes wrote and how they went."""

    uid: str = ""
    #: Where the object lives (from its own watch event; empty until that arrives).
    namespace: str = ""
    name: str = ""
    #: What the job's passes carry from one to the next (cluster/memory.py), kept whole.
    memory: Memory = field(default_factory=Memory)
    #: A new term began and no pass of the job has read with GETs since (the watches may lag).
    stale: bool = False
    #: Pod events that asked for a pod read; `pods_read` of them a pass read successfully.
    pods_seen: int = 0
    pods_read: int = 0
    #: The newest checkpoint the job's training pods reported (pod watch).
    checkpoint: Checkpoint | None = None
    #: When the job entered its current phase (monotonic seconds), for the stage-seconds metric.
    phase_entered_at: float | None = None
    #: Rank 0's training pod as its watch event showed it (name, ports, IP): a metrics read
    #: needs no list of the gang's pods every interval.
    rank0_pod: Json | None = None
    #: Consecutive passes that waited on something that may heal (their backoff).
    waits: int = 0
    #: Troubled pods as their watch event showed them (name -> {metadata, status}): Volcano
    #: deletes a failed pod ~60 ms after it fails, before a pass can read it (issue 17, bug 5).
    failed_pods: dict[str, Json] = field(default_factory=dict)
    #: The failed container's log tail, read as its pod's watch event arrived (pod uid ->
    #: lines): by the pass, Volcano may have deleted the pod and its log with it. Kept once read.
    pod_logs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Log reads tried of killed peers, per gang instance (Volcano job uid and version).
    peer_reads: dict[str, int] = field(default_factory=dict)
    #: Pods whose log is gone, read empty or not worth a read (pod uid): their DELETED event
    #: came, a read found nothing (404), or a killed peer past PEER_LOGS. A pass reads none
    #: of them (each pass read 4 at 1,024 nodes, nearly all 404).
    logs_gone: dict[str, None] = field(default_factory=dict)

    @property
    def pods_changed(self) -> bool:
        """A pod event no successful pass has read yet."""
        return self.pods_seen > self.pods_read


class Records:
    """The records of every live job, by uid; names resolve to uids here only."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._by_key: dict[Key, JobRecord] = {}
        self._names: dict[tuple[str, str], Key] = {}
        self._gone: dict[Key, None] = {}

    def resolve(self, namespace: str, name: str) -> Key | None:
        """The uid the name belongs to now (the one place a name becomes a uid)."""
        with self.lock:
            return self._names.get((namespace, name))

    def uids(self) -> list[Key]:
        with self.lock:
            return list(self._by_key)

    def named(self, key: Key, namespace: str, name: str) -> JobRecord:
        """The object's own watch event: its record, bound to its name (a new object's is new)."""
        with self.lock:
            record = self.ensure(key)
            record.namespace, record.name = namespace, name
            self._names[(namespace, name)] = key
            return record

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, key: Key) -> JobRecord | None:
        with self.lock:
            return self._by_key.get(key)

    def ensure(self, key: Key) -> JobRecord:
        """The object's record (a new, empty one for a uid not seen before)."""
        with self.lock:
            record = self._by_key.get(key)
            if record is None:
                record = self._by_key[key] = JobRecord(key)
            return record

    def drop(self, key: Key) -> JobRecord | None:
        """The object is gone: its record goes (the one place that forgets a job)."""
        with self.lock:
            record = self._by_key.pop(key, None)
            if record is not None and self._names.get((record.namespace, record.name)) == key:
                del self._names[(record.namespace, record.name)]
            self._gone[key] = None
            if len(self._gone) > _GONE_KEPT:
                del self._gone[next(iter(self._gone))]
            return record

    def live_job(self, key: Key) -> bool:
        """Whether the job is there (once it is deleted, its pods' ends tell nothing)."""
        with self.lock:
            record = self._by_key.get(key)
            return record is not None

    def known(self, key: Key) -> bool:
        """Whether events about this uid may start a record (it is not a forgotten object)."""
        with self.lock:
            return key not in self._gone

    @contextmanager
    def live(self, key: Key, record: JobRecord) -> Iterator[bool]:
        """Whether record is still the job's, held so it cannot be dropped meanwhile."""
        with self.lock:
            yield self._by_key.get(key) is record

    def pod_event(
        self, key: Key, pod: Json | None = None, log: tuple[str, ...] = (), gone: bool = False
    ) -> None:
        """A troubled pod: the next pass reads the pods, and this pod as its event showed it.

        `gone`: the pod was deleted, and its log with it: no pass reads it."""
        with self.lock:
            if not self.known(key):
                return
            record = self.ensure(key)
            record.pods_seen += 1
            if pod is not None:
                record.failed_pods[pod["metadata"]["name"]] = pod
                uid = pod["metadata"].get("uid")
                if uid and gone and not log:
                    _remember_gone(record, uid)
                if uid and log and uid not in record.pod_logs:  # the first read is the one kept
                    record.pod_logs[uid] = log
                    while len(record.pod_logs) > _LOGS_KEPT:
                        del record.pod_logs[next(iter(record.pod_logs))]

    def peer_read(self, key: Key, instance: str) -> bool:
        """Whether a killed peer's log of this gang instance may be read (counts the read)."""
        with self.lock:
            record = self._by_key.get(key)
            if record is None:
                return True
            tried = record.peer_reads.pop(instance, 0)
            record.peer_reads[instance] = tried + 1  # newest last
            while len(record.peer_reads) > _INSTANCES_KEPT:
                del record.peer_reads[next(iter(record.peer_reads))]
            return tried < PEER_LOGS

    def has_log(self, key: Key, uid: str) -> bool:
        """Whether the failed container's log tail of this pod was read already (or is gone)."""
        with self.lock:
            record = self._by_key.get(key)
            return record is not None and (uid in record.pod_logs or uid in record.logs_gone)

    def log_gone(self, key: Key, uid: str) -> None:
        """This pod's log is not to be read (again): a read found nothing (404), or peers tell."""
        with self.lock:
            record = self._by_key.get(key)
            if record is not None and uid not in record.pod_logs:
                _remember_gone(record, uid)

    def pods_to_read(self, record: JobRecord) -> tuple[int, tuple[Json, ...]]:
        """What a pass starts with: the pod events so far and the pods they showed."""
        with self.lock:
            return record.pods_seen, tuple(record.failed_pods.values())

    def logs_read(self, record: JobRecord) -> dict[str, tuple[str, ...]]:
        """The log tails read on pod events (pod uid -> lines; a gone one's: none), for a pass."""
        with self.lock:
            return {**dict.fromkeys(record.logs_gone, ()), **record.pod_logs}

    def pods_read(self, record: JobRecord, seen: int, shown: tuple[Json, ...] = ()) -> None:
        """A pass that started with `seen` pod events read the pods (and `shown`) successfully."""
        with self.lock:
            record.pods_read = max(record.pods_read, seen)
            for pod in shown:
                name = pod["metadata"]["name"]
                if record.failed_pods.get(name) is pod:  # not replaced by a newer event meanwhile
                    del record.failed_pods[name]

    def checkpoint(self, key: Key, found: Checkpoint | None, *, create: bool = True) -> bool:
        """Keep a newer checkpoint a training pod reported; whether it was newer.

        `create=False` (a pod's deletion): only a live job's record learns it; the pods of a
        deleted job go after its record did, and must not leave a new one behind.
        """
        with self.lock:
            if found is None or (not create and key not in self._by_key) or not self.known(key):
                return False
            record = self.ensure(key)
            known = record.checkpoint
            if checkpoints.newest([known, found]) is known:
                return False
            record.checkpoint = found
            return True

    def rank0(self, key: Key, pod: Json | None) -> bool:
        """Where rank 0 serves its metrics now (None: no IP, or gone); whether it is a new place.

        A new place wakes the job: its passes read nothing while rank 0 had no address.
        """
        with self.lock:
            live = pod is not None and self.known(key)
            record = self.ensure(key) if live else self._by_key.get(key)
            if record is None:
                return False
            before, record.rank0_pod = record.rank0_pod, pod
            return pod is not None and pod != before

    def phase_entered(self, record: JobRecord, at: float) -> None:
        with self.lock:
            record.phase_entered_at = at

    def remember(self, record: JobRecord, memory: Memory) -> None:
        """What a pass left for the next one (cluster/memory.py): kept whole."""
        with self.lock:
            record.memory = memory

    def is_echo(self, key: Key, version: str | None) -> bool:
        """Whether a job event only shows our own last status patch."""
        with self.lock:
            record = self._by_key.get(key)
            return record is not None and bool(version) and record.memory.written_version == version

    def waited(self, record: JobRecord, waiting: bool) -> int:
        """Count a pass that waited (0 resets); the number of waits before this one."""
        with self.lock:
            before = record.waits
            record.waits = before + 1 if waiting else 0
            return before

    def new_term(self) -> None:
        """A new leadership term: what our earlier writes told is not to be trusted to echo."""
        with self.lock:
            for record in self._by_key.values():
                record.memory = record.memory.for_a_new_term()
                record.stale = True


def _remember_gone(record: JobRecord, uid: str) -> None:
    """Keep that a pod's log is gone (the oldest such pods forgotten first)."""
    record.logs_gone.pop(uid, None)
    record.logs_gone[uid] = None  # newest last
    while len(record.logs_gone) > _GONE_LOGS_KEPT:
        del record.logs_gone[next(iter(record.logs_gone))]
