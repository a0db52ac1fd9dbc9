"""The fake kubelet's running mode (behavior outcome "Run"): pod status from real processes.

A test chooses it per job or per pod as any behavior (`kubelet.plan({"trainium.dev/job-name":
"x"}, Behavior(outcome="Run"))`). The pod gets its own network namespace and address first
(status.podIP is real: the operator reads rank 0's metrics there); its init containers run in
order (Pending, Initialized False while they do; a failed one fails the pod, restartPolicy
Never), then its containers (Running, Ready); the phase follows their exit codes. Each
terminated state carries the real exit code and what the process left at terminationMessagePath
(or its log's tail, FallbackToLogsOnError). A deletion sends SIGTERM, SIGKILL after the grace
period, reports the containers' end and removes the pod. Logs are the processes' own output.
"""

from __future__ import annotations

import logging
import threading
import urllib.error
from pathlib import Path
from typing import TYPE_CHECKING, Any

import podrun
from podstatus import _now, container_status, terminated

if TYPE_CHECKING:
    from cluster import Api

Obj = dict[str, Any]
log = logging.getLogger("tier.runmode")
#: The kubelet's grace period when neither the deletion nor the pod names one.
DEFAULT_GRACE = 30.0


class RunningMode:
    """Mixed into FakeKubelet: run a pod, end it, report it."""

    api: Api
    pods_root: Path
    errors: list[str]
    _runs: dict[str, podrun.PodRun]
    _network: podrun.Network | None
    _released: set[str]
    #: Pods whose node was lost (kubelet.lose_node): their end is reported by nobody.
    _lost: set[str]
    _lock: threading.Condition
    #: node -> how many devices of each kind its device plugins lack (its preflight fails).
    missing_devices: dict[str, int]

    def _base_status(self, pod: Obj, phase: str, ready: bool, ip: str | None = None) -> Obj:
        raise NotImplementedError

    def _patch_status(self, pod: Obj, status: Obj) -> None:
        raise NotImplementedError

    def _path(self, pod: Obj) -> str:
        raise NotImplementedError

    def _message(self, pod: Obj, container: Obj, code: int, message: str) -> str:
        raise NotImplementedError

    # -- starting ------------------------------------------------------------------------------

    def _run_pod(self, pod: Obj) -> None:
        """Give the pod a network, its volumes and hosts file, and start its containers."""
        with self._lock:
            if self._network is None:
                self._network = podrun.Network()
            network = self._network
        ns, ip = network.add()
        root = self.pods_root / pod["metadata"]["uid"]
        root.mkdir(parents=True, exist_ok=True)
        sources = podrun.prepare(pod, root, self.pods_root / "pv", self._claims(pod),
                                 self._config_maps(pod))  # fmt: skip
        callbacks = podrun.Callbacks(self._initializing, self._running_now, self._ended)
        missing = self.missing_devices.get(pod["spec"].get("nodeName", ""), 0)
        run = podrun.PodRun(pod, root, ns, ip, sources, callbacks, missing=missing)
        with self._lock:
            self._runs[pod["metadata"]["uid"]] = run
        self._publish_hosts(pod["metadata"]["namespace"])
        status = self._base_status(pod, "Pending", ready=False, ip=ip)
        self._set_condition(status, "Initialized", bool(not pod["spec"].get("initContainers")))
        self._patch_status(pod, status)
        run.start()

    def _claims(self, pod: Obj) -> dict[str, str]:
        """claim name -> the PV it is bound to, for the pod's claims (one host dir per PV)."""
        out = {}
        ns = pod["metadata"]["namespace"]
        for volume in pod["spec"].get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}"
                pvc = self.api.request("GET", path)
                name = (pvc.get("spec") or {}).get("volumeName")
                if name:
                    out[claim] = self._volume_key(name)
        return out

    def _volume_key(self, pv_name: str) -> str:
        """The host directory of a PV: its CSI volumeHandle (two PVs of one FSx file system see
        the same files, as on AWS), else its name."""
        pv = self.api.request("GET", f"/api/v1/persistentvolumes/{pv_name}")
        handle = ((pv.get("spec") or {}).get("csi") or {}).get("volumeHandle")
        return str(handle or pv_name)

    def _config_maps(self, pod: Obj) -> dict[str, Obj]:
        out = {}
        ns = pod["metadata"]["namespace"]
        for volume in pod["spec"].get("volumes") or []:
            name = (volume.get("configMap") or {}).get("name")
            if name:
                try:
                    path = f"/api/v1/namespaces/{ns}/configmaps/{name}"
                    out[name] = self.api.request("GET", path)
                except urllib.error.HTTPError as err:
                    if err.code != 404:
                        raise
        return out

    def _publish_hosts(self, namespace: str) -> None:
        """Every run pod of namespace gets the hosts file of its gang (its subdomain) as of now."""
        with self._lock:
            runs = [r for r in self._runs.values() if not r.done.is_set()]
        runs = [r for r in runs if r.pod["metadata"]["namespace"] == namespace]
        peers = [(r.pod, r.ip) for r in runs]
        for run in runs:
            podrun.write_hosts(run, peers)

    # -- reporting -----------------------------------------------------------------------------

    @staticmethod
    def _set_condition(status: Obj, kind: str, value: bool) -> None:
        for cond in status["conditions"]:
            if cond["type"] == kind:
                cond["status"] = "True" if value else "False"

    def _initializing(self, run: podrun.PodRun, index: int) -> None:
        """Init container `index` runs: the ones before it completed, the rest wait."""
        pod = run.pod
        inits = pod["spec"].get("initContainers") or []
        status = self._base_status(pod, "Pending", ready=False)
        self._set_condition(status, "Initialized", False)
        waiting = {"waiting": {"reason": "PodInitializing"}}
        states = []
        for i, (spec, box) in enumerate(zip(inits, run.inits, strict=False)):
            if i < index:
                state = terminated(0, "Completed", run.message(box), box.started)
            elif i == index:
                state = {"running": {"startedAt": _now()}}
            else:
                state = waiting
            states.append(container_status(spec, state, i <= index))
        status["initContainerStatuses"] = states
        containers = pod["spec"]["containers"]
        status["containerStatuses"] = [container_status(c, waiting, False) for c in containers]
        self._patch_status(pod, status)

    def _running_now(self, run: podrun.PodRun) -> None:
        pod = run.pod
        status = self._base_status(pod, "Running", ready=True)
        status["initContainerStatuses"] = self._ended_inits(run)
        status["containerStatuses"] = [
            container_status(c, {"running": {"startedAt": box.started}}, True)
            for c, box in zip(pod["spec"]["containers"], run.containers, strict=False)
        ]
        self._patch_status(pod, status)

    def _ended_inits(self, run: podrun.PodRun) -> list[Obj]:
        out = []
        for spec, box in zip(run.pod["spec"].get("initContainers") or [], run.inits, strict=False):
            out.append(container_status(spec, self._state(run, spec, box), box.started != ""))
        return out

    def _state(self, run: podrun.PodRun, spec: Obj, box: podrun.Container) -> Obj:
        """A container's state now: terminated with its code and message, or still waiting."""
        if box.exit_code is None:
            return {"waiting": {"reason": "PodInitializing"}}
        code = box.exit_code
        message = self._message(run.pod, spec, code, run.message(box))
        return terminated(code, "Completed" if code == 0 else "Error", message, box.started)

    def _ended(self, run: podrun.PodRun) -> None:
        """The pod's processes are gone: report the phase their exit codes give, release it
        (a lost node's pod: neither; it stays until deleted, as the pod GC or operator does)."""
        lost = run.pod["metadata"]["uid"] in self._lost
        try:
            if not lost:
                self._report_end(run)
        except Exception as exc:  # the pod may be gone already; a test reads .errors otherwise
            if not (isinstance(exc, urllib.error.HTTPError) and exc.code in (404, 409)):
                self.errors.append(f"run {run.pod['metadata']['name']}: {exc!r}")
        finally:
            if self._network is not None:
                self._network.remove(run.ns)
            if run.deleting.is_set() and not lost:
                self._release(run)

    def _report_end(self, run: podrun.PodRun) -> None:
        pod, containers = run.pod, run.pod["spec"]["containers"]
        codes = [b.exit_code for b in [*run.inits, *run.containers] if b.exit_code is not None]
        phase = "Succeeded" if codes and all(c == 0 for c in codes) else "Failed"
        if run.failed_init is None and any(b.exit_code is None for b in run.containers):
            phase = "Failed"  # deleted before its containers started
        status = self._base_status(pod, phase, ready=False)
        status["initContainerStatuses"] = self._ended_inits(run)
        if run.failed_init is not None:
            self._set_condition(status, "Initialized", False)
        status["containerStatuses"] = [
            container_status(c, self._state(run, c, box), box.started != "")
            for c, box in zip(containers, run.containers, strict=False)
        ]
        self._patch_status(pod, status)

    # -- deleting ------------------------------------------------------------------------------

    def _end_run(self, run: podrun.PodRun, deleted: Obj) -> None:
        """A graceful deletion of a running pod: SIGTERM now, SIGKILL after its grace period."""
        meta = deleted["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = deleted["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE)
        run.deleting.set()
        if run.done.is_set():
            self._release(run)
            return
        thread = threading.Thread(target=run.delete, args=(float(grace),), daemon=True)
        thread.start()

    def _release(self, run: podrun.PodRun) -> None:
        """Remove the pod from the API (grace 0, this uid only), once."""
        uid = run.pod["metadata"]["uid"]
        with self._lock:
            if uid in self._released:
                return
            self._released.add(uid)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid}}  # fmt: skip
        try:
            self.api.request("DELETE", self._path(run.pod).removesuffix("/status"), body)
        except urllib.error.HTTPError as err:
            if err.code not in (404, 409):
                raise

    def stop_runs(self) -> None:
        """Kill every pod process and remove every network this kubelet made."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.kill()
        for run in runs:
            run.done.wait(10)
        if self._network is not None:
            self._network.close()
        podrun.remove_tree(self.pods_root)
