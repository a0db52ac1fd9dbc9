"""One local job's state and folders: what the runner and the terminal view both read."""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainium_operator.api import naming
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.domain.cachekey import cache_key, cache_name
from trainium_operator.manifests import appdef, cache
from trainium_operator.manifests.appdef import StageContext

Json = dict[str, Any]
#: Where the training stage's rank 0 reports checkpoints (the termination message's stand-in).
CHECKPOINT_REPORT = "checkpoint-report"


def free_port() -> int:
    """A TCP port free now, so local runs (and tests) beside each other never share a store."""
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LocalRun:
    """One local job: its folders, its TorchX apps and the times each phase took."""

    name: str
    spec: TrainiumJobSpec
    root: Path
    rdzv_port: int = field(default_factory=free_port)
    apps: dict[str, str] = field(default_factory=dict)
    phase_started: dict[str, float] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    status: Json = field(default_factory=dict)
    #: runPolicy.suspend as last read from the job file.
    suspend: bool = False
    #: The training progress bar (created with the first metric record).
    view: Any = None
    #: The last step's wind-down line was said.
    wound_down: bool = False

    @property
    def volume(self) -> Path:
        """The folder standing in for the shared volume."""
        return self.root / "volume"

    @property
    def logs(self) -> Path:
        """Each stage's TorchX logs, under logs/<stage>/."""
        return self.root / "logs"

    @property
    def checkpoint_report(self) -> Path:
        """The file the trainer names its last complete checkpoint in."""
        return self.root / CHECKPOINT_REPORT

    @property
    def key(self) -> str:
        """The compile-cache key."""
        return cache_key(self.spec)

    @property
    def cache_record(self) -> Path:
        """Local cache record: the ConfigMap's stand-in, next to the cache it describes."""
        record = cache.identity(self.spec).record_name
        return self.volume / self.spec.cache.path / ".records" / f"{record}.json"

    def local_path(self, text: str) -> str:
        """Map a path under spec.storage.mountPath to the local volume folder."""
        mount = self.spec.storage.mountPath.rstrip("/")
        if text == mount or text.startswith(mount + "/"):
            return str(self.volume) + text[len(mount) :]
        return text


def stage_context(run: LocalRun, stage: str) -> StageContext:
    """The local StageContext: rendezvous on localhost, this Python, no Neuron launcher."""
    return StageContext(
        job_name=run.name,
        stage=stage,
        cache_name=cache_name(run.spec, run.key),
        run_id=f"{run.name}-{naming.STAGE_SUFFIX[stage]}",
        rank0_host="localhost",
        mount_root=str(run.volume),
        claim=None,
        python=sys.executable,
        compile_launcher=(),
        rdzv_port=run.rdzv_port,
        checkpoint_report=str(run.checkpoint_report),
        on_cpu=True,
    )


def flag_value(args: tuple[str, ...], flag: str, default: str) -> str:
    """Value of `flag V` or `flag=V` in args."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return default


def train_output(run: LocalRun) -> Path:
    """The training stage's output folder (metrics, checkpoints, model, summary.json)."""
    return Path(appdef.output_dir(run.spec, stage_context(run, appdef.TRAIN)))
