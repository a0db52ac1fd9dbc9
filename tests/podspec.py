"""What the kubelet derives from a pod spec before it starts a process: env, argv, hosts, mounts.

Pure functions (no I/O), so they are unit-tested without the tier (tests/unit/test_podspec.py):
`$(VAR)` expansion as the kubelet does it (k8s.io/kubernetes/third_party/forked/golang/expansion:
`$$` is a literal `$`, an unknown or malformed reference stays as written, env values see only the
variables defined before them, command and args see the whole env), the downward API's fieldRefs,
the hosts file of a gang as Volcano's svc plugin publishes its hostnames, and which host directory
each volumeMount binds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

#: The cluster domain Volcano's svc plugin and the kubelet's hosts file use.
CLUSTER_DOMAIN = "cluster.local"
#: "The image": every image name runs from one local environment that holds what
#: docker/trainer.Dockerfile installs (the trainer extra and CPU torch: the worktree's .venv, made
#: by `make install`). Its ENV lines and WORKDIR, as the Dockerfile sets them.
IMAGE_ENV = {
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_CACHE_DIR": "1",
    "HF_HUB_OFFLINE": "1",
    "HOME": "/root",
}
IMAGE_WORKDIR = "/workspace"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def expand(text: str, env: Mapping[str, str]) -> str:
    """`$(VAR)` replaced by env[VAR] as the kubelet does; `$$` -> `$`; the rest kept."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 >= len(text):
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end < 0:  # an unclosed reference is kept as written
                out.append(text[i:])
                break
            name = text[i + 2 : end]
            out.append(env[name] if name in env else text[i : end + 1])
            i = end + 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


_ANNOTATION = re.compile(r"^metadata\.(annotations|labels)\['([^']+)'\]$")


def field_ref(pod: Obj, path: str) -> str:
    """The value of a downward-API fieldRef on pod (what the kubelet resolves)."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
    }
    if path in simple:
        return str(simple[path])
    match = _ANNOTATION.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ValueError(f"fieldRef {path!r} is not one this kubelet resolves")


def container_env(
    pod: Obj, container: Obj, base: Mapping[str, str], config_maps: Mapping[str, Obj]
) -> dict[str, str]:
    """The container's environment: the image's, then its env in order, each value expanded."""
    env = dict(base)
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef")
        if ref:
            prefix = source.get("prefix", "")
            data = (config_maps.get(ref["name"]) or {}).get("data") or {}
            env.update({prefix + k: str(v) for k, v in data.items()})
    for var in container.get("env") or []:
        if "value" in var or "valueFrom" not in var:
            env[var["name"]] = expand(str(var.get("value", "")), env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            env[var["name"]] = field_ref(pod, source["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            data = (config_maps.get(ref["name"]) or {}).get("data") or {}
            env[var["name"]] = str(data.get(ref["key"], ""))
        else:
            raise ValueError(f"env {var['name']}: valueFrom {sorted(source)} not supported")
    return env


def container_argv(container: Obj, env: Mapping[str, str]) -> list[str]:
    """command + args, each expanded against the container's whole env (no image ENTRYPOINT)."""
    argv = [expand(str(a), env) for a in (container.get("command") or [])]
    argv += [expand(str(a), env) for a in (container.get("args") or [])]
    if not argv:
        raise ValueError(f"container {container['name']}: no command (the image has none)")
    return argv


def image_env(venv: Path, hostname: str) -> dict[str, str]:
    """What every container starts with: the image's ENV, PATH to its Python, HOSTNAME."""
    return {"PATH": f"{venv}/bin:{SYSTEM_PATH}", **IMAGE_ENV, "HOSTNAME": hostname}


def pod_hostname(pod: Obj) -> str:
    """The pod's hostname: spec.hostname, else its name (the kubelet's rule, 63 chars)."""
    return str(pod["spec"].get("hostname") or pod["metadata"]["name"])[:63]


def host_names(pod: Obj) -> list[str]:
    """The names a pod answers to: FQDN and short forms under its subdomain (headless service)."""
    hostname, subdomain = pod_hostname(pod), pod["spec"].get("subdomain")
    if not subdomain:
        return [hostname]
    ns = pod["metadata"]["namespace"]
    return [f"{hostname}.{subdomain}.{ns}.svc.{CLUSTER_DOMAIN}", f"{hostname}.{subdomain}",
            hostname]  # fmt: skip


def hosts_file(pod: Obj, pod_ip: str, peers: Sequence[tuple[Obj, str]]) -> str:
    """The pod's /etc/hosts: the kubelet's managed lines, the pod itself, then its gang's pods
    (what DNS answers for the headless service Volcano's svc plugin makes), by name."""
    lines = [
        "# Kubernetes-managed hosts file.",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "fe00::0\tip6-localnet",
        "fe00::0\tip6-mcastprefix",
        "fe00::1\tip6-allnodes",
        "fe00::2\tip6-allrouters",
        f"{pod_ip}\t" + "\t".join(host_names(pod)),
    ]
    me = pod["metadata"]["uid"]
    subdomain = pod["spec"].get("subdomain")
    for peer, ip in sorted(peers, key=lambda p: p[0]["metadata"]["name"]):
        same = peer["spec"].get("subdomain") == subdomain and subdomain
        if peer["metadata"]["uid"] != me and same and ip:
            lines.append(f"{ip}\t" + "\t".join(host_names(peer)))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Mount:
    """One bind the pod's mount namespace gets: a host path (or a fresh tmpfs) at `target`."""

    target: str
    source: str  # a host path; "tmpfs" for medium: Memory
    read_only: bool = False
    sub_path: str = ""


def volume_source(volume: Obj, pod_dir: Path, pv_dir: Path, claims: Mapping[str, str]) -> str:
    """Where a volume lives on the host: one directory per PV (every pod that mounts the PV
    shares it), per pod for emptyDir and configMap; `tmpfs` for an emptyDir in memory."""
    name = volume["name"]
    if "persistentVolumeClaim" in volume:
        claim = volume["persistentVolumeClaim"]["claimName"]
        if claim not in claims:
            raise ValueError(f"volume {name}: claim {claim} is not bound to a PV")
        return str(pv_dir / claims[claim])
    if "emptyDir" in volume:
        if (volume["emptyDir"] or {}).get("medium") == "Memory":
            return "tmpfs"
        return str(pod_dir / "volumes" / name)
    # configMap, projected (the service-account token), secret, ...: files the kubelet writes
    return str(pod_dir / "volumes" / name)


def mounts(container: Obj, sources: Mapping[str, str]) -> list[Mount]:
    """The container's volumeMounts as binds, parents before children (a mount on a mount)."""
    out = [
        Mount(
            target=m["mountPath"],
            source=sources[m["name"]],
            read_only=bool(m.get("readOnly")),
            sub_path=m.get("subPath", ""),
        )
        for m in container.get("volumeMounts") or []
    ]
    return sorted(out, key=lambda m: m.target.rstrip("/").count("/"))


#: Extended resources -> the device nodes their device plugins put in the container's /dev.
DEVICE_RESOURCES = {
    "aws.amazon.com/neuron": "neuron{}",
    "aws.amazon.com/neurondevice": "neuron{}",
    "vpc.amazonaws.com/efa": "infiniband/uverbs{}",
}


def devices(container: Obj, missing: int = 0) -> list[str]:
    """The /dev entries the Neuron and EFA device plugins give the container for its limits
    (`missing` fewer of each on a broken node)."""
    limits = (container.get("resources") or {}).get("limits") or {}
    out: set[str] = set()
    for resource, pattern in DEVICE_RESOURCES.items():
        count = max(0, int(limits.get(resource, 0)) - missing)
        out.update(pattern.format(i) for i in range(count))
    return sorted(out)
