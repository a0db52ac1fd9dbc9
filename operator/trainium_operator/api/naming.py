"""Deterministic child names that stay valid DNS labels for any valid TrainiumJob name.

Volcano names pods `<job>-<task>-<index>` and uses them as hostnames (63 characters at most).
Every node of a stage is a replica of one task named after TorchX's role (`node`), so node i's
pod is `<job>-node-<i>` (`pod_name`), and `node_index` reads i back: the one place that maps a
pod to its node. Gangs made before (one task `node-<i>` per node, pods `<job>-node-<i>-0`)
still read. Long job names are cut and get a hash suffix, so two different long names never
collide and nothing is rejected with a 422.

A training gang is never replaced under a name an earlier gang of the job had: Volcano 1.16's
job controller keys its cache by namespace/name, and a retried clean-up of the deleted job
removes a successor of the same name, whose pods are then never created (volcano-sh/volcano
#3968, #5973). The first gang is `<job>-train` (running jobs survive an operator upgrade); each
replacement is `<job>-train-<hash of its predecessor's uid>` (`successor`): deterministic from
what the operator read, and new, since uids are never reused. A counter would have to be
written before the delete and read back after a crash; the uid is on the object being replaced.
The TrainiumJob's train-gang annotation, written before the old gang is deleted, names it.
"""

from __future__ import annotations

import hashlib
import re

DNS_LABEL_MAX = 63
LABEL_VALUE_MAX = 63
ROLE = "node"
#: Characters a pod name may add after the Volcano job name: "-node-<i>" needs 10 up to node
#: 9,999; the 11 of the old "-node-<i>-0" (3 digits) are kept, so job names stay as they were.
_POD_SUFFIX_MAX = len(f"-{ROLE}-999-0")
#: The one Volcano task of a stage's gang (its replicas are the nodes).
TASK = ROLE
#: The annotation (and label) Volcano's job controller puts the pod's task index in (>= 1.9).
TASK_INDEX_ANNOTATION = "volcano.sh/task-index"
#: `-node-<i>` at a pod name's end; `-node-<i>-0` of the gangs made before the one task.
_NODE_SUFFIX = re.compile(rf"-{ROLE}-(\d+)(?:-0)?$")
STAGE_SUFFIX = {"precompile": "compile", "train": "train"}
_HASH_LEN = 8
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def short_hash(text: str, length: int = _HASH_LEN) -> str:
    """A stable lowercase hex digest prefix."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def fit(base: str, suffix: str, limit: int) -> str:
    """`base-suffix` as a DNS label within limit characters; a hash marks a shortened base.

    Object names are DNS subdomains and may hold dots, which a pod hostname may not: a base
    that is too long or has dots is cut, its dots become dashes and the hash keeps it unique.
    """
    name = f"{base}-{suffix}" if suffix else base
    if len(name) <= limit and _DNS_LABEL.fullmatch(name):
        return name
    tag = short_hash(base)
    keep = limit - len(suffix) - len(tag) - (2 if suffix else 1)
    head = _NOT_LABEL.sub("-", base[:keep].lower()).strip("-")
    return "-".join(part for part in (head, tag, suffix) if part)


def label_value(text: str) -> str:
    """text as a label value (63 characters at most): kept when it fits, else cut and hashed.

    TrainiumJob names may have 253 characters; a label holding one is its first characters and
    a hash of the whole name, so selectors stay unique and names that fit stay as they are.
    """
    if len(text) <= LABEL_VALUE_MAX and _LABEL_VALUE.fullmatch(text):
        return text
    tag = short_hash(text)
    head = re.sub(r"[^-A-Za-z0-9_.]+", "-", text[: LABEL_VALUE_MAX - len(tag) - 1])
    head = head.lstrip("-_.").rstrip("-_.")
    return f"{head}-{tag}" if head else tag


def vcjob_name(job: str, stage: str, size: int | None = None) -> str:
    """Name of the Volcano job of one stage; its pod hostnames stay within 63 characters.

    Volcano's svc plugin names a Service after the job, and Service names must start with a
    letter (DNS-1035), so a job name starting with a digit gets a `tj-` prefix. An elastic
    job compiles each size in its own precompile job (`size`: its node count); the first
    training gang has this name, its replacements `successor`'s.
    """
    base = job if job[:1].isalpha() else f"tj-{job}"
    suffix = STAGE_SUFFIX[stage]
    if size is not None and stage == "precompile":
        suffix = f"{suffix}-n{size}"
    return fit(base, suffix, DNS_LABEL_MAX - _POD_SUFFIX_MAX)


def stage_job(job: str, stage: str, size: int | None = None, train_gang: str = "") -> str:
    """A stage's Volcano job name: the training gang's current one (train_gang) when named."""
    return train_gang if stage == "train" and train_gang else vcjob_name(job, stage, size)


def successor(job: str, predecessor_uid: str) -> str:
    """Name of the training gang that replaces the one of uid predecessor_uid (never reused)."""
    base = job if job[:1].isalpha() else f"tj-{job}"
    suffix = f"{STAGE_SUFFIX['train']}-{short_hash(predecessor_uid)}"
    return fit(base, suffix, DNS_LABEL_MAX - _POD_SUFFIX_MAX)


def pod_name(vcjob: str, node: int) -> str:
    """Pod (and hostname) Volcano names node i of the gang: `<job>-<task>-<i>`."""
    return f"{vcjob}-{TASK}-{node}"


def node_index(pod: str, vcjob: str | None = None) -> int | None:
    """The node index in a gang pod's name (None: not a gang pod; of vcjob, when given)."""
    m = _NODE_SUFFIX.search(pod)
    if m is None or (vcjob is not None and pod[: m.start()] != vcjob):
        return None
    return int(m.group(1))


def gang_of(pod: str) -> str:
    """The Volcano job a gang pod belongs to ("": not one of ours)."""
    m = _NODE_SUFFIX.search(pod)
    return pod[: m.start()] if m else ""


def rank0_host(vcjob: str) -> str:
    """DNS name of the first pod via Volcano's svc plugin headless service `<job>`."""
    return f"{pod_name(vcjob, 0)}.{vcjob}"


def claim_name(job: str) -> str:
    """PVC name for a job's static FSx volume."""
    return fit(job, "fsx", DNS_LABEL_MAX)


def volume_name(namespace: str, job: str) -> str:
    """Cluster-scoped PV name; includes the namespace so two namespaces never collide."""
    return fit(f"{namespace}-{job}", "fsx", DNS_LABEL_MAX)


def claim_template_name(job: str) -> str:
    """The job's ResourceClaimTemplate of Neuron devices (spec.devices dra), one for all stages."""
    return fit(job, "neuron", DNS_LABEL_MAX)
