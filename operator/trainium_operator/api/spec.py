"""The typed TrainiumJob spec, built only from a spec the CRD's own rules accepted.

`parse()` defaults and validates with the CRD file (crd.py), then fills these frozen dataclasses;
a drift test checks that their fields are exactly the CRD's properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainium_operator.api import crd
from trainium_operator.api.instances import InstanceType, instance_type
from trainium_trainer.contract import DEFAULT_MODULE

#: Bytes of one problem and of all of them joined: a rejected spec with a huge env must not
#: turn into a huge status or Event (etcd refuses objects over 1.5 MiB).
MAX_PROBLEM_BYTES = 1024
MAX_MESSAGE_BYTES = 4096
_SEPARATOR = "; "
#: spec.devices: the Neuron device plugin's extended resources, or a DRA ResourceClaimTemplate.
DEVICES_PLUGIN, DEVICES_DRA = "plugin", "dra"


class SpecError(ValueError):
    """A TrainiumJob the schema rejects; `problems` has one short line per field."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = cap_problems(problems)
        super().__init__(_SEPARATOR.join(self.problems))


def _cut(text: str, limit: int) -> str:
    """text on one line within limit UTF-8 bytes, marked with an ellipsis when cut."""
    line = " ".join(text.split())
    data = line.encode("utf-8", "replace")
    if len(data) <= limit:
        return line
    return data[: limit - len("...")].decode("utf-8", "ignore") + "..."


def cap_problems(problems: list[str]) -> list[str]:
    """Each problem within 1 KiB and all of them, joined, within 4 KiB; the rest are counted."""
    kept: list[str] = []
    used = 0
    for i, problem in enumerate(problems):
        line = _cut(problem, MAX_PROBLEM_BYTES)
        cost = len(line.encode("utf-8")) + (len(_SEPARATOR) if kept else 0)
        after = len(problems) - i - 1  # room is kept for the line that counts those left out
        reserve = len(_SEPARATOR + _more(after)) if after else 0
        if used + cost + reserve > MAX_MESSAGE_BYTES:
            return [*kept, _more(len(problems) - i)]
        kept.append(line)
        used += cost
    return kept


def _more(count: int) -> str:
    return f"... and {count} more problems"


@dataclass(frozen=True)
class EnvVar:
    """One user environment variable."""

    name: str
    value: str = ""


@dataclass(frozen=True)
class Fsx:
    """An FSx for Lustre file system to mount through a static PV."""

    fileSystemId: str
    dnsName: str | None = None
    mountName: str | None = None
    capacity: str = "1200Gi"


@dataclass(frozen=True)
class Storage:
    """The shared volume: an existing claim or an FSx file system."""

    claimName: str | None = None
    fsx: Fsx | None = None
    mountPath: str = "/data"


@dataclass(frozen=True)
class Cache:
    """Where the Neuron compile cache lives on the volume."""

    name: str | None = None
    path: str = "neuron_cache"


@dataclass(frozen=True)
class Precompile:
    """The neuron_parallel_compile stage."""

    policy: str = "IfNotCached"
    steps: int = 10
    stepsArg: str = "--max-steps"


#: spec.scheduling.placement.mode: Volcano's hard and soft network topology modes.
PLACEMENT_REQUIRED, PLACEMENT_PREFERRED = "Required", "Preferred"


@dataclass(frozen=True)
class Placement:
    """Keep the gang under one EKS network node (Required), or as close as Volcano can."""

    mode: str = PLACEMENT_REQUIRED
    #: The network-node layer (1-3) whose one node holds the whole gang; Required only.
    networkNodeLayer: int | None = None


@dataclass(frozen=True)
class Elastic:
    """Elastic training: the sizes the job may shrink to and the global batch it keeps."""

    minNodes: int
    globalBatchSize: int
    batchSizePerProcess: int
    #: Sizes the precompile stage compiles; empty: the default (elastic.py, precompile_sizes).
    precompileSizes: tuple[int, ...] = ()
    shrinkAfterSeconds: int = 300


@dataclass(frozen=True)
class Stragglers:
    """When a node whose steps are slower than the gang's median is flagged, and replaced."""

    threshold: float = 1.3
    windowSeconds: int = 300
    replace: bool = False


@dataclass(frozen=True)
class Scheduling:
    """Volcano queue, priority and node placement."""

    queue: str = "default"
    priorityClassName: str | None = None
    nodeSelector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    neuronResourceName: str = "aws.amazon.com/neuron"
    placement: Placement | None = None


@dataclass(frozen=True)
class Resources:
    """Per-pod cpu/memory/hugepages quantities."""

    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunPolicy:
    """Retries, deadlines and clean-up; mutable after creation."""

    maxRetries: int = 3
    rendezvousTimeoutSeconds: int = 1800
    startupDeadlineSeconds: int | None = None
    activeDeadlineSeconds: int | None = None
    #: Seconds the step may stand still before the gang is Hung; None: never judged.
    progressDeadlineSeconds: int | None = None
    ttlSecondsAfterFinished: int | None = None
    suspend: bool = False


@dataclass(frozen=True)
class TrainiumJobSpec:
    """A validated, defaulted TrainiumJob spec."""

    image: str
    instanceType: str
    storage: Storage
    module: str | None = None
    script: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()
    nodes: int = 1
    #: Spare nodes the gang holds beside nodes, standing by outside the world (domain/spares.py).
    spares: int = 0
    nprocPerNode: int | None = None
    #: xla or native; None: the instance family's default (effective_backend).
    backend: str | None = None
    #: Logical NeuronCore configuration; None: the instance family's default (effective_lnc).
    lnc: int | None = None
    #: How pods get their Neuron devices: the device plugin's resources, or a DRA claim.
    devices: str = DEVICES_PLUGIN
    precision: str = "bf16"
    #: Check each training node in an init container before the gang starts.
    preflight: bool = True
    #: Straggler detection (domain/stragglers.py).
    stragglers: Stragglers = Stragglers()
    compilerFlags: tuple[str, ...] = ()
    cache: Cache = Cache()
    precompile: Precompile = Precompile()
    #: Elastic training (None: the gang always has spec.nodes).
    elastic: Elastic | None = None
    scheduling: Scheduling = Scheduling()
    resources: Resources = Resources()
    runPolicy: RunPolicy = RunPolicy()

    @property
    def instance(self) -> InstanceType:
        """Facts of the instance type."""
        return instance_type(self.instanceType)

    @property
    def effective_backend(self) -> str:
        """spec.backend, defaulting to the family's (trn1: xla, trn2/trn3: native)."""
        return self.backend or self.instance.family.default_backend

    @property
    def effective_lnc(self) -> int:
        """spec.lnc, defaulting to AWS's for the family (trn1: 1, trn2/trn3: 2)."""
        return self.lnc or self.instance.family.default_lnc

    @property
    def procs_per_node(self) -> int:
        """nprocPerNode, defaulting to one process per logical NeuronCore at the job's LNC."""
        return self.nprocPerNode or self.instance.logical_cores(self.effective_lnc)

    @property
    def precompile_size(self) -> int | None:
        """The node count that names this spec's precompile job: elastic sizes each have one."""
        return self.nodes if self.elastic else None

    @property
    def entry_module(self) -> str | None:
        """The module torchrun launches, or None when a script is set."""
        return None if self.script else (self.module or DEFAULT_MODULE)


def parse(body: Any, old: dict[str, Any] | None = None) -> TrainiumJobSpec:
    """Validate a TrainiumJob object (or bare spec) against the CRD and build the typed spec.

    Any shape is accepted as input; whatever is wrong with it comes back as one SpecError.
    """
    obj = body if isinstance(body, dict) and "spec" in body else {"spec": body}
    obj = {k: v for k, v in obj.items() if k in ("apiVersion", "kind", "metadata", "spec")}
    defaulted, problems = crd.validate(obj, old=old)
    if problems:
        raise SpecError(problems)
    return from_dict(defaulted["spec"])


def from_dict(s: dict[str, Any]) -> TrainiumJobSpec:
    """Build the dataclasses from an already defaulted and validated spec dict."""
    st = s["storage"]
    return TrainiumJobSpec(
        image=s["image"],
        instanceType=s["instanceType"],
        storage=Storage(
            claimName=st.get("claimName"),
            fsx=Fsx(**st["fsx"]) if "fsx" in st else None,
            mountPath=st.get("mountPath", "/data"),
        ),
        module=s.get("module"),
        script=s.get("script"),
        args=tuple(s.get("args", ())),
        env=tuple(EnvVar(e["name"], e.get("value", "")) for e in s.get("env", ())),
        nodes=s.get("nodes", 1),
        spares=s.get("spares", 0),
        nprocPerNode=s.get("nprocPerNode"),
        backend=s.get("backend"),
        lnc=s.get("lnc"),
        devices=s.get("devices", DEVICES_PLUGIN),
        precision=s.get("precision", "bf16"),
        preflight=s.get("preflight", True),
        stragglers=Stragglers(**s.get("stragglers", {})),
        compilerFlags=tuple(s.get("compilerFlags", ())),
        cache=Cache(**s.get("cache", {})),
        precompile=Precompile(**s.get("precompile", {})),
        elastic=_elastic(s.get("elastic")),
        scheduling=_scheduling(s.get("scheduling", {})),
        resources=Resources(**s.get("resources", {})),
        runPolicy=RunPolicy(**s.get("runPolicy", {})),
    )


def _elastic(e: dict[str, Any] | None) -> Elastic | None:
    """spec.elastic, with precompileSizes as a tuple (None when the job is not elastic)."""
    if e is None:
        return None
    return Elastic(**{**e, "precompileSizes": tuple(e.get("precompileSizes", ()))})


def _scheduling(s: dict[str, Any]) -> Scheduling:
    """spec.scheduling, its placement (a nested object) typed too."""
    placement = s.get("placement")
    fields = {k: v for k, v in s.items() if k != "placement"}
    return Scheduling(**fields, placement=None if placement is None else Placement(**placement))
