"""Thin cluster I/O with the kubernetes client: create (409 = already there), get, patch status.

Nothing here decides anything; every function is one API call or a tolerant wrapper of one.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import time
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from trainium_operator import __version__
from trainium_operator.api.crd import GROUP, PLURAL, VERSION

Json = dict[str, Any]
VOLCANO_GROUP, VOLCANO_VERSION, VOLCANO_JOBS = "batch.volcano.sh", "v1alpha1", "jobs"
QUEUE_GROUP, QUEUE_VERSION, QUEUES = "scheduling.volcano.sh", "v1beta1", "queues"
MERGE_PATCH = "application/merge-patch+json"
#: Every call has a deadline: a hung connection must not stall a job's reconcile forever.
TIMEOUT = 30
#: Network-level failures (reset, refused, timeout): retried like a 5xx.
log = logging.getLogger(__name__)
NETWORK_ERRORS = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)
#: Tries per request. A pass makes ~8 requests; failing the whole pass on any one transient
#: error collapses progress under faults (0.7**8 = 6% of passes get through at 30%), so each
#: request is retried on its own first: 5 tries leave 0.3**5 = 0.2% to the pass's backoff.
ATTEMPTS = 5
#: Backoff between tries (seconds): first, doubling, jittered; a Retry-After is honoured up to CAP.
FIRST_DELAY, DELAY_CAP = 0.05, 2.0
#: Injected for tests (no real sleeping).
sleep: Callable[[float], None] = time.sleep


#: Asked before every write is sent (runtime/leadership.py sets it to its fence's `check`): a
#: replica outside its term raises instead of writing. Reads are never fenced.
def _unfenced() -> None:
    """No election (one `--standalone` operator): every write may go."""


fence: Callable[[], None] = _unfenced
_WRITES = ("create_", "patch_", "replace_", "delete_")


def writes(call: Callable[..., Any]) -> bool:
    """Whether a client call changes the cluster (by the kubernetes client's method names)."""
    return getattr(call, "__name__", "").startswith(_WRITES)


def transient(exc: BaseException) -> bool:
    """Whether retrying the same request later may succeed (throttling, server, network)."""
    if isinstance(exc, ApiException):
        return exc.status in (0, 409, 429) or exc.status >= 500
    return isinstance(exc, NETWORK_ERRORS)


def retryable(exc: BaseException, *, guarded: bool = False) -> bool:
    """Whether this same request may be sent again at once.

    A 409 is a lost race only for writes guarded by a resourceVersion or uid precondition (the
    caller must read again); an unguarded write answered 409 Conflict is retried. AlreadyExists is
    an answer, not a failure: the callers decide what it means.
    """
    if isinstance(exc, ApiException) and exc.status == 409:
        return not guarded and _reason(exc) != "AlreadyExists"
    return transient(exc)


def retry_delay(exc: BaseException, attempt: int) -> float:
    """The server's Retry-After when it gave one (capped), else jittered doubling backoff."""
    headers = getattr(exc, "headers", None) or {}
    after = headers.get("Retry-After") if hasattr(headers, "get") else None
    if after is not None:
        try:
            return min(DELAY_CAP, max(0.0, float(after)))
        except ValueError:
            pass
    return min(DELAY_CAP, FIRST_DELAY * 2**attempt) * random.uniform(0.5, 1.0)


def request(call: Callable[..., Any], *args: Any, guarded: bool = False, **kwargs: Any) -> Any:
    """One API request with a deadline, retried in place on throttling, 5xx and network errors.

    Every request we send is idempotent or guarded: a create re-sent after a lost answer meets
    AlreadyExists (its callers treat that as done), a merge patch re-applies the same values.
    """
    write = writes(call)
    for attempt in range(ATTEMPTS):
        if write:
            fence()  # every try: a retry's sleep may outlast the term
        try:
            return call(*args, _request_timeout=TIMEOUT, **kwargs)
        except Exception as exc:
            if attempt == ATTEMPTS - 1 or not retryable(exc, guarded=guarded):
                raise
            sleep(retry_delay(exc, attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def post_event(event: Json) -> None:
    """Post a core/v1 Event, once: Events are auxiliary, a failure is logged, never raised."""
    try:
        fence()
        body = client.CoreV1Event.model_validate(event)  # what the client would make of the dict
        core().create_namespaced_event(
            event["metadata"]["namespace"], body, _request_timeout=TIMEOUT
        )
    except Exception as exc:  # a refused or lost Event must not fail the pass that posts it
        log.warning("posting Event %s (%s) failed: %s", event.get("reason"), event["action"], exc)


def api_message(exc: ApiException) -> str:
    """The API server's own message (the Status body), else the HTTP reason."""
    try:
        message = json.loads(exc.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or exc.reason or f"HTTP {exc.status}")


#: Connections the client keeps per host: one for each thread that may call the API at once
#: (16 pass workers, as many kopf handler threads, the recheck pool); urllib3's default of 10
#: discarded connections ("Connection pool is full") under a burst of passes.
POOL_SIZE = 40


@functools.cache
def api_client() -> client.ApiClient:
    """One client per process: in-cluster service account, else $KUBECONFIG."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = POOL_SIZE
    api = client.ApiClient(configuration=cfg)
    api.user_agent = f"trainium-operator/{__version__}"  # audit logs name us, not the library
    _load_apis()
    return api


def side_client(purpose: str, pool: int) -> client.ApiClient:
    """A client of its own for long or urgent requests (the Lease, our watches): they wait
    behind no pass's connection, and the audit log names them (`trainium-operator/V (purpose)`)."""
    api_client()  # loads the configuration (in-cluster, else $KUBECONFIG) once
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = pool
    api = client.ApiClient(configuration=cfg)
    api.user_agent = f"trainium-operator/{__version__} ({purpose})"
    return api


def _load_apis() -> None:
    """kubernetes 37 imports an API's module on first use (CoreV1Api: ~0.4 s CPU): pay it here."""
    for name in ("CoreV1Api", "CustomObjectsApi"):
        getattr(client, name)


def core() -> client.CoreV1Api:
    """Core v1 API (PV, PVC, ConfigMap)."""
    return client.CoreV1Api(api_client())


def custom() -> client.CustomObjectsApi:
    """Custom objects API (TrainiumJobs, Volcano jobs and queues)."""
    return client.CustomObjectsApi(api_client())


def missing_is_none(call: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return request(call, *args, **kwargs)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def exists_is_ok(call: Any, *args: Any, **kwargs: Any) -> Json | None:
    """Create; the object created now, None when it already existed (a restart adopts it)."""
    try:
        return to_dict(request(call, *args, **kwargs)) or {}
    except ApiException as exc:
        if exc.status == 409 and _reason(exc) == "AlreadyExists":
            return None
        raise


def _reason(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("reason") or "")
    except (ValueError, AttributeError):
        return ""


def to_dict(obj: Any) -> Json | None:
    """A typed client object as a plain API dict."""
    if obj is None or isinstance(obj, dict):
        return obj
    out: Json = api_client().sanitize_for_serialization(obj)
    return out


def get_trainiumjob(namespace: str, name: str) -> Json | None:
    """The TrainiumJob, or None when it is gone."""
    args = (GROUP, VERSION, namespace, PLURAL, name)
    return missing_is_none(custom().get_namespaced_custom_object, *args)  # type: ignore[no-any-return]


def delete_trainiumjob(namespace: str, name: str, uid: str | None = None) -> None:
    """Delete a TrainiumJob (its children follow through ownerReferences); gone is fine.

    With `uid`, only that object: a job re-created under the name meanwhile is not touched (409).
    """
    args = (GROUP, VERSION, namespace, PLURAL, name)
    if uid is None:
        missing_is_none(custom().delete_namespaced_custom_object, *args)
        return
    body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
    try:
        missing_is_none(custom().delete_namespaced_custom_object, *args, body=body, guarded=True)
    except ApiException as exc:
        if exc.status != 409:  # another object has the name now: not ours to delete
            raise


def patch_trainiumjob_status(
    namespace: str, name: str, status: Json, *, resource_version: str | None = None
) -> Json:
    """Merge-patch the status subresource; returns the job as patched.

    With `resource_version` (the one the pass read), the API server refuses the patch (409
    Conflict) when anyone wrote the job since: the pass reads again and decides again, so a
    write from a stale view never overwrites a newer one.
    """
    body: Json = {"status": status}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    out = request(
        custom().patch_namespaced_custom_object_status,
        GROUP, VERSION, namespace, PLURAL, name, body, _content_type=MERGE_PATCH,
        guarded=bool(resource_version),
    )  # fmt: skip
    return out or {}  # type: ignore[no-any-return]


def annotate_trainiumjob(
    namespace: str, name: str, annotations: Json, *, resource_version: str
) -> Json:
    """Merge-patch annotations onto the TrainiumJob version a pass read; returns it as patched.

    The resourceVersion precondition makes a pass of an older object of this name (or one that
    read an older version) fail with 409 instead of writing onto the object that holds the
    name now.
    """
    body: Json = {"metadata": {"annotations": annotations, "resourceVersion": resource_version}}
    out = request(
        custom().patch_namespaced_custom_object,
        GROUP, VERSION, namespace, PLURAL, name, body, _content_type=MERGE_PATCH, guarded=True,
    )  # fmt: skip
    return out or {}  # type: ignore[no-any-return]


def conflict(exc: BaseException) -> bool:
    """A guarded write lost a race (409 Conflict): read again, decide again."""
    return isinstance(exc, ApiException) and exc.status == 409 and _reason(exc) != "AlreadyExists"


def get_vcjob(namespace: str, name: str) -> Json | None:
    """A Volcano job, or None."""
    args = (VOLCANO_GROUP, VOLCANO_VERSION, namespace, VOLCANO_JOBS, name)
    return missing_is_none(custom().get_namespaced_custom_object, *args)  # type: ignore[no-any-return]


def list_vcjobs(namespace: str, selector: str) -> list[Json]:
    """Volcano jobs of a namespace matching a label selector."""
    args = (VOLCANO_GROUP, VOLCANO_VERSION, namespace, VOLCANO_JOBS)
    found = request(custom().list_namespaced_custom_object, *args, label_selector=selector)
    return list((found or {}).get("items") or [])


def create_vcjob(body: Json) -> Json | None:
    """Create a Volcano job; the created object, None when it existed (409)."""
    ns = body["metadata"]["namespace"]
    args = (VOLCANO_GROUP, VOLCANO_VERSION, ns, VOLCANO_JOBS, body)
    return exists_is_ok(custom().create_namespaced_custom_object, *args)


def create_claim_template(body: Json) -> Json | None:
    """Create a ResourceClaimTemplate (resource.k8s.io/v1); None when it existed (409)."""
    group, version = body["apiVersion"].split("/")
    args = (group, version, body["metadata"]["namespace"], "resourceclaimtemplates", body)
    return exists_is_ok(custom().create_namespaced_custom_object, *args)


def delete_vcjob(namespace: str, name: str, uid: str, *, foreground: bool = False) -> None:
    """Delete the Volcano job of uid and (in the background) its pods; gone already is fine.

    The uid precondition: another object under the name (a later job's gang) is never deleted
    (409, ignored: the one we meant is gone). `foreground`: the job stays (deletionTimestamp
    set) until its pods and PodGroup are gone.
    """
    args = (VOLCANO_GROUP, VOLCANO_VERSION, namespace, VOLCANO_JOBS, name)
    policy = "Foreground" if foreground else "Background"
    guard = client.V1Preconditions(uid=uid) if uid else None
    options = client.V1DeleteOptions(propagation_policy=policy, preconditions=guard)
    try:
        missing_is_none(custom().delete_namespaced_custom_object, *args, body=options, guarded=True)
    except ApiException as exc:
        if exc.status != 409:
            raise


def get_queue(name: str) -> Json | None:
    """The cluster-scoped Volcano queue, or None."""
    args = (QUEUE_GROUP, QUEUE_VERSION, QUEUES, name)
    return missing_is_none(custom().get_cluster_custom_object, *args)  # type: ignore[no-any-return]


def get_priority_class(name: str) -> Json | None:
    """The cluster-scoped PriorityClass (scheduling.k8s.io/v1), or None."""
    read = client.SchedulingV1Api(api_client()).read_priority_class
    return to_dict(missing_is_none(read, name))


def list_events(namespace: str, involved: str, reason: str) -> list[Json]:
    """Events of one reason about objects of this name in the namespace, in no order."""
    selector = f"involvedObject.name={involved},reason={reason}"
    found = request(core().list_namespaced_event, namespace, field_selector=selector)
    return [to_dict(e) or {} for e in found.items]


def coordination() -> client.CoordinationV1Api:
    """coordination.k8s.io/v1 (Leases)."""
    return client.CoordinationV1Api(api_client())


def list_pods(namespace: str, selector: str) -> list[Json]:
    """Pods matching a label selector."""
    return listed_items(request(core().list_namespaced_pod, namespace, label_selector=selector,
                                _preload_content=False))  # fmt: skip


def list_nodes(selector: str) -> list[Json]:
    """Nodes matching a label selector (an elastic job counts the ones that could hold it)."""
    return listed_items(request(core().list_node, label_selector=selector, _preload_content=False))


def listed_items(answer: Any) -> list[Json]:
    """A list's items as the API server sent them: building typed objects and serializing them
    back cost 0.19 s of CPU for 1,024 Nodes against 0.013 s for json.loads (issue 35's note)."""
    items = json.loads(answer.data).get("items") or []
    return [item for item in items if isinstance(item, dict)]


def pod_log_tail(namespace: str, pod: str, container: str, lines: int) -> list[str]:
    """The last lines of a container's log; none when the log is gone or unreadable.

    Read raw and decoded here: the client's own handling of text/plain varies by version
    (kubernetes 36.0.3 returns a bytes repr, one line; kubernetes-client/python#2596).
    """
    try:
        answer = request(
            core().read_namespaced_pod_log, pod, namespace, container=container,
            tail_lines=lines, _preload_content=False,
        )  # fmt: skip
    except ApiException as exc:
        if transient(exc):
            raise
        return []
    return log_lines(answer.data, lines)


def log_lines(data: bytes | str | None, lines: int) -> list[str]:
    """A log body as its last lines of text (undecodable bytes replaced, never fatal)."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data or ""
    return text.splitlines()[-lines:]
