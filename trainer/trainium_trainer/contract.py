"""Names shared by the operator (which sets them) and the trainer (which reads them).

One source: the operator's builders import these constants, and a contract test pins that every
env var the builders set for the trainer is declared here.
"""

from __future__ import annotations

from trainium_trainer import rendezvous

#: Name of the TrainiumJob this process belongs to.
ENV_JOB_NAME = "TRAINIUM_JOB_NAME"
#: Stage of the job: ``precompile`` or ``train``.
ENV_STAGE = "TRAINIUM_STAGE"
#: Where checkpoints, metrics and summary.json go (per job on the shared volume, so resume works).
ENV_OUTPUT_DIR = "TRAINIUM_OUTPUT_DIR"
#: The Neuron compile-cache directory of this node (also passed in NEURON_CC_FLAGS --cache_dir).
ENV_CACHE_DIR = "TRAINIUM_CACHE_DIR"
#: Set by neuron_parallel_compile (and by the local precompile stage): graph extraction only,
#: outputs are invalid, so nothing may be checkpointed.
ENV_EXTRACT_GRAPHS_ONLY = "NEURON_EXTRACT_GRAPHS_ONLY"
#: Training precision chosen in the TrainiumJob (bf16 or fp32); the trainer's --precision default.
ENV_PRECISION = "TRAINIUM_PRECISION"
#: Hugging Face home on the shared volume, pre-seeded with models and tokenizers.
ENV_HF_HOME = "HF_HOME"
#: "1" forbids hub downloads at run time (the default the operator sets).
ENV_HF_OFFLINE = "HF_HUB_OFFLINE"
#: Where rank 0 leaves one JSON line naming the last complete checkpoint after each one; the
#: operator points it at the container's termination-message file, so the line reaches the pod's
#: status when the container ends. Unset: no report is written.
ENV_CHECKPOINT_REPORT = "TRAINIUM_CHECKPOINT_REPORT"
#: The port each node's local rank 0 serves live training metrics on (Prometheus text); the
#: operator declares it as the named containerPort METRICS_PORT_NAME and reads it. Unset: no server.
ENV_METRICS_PORT = "TRAINIUM_TRAINER_METRICS_PORT"
#: Flags torch-neuronx passes to neuronx-cc; the operator puts --cache_dir and spec.compilerFlags
#: there, and the trainer adds its task's defaults (--model-type=transformer) unless present.
ENV_NEURON_CC_FLAGS = "NEURON_CC_FLAGS"
#: The backend the operator chose from spec.backend (BACKENDS: xla or native), set for every
#: stage: the trainer's --backend default (config.py), as TRAINIUM_PRECISION is --precision's.
ENV_BACKEND = "TRAINIUM_BACKEND"

#: The metrics port of training pods and its containerPort name (operator and trainer agree here).
METRICS_PORT = 9400
METRICS_PORT_NAME = "metrics"
#: Gauges the trainer serves on METRICS_PORT; the operator parses them back for status.progress.
METRIC_STEP = "trainium_trainer_step"
METRIC_TOTAL_STEPS = "trainium_trainer_total_steps"
METRIC_LOSS = "trainium_trainer_loss"
METRIC_SAMPLES_PER_SECOND = "trainium_trainer_samples_per_second"
METRIC_TOKENS_PER_SECOND = "trainium_trainer_tokens_per_second"
METRIC_LR = "trainium_trainer_learning_rate"
METRIC_CHECKPOINT_STEP = "trainium_trainer_last_checkpoint_step"
#: Each node's rank-local step seconds (its slowest local rank), one series per node labelled
#: with the node's index in the gang: the operator flags stragglers from it (stragglers.py).
METRIC_NODE_STEP_SECONDS = "trainium_trainer_node_step_seconds"
NODE_STEP_LABEL = "node"

STAGE_PRECOMPILE = "precompile"
STAGE_TRAIN = "train"

#: The trainer flag that limits optimizer steps; the precompile stage appends it.
MAX_STEPS_FLAG = "--max-steps"
#: The default module the operator launches under torchrun.
DEFAULT_MODULE = "trainium_trainer"
#: torchrun with an exit code that says a signal stopped it (128 + N); used with DEFAULT_MODULE.
TORCHRUN_MODULE = "trainium_trainer.torchrun"

# Exit codes of a trainer process, so whoever reads a pod's status can tell failures apart.
#: A mistake the user can fix (bad flag, missing data); one `error:` line on stderr.
EXIT_USAGE = 2
#: The loss became NaN/inf; nothing non-finite was checkpointed; one `error:` line names the step.
EXIT_DIVERGED = 3
#: `python -m trainium_trainer preflight` found the node unfit (devices, EFA, shared memory): the
#: node's fault, not the job's; one `preflight failed:` line on stderr and in the termination log.
EXIT_PREFLIGHT = 4
#: Stopped by SIGTERM (preemption) after checkpointing the step all ranks agreed on: 128 + 15.
EXIT_PREEMPTED = 143
#: The node's name, which the operator gives the preflight init container (spec.nodeName).
ENV_NODE_NAME = "NODE_NAME"
#: This node's index in its gang (rendezvous.py: node 0 hosts the store).
ENV_NODE_INDEX = rendezvous.ENV_NODE_INDEX
#: The init container that runs the preflight in training pods, and the trainer's subcommand.
PREFLIGHT_CONTAINER = "preflight"
PREFLIGHT_COMMAND = "preflight"
#: The trainer's subcommand a spare node's pod runs: it stands by outside the world until stopped.
STANDBY_COMMAND = "standby"
#: The first words of the preflight's failure line (the operator classifies it PreflightFailed).
PREFLIGHT_FAILED = "preflight failed:"
#: Kubernetes shows this file's contents as the container's termination message.
TERMINATION_LOG = "/dev/termination-log"
#: The kubelet keeps at most the last 4096 bytes of a termination message.
TERMINATION_MESSAGE_LIMIT = 4096
#: The key of the checkpoint report line, one JSON object:
#: {"trainiumCheckpoint": {"step": 120, "time": "2026-11-22T10:00:00Z", "path": ".../ckpt.pt"}}
CHECKPOINT_REPORT_KEY = "trainiumCheckpoint"

TRAINER_ENV = (
    ENV_JOB_NAME,
    ENV_STAGE,
    ENV_OUTPUT_DIR,
    ENV_CACHE_DIR,
    ENV_PRECISION,
    ENV_EXTRACT_GRAPHS_ONLY,
    ENV_HF_HOME,
    ENV_HF_OFFLINE,
    ENV_CHECKPOINT_REPORT,
    ENV_METRICS_PORT,
    ENV_BACKEND,
    ENV_NODE_INDEX,
)

#: Defaults the operator sets that spec.env may change (Hugging Face home, hub downloads).
USER_OVERRIDABLE_ENV = (ENV_HF_HOME, ENV_HF_OFFLINE)
#: Env the operator owns for each stage: spec.env may not set these (the CRD's rules name exactly
#: this list; a user's TRAINIUM_OUTPUT_DIR or NEURON_EXTRACT_GRAPHS_ONLY would lose the run).
OPERATOR_ENV = tuple(
    name for name in (*TRAINER_ENV, ENV_NEURON_CC_FLAGS) if name not in USER_OVERRIDABLE_ENV
)

# Set by torchrun (torch.distributed.run) for every worker; the trainer reads them to join the
# process group. Declared here so the contract test can pin every env name the trainer reads.
ENV_RANK = "RANK"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_LOCAL_RANK = "LOCAL_RANK"
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"

LAUNCHER_ENV = (ENV_RANK, ENV_WORLD_SIZE, ENV_LOCAL_RANK, ENV_MASTER_ADDR, ENV_MASTER_PORT)

# --- Backends (issue 27): PyTorch/XLA (trn1; trn2/trn3 with the XLA image) and native PyTorch
# (TorchNeuron on trn2/trn3; the same code on CPU with gloo where torch-neuronx is absent).
BACKEND_XLA = "xla"
BACKEND_NATIVE = "native"
#: What spec.backend may say (the CRD enum); the trainer also takes "cpu" and "auto".
BACKENDS = (BACKEND_XLA, BACKEND_NATIVE)
#: The trainer flag that picks the backend; "auto": XLA when torch_xla imports, else plain CPU.
BACKEND_FLAG = "--backend"

# TorchNeuron's knobs the native runtime sets (AWS, "TorchNeuron environment variables",
# https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/env-vars.html, whose
# caching section covers the NEFF cache; the names below are the ones torch-neuronx reads).
#: Where TorchNeuron keeps compiled NEFFs across runs: the native runtime points it at
#: $TRAINIUM_CACHE_DIR/neff, so the precompile stage fills the cache training reads.
ENV_NEFF_CACHE_DIR = "TORCH_NEURONX_NEFF_CACHE_DIR"
#: TorchNeuron's compile-only mode ("1"): graphs are compiled into the cache, outputs are
#: invalid; the native precompile stage sets it, and the trainer then persists nothing.
ENV_NEURONX_COMPILE_ONLY = "TORCH_NEURONX_COMPILE_ONLY"
#: PyTorch Inductor's cache root (FX-graph and AOTAutograd caches): the native runtime on CPU points
#: it at $TRAINIUM_CACHE_DIR/inductor, so the same precompile contract holds without Trainium.
ENV_INDUCTOR_CACHE_DIR = "TORCHINDUCTOR_CACHE_DIR"
#: Environment the native runtime sets for its compile caches (derived from ENV_CACHE_DIR).
NATIVE_CACHE_ENV = (ENV_NEFF_CACHE_DIR, ENV_NEURONX_COMPILE_ONLY, ENV_INDUCTOR_CACHE_DIR)

# --- Elastic training (issue 28): the global batch is kept across world sizes.
#: Samples per optimizer step over all ranks: the trainer's --global-batch-size default. Set, the
#: trainer derives gradient accumulation = G / (--batch-size x world size) from the real world
#: size at start, refuses (EXIT_USAGE, one line) a size that cannot keep G exactly, and refuses
#: to resume a checkpoint trained with another G. Unset: --grad-accum-steps as given (default 1).
ENV_GLOBAL_BATCH_SIZE = "TRAINIUM_GLOBAL_BATCH_SIZE"
#: Samples per process per micro-step: the trainer's --batch-size default (8 when unset).
ENV_BATCH_SIZE = "TRAINIUM_BATCH_SIZE"
#: Env the operator sets for elastic jobs only (spec.elastic); the trainer reads it always.
ELASTIC_ENV = (ENV_GLOBAL_BATCH_SIZE, ENV_BATCH_SIZE)
GLOBAL_BATCH_SIZE_FLAG = "--global-batch-size"
BATCH_SIZE_FLAG = "--batch-size"
GRAD_ACCUM_FLAG = "--grad-accum-steps"
#: Lets a resume change the global batch (the data continues at the samples consumed).
ALLOW_GLOBAL_BATCH_CHANGE_FLAG = "--allow-global-batch-change"
#: Gauges of the elastic state: samples consumed (global, at the last logged step), the world
#: size this run trains at, its global batch and the accumulation that keeps it.
METRIC_SAMPLES = "trainium_trainer_samples"
METRIC_WORLD_SIZE = "trainium_trainer_world_size"
METRIC_GLOBAL_BATCH_SIZE = "trainium_trainer_global_batch_size"
METRIC_GRAD_ACCUM_STEPS = "trainium_trainer_grad_accum_steps"
#: Keys the checkpoint report's body carries beside step/time/path: the global samples consumed
#: at that checkpoint and the world size that wrote it.
REPORT_SAMPLES = "samples"
REPORT_WORLD_SIZE = "worldSize"

#: Every environment variable the trainer package reads (tests/trainer pins this).
TRAINER_READS = (
    *TRAINER_ENV,
    *ELASTIC_ENV,
    *LAUNCHER_ENV,
    ENV_NEURON_CC_FLAGS,
    ENV_NODE_NAME,
    *NATIVE_CACHE_ENV,
)
