"""The compile-cache key changes exactly when an input that shapes the compiled graphs changes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
import yaml
from support import EXAMPLES, REPO, job

from trainium_operator.api.spec import parse
from trainium_operator.domain.cachekey import cache_key, cache_name, strip_flag

BASE: dict[str, Any] = {
    "args": ["bert-pretrain", "--batch-size", "16", "--max-steps", "1000"],
    "nodes": 2,
    "compilerFlags": ["--model-type=transformer"],
}


def key_of(**overrides: Any) -> str:
    return cache_key(parse(job(**{**BASE, **overrides})))


BASE_KEY = key_of()

GRAPH_CHANGES: dict[str, dict[str, Any]] = {
    "image": {"image": "registry.example/trainer:2"},
    "module": {"module": "my_trainer"},
    "script": {"script": "train.py"},
    "args-value": {"args": ["bert-pretrain", "--batch-size", "32", "--max-steps", "1000"]},
    "args-extra": {"args": [*BASE["args"], "--seq-len", "512"]},
    "args-order": {"args": ["--batch-size", "16", "bert-pretrain", "--max-steps", "1000"]},
    "instanceType": {"instanceType": "trn1n.32xlarge"},
    "nodes": {"nodes": 4},
    "nprocPerNode": {"nprocPerNode": 16},
    "precision": {"precision": "fp32"},
    "compilerFlags": {"compilerFlags": ["--model-type=transformer", "-O1"]},
    "compilerFlags-removed": {"compilerFlags": []},
}

SAME_GRAPHS: dict[str, dict[str, Any]] = {
    "queue": {"scheduling": {"queue": "other"}},
    "tolerations": {
        "scheduling": {"tolerations": [{"key": "aws.amazon.com/neuron", "operator": "Exists"}]}
    },
    "nodeSelector": {"scheduling": {"nodeSelector": {"zone": "a"}}},
    "neuronResourceName": {"scheduling": {"neuronResourceName": "aws.amazon.com/neurondevice"}},
    "runPolicy": {"runPolicy": {"maxRetries": 9, "activeDeadlineSeconds": 60}},
    "env": {"env": [{"name": "MALLOC_ARENA_MAX", "value": "64"}]},
    "resources": {"resources": {"requests": {"cpu": "100", "memory": "400Gi"}}},
    "precompile-steps": {"precompile": {"steps": 50}},
    "precompile-policy": {"precompile": {"policy": "Always"}},
    "storage-claim": {"storage": {"claimName": "other-claim"}},
    "storage-fsx": {"storage": {"fsx": {"fileSystemId": "fs-0123456789abcdef0"}}},
    "mountPath": {"storage": {"claimName": "fsx-claim", "mountPath": "/fsx"}},
    "cache-path": {"cache": {"path": "caches/neuron"}},
    "max-steps-value": {"args": ["bert-pretrain", "--batch-size", "16", "--max-steps", "5"]},
    "max-steps-equals-form": {"args": ["bert-pretrain", "--batch-size", "16", "--max-steps=5"]},
    "max-steps-absent": {"args": ["bert-pretrain", "--batch-size", "16"]},
    "max-steps-moved": {"args": ["bert-pretrain", "--max-steps", "7", "--batch-size", "16"]},
    "nproc-explicit-default": {"nprocPerNode": 32},
    "module-explicit-default": {"module": "trainium_trainer"},
}


def test_key_is_a_stable_hex_digest() -> None:
    assert key_of() == BASE_KEY
    assert len(BASE_KEY) == 32
    assert int(BASE_KEY, 16) >= 0


@pytest.mark.parametrize("overrides", GRAPH_CHANGES.values(), ids=list(GRAPH_CHANGES))
def test_graph_defining_change_changes_the_key(overrides: dict[str, Any]) -> None:
    assert key_of(**overrides) != BASE_KEY


@pytest.mark.parametrize("overrides", SAME_GRAPHS.values(), ids=list(SAME_GRAPHS))
def test_other_changes_keep_the_key(overrides: dict[str, Any]) -> None:
    assert key_of(**overrides) == BASE_KEY


def test_graph_changes_give_pairwise_distinct_keys() -> None:
    keys = [key_of(**o) for o in GRAPH_CHANGES.values()]
    assert len(set(keys)) == len(keys)


def test_step_flag_stripped_is_the_jobs_steps_arg() -> None:
    base = {"script": "train.py", "precompile": {"stepsArg": "--steps_this_run"}}
    a = key_of(**base, args=["--batch_size", "16", "--steps_this_run", "100"])
    b = key_of(**base, args=["--batch_size", "16", "--steps_this_run=3"])
    c = key_of(**base, args=["--batch_size", "16", "--max-steps", "100"])
    assert a == b
    assert c != a  # --max-steps is an ordinary argument of this script


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("a", "--max-steps", "5", "b"), ["a", "b"]),
        (("a", "--max-steps=5", "b"), ["a", "b"]),
        (("--max-steps", "5", "--max-steps", "6"), []),
        (("--max-steps-per-epoch", "5"), ["--max-steps-per-epoch", "5"]),
        (("a", "--max-steps"), ["a"]),
        ((), []),
    ],
)
def test_strip_flag(args: tuple[str, ...], expected: list[str]) -> None:
    assert strip_flag(args, "--max-steps") == expected


def test_key_is_the_same_in_a_fresh_process() -> None:
    example = EXAMPLES / "bert-large-pretrain.yaml"
    code = textwrap.dedent(
        f"""
        import yaml
        from trainium_operator.domain.cachekey import cache_key
        from trainium_operator.api.spec import parse
        print(cache_key(parse(yaml.safe_load(open({str(example)!r})))))
        """
    )
    # A different hash seed proves nothing depends on dict/set iteration order of str hashes.
    env = {"PYTHONHASHSEED": "12345", "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO, env=env
    )
    here = cache_key(parse(yaml.safe_load(example.read_text(encoding="utf-8"))))
    assert out.stdout.strip() == here


def test_cache_name_is_the_users_or_derived_from_the_key() -> None:
    named = parse(job(cache={"name": "bert-large"}))
    assert cache_name(named, cache_key(named)) == "bert-large"
    anon = parse(job())
    key = cache_key(anon)
    assert cache_name(anon, key) == f"tj-{key[:12]}"
