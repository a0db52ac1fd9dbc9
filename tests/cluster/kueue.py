"""Real Kueue (v0.19.2's controller manager) beside the tier's control plane, on loopback.

What ../shared/realcluster/kueue/README.md found to work outside a cluster, done here in Python
with the tier's own CA (cluster.Pki): Kueue's CRDs, RBAC and webhook configurations from
TRAINIUM_CLUSTER_ASSETS/kueue/, every service reference (5 CRD conversion webhooks, 43 admission
webhooks) turned into `url: https://127.0.0.1:PORT/<path>` + caBundle; the manager with internal
certificate management off, leader election off, VisibilityOnDemand off, health and metrics on
loopback, run as its ServiceAccount (a TokenRequest token: Kueue's own RBAC authorizes it). With
its cert management off the manager insists on a metrics certificate at the fixed path
/etc/kueue/metrics/certs/tls.{crt,key}: it gets one in a private mount namespace (`unshare
--mount` and an overlay over /etc only it sees; needs root). Nothing here calls those scripts.

Kueue's pod, deployment and statefulset webhooks have failurePolicy Fail for every namespace but
kube-system and kueue-system: while they are registered and the manager is down, no pod can be
created anywhere. So the webhook configurations are registered only once the manager answers,
and `stop()` removes them first, before it stops the manager (always, whatever failed).
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import yaml

import procs
from cluster import Cluster, free_port, kubeconfig, wait_until
from trainium_operator.manifests import dra

Obj = dict[str, Any]
NAMESPACE = "kueue-system"
SERVICE_ACCOUNT = "kueue-controller-manager"
WEBHOOKS = (
    ("mutatingwebhookconfiguration", "kueue-mutating-webhook-configuration"),
    ("validatingwebhookconfiguration", "kueue-validating-webhook-configuration"),
)
#: Kueue objects a test may create, in the order they are deleted (Workloads release their
#: ClusterQueue, ClusterQueues their flavors: Kueue's finalizers wait for that).
OBJECTS = (
    "workloads",
    "localqueues",
    "clusterqueues",
    "resourceflavors",
    "workloadpriorityclasses",
)
API = "/apis/kueue.x-k8s.io/v1beta2"
#: Each start attempt on new ports when one was taken meanwhile (loopback ports can be).
ATTEMPTS = 3


class Kueue:
    """Kueue's controller manager against a running Cluster: start() in ~10 s, stop() always."""

    def __init__(
        self, cluster: Cluster, *, settle_discovery: bool = True, config: Obj | None = None
    ) -> None:
        self.cluster = cluster
        #: Kueue Configuration fields set over its defaults (None: its defaults, as installed).
        self.overrides = config or {}
        #: False: no extra Workload CRD event once discovery lists every kind (the operator
        #: may then never watch Workloads: what a user's install does; issue 33).
        self.settle_discovery = settle_discovery
        self.manifests = cluster.assets / "kueue"
        self.binary = cluster.assets / "kueue-manager"
        if not self.binary.exists() or not (self.manifests / "crds.yaml").exists():
            raise FileNotFoundError(
                f"{cluster.assets}: no kueue-manager or kueue/crds.yaml "
                "(bash ../shared/realcluster/unpack.sh DIR lays them out)"
            )
        self.root = cluster.root / "kueue"
        self.log = cluster.root / "kueue-manager.log"
        self.popen: subprocess.Popen[bytes] | None = None
        self.webhook_port = self.health_port = self.metrics_port = 0
        self.crds: list[Obj] = []

    # -- start -----------------------------------------------------------------------------

    def start(self, timeout: float = 90) -> None:
        """CRDs, RBAC, the manager, then its webhooks; returns once a ResourceFlavor passes
        Kueue's webhooks (server-side dry run). A failed start stops and unregisters all."""
        try:
            self._ports()
            self._prepare()
            for attempt in range(1, ATTEMPTS + 1):
                if attempt > 1:
                    self._ports()
                self._spawn()
                try:
                    self._await_ready(procs.scaled(timeout))
                    break
                except RuntimeError:
                    taken = "address already in use" in self.log.read_text(errors="replace")
                    self._stop_process()
                    if not taken or attempt == ATTEMPTS:
                        raise
            self._register_webhooks()
        except BaseException:
            self.stop()
            raise

    def _prepare(self) -> None:
        pki, root = self.cluster.pki, self.root
        (root / "webhook-certs").mkdir(exist_ok=True)
        metrics = root / "etc-upper" / "kueue" / "metrics" / "certs"
        metrics.mkdir(parents=True, exist_ok=True)
        (root / "etc-work").mkdir(exist_ok=True)
        crt, key = pki.issue("kueue")
        for target in (root / "webhook-certs", metrics):
            (target / "tls.crt").write_bytes(crt.read_bytes())
            (target / "tls.key").write_bytes(key.read_bytes())
        # An earlier module's Kueue namespace may still be Terminating (its stop() does not wait):
        # applying it then is a no-op, and the RBAC that follows would meet NotFound.
        self.cluster.kubectl("wait", "--for=delete", f"namespace/{NAMESPACE}", "--timeout=120s")
        self.cluster.kubectl("apply", "--server-side", "-f", str(self.manifests / "namespace.yaml"))
        self.crds = [d for d in yaml.safe_load_all((self.manifests / "crds.yaml").read_text()) if d]
        self._apply_crds()
        names = [f"crd/{c['metadata']['name']}" for c in self.crds]
        self.cluster.wait_established(*names)
        self._await_discovery()
        self.cluster.kubectl("apply", "--server-side", "-f", str(self.manifests / "rbac.yaml"))
        token = self.cluster.kubectl(
            "create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=4h"
        ).stdout.strip()
        config = kubeconfig(self.cluster.server, self.cluster.pki.ca_file, token, NAMESPACE)
        (root / "kubeconfig").write_text(config)

    def _await_discovery(self) -> None:
        """Every Kueue kind listed by discovery (kubectl needs it to apply Kueue's objects),
        then one more event on the Workload CRD.

        A client that reads discovery again on each CRD event, as kopf does, may read it for
        the last time before the last kind is listed (Established comes first, the discovery
        entry a moment later). The operator no longer depends on it (it watches Kueue's kinds
        with its own watches, issue 41); the extra event is kept for other clients, and with
        `settle_discovery` False there is none (test_kueue_installed_while_the_operator_runs).
        """
        plurals = {c["spec"]["names"]["plural"] for c in self.crds}

        def listed() -> bool:
            found = self.cluster.api.get(API) or {}
            return plurals <= {r["name"] for r in found.get("resources") or []}

        wait_until(listed, procs.scaled(60), "Kueue's kinds in discovery", every=0.5)
        if not self.settle_discovery:
            return
        self.cluster.kubectl("annotate", "crd/workloads.kueue.x-k8s.io", "--overwrite",
                             f"tier.trainium.dev/discovered={time.time():.3f}")  # fmt: skip

    def _by_url(self, client: Obj) -> Obj:
        """A webhook's service reference as a URL on our port, trusted through the tier's CA."""
        path = (client.get("service") or {}).get("path") or "/"
        ca = base64.b64encode(self.cluster.pki.ca_file.read_bytes()).decode()
        return {"url": f"https://127.0.0.1:{self.webhook_port}{path}", "caBundle": ca}

    def _apply_crds(self) -> None:
        for crd in self.crds:
            conversion = crd["spec"].get("conversion") or {}
            if conversion.get("strategy") == "Webhook":
                hook = conversion["webhook"]
                hook["clientConfig"] = self._by_url(hook["clientConfig"])
        self.cluster.apply(*self.crds)

    def _ports(self) -> None:
        ports: set[int] = set()
        while len(ports) < 3:
            ports.add(free_port())
        self.webhook_port, self.health_port, self.metrics_port = sorted(ports)
        self.root.mkdir(parents=True, exist_ok=True)
        if self.crds:  # the conversion webhooks name the webhook port
            self._apply_crds()
        upstream = self.manifests / "controller_manager_config.yaml"
        config: Obj = yaml.safe_load(upstream.read_text())
        config.update(
            namespace=NAMESPACE,
            health={"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            metrics={"bindAddress": f"127.0.0.1:{self.metrics_port}"},
            webhook={"host": "127.0.0.1", "port": self.webhook_port,
                     "certDir": str(self.root / "webhook-certs")},
            leaderElection={"leaderElect": False},
            internalCertManagement={"enable": False},
        )  # fmt: skip
        config.setdefault("featureGates", {})["VisibilityOnDemand"] = False
        # DRA jobs count their Neuron devices (README, "Quota with Kueue"): Kueue's DRA
        # integration maps the DeviceClass their claims name to the device plugin's resource.
        config["resources"] = {"deviceClassMappings": [
            {"name": "aws.amazon.com/neuron", "deviceClassNames": [dra.DEVICE_CLASS]},
        ]}  # fmt: skip
        config.update(self.overrides)
        (self.root / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    def _spawn(self) -> None:
        """The manager in a mount namespace of its own where /etc/kueue/metrics/certs exists."""
        mount = (
            'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/etc-upper,workdir=$1/etc-work"'
            ' /etc && shift && exec "$@"'
        )
        cmd: Sequence[str] = [
            "unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh",
            str(self.root), str(self.binary), "--config", str(self.root / "config.yaml"),
            "--kubeconfig", str(self.root / "kubeconfig"), "--zap-log-level=2",
        ]  # fmt: skip
        with self.log.open("ab") as out:
            out.write(f"\n=== start: {' '.join(cmd)}\n".encode())
            out.flush()
            popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip
        self.popen = procs.track(popen)

    def _await_ready(self, seconds: float) -> None:
        """/readyz 200 and the webhook port answering TLS (our CA), three times in a row."""
        context = ssl.create_default_context(cafile=str(self.cluster.pki.ca_file))
        streak = 0

        def ready() -> bool:
            nonlocal streak
            if self.popen is None or self.popen.poll() is not None:
                raise RuntimeError(f"kueue-manager exited: {self.tail()}")
            try:
                url = f"http://127.0.0.1:{self.health_port}/readyz"
                with urllib.request.urlopen(url, timeout=2) as r:
                    ok = r.status == 200
                address = ("127.0.0.1", self.webhook_port)
                with (
                    socket.create_connection(address, timeout=2) as raw,
                    context.wrap_socket(raw, server_hostname="127.0.0.1"),
                ):
                    pass
            except (OSError, urllib.error.URLError):
                ok = False
            streak = streak + 1 if ok else 0
            return streak >= 3

        try:
            wait_until(ready, seconds, "kueue-manager /readyz and its webhook port", every=0.3)
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}: {self.tail()}") from exc

    def _register_webhooks(self) -> None:
        """The two webhook configurations by URL, then a server-side dry run through them."""
        hooks = [d for d in yaml.safe_load_all((self.manifests / "webhooks.yaml").read_text()) if d]
        for doc in hooks:
            for hook in doc["webhooks"]:
                hook["clientConfig"] = self._by_url(hook["clientConfig"])
        self.cluster.apply(*hooks)
        probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                 "metadata": {"name": "tier-webhook-probe"}}  # fmt: skip

        def served() -> bool:
            self.check_alive()
            proc = self.cluster.kubectl("create", "--dry-run=server", "-f", "-",
                                        stdin=json.dumps(probe), check=False)  # fmt: skip
            return proc.returncode == 0

        wait_until(served, procs.scaled(60), "Kueue's webhooks to answer the API server", every=0.5)

    def check_alive(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            raise RuntimeError(f"kueue-manager is not running: {self.tail()}")

    def tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- tail of {self.log}:\n{text[-3000:]}"

    # -- stop ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Unregister the webhooks (pods can be created again), delete Kueue's objects and CRDs
        while the manager still clears their finalizers, then stop it: each step whatever the
        previous one did."""
        try:
            for kind, name in WEBHOOKS:
                self.cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)
            if self.popen is not None and self.popen.poll() is None:
                self._delete_objects()
        finally:
            self._stop_process()
            self.cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found",
                                 "--wait=false", check=False)  # fmt: skip

    def _delete_objects(self) -> None:
        for plural in OBJECTS:
            kind = f"{plural}.kueue.x-k8s.io"
            self.cluster.kubectl("delete", kind, "--all", "--all-namespaces", "--wait=true",
                                 "--timeout=60s", check=False, timeout=90)  # fmt: skip
            self._drop_finalizers(plural)
        names = [c["metadata"]["name"] for c in self.crds]
        if names:
            self.cluster.kubectl("delete", "crd", *names, "--ignore-not-found", "--wait=true",
                                 "--timeout=60s", check=False, timeout=90)  # fmt: skip

    def _drop_finalizers(self, plural: str) -> None:
        """What Kueue did not release in time loses its finalizers (nothing may hang on it)."""
        left = self.cluster.api.get(f"{API}/{plural}") or {}
        for item in left.get("items") or []:
            meta = item["metadata"]
            where = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
            path = f"{API}{where}/{plural}/{meta['name']}"
            with contextlib.suppress(urllib.error.HTTPError):
                self.cluster.api.merge_patch(path, {"metadata": {"finalizers": None}})

    def _stop_process(self) -> None:
        if self.popen is not None:
            procs.stop_tree(self.popen)
            self.popen = None

    # -- reading Kueue's objects -----------------------------------------------------------

    def workloads(self, namespace: str) -> list[Obj]:
        """The Workloads of namespace, oldest first."""
        found = self.cluster.api.get(f"{API}/namespaces/{namespace}/workloads") or {}
        items = list(found.get("items") or [])
        return sorted(items, key=lambda w: int(w["metadata"]["resourceVersion"]))

    def cluster_queue(self, name: str) -> Obj:
        found = self.cluster.api.get(f"{API}/clusterqueues/{name}")
        assert found is not None, f"ClusterQueue {name} does not exist"
        return found


#: A TrainiumJob's phases after which none of its Workloads may hold quota.
FINISHED_PHASES = ("Succeeded", "Failed")


def held(workload: Obj) -> bool:
    """Whether Kueue counts the Workload's quota: reserved or admitted, not Finished."""
    conds = {c.get("type"): c.get("status") for c in (workload.get("status") or {}).get(
        "conditions") or []}  # fmt: skip
    if conds.get("Finished") == "True":
        return False
    return "True" in (conds.get("QuotaReserved"), conds.get("Admitted"))


def admitted_of_finished(kueue: Kueue, namespace: str) -> list[str]:
    """The Workloads of namespace that still hold quota though the TrainiumJob that controls
    them is finished (or gone): what issue 41 says must never outlive a job."""
    jobs = kueue.cluster.api.get(f"/apis/trainium.dev/v1alpha1/namespaces/{namespace}/trainiumjobs")
    phase = {
        j["metadata"]["uid"]: (j.get("status") or {}).get("phase")
        for j in (jobs or {}).get("items") or []
    }
    out = []
    for wl in kueue.workloads(namespace):
        owners = [r for r in wl["metadata"].get("ownerReferences") or [] if r.get("controller")]
        if not owners or owners[0].get("kind") != "TrainiumJob" or not held(wl):
            continue
        job_phase = phase.get(owners[0]["uid"], "gone")
        if job_phase in (*FINISHED_PHASES, "gone"):
            out.append(f"{wl['metadata']['name']} (job {owners[0]['name']} {job_phase})")
    return out
