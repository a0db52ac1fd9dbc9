"""`trainium run`: the user's args and env reach the process unchanged through TorchX's macros.

TorchX's local scheduler substitutes `$$`, `$app_id`, `${replica_id}`, ... in every arg and env
value. A 2-node job runs a worker that dumps what it received (tests/local/dump_worker.py).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

import procs

HERE = Path(__file__).resolve().parent
#: What TorchX's string.Template substitution would rewrite: `$$`, its macros, stray dollars.
MACRO_TEXT = ["cost$$5", "$app_id", "${replica_id}", "${img_root}", "$rank0_env", "$", "a$", "$$$"]


def job_file(tmp_path: Path) -> Path:
    """A 2-node job whose script (its name has a macro too) dumps its argv and env."""
    script = tmp_path / "dump$app_id.py"
    shutil.copy(HERE / "dump_worker.py", script)
    doc = {
        "apiVersion": "trainium.dev/v1alpha1",
        "kind": "TrainiumJob",
        "metadata": {"name": "macros"},
        "spec": {
            "image": "trainium-trainer:local",
            "instanceType": "trn1.2xlarge",
            "nodes": 2,
            "nprocPerNode": 1,
            "precision": "fp32",
            "script": str(script),
            "args": [*MACRO_TEXT, "--max-steps=99"],
            "env": [{"name": f"USER_{i}", "value": text} for i, text in enumerate(MACRO_TEXT)],
            "compilerFlags": ["--opt=$$x"],
            "storage": {"claimName": "fsx-claim"},
            "cache": {"name": "macros"},
            "precompile": {"steps": 2},
        },
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def dumps(root: Path, stage: str) -> list[dict[str, Any]]:
    """What each rank's worker received in one stage."""
    out = root / "volume" / "output" / "macros"
    folder = out / "precompile" if stage == "precompile" else out
    return [json.loads((folder / f"dump-{stage}-{rank}.json").read_text()) for rank in (0, 1)]


def test_user_args_and_env_reach_every_process_unchanged(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "trainium_operator", "run", "-f", str(job_file(tmp_path))]
    proc = procs.run([*cmd, "--runs-dir", str(runs)], timeout=procs.scaled(300))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root = runs / "macros"
    for stage, limit in (("precompile", ["--max-steps", "2"]), ("train", ["--max-steps=99"])):
        caches = set()
        for dump in dumps(root, stage):
            assert dump["world_size"] == 2 and dump["sum"] == 3.0  # both nodes in one world
            assert dump["argv"] == [*MACRO_TEXT, *limit]  # precompile replaced the step flag
            env = dump["env"]
            assert [env[f"USER_{i}"] for i in range(len(MACRO_TEXT))] == MACRO_TEXT
            assert env["NEURON_CC_FLAGS"] == f"--cache_dir={env['TRAINIUM_CACHE_DIR']} --opt=$$x"
            caches.add(env["TRAINIUM_CACHE_DIR"])
        # Our own macro is expanded: one cache dir per node, as on a cluster.
        cache = root / "volume" / "neuron_cache"
        assert caches == {str(cache / "macros_0"), str(cache / "macros_1")}
