"""Our own list and watch of an optional kind (Kueue's Workloads and ResourceFlavors), beside kopf.

kopf holds every event of every kind until each kind it indexes has been listed
(`operator_indexed` in kopf/_core/reactor/processing.py), so an indexed kind whose CRD appears
while the operator runs stalled every job's events until kopf listed it, minutes once (issue 41);
and a kopf watch re-opened on a deleted CRD meets 404, which kopf treats as fatal (nolar/kopf#509).
A kind watched here is neither: while it is not served (404) a watch of its CRD waits for it
(no polling: an idle operator without Kueue sends no request), a deleted CRD empties its index
(each object's owner woken), and no other kind waits for it.

The index is what a pass reads (reads.WatchReader): (namespace, name) -> the objects of that name,
as kopf's indices are; `listed` says an absence in it is trusted (reads.proven).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

Json = dict[str, Any]
Name = tuple[str, str]
#: Seconds between lists of a kind whose CRD exists but is not served yet (discovery lags).
POLL = 1.0
#: Seconds a watch request lasts on the server before it is re-opened (from the last version).
WATCH_SECONDS = 240
#: Backoff after a failed list or watch: first, doubling, capped (seconds).
FIRST_BACKOFF, MAX_BACKOFF = 1.0, 30.0
#: (type, body): ADDED, MODIFIED or DELETED, as a watch says it.
OnEvent = Callable[[str, Json], None]
#: A list: (the objects, the list's resourceVersion); raises ApiException (404: not served).
Lister = Callable[[], tuple[list[Json], str]]
#: A watch from a resourceVersion: its events ({"type", "object"}), until the server ends it.
Watcher = Callable[[str, int], Iterable[Json]]
#: Blocks until the kind's CRD exists (True) or the seconds pass (False).
CrdWaiter = Callable[[int], bool]
log = logging.getLogger(__name__)


class KindIndex(Mapping[Name, list[Json]]):
    """(namespace, name) -> the objects of that name, as our watch shows them (slimmed).

    Written by its watch thread only, read by any: every change replaces a whole entry (or the
    whole dict), so a reader never sees a half-made one.
    """

    def __init__(self, slim: Callable[[Json], Json] = lambda body: body) -> None:
        self._items: dict[Name, list[Json]] = {}
        self._slim = slim
        #: Whether the kind has been listed since it was last found absent (an absence is true).
        self.listed = False

    def __getitem__(self, key: Name) -> list[Json]:
        return self._items[key]

    def __iter__(self) -> Iterator[Name]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def put(self, body: Json) -> None:
        """One object as a watch event showed it."""
        self._items[name_of(body)] = [self._slim(body)]

    def drop(self, body: Json) -> None:
        """One object deleted."""
        self._items.pop(name_of(body), None)

    def replace(self, bodies: Iterable[Json]) -> tuple[list[Json], list[Json]]:
        """A whole list (or nothing: the kind is gone): (the objects gone, those new or changed)."""
        old, new = self._items, {name_of(b): (b, [self._slim(b)]) for b in bodies}
        self._items = {k: slimmed for k, (_b, slimmed) in new.items()}
        gone = [v[0] for k, v in old.items() if k not in new]
        changed = [b for k, (b, _s) in new.items() if _version(old.get(k)) != _version([b])]
        return gone, changed


def _version(entry: list[Json] | None) -> str | None:
    return None if not entry else str((entry[0].get("metadata") or {}).get("resourceVersion"))


def name_of(body: Mapping[str, Any]) -> Name:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class OwnWatch:
    """One kind's list and watch in a thread: events go to `on_event` after the index has them."""

    def __init__(
        self,
        what: str,
        index: KindIndex,
        lister: Lister,
        watcher: Watcher,
        on_event: OnEvent,
        *,
        wants: Callable[[Json], bool] = lambda _body: True,
        on_state: Callable[[bool], None] = lambda _failing: None,
        crd: CrdWaiter = lambda _seconds: True,
        poll: float = POLL,
    ) -> None:
        self.what, self.index = what, index
        self._list, self._watch, self._on_event, self._wants = lister, watcher, on_event, wants
        self._on_state, self._crd, self._poll = on_state, crd, poll
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self.run, name=f"watch {what}", daemon=True)
        self._failures = self._unserved = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """No more events; the thread ends at its watch's next line (it is a daemon meanwhile)."""
        self._stopped.set()
        self._thread.join(timeout)

    def run(self) -> None:
        """List, then watch from the list's version, for ever; relist on any end of a watch."""
        while not self._stopped.is_set():
            try:
                self.once()
            except Exception as exc:  # never let the thread die: the next relist heals
                self._failed(exc)

    def once(self) -> None:
        """One list and the watches that follow it, until one ends in an error (410, 404...)."""
        version = self.relist()
        if version is None:  # not served: wait for its CRD, then list again soon
            if self._crd(WATCH_SECONDS):  # there but not served (yet, or not this version)
                self._unserved += 1
                self._stopped.wait(min(MAX_BACKOFF, self._poll * 2 ** min(self._unserved, 10)))
            return
        self._unserved = 0
        while not self._stopped.is_set():
            for event in self._watch(version, WATCH_SECONDS):
                if self._stopped.is_set():
                    return
                version = self.take(event) or version
            self._recovered()  # the server ended a working watch: re-open it from `version`

    def relist(self) -> str | None:
        """The kind as the server lists it now; None when it is not served (404)."""
        try:
            items, version = self._list()
        except ApiException as exc:
            if exc.status != 404:
                raise
            if self.index.listed:
                log.info("%s are not served any more: their index is emptied", self.what)
            self._apply_list([], listed=False)
            return None
        if not self.index.listed:
            log.info("%s are listed and watched now", self.what)
        self._apply_list([b for b in items if self._wants(b)], listed=True)
        return version

    def take(self, event: Json) -> str | None:
        """One watch event into the index, then to `on_event`; the version it carries."""
        kind, body = event.get("type"), event.get("object")
        if not isinstance(body, dict):
            return None
        version = (body.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            return str(version) if version else None
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return None
        if kind == "DELETED" or not self._wants(body):
            self.index.drop(body)
            kind = "DELETED"
        else:
            self.index.put(body)
        self._on_event(kind, body)
        self._recovered()
        return str(version) if version else None

    def _apply_list(self, items: list[Json], *, listed: bool) -> None:
        """A list replaces the index; what it changed goes to `on_event` (a deleted CRD: all)."""
        gone, changed = self.index.replace(items)
        self.index.listed = listed
        for body in gone:
            self._on_event("DELETED", body)
        for body in changed:
            self._on_event("ADDED", body)

    def _failed(self, exc: Exception) -> None:
        """Relist: at once after 410 Gone (routine), else backing off; said after 3 in a row."""
        if _expired(exc):
            log.debug("watch of %s ended (%s): listing again", self.what, _brief(exc))
            return
        self._failures += 1
        if self._failures == 3:  # one failure is routine (a reset, a restarting API server)
            self._on_state(True)
        log.warning("watch of %s failed (%s): listing again", self.what, _brief(exc))
        self._stopped.wait(min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** min(self._failures - 1, 10)))

    def _recovered(self) -> None:
        if self._failures:
            if self._failures >= 3:
                self._on_state(False)
            self._failures = 0


def _expired(exc: Exception) -> bool:
    """410 Gone (the version watched from is too old) or 404 (the CRD deleted: the list says
    so): routine, list again at once."""
    return isinstance(exc, ApiException) and exc.status in (404, 410)


def _brief(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
