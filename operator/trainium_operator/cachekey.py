"""The compile-cache key: a hash of every input that changes the compiled Neuron graphs.

Two jobs with the same key trace the same graphs, so one precompile serves both. The step limit
is not part of it (precompile runs a few steps of the same program), nor are retries or queues.
"""

from __future__ import annotations

import hashlib
import json

from trainium_operator.spec import TrainiumJobSpec

KEY_VERSION = 1


def strip_flag(args: tuple[str, ...], flag: str) -> list[str]:
    """args without `flag VALUE` / `flag=VALUE`: how long a run trains does not change graphs."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(f"{flag}="):
            out.append(arg)
    return out


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
        "precision": spec.precision,
        "compilerFlags": list(spec.compilerFlags),
    }
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def cache_name(spec: TrainiumJobSpec, key: str) -> str:
    """The cacheset: the user's name, else one derived from the key."""
    return spec.cache.name or f"tj-{key[:12]}"
