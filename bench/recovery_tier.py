"""recovery.py's stage: the real-cluster tier, the operator, and a watcher that times arrivals.

One control plane from the tier's assets (etcd, kube-apiserver, kube-controller-manager with its
pod garbage collector, Volcano's webhooks, controllers and gang scheduler), the bench's own fake
kubelet playing `NODES` trn1.32xlarge nodes, the CRD, and the operator as a process with the
tier's progress settings (tests/cluster/conftest.PROGRESS_ENV). Every time here is the bench's
monotonic clock when a watch event reached it; nothing is read from the operator's log.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common

from cluster import Cluster, wait_until
from conftest import PROGRESS_ENV
from harness import OperatorProcess
from jobs import small_job
from kubelet import TRN1_32XLARGE, Behavior, FakeKubelet
from recorder import Recorder, Version
from trainium_operator.api import naming

Obj = dict[str, Any]
CRD = common.REPO / "crds" / "trainiumjobs.trainium.dev.yaml"
PODS = "/api/v1/pods"
VCJOBS = "/apis/batch.volcano.sh/v1alpha1/jobs"
TJS = "/apis/trainium.dev/v1alpha1"
#: trn1.32xlarge nodes the bench registers: gangs of 2 or 3, one at a time, and a node lost per
#: node-gone repetition (never re-added) still leave room.
NODES = 10


@dataclass(frozen=True)
class Arrival:
    """One watch event as it reached the bench: when (monotonic seconds) and what."""

    at: float
    version: Version


class TimedRecorder(Recorder):
    """A Recorder that also keeps when each event arrived, in arrival order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._arrivals: list[Arrival] = []

    def _keep(self, kind: str, obj: Obj) -> None:
        at = time.monotonic()
        super()._keep(kind, obj)
        version = Version(int(obj["metadata"]["resourceVersion"]), kind, obj)
        with self._lock:
            self._arrivals.append(Arrival(at, version))

    def arrivals(self, namespace: str, since: float = 0.0) -> list[Arrival]:
        """Events of one namespace that arrived at or after `since`, oldest first."""
        with self._lock:
            seen = list(self._arrivals)
        return [a for a in seen if a.at >= since and a.version.obj["metadata"].get(
            "namespace") == namespace]  # fmt: skip


class Stage:
    """The control plane, the fake nodes and the operator, with the pod and Volcano job watches."""

    def __init__(self, assets: Path, workdir: Path, env: dict[str, str]) -> None:
        self.cluster = Cluster(assets, workdir)
        self.workdir, self.env = workdir, env
        self.kubelet: FakeKubelet | None = None
        self.operator: OperatorProcess | None = None
        self.pods = TimedRecorder(self.cluster.api, PODS)
        self.vcjobs = TimedRecorder(self.cluster.api, VCJOBS)
        self._stop = threading.Event()

    def __enter__(self) -> Stage:
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        cluster = self.cluster
        cluster.start()
        cluster.kubectl("apply", "--server-side", "-f", str(CRD))
        cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        self.kubelet = FakeKubelet(cluster.api, cluster.kubelet_cert)
        for i in range(NODES):
            self.kubelet.add_node(f"trn1-32xl-{i}", TRN1_32XLARGE)
        self.kubelet.start()
        self.pods.__enter__()
        self.vcjobs.__enter__()
        command = [sys.executable, "-m", "trainium_operator", "operator", "--standalone",
                   "--all-namespaces"]  # fmt: skip
        env = {"KUBECONFIG": str(cluster.kubeconfig), **PROGRESS_ENV, **self.env}
        op = OperatorProcess(command, self.workdir / "operator.log", env=env)
        for key in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
            op.env.pop(key, None)
        op.env.update(AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE="/nonexistent",
                      AWS_SHARED_CREDENTIALS_FILE="/nonexistent")  # fmt: skip
        self.operator = op
        op.start(timeout=90)

    def __exit__(self, *exc: object) -> None:
        if self.operator is not None:
            self.operator.stop()
        for rec in (self.pods, self.vcjobs):
            if rec._thread.is_alive():
                rec.__exit__()
        if self.kubelet is not None:
            self.kubelet.stop()
        self.cluster.stop()

    @property
    def api(self) -> Any:
        return self.cluster.api

    def get(self, path: str) -> Obj | None:
        """One object as the admin reads it (None: 404)."""
        try:
            return self.api.get(path)  # type: ignore[no-any-return]
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise


def first(arrivals: Iterator[Arrival] | list[Arrival], test: Callable[[Obj], bool]) -> float | None:
    """When the first arrival whose object passes `test` came (None: none yet)."""
    return next((a.at for a in arrivals if test(a.version.obj)), None)


def owned_by(obj: Obj, uid: str) -> bool:
    """Whether an object's ownerReferences name uid."""
    return any(o.get("uid") == uid for o in obj["metadata"].get("ownerReferences") or [])


def nth_seen(arrivals: list[Arrival], test: Callable[[Obj], bool], n: int) -> float | None:
    """When the n-th distinct object (by uid) passing `test` was first seen so."""
    uids: set[str] = set()
    for a in arrivals:
        if a.version.type != "DELETED" and test(a.version.obj):
            uids.add(a.version.uid)
            if len(uids) >= n:
                return a.at
    return None


def poll(done: Callable[[], Any], timeout: float, what: str) -> Any:
    """wait_until, 0.2 s apart: the times come from recorded arrivals, not from the poll."""
    return wait_until(done, timeout, what, every=0.2)


#: Seconds the failure may take to show (a node gone: the pod garbage collector's 40 s
#: quarantine and 20 s period), then from it to the new gang bound before the trial counts lost
#: (a recovery takes a few seconds on the tier).
VISIBLE_TIMEOUT, RECOVERY_TIMEOUT = 120.0, 20.0
#: Nodes of each gang.
GANG = 2
RUNNING = Behavior(outcome="RunForever")


@dataclass
class Trial:
    """One repetition: the job, its first gang, and what was timed."""

    ns: str
    job: str
    vc_uid: str = ""
    new_uid: str = ""
    pod_uids: dict[str, str] = field(default_factory=dict)  # uid -> node
    injected: float = 0.0
    visible: float | None = None
    restarted: float | None = None
    bound: float | None = None
    #: When the new gang's last training pod was shown Running (the world at work again).
    running: float | None = None
    by: str = ""
    reason: str = ""
    extra: dict[str, float] = field(default_factory=dict)
    #: Why the trial ended without a new gang bound (a wait that timed out).
    lost: str = ""

    @property
    def vcjob(self) -> str:
        return naming.vcjob_name(self.job, "train")


@dataclass(frozen=True)
class Scenario:
    """A failure class: how its job runs, how the failure is injected, when it is visible."""

    name: str
    reason: str  # the lastFailure.reason the operator should show
    #: "operator" (a new Volcano job), "volcano" (RestartJob, same job) or "swap" (the same
    #: job, its reservation patched down by the operator: a spare takes the lost node's place).
    restarter: str
    inject: Callable[[Stage, Trial], None]
    visible: Callable[[Stage, Trial], float | None]
    run_policy: dict[str, Any] = field(default_factory=dict)
    behavior: Behavior = RUNNING
    #: Plans set before the job exists (a failure at the gang's start).
    before: Callable[[Stage, Trial], None] | None = None
    #: When set, `shown` times a second moment after the injection (a node gone: its pod
    #: disrupted), kept under this name as seconds after the injection, apart from (a).
    lag: str = ""
    shown: Callable[[Stage, Trial], float | None] | None = None
    #: The operator acts even where Volcano restarts the gang (a node gone: the operator removes
    #: its pods): (a) is then judged against the target.
    operator_acts: bool = False
    #: The first gang's nodes, the new gang's, and spec fields over small_job's (elastic).
    nodes: int = GANG
    new_nodes: int = GANG
    spec: dict[str, Any] = field(default_factory=dict)
    #: Seconds the class waits by design before restarting (elastic: shrinkAfterSeconds): added
    #: to the target of (a) and to the recovery timeout.
    waits: float = 0.0
    #: Brings the cluster to what each repetition starts from; run before and after each.
    reset: Callable[[Stage], None] | None = None
    #: Spare pods the gang runs beside its training pods (spec.spares).
    spares: int = 0
    #: The operator's share of a trial (None: restarted - visible) and further moments it times
    #: into trial.extra once the new gang is bound.
    share: Callable[[Trial], float | None] | None = None
    detail: Callable[[Stage, Trial], None] | None = None


def run_trial(stage: Stage, sc: Scenario, ns: str, index: int) -> Trial:
    """Create the job, let its gang run, inject, time the three moments, delete the job."""
    trial = Trial(ns, f"{sc.name}-{index}")
    if sc.reset is not None:
        sc.reset(stage)
    if sc.before is not None:
        sc.before(stage, trial)
    policy = {"maxRetries": 5, **sc.run_policy}
    spec = small_job(trial.job, ns, nodes=sc.nodes, runPolicy=policy, **sc.spec)
    stage.api.request("POST", f"{TJS}/namespaces/{ns}/trainiumjobs", spec)
    try:
        _measure(stage, sc, trial)
    except TimeoutError as exc:
        trial.lost = str(exc)
    finally:
        _delete(stage, trial)
        if sc.reset is not None:
            sc.reset(stage)
    return trial


def _measure(stage: Stage, sc: Scenario, trial: Trial) -> None:
    trial.vc_uid = poll(lambda: _vcjob_uid(stage, trial), 60, f"{trial.vcjob} created")
    if sc.before is None:  # a failure injected into a running gang
        gang = lambda: _running_gang(stage, trial, sc.nodes + sc.spares)  # noqa: E731
        trial.pod_uids = poll(gang, 120, f"{trial.job} running")
        if sc.behavior.metrics is not None:
            poll(lambda: _moved(stage, trial), 120, f"{trial.job}'s step moving on status")
    sc.inject(stage, trial)
    trial.visible = poll(lambda: sc.visible(stage, trial), VISIBLE_TIMEOUT, "the failure")
    late = trial.visible + RECOVERY_TIMEOUT + sc.waits - time.monotonic()
    poll(lambda: _restarted(stage, trial, sc), late, f"{trial.job} restarted")
    late = trial.visible + RECOVERY_TIMEOUT + sc.waits - time.monotonic()
    bound = lambda: _bound(stage, trial, sc.new_nodes)  # noqa: E731
    trial.bound = poll(bound, late, f"{trial.job}'s new gang bound")
    if sc.lag and sc.shown is not None:
        late = trial.visible + RECOVERY_TIMEOUT + sc.waits - time.monotonic()
        shown = poll(lambda: sc.shown(stage, trial), late, sc.lag)  # type: ignore[misc]
        trial.extra[sc.lag] = shown - trial.injected
    late = max(trial.visible + RECOVERY_TIMEOUT + sc.waits - time.monotonic(), 5.0)
    with contextlib.suppress(TimeoutError):  # bound is the recovery; Running is shown beside
        trial.running = poll(lambda: _running(stage, trial, sc.new_nodes), late, "Running")
    if sc.detail is not None:
        sc.detail(stage, trial)
    body = stage.get(f"{TJS}/namespaces/{trial.ns}/trainiumjobs/{trial.job}") or {}
    trial.reason = ((body.get("status") or {}).get("lastFailure") or {}).get("reason", "-")


def _vcjob_uid(stage: Stage, trial: Trial) -> str | None:
    for a in stage.vcjobs.arrivals(trial.ns):
        if a.version.name == trial.vcjob:
            return a.version.uid
    return None


def _running_gang(stage: Stage, trial: Trial, size: int) -> dict[str, str] | None:
    """uid -> node of the first gang's pods once the fake kubelet runs all of them."""
    assert stage.kubelet is not None
    running = stage.kubelet.running_uids(trial.ns)
    listed = stage.api.get(f"/api/v1/namespaces/{trial.ns}/pods")["items"]
    gang = {p["metadata"]["uid"]: p["spec"].get("nodeName", "") for p in listed
            if owned_by(p, trial.vc_uid) and p["metadata"]["uid"] in running}  # fmt: skip
    return gang if len(gang) == size else None


def _moved(stage: Stage, trial: Trial) -> bool:
    """The operator saw the step move (a hang is judged only then, with no first-step allowance)."""
    body = stage.get(f"{TJS}/namespaces/{trial.ns}/trainiumjobs/{trial.job}") or {}
    progress = (body.get("status") or {}).get("progress") or {}
    return int(progress.get("step", 0)) > int(progress.get("firstStep", 1 << 62))


def pod_names(stage: Stage, trial: Trial) -> list[str]:
    listed = stage.api.get(f"/api/v1/namespaces/{trial.ns}/pods")["items"]
    return sorted(p["metadata"]["name"] for p in listed if p["metadata"]["uid"] in trial.pod_uids)


def _restarted(stage: Stage, trial: Trial, sc: Scenario) -> bool:
    """A new Volcano job (the operator's, named after the old one's uid), or the gang's new
    pods (Volcano)."""
    assert trial.visible is not None
    if sc.restarter == "swap":
        return _patched(stage, trial, sc)
    successor = naming.successor(trial.job, trial.vc_uid)
    for a in stage.vcjobs.arrivals(trial.ns):
        if a.version.name in (trial.vcjob, successor) and a.version.uid != trial.vc_uid:
            trial.restarted, trial.by, trial.new_uid = a.at, "operator", a.version.uid
            return True
    if sc.restarter == "operator":
        return False
    pods = stage.pods.arrivals(trial.ns, trial.injected)
    new = lambda pod: owned_by(pod, trial.vc_uid) and pod["metadata"]["uid"] not in trial.pod_uids  # noqa: E731
    at = nth_seen(pods, new, sc.new_nodes)
    if at is None:
        return False
    trial.restarted, trial.by, trial.new_uid = at, "volcano", trial.vc_uid
    return True


def _patched(stage: Stage, trial: Trial, sc: Scenario) -> bool:
    """The operator's swap: the same Volcano job shown with its reservation (minAvailable)
    below the training nodes plus the spares."""
    for a in stage.vcjobs.arrivals(trial.ns, trial.injected):
        obj = a.version.obj
        if a.version.uid == trial.vc_uid and obj["spec"].get("minAvailable", 0) < sc.nodes + (
                sc.spares):  # fmt: skip
            trial.restarted, trial.by, trial.new_uid = a.at, "operator (swap)", trial.vc_uid
            return True
    return False


def training_pod(pod: Obj) -> bool:
    """A pod of the training world (not a standby spare's)."""
    return (pod["metadata"].get("labels") or {}).get("trainium.dev/role") != "spare"


def _fresh(trial: Trial, pod: Obj) -> bool:
    """A training pod of the new gang (not one of the first gang's)."""
    uid = pod["metadata"]["uid"]
    return uid not in trial.pod_uids and owned_by(pod, trial.new_uid) and training_pod(pod)


def _bound(stage: Stage, trial: Trial, size: int) -> float | None:
    """When the last training pod of the new gang was shown bound to a node."""
    pods = stage.pods.arrivals(trial.ns, trial.injected)
    return nth_seen(pods, lambda pod: _fresh(trial, pod) and bool(pod["spec"].get("nodeName")),
                    size)  # fmt: skip


def _running(stage: Stage, trial: Trial, size: int) -> float | None:
    """When the last training pod of the new gang was shown Running."""
    pods = stage.pods.arrivals(trial.ns, trial.injected)
    running = lambda pod: (pod.get("status") or {}).get("phase") == "Running"  # noqa: E731
    return nth_seen(pods, lambda pod: _fresh(trial, pod) and running(pod), size)


def _delete(stage: Stage, trial: Trial) -> None:
    """Delete the job and wait until its pods and Volcano jobs are gone (the next starts quiet)."""
    path = f"{TJS}/namespaces/{trial.ns}/trainiumjobs/{trial.job}"
    try:
        stage.api.request("DELETE", path)
    except Exception as exc:  # already gone
        print(f"# delete {trial.job}: {exc}", file=sys.stderr)

    def gone() -> bool:
        pods = stage.api.get(f"/api/v1/namespaces/{trial.ns}/pods")["items"]
        jobs = stage.api.get(f"/apis/batch.volcano.sh/v1alpha1/namespaces/{trial.ns}/jobs")
        return not pods and not jobs["items"]

    poll(gone, 120, f"{trial.job}'s pods and Volcano jobs gone")
