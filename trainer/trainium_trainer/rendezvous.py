"""Node 0 of a gang hosts torchrun's c10d store: its rendezvous flags, from its index at run time.

On a cluster every node of a stage is one replica of one Volcano task, so all pods share one
argv: the other nodes' (`--rdzv_endpoint <pod 0's DNS name>:PORT`, `is_host=0`). The node whose
index is 0 (TRAINIUM_NODE_INDEX, from Volcano's task index) swaps in what TorchX's replica 0 had:
`localhost:PORT` and `is_host=1`. Locally the variable is unset and argv is kept (TorchX's replica
0 already has the host's flags). Stdlib only: a job whose image lacks this package runs this very
file as `python3 -c <its source> ARGV`, which then runs torch.distributed.run.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Mapping, Sequence

ENV_NODE_INDEX = "TRAINIUM_NODE_INDEX"
STORE_HOST = "localhost"
ENDPOINT_FLAG = "--rdzv_endpoint"
CONF_FLAG = "--rdzv_conf"


def store_host_argv(argv: Sequence[str]) -> list[str]:
    """The store host's argv from another node's: the first (the operator's) rendezvous flags.

    The user's args come after ours and are never touched.
    """
    out = list(argv)
    at = out.index(ENDPOINT_FLAG) + 1
    out[at] = f"{STORE_HOST}:{out[at].rpartition(':')[2]}"
    at = out.index(CONF_FLAG) + 1
    conf = [("is_host=1" if item.startswith("is_host=") else item) for item in out[at].split(",")]
    out[at] = ",".join(conf)
    return out


def node_argv(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> list[str]:
    """argv for this node: the store host's when its index is 0, else as given."""
    return store_host_argv(argv) if env.get(ENV_NODE_INDEX, "").strip() == "0" else list(argv)


def main() -> None:
    """`python3 -c <this file> ARGV`: torch.distributed.run with this node's argv."""
    sys.argv = [sys.argv[0], *node_argv(sys.argv[1:])]
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
