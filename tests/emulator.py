"""A Kubernetes API emulator for end-to-end tests: kmock 0.8's in-memory server, gaps closed.

kmock stores objects and speaks the URL scheme, discovery and watch framing; this subclass takes
over the state changes (create/patch/replace/delete) so that metadata, status isolation,
selectors, resourceVersion-aware watches and ownerReference garbage collection behave like a
real API server.

Pinned to kmock==0.8, which has no public hooks for any of this: every kmock private the test
tree uses is here, in this module only, and `KMOCK_PRIVATES` lists them for
`tests/test_kmock_privates.py`, which fails loudly (naming the private) when kmock changes one:

- `kmock._internal.parsing.parse_path` / `ParsedPath`: replaced module-wide, so that Namespace
  URLs route to the Namespace resource (kmock raises on /api/v1/namespaces).
- `KubernetesEmulator._handle` (overridden): the request entry; we record, inject faults, apply
  the change ourselves and answer. `RawHandler._handle` (called): kmock's routing and rendering,
  without the emulator's own naive state change.
- `KubernetesEmulator._serve_fetch`, `_serve_list`, `_serve_watch`, `KubernetesScaffold
  ._serve_version`, `_render_error` (overridden): selectors, resourceVersions, watch replay from
  a version, our kinds in discovery, Status bodies with reasons.
- `KubernetesEmulator._objects`, `_lock`, `_buses` (read and written): kmock's store, its lock
  and its watch buses, which our state changes keep.
- `Root._requests`, `Root._payloads` (trimmed): kmock keeps every request it served and scans
  them all to route the next one (O(n^2) over a session, `_forget`).
- `Request._raw_request` (read): the aiohttp request under kmock's, whose socket a fault resets
  (`aiohttp_request`).
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import datetime
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import aiohttp.web
import jsonpatch
import kmock
import yaml
from kmock._internal import parsing

import controllers
from k8s_semantics import (
    ApiRequest,
    SelectorError,
    apply_merge,
    field_values,
    generated_name,
    match_selector,
    merge_patch,
)

if TYPE_CHECKING:
    from faults import FaultInjector

Obj = dict[str, Any]
Key = tuple[kmock.resource, str | None, str]
VERBS = {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

# kmock's URL parser raises ValueError on /api/v1/namespaces (a 500 for `kubectl get ns`) and reads
# /api/v1/namespaces/NAME as "namespace NAME, no resource": route both to the Namespace resource.
_NAMESPACE_URL = re.compile(r"/api/v1/namespaces(?:/([^/]+)(?:/(status|finalize))?)?/?")
_kmock_parse_path = parsing.parse_path


def _parse_path(path: str) -> parsing.ParsedPath:
    """Parse a request path like kmock, but understand Namespace URLs."""
    if m := _NAMESPACE_URL.fullmatch(path):
        return parsing.ParsedPath("", "v1", "namespaces", None, m[1], m[2])
    return _kmock_parse_path(path)


parsing.parse_path = _parse_path


#: (kmock class or module, private name) for every private above: tests/test_kmock_privates.py.
KMOCK_PRIVATES: tuple[tuple[object, str], ...] = (
    (parsing, "parse_path"),
    (parsing, "ParsedPath"),
    (kmock.KubernetesEmulator, "_handle"),
    (kmock.RawHandler, "_handle"),
    (kmock.KubernetesEmulator, "_serve_fetch"),
    (kmock.KubernetesEmulator, "_serve_list"),
    (kmock.KubernetesEmulator, "_serve_watch"),
    (kmock.KubernetesScaffold, "_serve_version"),
    (kmock.KubernetesScaffold, "_render_error"),
    (kmock.KubernetesEmulator, "_objects"),
    (kmock.KubernetesEmulator, "_lock"),
    (kmock.KubernetesEmulator, "_buses"),
    (kmock.Root, "_requests"),
    (kmock.Root, "_payloads"),
    (kmock.Request, "_raw_request"),
)


def aiohttp_request(request: kmock.Request) -> aiohttp.web.BaseRequest | None:
    """The aiohttp request under kmock's (kmock 0.8 keeps it private): faults reset its socket."""
    return request._raw_request


def _error(code: int, reason: str, message: str, **details: Any) -> kmock.KubernetesError:
    """A Status error with the machine-readable reason client-go and kopf match on."""
    return kmock.KubernetesError(status=code, reason=reason, message=message, details=details)


def _spec(obj: Obj) -> Obj:
    """Everything whose change bumps metadata.generation."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _check_preconditions(key: Key, obj: Obj, wanted: Obj) -> None:
    """DeleteOptions.preconditions, as the API server checks them (409 Conflict)."""
    md = obj["metadata"]
    for field in ("uid", "resourceVersion"):
        if wanted.get(field) and wanted[field] != md.get(field):
            msg = (
                f"Precondition failed: {field.upper() if field == 'uid' else field} in "
                f"precondition: {wanted[field]}, {field} in object meta: {md.get(field)}"
            )
            raise _error(409, "Conflict", msg, name=key[2])


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class K8sEmulator(kmock.KubernetesEmulator):
    """kmock's KubernetesEmulator made honest enough for kubectl, kopf and the python client."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.api_requests: list[ApiRequest] = []
        self.keep_requests = False  # True: kmock keeps every request (`list(emulator)`), O(n^2)
        self.faults: FaultInjector | None = None  # tests/faults.py, for the reliability suite
        self._rv = 0
        self._log: list[tuple[int, kmock.resource, Obj]] = []  # every event, for watch replay
        self._outcomes: dict[kmock.Request, Obj] = {}
        #: Admission refusals tests inject (webhooks, quota, pod validation): see controllers.py.
        self.refusals: list[controllers.Refusal] = []
        #: Container logs by (namespace, pod), served at pods/NAME/log as the kubelet would.
        self.pod_logs: dict[tuple[str, str], str] = {}
        #: The garbage collector runs (False: kube-controller-manager stopped; deletions wait).
        self.collecting = True
        self.uncollected: list[tuple[Key, str]] = []
        #: Server-side apply: the status fields each (object uid, field manager) last applied.
        self.applied: dict[tuple[str, str], set[str]] = {}
        #: Resources ("group/version/plural") served but not yet listed by discovery: the API
        #: server lists a new CRD's kind a moment after the CRD's last event (issue 33).
        self.undiscovered: set[str] = set()
        fallback = self.fallback**1  # outranks kmock's own fallbacks
        # POST answers 201: the python client's CustomObjectsApi returns None on a 200.
        fallback[kmock.action.CREATE] << 201 << self._serve_outcome
        fallback[kmock.action.UPDATE] << self._serve_outcome
        fallback[kmock.action.DELETE] << self._serve_outcome
        fallback[kmock.method.PUT] << self._serve_outcome  # kmock 0.8 has no PUT (kubectl replace)
        # client-go refuses watch streams served as application/octet-stream.
        (
            fallback[kmock.action.WATCH]
            << kmock.headers({"Content-Type": "application/json"})
            << (self._serve_watch)
        )

    # ---- request entry: record, change state, answer -------------------------------------------

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        record = self._record(request)
        try:
            fault = self.faults.pick(record) if self.faults and record else None
            if fault is None:
                response = await self._answer(request)
            else:  # tests/faults.py: an injected 500/429/409/reset instead of (or after) the answer
                assert self.faults is not None and record is not None
                response = await self.faults.respond(
                    fault, request, record, self._answer, self._render_error
                )
        finally:
            self._outcomes.pop(request, None)
            self._forget(request)
        if record is not None:
            record.code = response.status
        return response

    async def _answer(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """Change state (under the lock) and answer, as the API server would."""
        try:
            if request.resource is not None and request.resource.plural:
                async with self._lock:
                    if (outcome := await self._change(request)) is not None:
                        self._outcomes[request] = outcome
                        await self._run_controllers()
            # Skip kmock's own _handle: it would apply the change a second time, naively.
            response = await kmock.RawHandler._handle(self, request)
            if request.subresource == "log" and response.status == 200 and not response.prepared:
                # As the API server answers pods/log: plain text (kmock says octet-stream).
                response.content_type, response.charset = "text/plain", "utf-8"
            return response
        except kmock.KubernetesError as e:
            return await self._render_error(e)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            return await self._render_error(_error(422, "Invalid", str(e)))  # k8s: not a 500

    def _forget(self, request: kmock.Request) -> None:
        """Drop an answered request from kmock's records, unless a test asked to keep them.

        kmock 0.8 keeps every request it served and, to route each new one, scans them all
        (`request in payload._source` iterates the history): O(n^2) over a session.
        """
        if self.keep_requests:
            return
        for served in (self._requests, *(p._requests for p in self._payloads)):
            for i in range(len(served) - 1, -1, -1):  # by identity; answered ones are recent
                if served[i] is request:
                    del served[i]
                    break

    def retained_requests(self) -> int:
        """How many served requests kmock still holds (it scans them all to route a new one)."""
        return len(self._requests)

    def _record(self, request: kmock.Request) -> ApiRequest | None:
        res = request.resource
        if res is None or not res.plural:
            return None  # discovery (/api, /apis/G/V): allowed to everyone by system:discovery
        verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "GET": "get"}.get(
            request.method.value, "delete"
        )
        if request.action == kmock.action.WATCH:
            verb = "watch"
        elif request.name is None:
            verb = {"get": "list", "delete": "deletecollection"}.get(verb, verb)
        record = ApiRequest(
            verb, res.group or "", res.plural, request.subresource, request.namespace,
            request.name, self._header(request, "user-agent"), at=time.monotonic(),
        )  # fmt: skip
        record.token = self._header(request, "authorization").removeprefix("Bearer ")
        self.api_requests.append(record)
        return record

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        # kmock 0.8 says 'Object Not Found'/'Object Already Exists'; client-go matches the reason.
        if isinstance(exc, kmock.KubernetesNotFoundError):
            exc = _error(404, "NotFound", exc.message)
        elif isinstance(exc, kmock.KubernetesError) and exc.status == 409 and exc.details is None:
            exc = _error(409, "AlreadyExists", exc.message or "already exists")
        return await super()._render_error(exc)

    # ---- state changes, under self._lock -------------------------------------------------------

    async def _change(self, request: kmock.Request) -> Obj | None:
        """Apply a create/patch/replace/delete to the store; return the object to answer with."""
        res, method, sub = request.resource, request.method, request.subresource
        assert res is not None
        info = self._info(res)
        key: Key = (res, request.namespace if info.namespaced else None, request.name or "")
        if method == kmock.method.POST and request.name is None:
            return await self._create(res, request.namespace, self._body(request))
        if request.name is None or sub not in (None, "status") or method == kmock.method.GET:
            return None
        old = self._live(key)
        if method == kmock.method.DELETE:
            if old is None:
                raise self._not_found(key)
            options = request.data if isinstance(request.data, dict) else {}
            _check_preconditions(key, old, options.get("preconditions") or {})
            policy = request.params.get("propagationPolicy") or options.get("propagationPolicy")
            orphan = policy == "Orphan"
            return await self._delete(key, orphan=orphan)
        body = self._body(request)
        ctype = self._header(request, "content-type")
        if old is None and "apply-patch" in ctype:  # server-side apply creates
            return await self._create(res, request.namespace, body)
        if old is None:
            raise self._not_found(key)
        if method == kmock.method.PUT:
            new = copy.deepcopy(body)
        elif isinstance(body, list):
            new = jsonpatch.apply_patch(old, body)
        elif "apply-patch" in ctype and sub == "status":
            new = self._apply_status(old, body, request.params.get("fieldManager", ""))
        else:  # merge, strategic merge (approximated: lists replaced) and apply patches
            new = merge_patch(old, body)
        return await self._update(key, old, new, status_only=sub == "status")

    def _apply_status(self, old: Obj, body: Obj, manager: str) -> Obj:
        """Server-side apply to /status, as far as owners matter here: conditions merge by
        type (a listType=map), and a status field this manager applied before and omits now
        is removed unless another apply still holds it (Kueue clears an admission so)."""
        uid = old["metadata"]["uid"]
        sent = set((body.get("status") or {}) if isinstance(body, dict) else ())
        before = self.applied.get((uid, manager), set())
        held = {f for (u, m), fs in self.applied.items() if u == uid and m != manager for f in fs}
        new = apply_merge(old, body)
        for field in before - sent - held:
            (new.get("status") or {}).pop(field, None)
        self.applied[(uid, manager)] = sent
        return new

    async def _create(self, res: kmock.resource, ns: str | None, body: Any) -> Obj:
        info = self._info(res)
        obj: Obj = copy.deepcopy(body) if isinstance(body, dict) else {}
        md = obj.setdefault("metadata", {})
        if info.namespaced:  # the URL's namespace wins, as in the real API server
            md["namespace"] = ns or md.get("namespace") or "default"
        else:
            md.pop("namespace", None)
        if not md.get("name") and md.get("generateName"):
            md["name"] = self._generate_name(res, md.get("namespace"), md["generateName"])
        if not md.get("name"):
            raise _error(422, "Invalid", "metadata.name: Required value: name or generateName")
        key: Key = (res, md.get("namespace"), md["name"])
        if self._live(key) is not None:
            raise _error(409, "AlreadyExists", f'{self._what(res)} "{md["name"]}" already exists')
        obj.setdefault("apiVersion", f"{res.group}/{res.version}".lstrip("/"))
        obj.setdefault("kind", info.kind or res.plural)
        if "status" in info.subresources:
            obj.pop("status", None)  # status is written through /status only
        md.pop("deletionTimestamp", None)
        controllers.admit(res, obj, self.refusals)
        md.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        if res == "v1/namespaces":
            obj["status"] = {"phase": "Active"}
        elif res == "apiextensions.k8s.io/v1/customresourcedefinitions":
            self._register_crd(obj)
        return await self._store(key, obj, "ADDED")

    def _generate_name(self, res: kmock.resource, ns: str | None, prefix: str) -> str:
        """A free name for generateName: retried on collision, as the API server does (k8s 1.32+).

        A 5-hex-character suffix alone collided within a few thousand Events and dropped them.
        """
        for _ in range(8):
            name = generated_name(prefix)
            key = (res, ns, name)
            if key not in self._objects or self._objects[key].deleted:
                return name
        raise _error(409, "AlreadyExists", f"{prefix}*: no free generated name after 8 tries")

    async def _update(self, key: Key, old: Obj, new: Obj, *, status_only: bool) -> Obj:
        info = self._info(key[0])
        if status_only:  # /status changes only .status, and is refused on a stale resourceVersion
            sent = (new.get("metadata") or {}).get("resourceVersion")
            rv = sent or old["metadata"]["resourceVersion"]
            new = {**old, "metadata": {**old["metadata"], "resourceVersion": rv},
                   "status": new.get("status")}  # fmt: skip
        elif "status" in info.subresources:  # the main resource never changes .status
            new["status"] = old.get("status")
        new = {k: v for k, v in new.items() if v is not None}
        md, old_md = new.setdefault("metadata", {}), old["metadata"]
        if md.get("resourceVersion") not in (None, old_md["resourceVersion"]):
            raise _error(409, "Conflict", f"the object has been modified: {key[2]}", name=key[2])
        for field in ("uid", "creationTimestamp", "name", "namespace", "generation"):
            if field in old_md:
                md[field] = old_md[field]  # immutable or server-owned
        if "deletionTimestamp" in old_md:
            md["deletionTimestamp"] = old_md["deletionTimestamp"]
        if _spec(old) != _spec(new):
            md["generation"] = int(old_md.get("generation", 1)) + 1
        if new == old:
            return old  # a no-op write bumps nothing and emits no event, as in the real server
        if key[0] == "apiextensions.k8s.io/v1/customresourcedefinitions":
            self._register_crd(new)
        if md.get("deletionTimestamp") and not md.get("finalizers"):
            return await self._delete(key, new)  # the last finalizer is gone
        return await self._store(key, new, "MODIFIED")

    async def _delete(self, key: Key, obj: Obj | None = None, *, orphan: bool = False) -> Obj:
        obj = copy.deepcopy(obj or self._live(key) or {})
        md = obj["metadata"]
        if md.get("finalizers"):  # finalizers hold the object, marked for deletion
            if md.get("deletionTimestamp"):
                return obj
            md["deletionTimestamp"] = _now()
            return await self._store(key, obj, "MODIFIED")
        obj = await self._store(key, obj, "DELETED")
        self._objects[key].delete()
        if orphan:
            await self._orphan(md["uid"])
        elif self.collecting:
            await self._collect(key, md["uid"])
        else:
            self.uncollected.append((key, md["uid"]))
        return obj

    async def _orphan(self, uid: str) -> None:
        """propagationPolicy Orphan: dependents lose their reference to the owner, and stay."""
        for key, o in list(self._objects.items()):
            if o.deleted:
                continue
            refs = o.raw["metadata"].get("ownerReferences") or []
            if not any(r.get("uid") == uid for r in refs):
                continue
            kept = [r for r in refs if r.get("uid") != uid]
            obj = copy.deepcopy(o.raw)
            obj["metadata"]["ownerReferences"] = kept
            if not kept:
                del obj["metadata"]["ownerReferences"]
            await self._store(key, obj, "MODIFIED")

    async def resume_collection(self) -> None:
        """The garbage collector back (kube-controller-manager resumed): collect what waited."""
        self.collecting = True
        waiting, self.uncollected = self.uncollected, []
        for key, uid in waiting:
            await self._collect(key, uid)

    async def _collect(self, owner: Key, uid: str) -> None:
        """Background garbage collection: delete dependents whose last live owner is gone."""
        live = {o.raw["metadata"].get("uid") for o in self._objects.values() if not o.deleted}
        for key, o in list(self._objects.items()):
            if o.deleted:
                continue
            if owner[0] == "v1/namespaces" and key[1] == owner[2]:
                await self._delete(key)  # a deleted namespace takes its contents along
                continue
            refs = o.raw["metadata"].get("ownerReferences") or []
            if not any(r.get("uid") == uid for r in refs):
                continue
            if owner[1] is not None and key[1] != owner[1]:
                continue  # invalid in k8s: cluster-scoped or cross-namespace dependents
            if not any(r.get("uid") in live for r in refs if r.get("uid") != uid):
                await self._delete(key)

    # ---- controllers (tests/controllers.py) act through these, under self._lock -------------

    async def _run_controllers(self) -> None:
        """Let the cluster's controllers react to a change until they are quiet."""
        for _ in range(100):
            if not await controllers.sync_storage(self):
                return
        raise RuntimeError("the emulated controllers did not settle")

    async def store_new(self, res: kmock.resource, ns: str | None, obj: Obj) -> Obj:
        """Create an object as a controller would (admission included)."""
        return await self._create(res, ns, obj)

    async def store_changed(self, key: Key, obj: Obj) -> Obj:
        """Write a controller's change to spec and status alike (controllers own both)."""
        return await self._store(key, copy.deepcopy(obj), "MODIFIED")

    async def update_object(self, key: Key, old: Obj, new: Obj) -> Obj:
        """Update with API semantics (a finalizer removed may complete a deletion)."""
        return await self._update(key, old, copy.deepcopy(new), status_only=False)

    async def _store(self, key: Key, obj: Obj, event: str) -> Obj:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if key in self._objects:
            self._objects[key].history.append(obj)  # re-creation after deletion keeps history
        else:
            self._objects[key] = obj
        self._log.append((self._rv, key[0], {"type": event, "object": obj}))
        await self._buses[key[0]].put({"type": event, "object": obj})
        return obj

    def _register_crd(self, crd: Obj) -> None:
        """Make a CRD's resource discoverable and mark it Established, as the apiserver does."""
        spec = crd.get("spec", {})
        names = spec.get("names", {})
        for v in spec.get("versions", []):
            if v.get("served", True):
                self.resources[f"{spec['group']}/{v['name']}/{names['plural']}"] = (
                    kmock.ResourceInfo(
                        kind=names["kind"], singular=names.get("singular"),
                        namespaced=spec.get("scope") == "Namespaced",
                        shortnames=names.get("shortNames", []),
                        categories=names.get("categories", []),
                        subresources=v.get("subresources", {}), verbs=VERBS,
                    )
                )  # fmt: skip
        conditions = [{"type": t, "status": "True"} for t in ("NamesAccepted", "Established")]
        crd["status"] = {"acceptedNames": names, "conditions": conditions}

    # ---- reads ---------------------------------------------------------------------------------

    async def _serve_version(self, request: kmock.Request) -> kmock.Payload:
        result = await super()._serve_version(request)
        assert isinstance(result, dict)
        result["groupVersion"] = result["groupVersion"].lstrip("/")  # kmock: "/v1" for the core
        gv = result["groupVersion"]
        result["resources"] = [
            r for r in result["resources"]
            if f"{gv}/{r['name'].split('/')[0]}" not in self.undiscovered
        ]  # fmt: skip
        for r in result["resources"]:
            if "/" in r["name"]:  # else kubectl warns "short name could also match" on subresources
                r.update(shortNames=[], categories=[], verbs=["get", "patch", "update"])
        return result

    async def _serve_outcome(self, request: kmock.Request) -> Obj:
        if request not in self._outcomes:
            raise _error(405, "MethodNotAllowed", f"{request.method.value} is not supported here")
        return self._outcomes[request]

    async def _serve_fetch(self, request: kmock.Request) -> Obj:
        assert request.resource is not None
        ns = request.namespace if self._info(request.resource).namespaced else None
        key: Key = (request.resource, ns, request.name or "")
        if (obj := self._live(key)) is None:
            raise self._not_found(key)
        if request.subresource == "log":
            lines = self.pod_logs.get((ns or "", key[2]), "").splitlines()
            tail = request.params.get("tailLines")
            lines = lines[-int(tail) :] if tail and tail.isdigit() else lines
            return "".join(f"{line}\n" for line in lines).encode()  # type: ignore[return-value]
        return obj

    async def _serve_list(self, request: kmock.Request) -> Obj:
        assert request.resource is not None
        res, info = request.resource, self._info(request.resource)
        async with self._lock:
            items = [o for o in self._select(request)]
        return {
            "apiVersion": f"{res.group}/{res.version}".lstrip("/"),
            "kind": f"{info.kind or 'List'}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        # Replay events newer than ?resourceVersion (kmock replays everything, so kopf ran create
        # handlers twice); subscribe under the lock so no event falls between replay and live.
        assert request.resource is not None
        yield b""  # kmock sends the headers on the first chunk
        since, params = request.params.get("resourceVersion", ""), request.params
        bus = self._buses[request.resource]
        async with self._lock:
            if since.isdigit() and int(since) > 0 and params.get("sendInitialEvents") != "true":
                newer = self._log[bisect.bisect_right(self._log, int(since), key=lambda e: e[0]) :]
                backlog = [e for _, r, e in newer if r == request.resource]
            else:
                backlog = [{"type": "ADDED", "object": o} for o in self._select(request)]
            if params.get("sendInitialEvents") == "true":  # kubectl >= 1.35 WatchList waits for it
                backlog.append(self._bookmark(request.resource))
            mark = await bus.mark()
        try:
            for event in backlog:
                if event["type"] == "BOOKMARK" or self._matches(request, event["object"]):
                    yield event
            timeout = float(params.get("timeoutSeconds", 0)) or None
            if self.faults is not None:  # tests/faults.py: drop watch streams every few seconds
                timeout = self.faults.watch_lifetime(request, timeout)
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            stream = bus.stream(since=mark)
            while True:
                left = None if deadline is None else deadline - loop.time()
                try:
                    event = await asyncio.wait_for(anext(stream), left)
                except TimeoutError:
                    if self.faults is not None:
                        self.faults.drop_watch(request)
                    return  # ?timeoutSeconds elapsed: the client re-lists or re-watches
                if self._matches(request, event["object"]):
                    yield event
        finally:
            await bus.unmark(mark)

    def _bookmark(self, res: kmock.resource) -> Obj:
        annotations = {"k8s.io/initial-events-end": "true"}
        md = {"resourceVersion": str(self._rv), "annotations": annotations}
        kind = self._info(res).kind
        api_version = f"{res.group}/{res.version}".lstrip("/")
        return {
            "type": "BOOKMARK",
            "object": {"kind": kind, "apiVersion": api_version, "metadata": md},
        }

    def _select(self, request: kmock.Request) -> list[Obj]:
        """Live objects of the request's resource that match its namespace and selectors."""
        found = [
            o.raw
            for (res, _, _), o in self._objects.items()
            if res == request.resource and not o.deleted and self._matches(request, o.raw)
        ]
        return sorted(
            found, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
        )

    def _matches(self, request: kmock.Request, obj: Obj) -> bool:
        md = obj.get("metadata", {})
        if request.namespace is not None and md.get("namespace") != request.namespace:
            return False
        if request.name is not None and md.get("name") != request.name:
            return False
        labels, fields = request.params.get("labelSelector"), request.params.get("fieldSelector")
        try:
            if labels and not match_selector(labels, md.get("labels") or {}):
                return False
            return not fields or match_selector(fields, field_values(obj, fields))
        except SelectorError as exc:
            raise _error(400, "BadRequest", str(exc)) from None

    # ---- small helpers -------------------------------------------------------------------------

    def _info(self, res: kmock.resource) -> kmock.ResourceInfo:
        if res not in self.resources:
            raise _error(404, "NotFound", f"the server could not find the resource {res.plural}")
        return self.resources[res]

    def _live(self, key: Key) -> Obj | None:
        obj = self._objects[key] if key in self._objects else None  # noqa: SIM401 (no .get)
        return None if obj is None or obj.deleted else copy.deepcopy(obj.raw)

    def _what(self, res: kmock.resource) -> str:
        return f"{res.plural}.{res.group}" if res.group else str(res.plural)

    def _not_found(self, key: Key) -> kmock.KubernetesError:
        return _error(404, "NotFound", f'{self._what(key[0])} "{key[2]}" not found', name=key[2])

    @staticmethod
    def _header(request: kmock.Request, name: str) -> str:
        return next((v for k, v in request.headers.items() if k.lower() == name), "")

    @classmethod
    def _body(cls, request: kmock.Request) -> Any:
        if "protobuf" in cls._header(request, "content-type"):  # kubectl's generators send it
            raise _error(
                415, "UnsupportedMediaType",
                "the emulator speaks JSON only: use `kubectl apply/create -f` (not generators)",
            )  # fmt: skip
        if request.data is None and request.text:  # apply-patch+yaml is YAML, not JSON
            return yaml.safe_load(request.text)
        return request.data
