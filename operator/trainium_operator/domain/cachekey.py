"""The compile-cache key: a hash of every input that changes the compiled Neuron graphs.

Two jobs with the same key trace the same graphs, so one precompile serves both. The step limit
is not part of it (precompile runs a few steps of the same program), nor are retries or queues.
The torch, torch-xla and torch-neuronx versions (and neuronx-cc's) are the image's: they enter
through spec.image, so an image pinned by digest pins them; a moved tag does not change the key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from trainium_operator.api.crd import GROUP
from trainium_operator.api.naming import short_hash
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_trainer.config import without_flag

#: 2: backend, LNC and world size joined the key (issue 27); every earlier entry misses once.
KEY_VERSION = 2
#: On a cache entry's record, lease and precompile Volcano jobs: the entry's record name.
LABEL_CACHE_ENTRY = f"{GROUP}/cache-entry"


def strip_flag(args: tuple[str, ...], flag: str) -> list[str]:
    """args without `flag VALUE` / `flag=VALUE`: how long a run trains does not change graphs."""
    return without_flag(args, flag)


def cache_key(spec: TrainiumJobSpec) -> str:
    """Stable hex key of the graph-defining inputs."""
    material = {
        "v": KEY_VERSION,
        "image": spec.image,
        "entrypoint": {"module": spec.entry_module, "script": spec.script},
        "args": strip_flag(spec.args, spec.precompile.stepsArg),
        "instanceType": spec.instanceType,
        "nodes": spec.nodes,
        "nprocPerNode": spec.procs_per_node,
        "worldSize": spec.nodes * spec.procs_per_node,
        "backend": spec.effective_backend,
        "lnc": spec.effective_lnc,
        "precision": spec.precision,
        "compilerFlags": list(spec.compilerFlags),
    }
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def cache_name(spec: TrainiumJobSpec, key: str) -> str:
    """The cacheset: the user's name, else one derived from the key."""
    return spec.cache.name or f"tj-{key[:12]}"


@dataclass(frozen=True)
class Identity:
    """Where graphs were compiled (volume, cache path, cacheset) and which graphs (the key)."""

    volume: str
    path: str
    name: str
    key: str

    @property
    def record_name(self) -> str:
        """The record's and the lease's name: a DNS label unique per identity."""
        place = short_hash(f"{self.volume}|{self.path}|{self.name}")
        return f"trainium-cache-{place}-{self.key[:16]}"


def identity(spec: TrainiumJobSpec) -> Identity:
    """The cache entry a job reads and fills."""
    key = cache_key(spec)
    fsx = spec.storage.fsx
    volume = f"fsx:{fsx.fileSystemId}" if fsx else f"claim:{spec.storage.claimName}"
    return Identity(volume, spec.cache.path, cache_name(spec, key), key)
