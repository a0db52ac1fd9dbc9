"""Set-up shared by the Kueue modules (test_tier_kueue*.py, test_tier_e2e_preempt.py): the
module's ResourceFlavor, a ClusterQueue and LocalQueue per test, priority classes, jobs in the
queue, and the reads of Kueue's objects their checks share.

Each test has a ClusterQueue of its own (`cq-<namespace>`) that admits only its namespace, and a
LocalQueue `team-a` there; a job opts in with the `kueue.x-k8s.io/queue-name` label. The
module's Kueue is conftest's `kueue` fixture (a module's KUEUE_CONFIG over Kueue's defaults, as in
test_tier_kueue_podsready.py). The fixtures (flavor, queued, kueue_alive) reach every tier module
through conftest.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

import procs
from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import TJ, condition, create, fsx_claim, get, small_job
from kubelet import Behavior, FakeKubelet
from kueue import API, Kueue
from test_zz_audit import OPERATOR_USER

Obj = dict[str, Any]
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
LOCAL_QUEUE = "team-a"
NEURON = "aws.amazon.com/neuron"
EFA = "vpc.amazonaws.com/efa"
#: The flavor's node labels and toleration: a zone every fake node has (the pods still fit) and
#: a taint key none has; neither is on a gang's pods unless an admission put it there.
FLAVOR = "trn1-tier"
FLAVOR_LABELS = {"topology.kubernetes.io/zone": "us-west-2d"}
FLAVOR_TOLERATION = {"key": "tier.trainium.dev/pool", "operator": "Exists", "effect": "NoSchedule"}
RUNNING = Behavior(outcome="RunForever")
PRECOMPILE = {"trainium.dev/stage": "precompile"}


def resource_flavor() -> Obj:
    """The tier's ResourceFlavor FLAVOR."""
    return {
        "apiVersion": KUEUE_API_VERSION, "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR},
        "spec": {"nodeLabels": FLAVOR_LABELS, "tolerations": [FLAVOR_TOLERATION]},
    }  # fmt: skip


@pytest.fixture(scope="module", name="flavor")
def flavor_fixture(kueue: Kueue, operator: OperatorProcess) -> str:
    """The module's ResourceFlavor (through Kueue's webhooks), once the operator watches
    Kueue's Workloads and ResourceFlavors (kopf found their CRDs, installed after it started)."""

    def watched() -> set[str]:
        seen = {
            (e.get("objectRef") or {}).get("resource")
            for e in kueue.cluster.audit()
            if e.get("user", {}).get("username") == OPERATOR_USER
            and e["verb"] == "watch"
            and (e.get("objectRef") or {}).get("apiGroup") == "kueue.x-k8s.io"
        }
        return {"workloads", "resourceflavors"} - seen

    try:
        wait_until(lambda: not watched(), procs.scaled(30), "the operator's Kueue watches")
    except TimeoutError as exc:
        raise AssertionError(f"the operator never watched Kueue's {watched()}") from exc
    kueue.cluster.apply(resource_flavor())
    return FLAVOR


# -- queues ------------------------------------------------------------------------------------


def cluster_queue(
    name: str,
    namespace: str,
    flavor: str,
    neuron: int,
    efa: int | None = None,
    checks: Sequence[str] = (),
    preempt: bool = False,
) -> Obj:
    """A ClusterQueue admitting namespace alone: `neuron` devices, EFA to match unless given,
    cpu and memory plenty (in that order: set_neuron_quota patches by index); `checks`: its
    AdmissionChecks; `preempt`: it preempts lower priorities within itself."""
    resources: list[Obj] = [
        {"name": "cpu", "nominalQuota": 1024},
        {"name": "memory", "nominalQuota": "4Ti"},
        {"name": NEURON, "nominalQuota": neuron},
        {"name": EFA, "nominalQuota": neuron if efa is None else efa},
    ]
    spec: Obj = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [{
            "coveredResources": [r["name"] for r in resources],
            "flavors": [{"name": flavor, "resources": resources}],
        }],
    }  # fmt: skip
    if preempt:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return {"apiVersion": KUEUE_API_VERSION, "kind": "ClusterQueue",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def local_queue(name: str, namespace: str, cq: str) -> Obj:
    return {"apiVersion": KUEUE_API_VERSION, "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cq}}  # fmt: skip


def queues(cluster: Cluster, namespace: str, flavor: str, neuron: int, **kw: Any) -> str:
    """cluster_queue `cq-<namespace>` (`kw`: its efa, checks, preempt) and LocalQueue team-a
    there, both Active; the ClusterQueue's name."""
    name = f"cq-{namespace}"
    cluster.apply(
        cluster_queue(name, namespace, flavor, neuron, **kw),
        local_queue(LOCAL_QUEUE, namespace, name),
    )
    wait_active(cluster, f"{API}/clusterqueues/{name}",
                f"{API}/namespaces/{namespace}/localqueues/{LOCAL_QUEUE}")  # fmt: skip
    return name


def wait_active(cluster: Cluster, *paths: str) -> None:
    """Until each Kueue queue at an API path says Active (Kueue admits nothing into it before)."""
    for path in paths:
        wait_until(lambda path=path: active(cluster.api.get(path)), 60, f"{path} Active")


def second_queue(cluster: Cluster, ns: str, flavor: str, neuron: int) -> str:
    """LocalQueue team-b in ns, on a ClusterQueue of its own with `neuron` devices; its name."""
    other = f"cqb-{ns}"[:63]
    cluster.apply(cluster_queue(other, ns, flavor, neuron, efa=16),
                  local_queue("team-b", ns, other))  # fmt: skip
    return other


def set_neuron_quota(cluster: Cluster, name: str, neuron: int) -> None:
    """The ClusterQueue's Neuron and EFA quotas (its first flavor's third and fourth
    resources, as cluster_queue orders them) set to `neuron`."""
    patch = [{"op": "replace",
              "path": f"/spec/resourceGroups/0/flavors/0/resources/{i}/nominalQuota",
              "value": neuron} for i in (2, 3)]  # fmt: skip
    cluster.kubectl("patch", "clusterqueue", name, "--type=json", "-p", json.dumps(patch))


def active(obj: Obj | None) -> bool:
    return condition(obj, "Active").get("status") == "True"


def priority_classes(cluster: Cluster, namespace: str) -> tuple[str, str]:
    """Kueue WorkloadPriorityClasses low (10) and high (1000) for namespace: their names."""
    low, high = f"low-{namespace}"[:63], f"high-{namespace}"[:63]
    cluster.apply(*(priority_class(name, value) for name, value in ((low, 10), (high, 1000))))
    return low, high


def priority_class(name: str, value: int) -> Obj:
    return {"apiVersion": KUEUE_API_VERSION, "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value}  # fmt: skip


# -- jobs --------------------------------------------------------------------------------------


def in_queue(body: Obj, priority_class: str | None = None) -> Obj:
    """body with the opt-in label (LocalQueue team-a) and, if given, a Kueue priority class."""
    body["metadata"]["labels"] = {QUEUE_LABEL: LOCAL_QUEUE}
    if priority_class is not None:
        body["metadata"]["labels"][PRIORITY_LABEL] = priority_class
    return body


def kueue_job(name: str, namespace: str, **spec: Any) -> Obj:
    """small_job with the opt-in label (LocalQueue team-a)."""
    return in_queue(small_job(name, namespace, **spec))


def running_pods(kubelet: FakeKubelet, namespace: str, count: int, job: str) -> list[str]:
    """Wait until the kubelet runs `count` pods of `job`'s gangs (their names start with it)."""

    def mine() -> list[str]:
        return [p for p in kubelet.running(namespace) if p.startswith(f"{job}-")]

    return list(
        wait_until(lambda: len(mine()) == count and mine(), 120, f"{count} running pods {job}")
    )


# -- reading Kueue's objects -------------------------------------------------------------------


def workloads_of(kueue: Kueue, namespace: str, job: str) -> list[Obj]:
    """The Workloads of one job, oldest first."""
    return [
        w
        for w in kueue.workloads(namespace)
        if w["metadata"].get("labels", {}).get("trainium.dev/job-name") == job
    ]


def workload_of(cluster: Cluster, namespace: str, job: str, stage: str = "train") -> str:
    """The name of a job's Workload for a stage (it carries the job's uid: issue 41)."""
    found = cluster.api.get(f"{API}/namespaces/{namespace}/workloads") or {}
    names = [
        w["metadata"]["name"]
        for w in found.get("items") or []
        if (w["metadata"].get("labels") or {}).get("trainium.dev/job-name") == job
        and (w["metadata"].get("labels") or {}).get("trainium.dev/stage") == stage
    ]
    assert len(names) == 1, f"{job}'s {stage} Workloads: {names}"
    return names[0]


def released(kueue: Kueue, name: str) -> bool:
    """The ClusterQueue holds nothing: no Workload reserving or admitted, every total 0."""
    status = kueue.cluster_queue(name).get("status") or {}
    totals = [
        r.get("total", "0")
        for key in ("flavorsReservation", "flavorsUsage")
        for f in status.get(key) or []
        for r in f.get("resources") or []
    ]
    held = status.get("reservingWorkloads", 0) or status.get("admittedWorkloads", 0)
    return not held and all(t in ("0", 0) for t in totals)


def refused_in(kueue: Kueue, ns: str, job: str) -> Obj | None:
    """The job's (one) Workload once Kueue refused it quota (QuotaReserved=False)."""
    found = workloads_of(kueue, ns, job)
    verdict = condition(found[0], "QuotaReserved") if len(found) == 1 else {}
    return found[0] if verdict.get("status") == "False" and verdict.get("message") else None


@pytest.fixture(name="kueue_alive")
def kueue_alive_fixture(request: pytest.FixtureRequest) -> Iterator[None]:
    """The test starts and ends with Kueue's manager running (a crash names itself); nothing
    for a test that runs a Kueue of its own (it asks for no `kueue`)."""
    if "kueue" not in request.fixturenames:
        yield
        return
    kueue: Kueue = request.getfixturevalue("kueue")
    kueue.check_alive()
    yield
    kueue.check_alive()


# -- one test's world --------------------------------------------------------------------------


@dataclass
class Queued:
    """What a Kueue test works with: the tier, the module's Kueue and flavor, the operator
    running, and its namespace (with the FSx claim `fsx-claim`)."""

    cluster: Cluster
    kubelet: FakeKubelet
    kueue: Kueue
    flavor: str
    operator: OperatorProcess
    ns: str

    def queues(self, neuron: int, **kw: Any) -> str:
        """`queues` for this test's namespace and the module's flavor."""
        return queues(self.cluster, self.ns, self.flavor, neuron, **kw)

    def create(self, name: str, **spec: Any) -> None:
        """A kueue_job created in the namespace."""
        create(self.cluster, kueue_job(name, self.ns, **spec))

    def running(self, count: int, job: str) -> list[str]:
        return running_pods(self.kubelet, self.ns, count, job)

    def workloads(self, job: str) -> list[Obj]:
        return workloads_of(self.kueue, self.ns, job)

    def refused(self, job: str) -> Obj | None:
        return refused_in(self.kueue, self.ns, job)

    def status(self, job: str) -> Obj:
        return (get(self.cluster, TJ, job, self.ns) or {}).get("status") or {}

    def wait_released(self, cq: str, seconds: float | None = None) -> None:
        """Until the ClusterQueue holds nothing (procs.scaled(60) unless given)."""
        wait = procs.scaled(60) if seconds is None else seconds
        wait_until(lambda: released(self.kueue, cq), wait, f"{cq} usage back to 0")


@pytest.fixture(name="queued")
def queued_fixture(
    cluster: Cluster,
    kubelet: FakeKubelet,
    kueue: Kueue,
    flavor: str,
    running_operator: OperatorProcess,
    ns: str,
) -> Queued:
    """A Kueue test's world (Queued); the namespace's FSx claim made first."""
    fsx_claim(cluster, ns)
    return Queued(cluster, kubelet, kueue, flavor, running_operator, ns)
