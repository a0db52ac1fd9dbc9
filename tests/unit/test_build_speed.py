"""Volcano job builds parse no Python source after the first, and agree when built from threads.

TorchX's `submit_dryrun` rebuilt its run options from `inspect.getsource` + `ast.parse` of its
1,136-line scheduler module on every call (a third of the operator's CPU), and concurrent
`ast.parse` from the operator's handler threads raised CPython 3.11 SystemErrors under load.
"""

from __future__ import annotations

import ast
import json
import threading
from typing import Any

import pytest
from kubernetes.client import Configuration
from support import example_spec

from trainium_operator.manifests import builders


def test_repeated_builds_parse_no_source(monkeypatch: pytest.MonkeyPatch) -> None:
    spec, owner = example_spec("bert-large-pretrain.yaml")
    builders.build_vcjob(spec, owner, "precompile")  # whatever one-time set-up there is
    parses = []
    real_parse = ast.parse

    def counting_parse(*args: Any, **kwargs: Any) -> ast.AST:
        parses.append(args[1] if len(args) > 1 else kwargs.get("filename", "<unknown>"))
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting_parse)
    for stage in ("precompile", "train", "precompile"):
        builders.build_vcjob(spec, owner, stage)
    assert parses == []


def test_a_build_copies_the_client_configuration_per_client_not_per_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kubernetes 37's models copy nothing (kubernetes-client/python#1921: ~60 copies a build)."""
    spec, owner = example_spec("bert-large-pretrain.yaml")
    monkeypatch.setattr(Configuration, "_default", Configuration())  # as a loaded kubeconfig
    copies = []
    real_copy = Configuration.__deepcopy__

    def counting_copy(self: Configuration, memo: Any) -> Any:
        copies.append(1)
        return real_copy(self, memo)

    monkeypatch.setattr(Configuration, "__deepcopy__", counting_copy)
    job = builders.build_vcjob(spec, owner, "train")
    assert len(copies) <= 2  # one per ApiClient TorchX makes for the pod overlay
    assert job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]  # models built


@pytest.mark.filterwarnings("error")  # a warning escaping one build's filter fails that build
def test_builds_from_many_threads_at_once_agree() -> None:
    spec, owner = example_spec("bert-large-pretrain.yaml")
    want = json.dumps(builders.build_vcjob(spec, owner, "train"), sort_keys=True)
    start = threading.Barrier(8)
    results: list[str] = []
    errors: list[BaseException] = []

    def build() -> None:
        start.wait()
        try:
            for _ in range(5):
                job = builders.build_vcjob(spec, owner, "train")
                results.append(json.dumps(job, sort_keys=True))
        except BaseException as exc:  # reported below, with the failing thread's error
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(results) == 40
    assert set(results) == {want}
