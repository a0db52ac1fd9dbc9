"""The kubelet's running mode: a pod's containers as real processes, isolated per pod.

Each pod gets a network namespace with its own address on a bridge of this machine (`Network`:
addresses the tier makes, in a private range; the operator on the host reaches pod IPs, pods
reach each other, pods bind the same ports), and each container a mount, PID and UTS namespace
(podinit.py is its PID 1) in which the pod's volumes, hosts file and termination-message file sit
at the paths the pod spec names. Init containers run first, in order; then the containers, side
by side. Deletion: SIGTERM to each container, SIGKILL after the grace period. Everything runs
from "the image" = `podspec` (the worktree's .venv). `PodRun` reports through callbacks; the
kubelet (kubelet.py) turns them into pod status.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import podspec

Obj = dict[str, Any]
log = logging.getLogger("tier.podrun")
PODINIT = Path(__file__).with_name("podinit.py")
REPO = Path(__file__).resolve().parents[2]
#: "The image" of every container in running mode (docker/trainer.Dockerfile's contents).
VENV = REPO / ".venv"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Network:
    """A bridge with a /16 of 10.x (x random per tier) and one namespace + veth per pod."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 10000:04d}{random.randrange(100):02d}"
        self.bridge = f"trb{tag}"
        self.octet = random.randrange(100, 250)
        self.gateway = f"10.{self.octet}.0.1"
        self._next = 2
        self._lock = threading.Lock()
        self.namespaces: set[str] = set()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/16", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add(self) -> tuple[str, str]:
        """A new pod network: (namespace name, pod IP), loopback and default route set."""
        with self._lock:
            n = self._next
            self._next += 1
        ns, host_end = f"{self.bridge}-{n}", f"trv{self.bridge[3:]}{n}"[:15]
        ip = f"10.{self.octet}.{n // 250}.{n % 250 + 2}"
        _ip("netns", "add", ns)
        with self._lock:
            self.namespaces.add(ns)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", host_end, "master", self.bridge, "up")
        _ip("-n", ns, "addr", "add", f"{ip}/16", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "route", "add", "default", "via", self.gateway)
        return ns, ip

    def remove(self, ns: str) -> None:
        """Delete a pod's namespace (its veth goes with it)."""
        with self._lock:
            self.namespaces.discard(ns)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)

    def close(self) -> None:
        for ns in list(self.namespaces):
            self.remove(ns)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)


@dataclass
class Container:
    """One container's process and files while it runs, and how it ended."""

    name: str
    log: Path
    message_file: Path
    proc: subprocess.Popen[bytes] | None = None
    started: str = ""
    exit_code: int | None = None

    def signal(self, signum: int) -> None:
        """signum to the container's PID 1 (podinit forwards SIGTERM; SIGKILL ends them all)."""
        pid = self.pid1()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def pid1(self) -> int | None:
        """The host PID of podinit (the child of `unshare --fork`, which `ip netns exec` runs)."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            return None
        return int(children.split()[0]) if children.split() else None

    def pids(self) -> list[int]:
        """Host PIDs of every process in the container (its PID namespace)."""
        root = self.pid1()
        if root is None:
            return []
        try:
            target = os.readlink(f"/proc/{root}/ns/pid")
        except OSError:
            return []
        out = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "ns" / "pid") == target:
                        out.append(int(entry.name))
        return out


@dataclass
class Callbacks:
    """How a PodRun tells the kubelet what happened (each builds and patches pod status)."""

    initializing: Callable[[PodRun, int], None]
    running: Callable[[PodRun], None]
    ended: Callable[[PodRun], None]


@dataclass
class PodRun:
    """One pod in running mode: its directory, network, containers and the thread that runs them."""

    pod: Obj
    root: Path
    ns: str
    ip: str
    sources: dict[str, str]
    callbacks: Callbacks
    inits: list[Container] = field(default_factory=list)
    containers: list[Container] = field(default_factory=list)
    deleting: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    failed_init: Container | None = None
    #: Devices the node's device plugin lacks (a broken node: its preflight fails).
    missing: int = 0

    @property
    def hosts(self) -> Path:
        return self.root / "hosts"

    def start(self) -> None:
        specs = self.pod["spec"]
        for kind, out in (("initContainers", self.inits), ("containers", self.containers)):
            for c in specs.get(kind) or []:
                out.append(Container(c["name"], self.root / f"{c['name']}.log",
                                     self.root / f"{c['name']}.termination-log"))  # fmt: skip
                out[-1].log.touch()
        thread = threading.Thread(target=self._run, daemon=True, name=f"pod-{self.ns}")
        thread.start()

    def _run(self) -> None:
        try:
            for i, (spec, box) in enumerate(zip(self.pod["spec"].get("initContainers") or [],
                                                self.inits, strict=False)):  # fmt: skip
                if self.deleting.is_set():
                    return
                self.callbacks.initializing(self, i)
                self._launch(spec, box)
                self._wait(box)
                if box.exit_code != 0:
                    self.failed_init = box
                    return
            if self.deleting.is_set():
                return
            for spec, box in zip(self.pod["spec"]["containers"], self.containers, strict=False):
                self._launch(spec, box)
            self.callbacks.running(self)
            for box in self.containers:
                self._wait(box)
        except Exception as exc:  # a spec this kubelet cannot run: the container fails
            log.exception("pod %s", self.pod["metadata"]["name"])
            for box in [*self.inits, *self.containers]:
                if box.exit_code is None:
                    box.log.open("a").write(f"kubelet: {exc}\n")
                    box.exit_code = 128
        finally:
            self.done.set()
            self.callbacks.ended(self)

    def _launch(self, spec: Obj, box: Container) -> None:
        env = podspec.container_env(self.pod, spec, podspec.image_env(VENV, self.hostname), {})
        binds = [podspec.Mount(m.target, self._sub(m)) for m in
                 podspec.mounts(spec, self.sources)]  # fmt: skip
        ro = {m.target for m in podspec.mounts(spec, self.sources) if m.read_only}
        workdir = spec.get("workingDir") or podspec.IMAGE_WORKDIR
        layer = self.root / "rootfs" / spec["name"] / workdir.strip("/")
        layer.mkdir(parents=True, exist_ok=True)
        box.message_file.touch()
        mounts = [{"source": str(layer), "target": workdir}]
        mounts += [{"source": m.source, "target": m.target, "read_only": m.target in ro}
                   for m in binds]  # fmt: skip
        mounts.append({"source": str(self.hosts), "target": "/etc/hosts"})
        path = spec.get("terminationMessagePath") or "/dev/termination-log"
        mounts.append({"source": str(box.message_file), "target": path})
        argv = podspec.container_argv(spec, env)
        config = {"hostname": self.hostname, "mounts": mounts, "log": str(box.log),
                  "argv": argv, "env": env, "cwd": workdir, "dev": str(self.root / "dev"
                  / spec["name"]), "devices": podspec.devices(spec, self.missing)}  # fmt: skip
        config_file = self.root / f"{spec['name']}.json"
        config_file.write_text(json.dumps(config))
        argv = ["ip", "netns", "exec", self.ns, "unshare", "--mount", "--pid", "--uts", "--fork",
                "--mount-proc", "--propagation", "private", "--", sys.executable, str(PODINIT),
                str(config_file)]  # fmt: skip
        box.started = podspec_now()
        with box.log.open("ab") as out:
            box.proc = subprocess.Popen(argv, stdout=out, stderr=out, start_new_session=True)

    def _sub(self, mount: podspec.Mount) -> str:
        if not mount.sub_path or mount.source == "tmpfs":
            return mount.source
        path = Path(mount.source) / mount.sub_path
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def _wait(self, box: Container) -> None:
        assert box.proc is not None
        code = box.proc.wait()
        box.exit_code = 128 - code if code < 0 else code

    @property
    def hostname(self) -> str:
        return podspec.pod_hostname(self.pod)

    def message(self, box: Container) -> str:
        """What the container left at its terminationMessagePath (the kubelet keeps 4 KiB)."""
        with contextlib.suppress(OSError):
            return box.message_file.read_bytes()[-4096:].decode(errors="replace")
        return ""

    def delete(self, grace: float) -> None:
        """SIGTERM to every running container, SIGKILL to what is left after `grace` seconds."""
        self.deleting.set()
        live = [b for b in [*self.inits, *self.containers] if b.exit_code is None and b.proc]
        for box in live:
            box.signal(signal.SIGTERM)
        if not self.done.wait(grace):
            self.kill()

    def kill(self) -> None:
        """SIGKILL to every process of the pod (its PID 1s: the kernel takes the rest)."""
        self.deleting.set()
        for box in [*self.inits, *self.containers]:
            box.signal(signal.SIGKILL)
            if box.proc is not None and box.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(box.proc.pid, signal.SIGKILL)

    def signal_all(self, signum: int) -> int:
        """signum to every process of every running container (SIGSTOP: a hung gang)."""
        count = 0
        for box in self.containers:
            for pid in box.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)
                    count += 1
        return count


def podspec_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_hosts(run: PodRun, peers: list[tuple[Obj, str]]) -> None:
    """Rewrite the pod's hosts file in place (the bind mount keeps pointing at this inode)."""
    with run.hosts.open("r+" if run.hosts.exists() else "w") as out:
        out.seek(0)
        out.write(podspec.hosts_file(run.pod, run.ip, peers))
        out.truncate()


def prepare(pod: Obj, root: Path, pv_dir: Path, claims: Mapping[str, str],
            config_maps: Mapping[str, Obj]) -> dict[str, str]:  # fmt: skip
    """Make the pod's volume directories (configMap files written); volume name -> source."""
    sources = {}
    for volume in pod["spec"].get("volumes") or []:
        source = podspec.volume_source(volume, root, pv_dir, claims)
        sources[volume["name"]] = source
        if source == "tmpfs":
            continue
        Path(source).mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            data = (config_maps.get(volume["configMap"]["name"]) or {}).get("data") or {}
            for key, value in data.items():
                (Path(source) / key).write_text(str(value))
    return sources


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
