"""Many TrainiumJobs against a private emulator: the reliability suite's and bench/'s driver.

One `Cluster` is an emulator of its own (with the CRD, a queue and a claim), a python client that
the emulator tells apart from the operator (its own User-Agent), a stand-in for Volcano that
moves every Volcano job through Running to Completed, and read-outs of what happened: phase
histories, children, Events and the operator's requests. No kubectl: a burst of 1,000 jobs must
not cost 1,000 processes.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kmock
import kubernetes
import yaml

from emulator import K8sEmulator
from harness import EmulatorServer, make_emulator, write_kubeconfig
from k8s_semantics import ApiRequest

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[1]
CRD = REPO / "crds" / "trainiumjobs.trainium.dev.yaml"
GROUP, VERSION, PLURAL = "trainium.dev", "v1alpha1", "trainiumjobs"
TJS, VCJOBS = f"{GROUP}/{VERSION}/{PLURAL}", "batch.volcano.sh/v1alpha1/jobs"
DRIVER_AGENT = "trainium-driver/1"  # ApiRequest.client "other": never faulted, never counted
PHASE_ORDER = {
    "Pending": 0,
    "WaitingForCache": 1,
    "Precompiling": 1,
    "Training": 2,
    "Succeeded": 3,
    "Failed": 3,
}
JOB_LABEL = "trainium.dev/job-name"
WRITES = {"create", "patch", "update", "delete", "deletecollection"}


def good_spec(queue: str, cache: str, **overrides: Any) -> Obj:
    """A valid spec on an existing claim; a distinct cache name makes each job compile."""
    spec: Obj = {
        "image": "registry.example/trainer:1",
        "args": ["bert-pretrain", "--batch-size", "16"],
        "instanceType": "trn1.32xlarge",
        "nodes": 2,
        "storage": {"claimName": "fsx-claim"},
        "cache": {"name": cache},
        "scheduling": {"queue": queue},
    }
    spec.update(overrides)
    return spec


class Cluster:
    """A private emulator with the CRD, a namespace, a queue and a claim; driven over HTTP."""

    def __init__(
        self, workdir: Path, namespace: str = "fleet", emulator: K8sEmulator | None = None
    ) -> None:
        self.workdir, self.namespace, self.queue = workdir, namespace, "fleet-queue"
        self.server = EmulatorServer(make_emulator() if emulator is None else emulator)
        self.kubeconfig = workdir / "kubeconfig"
        self.volcano: VolcanoStandIn | None = None

    def start(self) -> None:
        self.server.start()
        write_kubeconfig(self.kubeconfig, self.server.url)
        config = kubernetes.client.Configuration(host=self.server.url)
        config.retries = False
        client = kubernetes.client.ApiClient(config, pool_threads=4)
        client.user_agent = DRIVER_AGENT
        self.client = client
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.core = kubernetes.client.CoreV1Api(client)
        crd = yaml.safe_load(CRD.read_text())
        kubernetes.client.ApiextensionsV1Api(client).create_custom_resource_definition(crd)
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        self.create_queue(self.queue)
        self.create_claim("fsx-claim")

    def stop(self) -> None:
        if self.volcano is not None:
            self.volcano.stop()
        self.server.stop()

    @property
    def emulator(self) -> K8sEmulator:
        return self.server.emulator

    def operator_env(self) -> dict[str, str]:
        """Environment for an operator process that talks to this cluster."""
        return {"KUBECONFIG": str(self.kubeconfig)}

    # ---- objects -------------------------------------------------------------------------------

    def create_queue(self, name: str) -> None:
        body = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                "metadata": {"name": name}, "spec": {"weight": 1}}  # fmt: skip
        self.custom.create_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", body)

    def create_claim(self, name: str) -> None:
        """A claim of a StorageClass that exists, so the emulated provisioner binds it."""
        storage = kubernetes.client.StorageV1Api(self.core.api_client)
        sc = {"metadata": {"name": "fleet-sc"}, "provisioner": "fsx.csi.aws.com"}
        try:
            storage.create_storage_class(sc)
        except kubernetes.client.exceptions.ApiException as exc:
            if exc.status != 409:
                raise
        spec = {"accessModes": ["ReadWriteMany"], "storageClassName": "fleet-sc",
                "resources": {"requests": {"storage": "1Gi"}}}  # fmt: skip
        body = {"metadata": {"name": name}, "spec": spec}
        self.core.create_namespaced_persistent_volume_claim(self.namespace, body)

    def create_job(self, name: str, spec: Any) -> None:
        """Create a TrainiumJob with any spec at all: the emulator does not validate CRs."""
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainiumJob",
                "metadata": {"name": name, "namespace": self.namespace}, "spec": spec}  # fmt: skip
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)

    def create_jobs(self, specs: dict[str, Obj], threads: int = 8) -> None:
        """Create many jobs at once (a burst), from a few client threads."""
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda item: self.create_job(*item), specs.items()))

    def start_volcano(
        self,
        steps: tuple[str, ...] = ("Running", "Completed"),
        hold: dict[str, float] | None = None,
    ) -> VolcanoStandIn:
        self.volcano = VolcanoStandIn(self, steps, hold=hold)
        self.volcano.start()
        return self.volcano

    # ---- read-outs (in process, not over HTTP: not recorded as requests) -----------------------

    def jobs(self) -> dict[str, Obj]:
        return {j["metadata"]["name"]: j for j in self.server.list(TJS, self.namespace)}

    def phases(self) -> dict[str, str | None]:
        """Each job's current status.phase."""
        return {n: (j.get("status") or {}).get("phase") for n, j in self.jobs().items()}

    def phase_history(self, name: str) -> list[str]:
        """Every phase the job's stored versions went through, repeats collapsed."""
        key = (kmock.resource(TJS), self.namespace, name)

        def read() -> list[str]:
            versions = self.emulator.objects[key].history
            seen = [((v.raw.get("status") or {}).get("phase")) for v in versions if v is not None]
            return [p for i, p in enumerate(seen) if p and (i == 0 or seen[i - 1] != p)]

        return self.server.call(read)

    def backwards(self, names: Iterable[str]) -> dict[str, list[str]]:
        """Jobs whose phase ever went back (e.g. Training -> Precompiling)."""
        out = {}
        for name in names:
            history = self.phase_history(name)
            ranks = [PHASE_ORDER.get(p, -1) for p in history]
            if any(b < a for a, b in itertools.pairwise(ranks)):
                out[name] = history
        return out

    def children(self, resource: str, job: str) -> list[Obj]:
        """Live objects of a resource labelled as the job's (any namespace)."""
        return [
            o
            for o in self.server.list(resource)
            if (o["metadata"].get("labels") or {}).get(JOB_LABEL) == job
        ]

    def added_twice(self) -> list[tuple[str, str | None, str]]:
        """Objects created more than once (a re-creation is a duplicate child)."""

        def read() -> list[tuple[str, str | None, str]]:
            added = Counter(
                (str(res), md.get("namespace"), md["name"])
                for _, res, e in self.emulator._log
                if e["type"] == "ADDED" and (md := e["object"]["metadata"])
            )
            return [key for key, n in added.items() if n > 1]

        return self.server.call(read)

    def events(self, job: str) -> list[Obj]:
        """Events about one job, in creation order."""
        return [
            e
            for e in self.server.list("v1/events", self.namespace)
            if (e.get("involvedObject") or {}).get("name") == job
        ]

    def operator_requests(self) -> list[ApiRequest]:
        """Requests of the operator (kopf's and its own client's), not the driver's."""
        return [r for r in list(self.emulator.api_requests) if r.user_agent != DRIVER_AGENT]

    def wait(self, done: Callable[[], bool], timeout: float, what: str) -> float:
        """Poll until done() is true; return the seconds it took, or raise naming `what`."""
        start = time.monotonic()
        while not done():
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.1)
        return time.monotonic() - start


class VolcanoStandIn:
    """Moves every Volcano job through `steps`, one step per sweep, as Volcano's controller.

    `hold` keeps a stage's jobs (by their trainium.dev/stage label) in their first step for that
    many seconds: a compile or a training run that takes time.
    """

    def __init__(
        self,
        cluster: Cluster,
        steps: tuple[str, ...],
        interval: float = 0.2,
        hold: dict[str, float] | None = None,
    ) -> None:
        self.cluster, self.steps, self.interval = cluster, steps, interval
        self.hold = hold or {}
        self.entered: dict[str, float] = {}  # job name -> when it entered its first step
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="volcano", daemon=True)
        self.errors: list[str] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for job in self.cluster.server.list(VCJOBS):
                phase = ((job.get("status") or {}).get("state") or {}).get("phase")
                index = self.steps.index(phase) + 1 if phase in self.steps else 0
                if index < len(self.steps) and not self._held(job["metadata"], index):
                    self._patch(job["metadata"], self.steps[index])

    def _held(self, md: Obj, index: int) -> bool:
        """Whether a job stays in its first step a while longer (see `hold`)."""
        if index == 0:
            self.entered[md["name"]] = time.monotonic()
            return False
        stage = (md.get("labels") or {}).get("trainium.dev/stage", "")
        held_for = time.monotonic() - self.entered.get(md["name"], 0.0)
        return index == 1 and held_for < self.hold.get(stage, 0.0)

    def _patch(self, md: Obj, phase: str) -> None:
        body = {"status": {"state": {"phase": phase}}}
        try:
            self.cluster.custom.patch_namespaced_custom_object_status(
                "batch.volcano.sh", "v1alpha1", md["namespace"], "jobs", md["name"], body
            )
        except kubernetes.client.ApiException as exc:  # deleted meanwhile: fine, but keep a note
            self.errors.append(f"{md['name']}: {exc.status}")


def count_by_verb(requests: Iterable[ApiRequest]) -> dict[str, int]:
    """reads (get/list), writes, watches and 404s of a request record."""
    out = Counter[str]()
    for r in requests:
        out["writes" if r.verb in WRITES else "watches" if r.verb == "watch" else "reads"] += 1
        out["404s"] += r.code == 404
    return dict(out)
