"""Volcano job builds: TorchX's dry run as it was called per build vs builders.build_vcjob now.

Both in one run, same spec, CPU time per build (time.process_time). Usage:

    python bench/build_vcjob.py [--builds 200]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import warnings
from collections.abc import Callable

import common
import yaml
from kubernetes.client import ApiClient
from torchx.schedulers.kubernetes_scheduler import KubernetesScheduler
from torchx.specs.overlays import set_overlay

from trainium_operator.api import naming
from trainium_operator.api.spec import TrainiumJobSpec, parse
from trainium_operator.manifests import appdef, builders
from trainium_operator.manifests.ownership import Owner


def build_as_before(spec: TrainiumJobSpec, owner: Owner, stage: str) -> dict[str, object]:
    """build_vcjob's body before issue 10: a new scheduler (and its source parse) per build."""
    ctx = builders.stage_context(spec, owner, stage)
    app = appdef.build_appdef(spec, ctx)
    set_overlay(app.roles[0], "kubernetes", "V1Pod", builders.pod_overlay(spec, owner, stage))
    app = dataclasses.replace(app, roles=[dataclasses.replace(app.roles[0], num_replicas=1)])
    cfg = {"queue": spec.scheduling.queue, "namespace": owner.namespace, "validate_spec": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        info = KubernetesScheduler(session_name=naming.ROLE).submit_dryrun(app, cfg)
    job = ApiClient().sanitize_for_serialization(info.request.resource)
    job = builders._overlay_job(job, spec, owner, stage, ctx.run_id)
    job["spec"]["tasks"] = [builders._one_task(job["spec"]["tasks"][0], spec.nodes)]
    return job


def cpu_ms_per_build(build: Callable[[], object], n: int) -> float:
    build()  # one-time set-up is not per build
    start = time.process_time()
    for _ in range(n):
        build()
    return (time.process_time() - start) * 1000 / n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--builds", type=int, default=200)
    n = common.parse(p, argv, builds=2).builds
    doc = common.REPO / "examples" / "bert-large-pretrain.yaml"
    spec = parse(yaml.safe_load(doc.read_text()))
    owner = Owner("bert", "default", "uid-1")
    assert build_as_before(spec, owner, "train") == builders.build_vcjob(spec, owner, "train")
    before = cpu_ms_per_build(lambda: build_as_before(spec, owner, "train"), n)
    after = cpu_ms_per_build(lambda: builders.build_vcjob(spec, owner, "train"), n)
    rows = [["before (scheduler + source parse per build)", before], ["after", after]]
    print(common.table(["build_vcjob", "CPU ms per build"], rows))
    print(f"\nbefore / after: {before / after:.1f}x ({n} builds each, same spec, one process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
