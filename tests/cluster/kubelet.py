"""Fake Trainium Nodes and our own fake kubelet: it plays every pod bound to them.

Pods go Running, then Succeeded, unless a test asks for another outcome, either by a plan on the
kubelet (`kubelet.plan({"trainium.dev/stage": "training"}, Behavior(...))`, matched on pod
labels) or by pod annotations (`tier.trainium.dev/outcome` ...). Deleted pods end as a kubelet
ends them: containers terminated (exit 137 if they were running), phase terminal, then a delete
with grace 0. Container logs are served over HTTPS at the node's InternalIP on the port the Node
advertises (status.daemonEndpoints), so `kubectl logs` works through the API server.

Pods get distinct loopback IPs (127.N.x.y), so a pod whose behavior has `metrics` serves rank
0's live figures (Prometheus text, the trainer's gauge names) on its IP and its containerPort named
`metrics`, where the operator reads them; `stall(namespace)` stops their steps. A behavior with
`init_exit_code` fails the pod's first init container (the trainer's preflight) as the kubelet
reports it, and `fail_node(node, behavior)` fails the pods running on one node now.

At fleet size (issue 35: 1,024 nodes) the kubelet stays cheap: `add_nodes` registers many nodes
in parallel (with labels and taints that keep other tests' pods off them) and `remove_nodes`
takes them away; its requests go over a pool of kept-alive connections; pod actions run on
several workers, each pod's in order on one of them; nodes added with `heartbeat=False` post no
status every 30 s (the tier runs no node lifecycle controller, so nobody reads heartbeats), and
a behavior's `metrics_index` serves metrics from one task index only (rank 0), not every pod.
"""

from __future__ import annotations

import functools
import heapq
import http.server
import io
import itertools
import json
import logging
import queue
import random
import re
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import urllib3
from prometheus_client import CollectorRegistry, Gauge, generate_latest

import podrun
from cluster import Api, free_port
from podstatus import _now, container_status, terminated
from runmode import RunningMode
from trainium_trainer import contract

Obj = dict[str, Any]
log = logging.getLogger("tier.kubelet")

NEURON_LABEL = "node.kubernetes.io/instance-type"
#: A gang pod's name: its Volcano job, then its index.
_GANG_POD = re.compile(r"^(.*)-node-(\d+)$")
FSX_DRIVER = "fsx.csi.aws.com"
ANNOTATION = "tier.trainium.dev/"
#: Outcomes a pod can have: finish (Succeeded or Failed by exit code), OOMKilled, an image that
#: cannot be pulled, never starting (stays Pending), or running until deleted.
KUBELET_CONDITIONS = ("PodScheduled", "Initialized", "ContainersReady", "Ready")
#: "Run" runs the pod's containers as real processes (podrun.py: the running mode).
OUTCOMES = ("Exit", "OOMKilled", "ErrImagePull", "NeverStart", "RunForever", "Run")
#: Volcano's annotation with a pod's index in its task (the node rank of a one-task gang).
TASK_INDEX = "volcano.sh/task-index"
#: Threads that play pods (each pod's actions on one of them, in order) and that add nodes.
WORKERS = 8


@dataclass(frozen=True)
class NodeType:
    """Capacity and labels of one EC2 instance type, as a Neuron/EFA-plugin node reports them."""

    name: str
    cpu: str
    memory: str
    neuron_devices: int
    neuron_cores: int
    efa: int

    def capacity(self) -> dict[str, str]:
        return {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": "110",
            "ephemeral-storage": "500Gi",
            "aws.amazon.com/neuron": str(self.neuron_devices),
            "aws.amazon.com/neurondevice": str(self.neuron_devices),
            "aws.amazon.com/neuroncore": str(self.neuron_cores),
            "vpc.amazonaws.com/efa": str(self.efa),
        }


TRN1_32XLARGE = NodeType("trn1.32xlarge", "128", "512Gi", 16, 32, 8)
TRN1_2XLARGE = NodeType("trn1.2xlarge", "8", "32Gi", 1, 2, 0)
#: Nodes of the tier: four trn1.32xlarge (gangs up to 4) and two trn1.2xlarge.
NODES = {
    **{f"trn1-32xl-{i}": TRN1_32XLARGE for i in range(4)},
    **{f"trn1-2xl-{i}": TRN1_2XLARGE for i in range(2)},
}
TRN1_32XLARGE_NODES = sum(1 for kind in NODES.values() if kind is TRN1_32XLARGE)


@dataclass(frozen=True)
class Metrics:
    """Rank 0's live figures a pod serves: the step goes from `start` at `rate` steps a second."""

    total_steps: int = 1000
    rate: float = 5.0
    start: int = 0
    loss: float = 2.5
    samples_per_second: float = 512.0
    checkpoint_step: int = 0
    #: Non-zero: the served checkpoint step follows the step, a checkpoint every this many steps.
    checkpoint_every: int = 0
    #: Non-zero: each node's step seconds (the trainer's per-node gauge), for every node of the
    #: pod's gang by its index; a node in `slow_nodes` (name, factor) steps that much slower.
    step_seconds: float = 0.0
    slow_nodes: tuple[tuple[str, float], ...] = ()


class Feed:
    """One pod's metrics endpoint: the step advances with the clock until stalled."""

    def __init__(
        self, metrics: Metrics, namespace: str, peers: Callable[[], dict[int, str]] | None = None
    ) -> None:
        self.metrics = metrics
        self.namespace = namespace
        #: The pod's gang: node by pod index, now (the per-node step seconds follow the node).
        self.peers = peers
        self.began = time.monotonic()
        self.frozen: int | None = None
        self.server: http.server.ThreadingHTTPServer | None = None

    def step(self) -> int:
        m = self.metrics
        if self.frozen is not None:
            return self.frozen
        return min(m.total_steps, m.start + int(m.rate * (time.monotonic() - self.began)))

    def stall(self) -> None:
        """The step stands still from now on (a gang hung in a collective)."""
        self.frozen = self.step()

    def text(self) -> bytes:
        """The gauges as the trainer's prometheus-client registry renders them."""
        m, registry = self.metrics, CollectorRegistry()
        values = {
            contract.METRIC_STEP: self.step(),
            contract.METRIC_TOTAL_STEPS: m.total_steps,
            contract.METRIC_LOSS: m.loss,
            contract.METRIC_SAMPLES_PER_SECOND: m.samples_per_second,
            contract.METRIC_TOKENS_PER_SECOND: m.samples_per_second * 512,
            contract.METRIC_LR: 1e-4,
            contract.METRIC_CHECKPOINT_STEP: (
                self.step() // m.checkpoint_every * m.checkpoint_every
                if m.checkpoint_every
                else m.checkpoint_step
            ),
        }
        for name, value in values.items():
            Gauge(name, name, registry=registry).set(value)
        if m.step_seconds and self.peers is not None:
            per_node = Gauge(contract.METRIC_NODE_STEP_SECONDS, "step seconds by node",
                             [contract.NODE_STEP_LABEL], registry=registry)  # fmt: skip
            slow = dict(m.slow_nodes)
            for index, node in self.peers().items():
                per_node.labels(str(index)).set(m.step_seconds * slow.get(node, 1.0))
        return generate_latest(registry)


def metrics_port(pod: Obj) -> int | None:
    """The pod's containerPort named `metrics` (where the operator reads rank 0)."""
    for container in pod["spec"]["containers"]:
        for port in container.get("ports") or []:
            if port.get("name") == contract.METRICS_PORT_NAME:
                return int(port["containerPort"])
    return None


@dataclass(frozen=True)
class Behavior:
    """What the fake kubelet does with a pod: how long it runs, how it ends, what it logs."""

    outcome: str = "Exit"
    exit_code: int = 0
    #: The container's termination message (the trainer writes its checkpoint report there).
    message: str = ""
    logs: tuple[str, ...] = ()
    run_seconds: float = 1.0
    #: Serve rank 0's live metrics on the pod's IP and named port while it runs.
    metrics: Metrics | None = None
    #: Only the pod of this Volcano task index serves them (None: every pod with the port).
    metrics_index: int | None = None
    #: Non-zero: the pod's first init container (the preflight) fails with this exit code and
    #: `init_message` as its termination message and log; the pod is Failed, nothing else runs.
    init_exit_code: int = 0
    init_message: str = ""

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r}: one of {OUTCOMES}")

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str], base: Behavior) -> Behavior:
        """base with what the pod's tier.trainium.dev/* annotations set."""
        get = {
            k.removeprefix(ANNOTATION): v
            for k, v in annotations.items()
            if k.startswith(ANNOTATION)
        }
        if not get:
            return base
        return replace(
            base,
            outcome=get.get("outcome", base.outcome),
            exit_code=int(get.get("exit-code", base.exit_code)),
            message=get.get("message", base.message),
            logs=tuple(get["logs"].splitlines()) if "logs" in get else base.logs,
            run_seconds=float(get.get("run-seconds", base.run_seconds)),
        )


@dataclass
class Plan:
    """A test's request: pods whose labels include `labels` get `behavior` (`times` pods)."""

    labels: dict[str, str]
    behavior: Behavior
    namespace: str | None = None
    times: int | None = None
    used: int = 0
    #: Only pods bound to this node.
    node: str | None = None
    #: (pod name, node) of each pod the plan was used for.
    pods: list[tuple[str, str]] = field(default_factory=list)

    def matches(self, pod: Obj) -> bool:
        meta = pod["metadata"]
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        if self.node and pod["spec"].get("nodeName") != self.node:
            return False
        if self.times is not None and self.used >= self.times:
            return False
        labels = meta.get("labels") or {}
        return all(labels.get(k) == v for k, v in self.labels.items())


def node_object(
    name: str, kind: NodeType, zone: str, port: int, labels: Mapping[str, str] | None = None
) -> Obj:
    """A Node as a Trainium instance's kubelet registers it (status carries the capacity)."""
    capacity = kind.capacity()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                NEURON_LABEL: kind.name,
                "topology.kubernetes.io/zone": zone,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
        },
        "status": {"capacity": capacity, "allocatable": capacity, **_node_status(port)},
    }


def _node_status(port: int) -> Obj:
    now = _now()
    return {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "fake kubelet is posting ready status",
             "lastHeartbeatTime": now, "lastTransitionTime": now},
        ],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": {"kubeletVersion": "v1.36.2", "operatingSystem": "linux",
                     "architecture": "amd64", "containerRuntimeVersion": "fake://1",
                     "kernelVersion": "", "osImage": "", "kubeProxyVersion": "",
                     "machineID": "", "systemUUID": "", "bootID": ""},
    }  # fmt: skip


class PooledApi(Api):
    """The tier's Api over a pool of kept-alive connections (at fleet size a TLS handshake per
    request costs more than the request); failures raise urllib's HTTPError, as Api's do."""

    def __init__(self, api: Api, size: int) -> None:
        self.server, self.token, self.context = api.server, api.token, api.context
        # One retry of a request whose kept-alive connection the server had closed: a repeated
        # create answers 409 and a repeated delete 404, which the kubelet takes as done.
        retry = urllib3.Retry(total=1, allowed_methods=None, redirect=0, status=0)
        self.pool = urllib3.PoolManager(
            maxsize=size, block=True, ssl_context=api.context, retries=retry
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> Obj:
        """One request; raises urllib.error.HTTPError on a non-2xx answer."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        url = self.server + path
        answer = self.pool.request(method, url, body=data, headers=headers, timeout=timeout)
        if answer.status >= 300:
            fp = io.BytesIO(answer.data)
            raise urllib.error.HTTPError(url, answer.status, answer.reason or "", None, fp)  # type: ignore[arg-type]
        return json.loads(answer.data) if answer.data else {}


class FakeKubelet(RunningMode):
    """Plays the kubelet of every fake node: pod phases, deletions, logs, node heartbeats."""

    def __init__(self, api: Api, cert: tuple[Path, Path]) -> None:
        self.api: Api = PooledApi(api, 2 * WORKERS)
        self.cert = cert
        self.nodes: dict[str, NodeType] = {}
        self.plans: list[Plan] = []
        self.default = Behavior()
        self._logs: dict[tuple[str, str, str], str] = {}
        self._started: dict[str, str] = {}  # pod uid -> startedAt
        self._running: dict[str, Obj] = {}  # pod uid -> pod, while its containers run
        self._ending: set[str] = set()
        self._seen: set[str] = set()
        self._bound: dict[str, dict[str, float]] = {}  # namespace -> pod name -> first seen
        self._ip = itertools.count(2)
        # Loopback pod IPs (reachable without setup); a random second octet keeps two tiers on
        # one machine apart (a taken address:port is skipped anyway).
        self._net = random.randrange(16, 250)
        self._feeds: dict[str, Feed] = {}  # pod uid -> its metrics endpoint
        self._pod_ips: dict[str, str] = {}  # pod uid -> its IP (one for the pod's life)
        self._timers: list[tuple[float, int, str, Callable[[], None]]] = []
        # One queue per worker thread; a pod's actions all go to one (by its uid), in order.
        self._queues: list[queue.SimpleQueue[Callable[[], None] | None]] = [
            queue.SimpleQueue() for _ in range(WORKERS)
        ]
        self._beats: set[str] = set()  # nodes that post a status every 30 s
        self._csi: set[str] = set()  # nodes registered with a CSINode
        self._seq = itertools.count()
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.port = free_port()
        self._server = self._log_server()
        # The running mode (outcome "Run"): pod uid -> its run; one bridge, made on first use.
        self._runs: dict[str, podrun.PodRun] = {}
        self._network: podrun.Network | None = None
        self.pods_root = Path(tempfile.mkdtemp(prefix="trainium-pods-"))
        self._released: set[str] = set()
        self._lost: set[str] = set()  # uids of running-mode pods whose node was lost
        self.missing_devices: dict[str, int] = {}

    # -- the test-side API ---------------------------------------------------------------------

    def plan(
        self,
        labels: dict[str, str],
        behavior: Behavior,
        namespace: str | None = None,
        times: int | None = None,
        node: str | None = None,
    ) -> Plan:
        """Pods matching labels (in namespace, on node) get behavior, the first `times` of them."""
        rule = Plan(labels, behavior, namespace, times, node=node)
        with self._lock:
            self.plans.insert(0, rule)
        return rule

    def forget(self, namespace: str) -> None:
        """Drop the plans of a namespace (a test's end)."""
        with self._lock:
            self.plans = [p for p in self.plans if p.namespace != namespace]
            self._bound.pop(namespace, None)

    def finish(self, namespace: str, behavior: Behavior | None = None) -> int:
        """End every running pod of namespace now (as behavior says; default exit 0)."""
        with self._lock:
            pods = [p for p in self._running.values() if p["metadata"]["namespace"] == namespace]
        for pod in pods:
            action = functools.partial(self._finish, pod, behavior or Behavior())
            self._after(0, action, pod["metadata"]["uid"])
        return len(pods)

    def fail_node(self, node: str, behavior: Behavior) -> list[str]:
        """End the pods running on node now as behavior says (its logs become theirs)."""
        with self._lock:
            pods = [p for p in self._running.values() if p["spec"].get("nodeName") == node]
        for pod in pods:
            meta = pod["metadata"]
            for container in pod["spec"]["containers"]:
                key = (meta["namespace"], meta["name"], container["name"])
                self._logs[key] = "".join(f"{line}\n" for line in behavior.logs)
            uid = meta["uid"]
            self._after(0, lambda pod=pod: self._finish(pod, behavior), uid)
        return sorted(p["metadata"]["name"] for p in pods)

    def stall(self, namespace: str) -> int:
        """Stop the steps of every metrics endpoint of namespace (how many there are)."""
        with self._lock:
            feeds = [f for f in self._feeds.values() if f.namespace == namespace]
        for feed in feeds:
            feed.stall()
        return len(feeds)

    def serving(self, namespace: str) -> dict[str, str]:
        """uid -> pod IP of the pods of namespace that serve metrics now."""
        with self._lock:
            return {
                uid: f.server.server_address[0]
                for uid, f in self._feeds.items()
                if f.namespace == namespace and f.server is not None
            }

    def running(self, namespace: str) -> list[str]:
        """Names of the pods of namespace this kubelet runs now."""
        with self._lock:
            pods = list(self._running.values())
        return sorted(
            p["metadata"]["name"] for p in pods if p["metadata"]["namespace"] == namespace
        )

    def running_uids(self, namespace: str) -> dict[str, str]:
        """uid -> name of the pods of namespace this kubelet runs now (names repeat on restart)."""
        with self._lock:
            pods = list(self._running.items())
        return {
            uid: p["metadata"]["name"] for uid, p in pods if p["metadata"]["namespace"] == namespace
        }

    def bound(self, namespace: str, prefix: str = "") -> dict[str, float]:
        """Pod name -> when this kubelet first saw it bound to one of its nodes (monotonic), for
        the pods of namespace whose name starts with prefix (a pod's name once, the first)."""
        with self._lock:
            seen = dict(self._bound.get(namespace, {}))
        return {name: t for name, t in seen.items() if name.startswith(prefix)}

    def logs(self, namespace: str, pod: str, container: str) -> str | None:
        with self._lock:
            runs = [r for r in self._runs.values() if r.pod["metadata"]["name"] == pod
                    and r.pod["metadata"]["namespace"] == namespace]  # fmt: skip
        for run in runs[-1:]:
            for box in [*run.inits, *run.containers]:
                if box.name == container:
                    return box.log.read_text(errors="replace")
        return self._logs.get((namespace, pod, container))

    def runs(self, namespace: str) -> list[podrun.PodRun]:
        """The pods of namespace this kubelet runs (or ran) as processes, oldest first."""
        with self._lock:
            return [r for r in self._runs.values() if r.pod["metadata"]["namespace"] == namespace]

    def signal_pods(self, namespace: str, signum: int) -> int:
        """signum to every process of namespace's running pods (SIGSTOP: a hung gang)."""
        return sum(r.signal_all(signum) for r in self.runs(namespace) if not r.done.is_set())

    # -- nodes ---------------------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        kind: NodeType,
        zone: str = "us-west-2d",
        labels: Mapping[str, str] | None = None,
        taints: list[Obj] | None = None,
        heartbeat: bool = True,
        csi: bool = True,
    ) -> None:
        """Register a Ready node of `kind`; its only taints are `taints` (TaintNodesByCondition's
        not-ready one is lifted). heartbeat: post its status every 30 s; csi: with a CSINode for
        the FSx driver (without one, Volcano finds no room for an FSx volume on the node)."""
        body = node_object(name, kind, zone, self.port, labels)
        node = self.api.request("POST", "/api/v1/nodes", body)
        if heartbeat:
            path = f"/api/v1/nodes/{name}/status"
            self.api.merge_patch(path, {"status": _node_status(self.port)})
        # TaintNodesByCondition put node.kubernetes.io/not-ready on the new node: lift it.
        self.api.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": taints or None}})
        if csi:
            # Owned by its Node, as the kubelet makes it: the garbage collector deletes it.
            owner = {"apiVersion": "v1", "kind": "Node", "name": name,
                     "uid": node["metadata"]["uid"]}  # fmt: skip
            self.api.request("POST", "/apis/storage.k8s.io/v1/csinodes", {
                "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                "metadata": {"name": name, "ownerReferences": [owner]},
                "spec": {"drivers": [{"name": FSX_DRIVER, "nodeID": name,
                                      "topologyKeys": None}]},
            })  # fmt: skip
            self._csi.add(name)
        if heartbeat:
            self._beats.add(name)
        self.nodes[name] = kind

    def add_nodes(
        self,
        names: Iterable[str],
        kind: NodeType,
        labels: Mapping[str, str] | None = None,
        taints: list[Obj] | None = None,
    ) -> None:
        """add_node for many nodes at once, in parallel, without heartbeats (a fleet)."""
        add = functools.partial(
            self.add_node, kind=kind, labels=labels, taints=taints, heartbeat=False
        )
        with ThreadPoolExecutor(WORKERS, thread_name_prefix="add-node") as pool:
            list(pool.map(add, names))

    def remove_nodes(self, names: Iterable[str]) -> None:
        """Delete many nodes in parallel (their CSINodes go with them: the garbage collector's);
        one already gone is skipped."""

        def remove(name: str) -> None:
            try:
                self.lose_node(name, csinode=False)
            except urllib.error.HTTPError as err:
                if err.code != 404:
                    raise

        with ThreadPoolExecutor(WORKERS, thread_name_prefix="remove-node") as pool:
            list(pool.map(remove, names))

    def lose_node(self, name: str, csinode: bool = True) -> list[str]:
        """The instance behind node `name` is gone, as EKS sees it: nothing runs or reports there
        any more, and the cloud controller deletes the Node (the operator then removes its gang
        pods; kube-controller-manager's pod GC would 40+ s later). The names of the pods that
        ran there."""
        with self._lock:
            self.nodes.pop(name, None)
            self._beats.discard(name)
            gone = {u: p for u, p in self._running.items() if p["spec"].get("nodeName") == name}
            for uid in gone:
                self._running.pop(uid, None)
            # Running-mode pods (real processes) die with the instance, SIGKILL, unreported.
            runs = {u: r for u, r in self._runs.items()
                    if r.pod["spec"].get("nodeName") == name and not r.done.is_set()}  # fmt: skip
            self._lost.update(runs)
            gone.update({u: r.pod for u, r in runs.items()})
        for uid in gone:
            self._stop_feed(uid)
            run = self._runs.get(uid)
            if run is not None:
                run.kill()
        self.api.request("DELETE", f"/api/v1/nodes/{name}")
        if name in self._csi:  # now, not when the garbage collector gets to it (csinode)
            self._csi.discard(name)
            if csinode:
                try:
                    self.api.request("DELETE", f"/apis/storage.k8s.io/v1/csinodes/{name}")
                except urllib.error.HTTPError as err:
                    if err.code != 404:
                        raise
        return sorted(p["metadata"]["name"] for p in gone.values())

    def _heartbeat(self) -> None:
        # A strategic merge, as the kubelet's: conditions merge by type, so a node problem
        # detector's (NeuronHealth) stays; a merge patch would replace the whole list.
        for name in [n for n in list(self.nodes) if n in self._beats]:
            self.api.request(
                "PATCH", f"/api/v1/nodes/{name}/status", {"status": _node_status(self.port)},
                "application/strategic-merge-patch+json",
            )  # fmt: skip

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        for target in (self._serve_logs, self._watch_pods, self._work):
            thread = threading.Thread(target=self._guard(target), daemon=True, name=target.__name__)
            thread.start()
            self._threads.append(thread)
        for i, actions in enumerate(self._queues):
            play = functools.partial(self._play, actions)
            thread = threading.Thread(target=play, daemon=True, name=f"play-{i}")
            thread.start()
            self._threads.append(thread)
        self._every(30, self._heartbeat)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        for actions in self._queues:
            actions.put(None)
        self._server.shutdown()
        for uid in list(self._feeds):
            self._stop_feed(uid)
        self.stop_runs()
        for thread in self._threads:
            thread.join(5)

    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            while not self._stop.is_set():
                try:
                    target()
                    return
                except Exception as exc:  # keep playing the kubelet; a test reads .errors
                    if self._stop.is_set():
                        return
                    self.errors.append(f"{target.__name__}: {exc!r}")
                    log.exception("fake kubelet %s", target.__name__)
                    time.sleep(0.5)

        return run

    def _after(self, delay: float, action: Callable[[], None], key: str = "") -> None:
        """Run action after delay on the worker of key (a pod's uid: its actions in order)."""
        with self._lock:
            due = (time.monotonic() + delay, next(self._seq), key, action)
            heapq.heappush(self._timers, due)
            self._lock.notify_all()

    def _every(self, period: float, action: Callable[[], None]) -> None:
        def again() -> None:
            action()
            self._after(period, again)

        self._after(period, again)

    def _work(self) -> None:
        """Hand each action to its key's worker when it is due."""
        while not self._stop.is_set():
            with self._lock:
                while not self._stop.is_set():
                    wait = self._timers[0][0] - time.monotonic() if self._timers else 1.0
                    if self._timers and wait <= 0:
                        _, _, key, action = heapq.heappop(self._timers)
                        break
                    self._lock.wait(min(wait, 1.0))
                else:
                    return
            self._queues[hash(key) % WORKERS].put(action)

    def _play(self, actions: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        """One worker: run its actions in order until stopped."""
        while True:
            action = actions.get()
            if action is None or self._stop.is_set():
                return
            try:
                action()
            except urllib.error.HTTPError as err:
                if err.code not in (404, 409):  # the pod went away or moved on meanwhile
                    self.errors.append(f"{err.code} {err.reason}: {err.read()[:300]!r}")
            except Exception as exc:
                self.errors.append(repr(exc))
                log.exception("fake kubelet action")

    # -- pods ----------------------------------------------------------------------------------

    def _watch_pods(self) -> None:
        """List once, then watch on from the newest version seen (bookmarks keep it fresh), and
        list again only when the server has forgotten it (410): at fleet size a list of every
        pod each time a watch times out costs more than all the events between."""
        version: str | None = None
        while not self._stop.is_set():
            if version is None:
                listing = self.api.request("GET", "/api/v1/pods", timeout=120)
                for pod in listing["items"]:
                    self._on_pod(pod)
                version = listing["metadata"]["resourceVersion"]
            try:
                path = "/api/v1/pods?allowWatchBookmarks=true"
                for event in self.api.watch(path, version, timeout=30):
                    if self._stop.is_set():
                        return
                    if event["type"] == "ERROR":
                        version = None  # 410 Gone: list again
                        break
                    version = event["object"]["metadata"].get("resourceVersion") or version
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._on_pod(event["object"])
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                if self._stop.is_set():
                    return
                time.sleep(0.5)

    def _behavior(self, pod: Obj) -> Behavior:
        base = self.default
        for rule in self.plans:
            if rule.matches(pod):
                rule.used += 1
                rule.pods.append((pod["metadata"]["name"], pod["spec"]["nodeName"]))
                base = rule.behavior
                break
        return Behavior.from_annotations(pod["metadata"].get("annotations") or {}, base)

    def _on_pod(self, pod: Obj) -> None:
        spec, meta = pod["spec"], pod["metadata"]
        if spec.get("nodeName") not in self.nodes:
            return
        uid = meta["uid"]
        phase = (pod.get("status") or {}).get("phase")
        with self._lock:
            if meta.get("deletionTimestamp"):
                if uid not in self._ending:
                    self._ending.add(uid)
                    self._after(0, lambda: self._end(pod), uid)
                return
            if uid in self._seen or phase in ("Succeeded", "Failed"):
                return
            self._seen.add(uid)
            bound = self._bound.setdefault(meta["namespace"], {})
            bound.setdefault(meta["name"], time.monotonic())
            behavior = self._behavior(pod)
        for container in spec["containers"]:
            key = (meta["namespace"], meta["name"], container["name"])
            self._logs[key] = "".join(f"{line}\n" for line in behavior.logs)
        for i, container in enumerate(spec.get("initContainers") or []):
            failing = i == 0 and behavior.init_exit_code
            text = f"{behavior.init_message}\n" if failing and behavior.init_message else ""
            self._logs[(meta["namespace"], meta["name"], container["name"])] = text
        self._after(0.1, lambda: self._begin(pod, behavior), uid)

    def _path(self, pod: Obj) -> str:
        meta = pod["metadata"]
        return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"

    def _patch_status(self, pod: Obj, status: Obj) -> None:
        patch = {"metadata": {"uid": pod["metadata"]["uid"]}, "status": status}
        self.api.merge_patch(self._path(pod), patch)

    def _next_ip(self) -> str:
        n = next(self._ip)
        return f"127.{self._net}.{n // 250 % 250}.{n % 250 + 2}"

    def _base_status(self, pod: Obj, phase: str, ready: bool, ip: str | None = None) -> Obj:
        status = pod.get("status") or {}
        pod_ip = status.get("podIP") or self._pod_ips.get(pod["metadata"]["uid"]) or ip
        pod_ip = pod_ip or self._next_ip()
        self._pod_ips[pod["metadata"]["uid"]] = pod_ip
        start = status.get("startTime") or _now()
        flag = "True" if ready else "False"
        # Conditions the kubelet does not own (DisruptionTarget from the Eviction API) stay.
        kept = [
            c for c in status.get("conditions") or [] if c.get("type") not in KUBELET_CONDITIONS
        ]
        return {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": start,
            "conditions": [
                {"type": t, "status": "True" if t in ("PodScheduled", "Initialized") else flag,
                 "lastTransitionTime": _now()}
                for t in KUBELET_CONDITIONS
            ]
            + kept,
        }  # fmt: skip

    def _begin(self, pod: Obj, behavior: Behavior) -> None:
        containers = pod["spec"]["containers"]
        if behavior.outcome == "NeverStart":
            return
        if behavior.outcome == "Run":
            self._run_pod(pod)
            return
        if behavior.init_exit_code:
            self._fail_init(pod, behavior)
            return
        if behavior.outcome == "ErrImagePull":
            waiting = {"waiting": {"reason": "ErrImagePull",
                                   "message": f"failed to pull image {containers[0].get('image')}"
                                              ": not found"}}  # fmt: skip
            status = self._base_status(pod, "Pending", ready=False)
            status["containerStatuses"] = [container_status(c, waiting, False) for c in containers]
            self._patch_status(pod, status)
            return
        started = _now()
        self._started[pod["metadata"]["uid"]] = started
        ip = self._serve_metrics(pod, behavior.metrics) if self._serves(pod, behavior) else None
        status = self._base_status(pod, "Running", ready=True, ip=ip)
        running = {"running": {"startedAt": started}}
        status["containerStatuses"] = [container_status(c, running, True) for c in containers]
        inits = pod["spec"].get("initContainers") or []
        done = terminated(0, "Completed", "", started)
        status["initContainerStatuses"] = [container_status(c, done, False) for c in inits]
        self._patch_status(pod, status)
        with self._lock:
            self._running[pod["metadata"]["uid"]] = pod
        if behavior.outcome != "RunForever":
            uid = pod["metadata"]["uid"]
            self._after(behavior.run_seconds, lambda: self._finish(pod, behavior), uid)

    @staticmethod
    def _serves(pod: Obj, behavior: Behavior) -> bool:
        """Whether the pod serves metrics: its behavior has some, for its task index or all."""
        if behavior.metrics is None:
            return False
        if behavior.metrics_index is None:
            return True
        index = (pod["metadata"].get("annotations") or {}).get(TASK_INDEX)
        return index == str(behavior.metrics_index)

    def _gang_nodes(self, pod: Obj) -> dict[int, str]:
        """The running pods of the pod's gang: node by pod index (from the names' end)."""
        gang = _GANG_POD.match(pod["metadata"]["name"])
        with self._lock:
            running = list(self._running.values())
        out = {}
        for other in running:
            found = _GANG_POD.match(other["metadata"]["name"])
            same = other["metadata"]["namespace"] == pod["metadata"]["namespace"]
            if gang and found and same and found.group(1) == gang.group(1):
                out[int(found.group(2))] = str(other["spec"].get("nodeName") or "")
        return out

    def _finish(self, pod: Obj, behavior: Behavior) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self._runs:  # a real process ends as it ends: killed
            self._runs[uid].kill()
            return
        with self._lock:
            if uid in self._ending or self._running.pop(uid, None) is None:
                return
        oom = behavior.outcome == "OOMKilled"
        code = 137 if oom else behavior.exit_code
        reason = "OOMKilled" if oom else ("Completed" if code == 0 else "Error")
        self._terminate(pod, code, reason, behavior.message)

    def _fail_init(self, pod: Obj, behavior: Behavior) -> None:
        """The first init container exits non-zero: the pod (restartPolicy Never) is Failed."""
        inits, started = pod["spec"].get("initContainers") or [], _now()
        if not inits:
            raise ValueError(f"pod {pod['metadata']['name']} has no init container to fail")
        status = self._base_status(pod, "Failed", ready=False)
        for cond in status["conditions"]:
            if cond["type"] == "Initialized":
                cond.update(
                    status="False",
                    reason="ContainersNotInitialized",
                    message=f"containers with incomplete status: [{inits[0]['name']}]",
                )
        code = behavior.init_exit_code
        failed = terminated(code, "Error", behavior.init_message, started)
        waiting = {"waiting": {"reason": "PodInitializing"}}
        status["initContainerStatuses"] = [
            container_status(c, failed if i == 0 else waiting, i == 0) for i, c in enumerate(inits)
        ]
        containers = pod["spec"]["containers"]
        status["containerStatuses"] = [container_status(c, waiting, False) for c in containers]
        self._patch_status(pod, status)

    def _serve_metrics(self, pod: Obj, metrics: Metrics) -> str | None:
        """Serve the pod's metrics on a free loopback IP and its named port; that IP."""
        port = metrics_port(pod)
        if port is None:
            return None
        feed = Feed(metrics, pod["metadata"]["namespace"], functools.partial(self._gang_nodes, pod))

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = feed.text() if self.path.split("?")[0] == "/metrics" else b"not found\n"
                self.send_response(200 if body != b"not found\n" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug(format, *args)

        for _ in range(50):  # an address another tier on this machine holds is skipped
            ip = self._next_ip()
            try:
                feed.server = http.server.ThreadingHTTPServer((ip, port), Handler)
                break
            except OSError:
                continue
        else:
            raise RuntimeError(f"no free loopback address for port {port}")
        server = feed.server
        thread = threading.Thread(
            target=lambda: server.serve_forever(poll_interval=0.5), daemon=True, name=f"m-{ip}"
        )
        thread.start()
        with self._lock:
            self._feeds[pod["metadata"]["uid"]] = feed
        return ip

    def _stop_feed(self, uid: str) -> None:
        with self._lock:
            feed = self._feeds.pop(uid, None)
        if feed is not None and feed.server is not None:
            feed.server.shutdown()
            feed.server.server_close()

    def _terminate(self, pod: Obj, code: int, reason: str, message: str) -> None:
        self._stop_feed(pod["metadata"]["uid"])
        started = self._started.get(pod["metadata"]["uid"], _now())
        phase = "Succeeded" if code == 0 else "Failed"
        status = self._base_status(pod, phase, ready=False)
        containers = pod["spec"]["containers"]
        status["containerStatuses"] = [
            container_status(c, terminated(code, reason, self._message(pod, c, code, message),
                                           started), True)
            for c in containers
        ]  # fmt: skip
        self._patch_status(pod, status)

    def _message(self, pod: Obj, container: Obj, code: int, message: str) -> str:
        """The termination message; FallbackToLogsOnError: a failed container's log tail.

        As the kubelet does: only when the container wrote none and exited non-zero, the
        last 80 lines of its log, at most 2 KiB (kubelet's MaxContainerTerminationMessageLog*).
        """
        fallback = container.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        if message or code == 0 or not fallback:
            return message
        meta = pod["metadata"]
        text = self.logs(meta["namespace"], meta["name"], container["name"]) or ""
        tail = "".join(text.splitlines(keepends=True)[-80:]).encode()[-2048:]
        return tail.decode(errors="ignore")

    def _end(self, pod: Obj) -> None:
        """A graceful deletion: stop the containers, report them, then remove the pod.

        `pod` is the deletion's watch event (its status is the newest: this pod's earlier
        actions ran before this one, on the same worker), so no read is needed first."""
        meta = pod["metadata"]
        phase = (pod.get("status") or {}).get("phase")
        run = self._runs.get(meta["uid"])
        if run is not None:
            self._end_run(run, pod)
            return
        with self._lock:
            was_running = self._running.pop(meta["uid"], None) is not None
        self._stop_feed(meta["uid"])
        if phase not in ("Succeeded", "Failed") and was_running:
            self._terminate(pod, 137, "Error", "")
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]}}  # fmt: skip
        self.api.request("DELETE", self._path(pod).removesuffix("/status"), body)

    # -- logs ----------------------------------------------------------------------------------

    def _log_server(self) -> http.server.ThreadingHTTPServer:
        kubelet = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self._answer(404, "not found\n")
                    return
                text = kubelet.logs(parts[1], parts[2], parts[3])
                if text is None:
                    self._answer(404, f"container {parts[3]} of pod {parts[2]} not found\n")
                    return
                query = urllib.parse.parse_qs(url.query)
                if "tailLines" in query:
                    lines = text.splitlines(keepends=True)
                    tail = int(query["tailLines"][0])
                    text = "".join(lines[-tail:] if tail else [])
                if "limitBytes" in query:
                    text = text.encode()[: int(query["limitBytes"][0])].decode(errors="ignore")
                self._answer(200, text)

            def _answer(self, code: int, text: str) -> None:
                body = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug(format, *args)

        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.cert[0]), str(self.cert[1]))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        return server

    def _serve_logs(self) -> None:
        self._server.serve_forever(poll_interval=0.5)


def summary(pod: Obj) -> str:
    """One line about a pod for failure messages."""
    status = pod.get("status") or {}
    return json.dumps({"name": pod["metadata"]["name"], "phase": status.get("phase"),
                       "node": pod["spec"].get("nodeName")})  # fmt: skip
