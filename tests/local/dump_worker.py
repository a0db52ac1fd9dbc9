"""Test worker that torchrun starts: writes its argv and env, all-reduced over gloo across nodes.

Only tests launch it (as spec.script), so they see what reached the process unchanged.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def all_reduced_ranks() -> float:
    """Sum of (rank + 1) over the world: proof that every node joined one process group."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([float(os.environ["RANK"]) + 1.0])
    dist.all_reduce(value)
    dist.destroy_process_group()
    return float(value.item())


def main() -> None:
    """Dump to <TRAINIUM_OUTPUT_DIR>/dump-<stage>-<rank>.json."""
    world = int(os.environ["WORLD_SIZE"])
    record = {
        "argv": sys.argv[1:],
        "env": dict(os.environ),
        "world_size": world,
        "sum": all_reduced_ranks(),
    }
    out = Path(os.environ["TRAINIUM_OUTPUT_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    name = f"dump-{os.environ['TRAINIUM_STAGE']}-{os.environ['RANK']}.json"
    (out / name).write_text(json.dumps(record))


if __name__ == "__main__":
    main()
