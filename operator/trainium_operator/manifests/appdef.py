"""The TorchX AppDef of one stage: torchrun argv, env, Neuron/EFA devices and the shared volume.

The cluster backend turns it into a Volcano Job with TorchX's Kubernetes scheduler; the local
backend runs the very same AppDef with TorchX's local scheduler. Argv lists only: no `bash -c`,
the c10d rendezvous endpoint is a plain element (Volcano's svc plugin gives pod 0 a stable name).

TorchX substitutes its macros (`${replica_id}`, `$app_id`, ...) in every arg and env value, and
torchrun its `${local_rank}` in the worker's args, both with Python's string.Template: all text
we did not write as a macro is escaped (`$` -> `$$`) for each substitution it passes through.
"""

from __future__ import annotations

import inspect
import posixpath
from dataclasses import dataclass

from torchx import specs

from trainium_operator.api import naming
from trainium_operator.api.instances import EFA_RESOURCE, INSTANCE_TYPE_LABEL, LNC_ENV
from trainium_operator.api.spec import DEVICES_PLUGIN, TrainiumJobSpec
from trainium_operator.domain.budget import VOLCANO_MAX_RETRY
from trainium_operator.domain.cachekey import strip_flag
from trainium_trainer import config, contract, rendezvous

RDZV_PORT = 29500
#: torchrun's --tee value for stdout and stderr (Std.ALL).
TEE_BOTH = "3"
#: The replica that hosts the c10d rendezvous store (node 0).
STORE_HOST_REPLICA = 0
#: A node's own index in a TorchX template when it is known only at run time (the cluster's one
#: Volcano task): Kubernetes' reference to the env var the pod defines first (escaped for TorchX).
POD_NODE_INDEX = "$$(" + contract.ENV_NODE_INDEX + ")"
#: `python3 -c` of this program runs torch.distributed.run with the node's own rendezvous flags
#: in an image without the trainer package (rendezvous.py is stdlib only).
RENDEZVOUS_PROGRAM = inspect.getsource(rendezvous)
PRECOMPILE = contract.STAGE_PRECOMPILE
TRAIN = contract.STAGE_TRAIN

#: Neuron/EFA env from AWS's EKS tutorial component (see README, "What the operator sets").
BASE_ENV = {
    "CCOM_SOCKET_IFNAME": "eth0",
    "NEURON_RT_RESET_CORES": "1",
    "XLA_TRANSFER_SEED_ASYNC": "1",
}
EFA_ENV = {
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_FORK_SAFE": "1",
}
#: The env var torch-neuronx reads compiler flags (and our cache dir) from.
NEURON_CC_FLAGS = contract.ENV_NEURON_CC_FLAGS
#: PyTorch/XLA's precompile: graphs extracted and compiled in parallel (it sets
#: NEURON_EXTRACT_GRAPHS_ONLY itself). TorchNeuron has no such tool: its precompile is the
#: training program under NEURON_EXTRACT_GRAPHS_ONLY, which the trainer maps to compile-only mode.
XLA_COMPILE_LAUNCHER = ("neuron_parallel_compile",)


@dataclass(frozen=True)
class StageContext:
    """Everything besides the spec that shapes one stage's AppDef."""

    job_name: str
    stage: str
    cache_name: str
    #: Volcano job name (cluster) or run name (local); the rendezvous id.
    run_id: str
    #: Host of the rendezvous store for replicas other than 0: pod 0's DNS name on a cluster.
    rank0_host: str
    #: Where the storage is mounted in the container (cluster) or lives on disk (local).
    mount_root: str
    #: PVC to mount at mount_root; None locally.
    claim: str | None = None
    python: str = "python3"
    #: Prefix argv of the precompile stage; empty locally where there is no Neuron compiler.
    compile_launcher: tuple[str, ...] = XLA_COMPILE_LAUNCHER
    #: Port of the rendezvous store; local runs pick a free one so they never share a store.
    rdzv_port: int = RDZV_PORT
    #: Where training's rank 0 reports each complete checkpoint: the container's termination
    #: message on a cluster (the operator reads it from the pod), a run file locally.
    checkpoint_report: str | None = None
    #: Port training's local rank 0 serves live metrics on (a named containerPort on a cluster);
    #: None locally, where parallel runs would collide on one port.
    metrics_port: int | None = None
    #: The stage runs on this machine's CPU (the local backend): an XLA job's trainer then picks
    #: its runtime by what imports (auto: CPU here); a native job's runs natively on CPU.
    on_cpu: bool = False
    #: Every node runs one shared template (the cluster's one Volcano task of `nodes` replicas):
    #: a node's index, and node 0's store-host flags, come at run time from its task index.
    #: False: TorchX writes each replica's own values (`${replica_id}`; the local backend).
    one_task: bool = False

    @property
    def node_index(self) -> str:
        """This node's index as a TorchX template: its macro, or the pod's env reference."""
        return POD_NODE_INDEX if self.one_task else specs.macros.replica_id


def compile_launcher(spec: TrainiumJobSpec) -> tuple[str, ...]:
    """The precompile stage's argv prefix on a cluster: neuron_parallel_compile for XLA only."""
    return XLA_COMPILE_LAUNCHER if spec.effective_backend == contract.BACKEND_XLA else ()


def escape(text: str) -> str:
    """Text that TorchX's macro substitution (string.Template) gives back unchanged."""
    return text.replace("$", "$$")


def cache_dir(spec: TrainiumJobSpec, ctx: StageContext, replica: str) -> str:
    """Per-node cache directory `<mount>/<cache.path>/<cacheset>_<i>` (no write contention)."""
    return posixpath.join(ctx.mount_root, spec.cache.path, f"{ctx.cache_name}_{replica}")


def output_dir(spec: TrainiumJobSpec, ctx: StageContext) -> str:
    """Per-job output directory on the shared volume, so a restarted gang resumes from it.

    The precompile stage gets a subfolder: its graph-extraction run must not mix its metrics
    with training's, nor look like a checkpoint to `--resume auto`.
    """
    base = posixpath.join(ctx.mount_root, "output", ctx.job_name)
    return posixpath.join(base, "precompile") if ctx.stage == PRECOMPILE else base


def rendezvous_conf(spec: TrainiumJobSpec, host: bool) -> str:
    """torchrun's --rdzv_conf: who hosts the store, and how long to wait for the other nodes.

    torch's c10d defaults (read_timeout 60 s, join_timeout 600 s) fail a node whose peers start
    minutes later (image pulls, volume mounts); `is_host` is explicit because torch's guess
    resolves the endpoint, and pod 0's own DNS record may not exist yet.
    """
    timeout = spec.runPolicy.rendezvousTimeoutSeconds
    return f"is_host={int(host)},join_timeout={timeout},read_timeout={timeout}"


def rendezvous_args(spec: TrainiumJobSpec, ctx: StageContext, host: bool) -> list[str]:
    """Endpoint and conf of one node: the store host listens via localhost, the rest dial it."""
    endpoint = "localhost" if host else ctx.rank0_host
    return [
        "--rdzv_endpoint", f"{endpoint}:{ctx.rdzv_port}",
        "--rdzv_conf", rendezvous_conf(spec, host),
    ]  # fmt: skip


def user_args(spec: TrainiumJobSpec, stage: str) -> list[str]:
    """The user's args; precompile replaces the step flag (either form) with its own limit.

    For the trainer, the limit is at least 3 steps and its log and checkpoint periods are
    brought under it, so the precompile traces every step kind training has (issue 21).
    """
    if stage != PRECOMPILE:
        return list(spec.args)
    flag = spec.precompile.stepsArg
    args, steps = strip_flag(spec.args, flag), spec.precompile.steps
    if spec.entry_module == contract.DEFAULT_MODULE:
        steps = config.precompile_steps(steps)
        args = config.precompile_args(args, steps)
    return [*args, flag, str(steps)]


def launcher(spec: TrainiumJobSpec) -> str:
    """torchrun; for the trainer, its wrapper that exits 143 (not 1) when a SIGTERM stopped it.

    Another module or a script may run in an image without the trainer, so it gets torchrun.
    """
    if spec.entry_module == contract.DEFAULT_MODULE:
        return contract.TORCHRUN_MODULE
    return "torch.distributed.run"


def launch(spec: TrainiumJobSpec, ctx: StageContext) -> list[str]:
    """`-m <launcher>`; with one task and no trainer in the image, `-c` of rendezvous.py."""
    module = launcher(spec)
    if ctx.one_task and module != contract.TORCHRUN_MODULE:
        return ["-c", RENDEZVOUS_PROGRAM]
    return ["-m", module]


def torchrun_argv(spec: TrainiumJobSpec, ctx: StageContext) -> list[str]:
    """`python3 -m <launcher> ... <module|script> <args>` of every node but 0 (launcher: torchrun).

    This is the container's argv: the worker's part is escaped for torchrun's own substitution.
    """
    argv = [
        ctx.python, *launch(spec, ctx),
        "--nnodes", str(spec.nodes),
        "--nproc_per_node", str(spec.procs_per_node),
        "--rdzv_backend", "c10d",
        *rendezvous_args(spec, ctx, host=False),
        "--rdzv_id", ctx.run_id,
        "--max_restarts", "0",
        # Both streams of every worker, each line prefixed with its local rank ("[default3]:"),
        # as TorchX's dist.ddp does: 32 ranks per pod stay readable in one container log.
        "--tee", TEE_BOTH,
    ]  # fmt: skip
    module = spec.entry_module
    worker = ["-m", module] if module else [spec.script or ""]
    # torchrun substitutes `${local_rank}` in the worker's argv (string.Template) as well.
    return argv + [escape(arg) for arg in [*worker, *user_args(spec, ctx.stage)]]


def device_env(spec: TrainiumJobSpec) -> dict[str, str]:
    """Neuron runtime and EFA env of the instance type, the backend the trainer runs, the LNC.

    The LNC goes to every stage on families that have one: the precompile must compile at the
    LNC training runs with (AWS: the compiler's LNC may not differ from the runtime's).
    """
    env = dict(BASE_ENV)
    if spec.instance.efa_interfaces:
        env.update(EFA_ENV)
    if spec.precision == "bf16":
        env["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"
    if len(spec.instance.family.lncs) > 1:
        env[LNC_ENV] = str(spec.effective_lnc)
    env[contract.ENV_BACKEND] = spec.effective_backend
    return env


def stage_env(spec: TrainiumJobSpec, ctx: StageContext) -> dict[str, str]:
    """Operator defaults, then the user's env on top (the user wins), cache flags always ours.

    Values are TorchX templates: escaped text plus the node's index in the cache dir.
    """
    cdir = escape(cache_dir(spec, ctx, "")) + ctx.node_index
    env = device_env(spec)
    if ctx.on_cpu and spec.effective_backend == contract.BACKEND_XLA:
        env[contract.ENV_BACKEND] = "auto"
    env.update(
        {
            contract.ENV_JOB_NAME: ctx.job_name,
            contract.ENV_STAGE: ctx.stage,
            contract.ENV_OUTPUT_DIR: output_dir(spec, ctx),
            contract.ENV_PRECISION: spec.precision,
            contract.ENV_HF_HOME: posixpath.join(ctx.mount_root, "hf_home"),
            contract.ENV_HF_OFFLINE: "1",
        }
    )
    if ctx.stage == PRECOMPILE and not ctx.compile_launcher:
        # neuron_parallel_compile sets this itself; without it, say so for the trainer.
        env[contract.ENV_EXTRACT_GRAPHS_ONLY] = "1"
    if ctx.stage == TRAIN and ctx.checkpoint_report:
        env[contract.ENV_CHECKPOINT_REPORT] = ctx.checkpoint_report
    if ctx.stage == TRAIN and ctx.metrics_port is not None:
        env[contract.ENV_METRICS_PORT] = str(ctx.metrics_port)
    env = {name: escape(value) for name, value in env.items()}
    env[contract.ENV_CACHE_DIR] = cdir
    env.update({e.name: escape(e.value) for e in spec.env})
    if spec.elastic is not None:  # both stages: the precompile traces the same micro batch
        env[contract.ENV_GLOBAL_BATCH_SIZE] = str(spec.elastic.globalBatchSize)
        env[contract.ENV_BATCH_SIZE] = str(spec.elastic.batchSizePerProcess)
    env[NEURON_CC_FLAGS] = " ".join([f"--cache_dir={cdir}", *map(escape, spec.compilerFlags)])
    return env


def resource(spec: TrainiumJobSpec) -> specs.Resource:
    """Whole Neuron devices and every EFA interface of the node, selected by instance type.

    With spec.devices dra the Neuron devices come from the pod's claim instead (manifests/dra.py).
    """
    inst = spec.instance
    devices = {}
    if spec.devices == DEVICES_PLUGIN:
        devices[spec.scheduling.neuronResourceName] = inst.neuron_devices
    if inst.efa_interfaces:
        devices[EFA_RESOURCE] = inst.efa_interfaces
    return specs.Resource(
        cpu=0, gpu=0, memMB=0, devices=devices,
        capabilities={INSTANCE_TYPE_LABEL: spec.instanceType},
    )  # fmt: skip


def build_appdef(spec: TrainiumJobSpec, ctx: StageContext) -> specs.AppDef:
    """The AppDef of one stage: one role, one replica per node."""
    argv = torchrun_argv(spec, ctx)
    if ctx.stage == PRECOMPILE:
        argv = [*ctx.compile_launcher, *argv]
    mounts: list[specs.BindMount | specs.VolumeMount | specs.DeviceMount] = []
    if ctx.claim:
        mounts.append(specs.VolumeMount(src=ctx.claim, dst_path=spec.storage.mountPath))
    ports = {}
    if ctx.stage == TRAIN and ctx.metrics_port is not None:
        ports[contract.METRICS_PORT_NAME] = ctx.metrics_port
    role = specs.Role(
        name=naming.ROLE,
        image=spec.image,
        entrypoint=argv[0],  # TorchX substitutes no macros in the entrypoint
        args=[escape(arg) for arg in argv[1:]],
        num_replicas=spec.nodes,
        env=stage_env(spec, ctx),
        resource=resource(spec),
        mounts=mounts,
        port_map=ports,
        # Volcano restarts the whole gang on a failed or evicted pod (TorchX's RestartJob
        # policies), up to a ceiling it never reaches: the operator keeps runPolicy.maxRetries,
        # so evictions spend none of it (budget.py). The local scheduler does not retry.
        max_retries=VOLCANO_MAX_RETRY,
        retry_policy=specs.RetryPolicy.APPLICATION,
    )
    return specs.AppDef(name=ctx.run_id, roles=[role])
