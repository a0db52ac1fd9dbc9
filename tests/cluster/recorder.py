"""Every version of a collection's objects, as a watch shows them: what a test asserts order on.

A Recorder lists a collection, then watches it from the listing's resourceVersion on a thread
of its own (re-listing after a 410), and keeps each (type, object) once. On the tier all objects
live in one etcd, whose revision is every object's resourceVersion: ordering two versions of any
two objects by resourceVersion orders the writes that made them (what the API server promises
only within one collection holds across collections here). Polling would miss a version that
lives for milliseconds (a phase written and overwritten); a watch shows every one.
"""

from __future__ import annotations

import threading
import time
import urllib.error
from dataclasses import dataclass
from typing import Any

from cluster import Api

Obj = dict[str, Any]


@dataclass(frozen=True)
class Version:
    """One version of one object: its resourceVersion, the watch event's type, the object."""

    rv: int
    type: str
    obj: Obj

    @property
    def uid(self) -> str:
        return str(self.obj["metadata"]["uid"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def phase(self) -> str | None:
        return (self.obj.get("status") or {}).get("phase")

    def owners(self) -> set[str]:
        """uids of the object's ownerReferences."""
        return {ref["uid"] for ref in self.obj["metadata"].get("ownerReferences") or []}


class _Relist(Exception):
    pass


class Recorder:
    """Watch `path` (a collection) from now until the `with` block ends; versions() in rv order."""

    def __init__(self, api: Api, path: str) -> None:
        self.api, self.path = api, path
        self._versions: dict[tuple[str, int, str], Version] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listed = threading.Event()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch {path}")

    def __enter__(self) -> Recorder:
        self._thread.start()
        if not self._listed.wait(60):
            raise TimeoutError(f"no listing of {self.path} in 60s: {self.errors[-3:]}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def versions(self, uid: str | None = None, name: str | None = None) -> list[Version]:
        """What was seen so far (of one uid or name), oldest first."""
        with self._lock:
            seen = list(self._versions.values())
        return sorted(
            (v for v in seen if uid in (None, v.uid) and name in (None, v.name)),
            key=lambda v: (v.rv, v.type != "DELETED"),
        )

    def created(self) -> dict[str, Version]:
        """uid -> the first version seen of each object (its creation, once watched)."""
        first: dict[str, Version] = {}
        for version in self.versions():
            first.setdefault(version.uid, version)
        return first

    def _keep(self, kind: str, obj: Obj) -> None:
        version = Version(int(obj["metadata"]["resourceVersion"]), kind, obj)
        with self._lock:
            self._versions.setdefault((version.uid, version.rv, kind), version)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listing = self.api.request("GET", self.path)
                for item in listing["items"]:
                    self._keep("LISTED", item)
                rv = listing["metadata"]["resourceVersion"]
                self._listed.set()
                while not self._stop.is_set():
                    for event in self.api.watch(self.path, rv, timeout=5):
                        if event["type"] == "ERROR":
                            raise _Relist(str(event.get("object")))
                        rv = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self._keep(event["type"], event["object"])
            except _Relist as gone:
                self.errors.append(f"relist: {gone}")
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as err:
                if self._stop.is_set():
                    return
                self.errors.append(repr(err))
                time.sleep(0.2)  # a back-off before the next listing, not a synchronisation
