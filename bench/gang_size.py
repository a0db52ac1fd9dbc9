"""Volcano job sizes by node count: one task per node (TorchX's shape, before issue 35) vs one
task of `nodes` replicas (now), both stages, side by side in one run.

Size: the object as the API server stores a custom resource in etcd (compact JSON), and as
`trainium render` prints it (YAML). CPU: one build (time.process_time). Usage:

    python bench/gang_size.py [--nodes 8 128 1024]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import common
import yaml
from torchx.specs.overlays import set_overlay

from trainium_operator.api.spec import TrainiumJobSpec, parse
from trainium_operator.manifests import appdef, builders
from trainium_operator.manifests.ownership import Owner
from trainium_trainer import rendezvous

Json = dict[str, Any]
STAGES = (appdef.PRECOMPILE, appdef.TRAIN)
#: etcd's default request limit (--max-request-bytes 1.5 MiB; EKS does not let you change it).
ETCD_LIMIT = int(1.5 * 1024 * 1024)


def build_before(spec: TrainiumJobSpec, owner: Owner, stage: str) -> Json:
    """build_vcjob before issue 35: TorchX's task per replica, task node-0 given the host flags."""
    ctx = dataclasses.replace(builders.stage_context(spec, owner, stage), one_task=False)
    app = appdef.build_appdef(spec, ctx)
    set_overlay(app.roles[0], "kubernetes", "V1Pod", builders.pod_overlay(spec, owner, stage))
    cfg = {"queue": spec.scheduling.queue, "namespace": owner.namespace, "validate_spec": False}
    info = builders._submit_dryrun(app, cfg)
    job: Json = builders._serializer.sanitize_for_serialization(info.request.resource)
    job = builders._overlay_job(job, spec, owner, stage, ctx.run_id)
    host = job["spec"]["tasks"][appdef.STORE_HOST_REPLICA]["template"]["spec"]["containers"][0]
    host["command"] = rendezvous.store_host_argv(host["command"])
    return job


def measure(build: Callable[[], Json]) -> tuple[int, int, float]:
    """(JSON bytes, YAML bytes, CPU ms) of one build."""
    start = time.process_time()
    job = build()
    cpu = (time.process_time() - start) * 1000
    text = yaml.safe_dump(job, sort_keys=False)
    return len(json.dumps(job, separators=(",", ":"))), len(text), cpu


def row(spec: TrainiumJobSpec, owner: Owner, stage: str) -> list[object]:
    """One table row: both shapes of one stage's Volcano job at spec.nodes."""
    b_json, b_yaml, b_cpu = measure(lambda: build_before(spec, owner, stage))
    a_json, a_yaml, a_cpu = measure(lambda: builders.build_vcjob(spec, owner, stage))
    over = " (over etcd's 1.5 MiB)" if b_json > ETCD_LIMIT else ""
    ratio = f"{b_json / a_json:.0f}x"
    return [spec.nodes, stage, f"{b_json:,}{over}", f"{a_json:,}", ratio,
            f"{b_yaml:,}", f"{a_yaml:,}", b_cpu, a_cpu]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--nodes", type=int, nargs="+", default=[8, 128, 1024])
    args = common.parse(p, argv, nodes=[2, 8])
    doc = common.REPO / "examples" / "bert-large-pretrain.yaml"
    tutorial = parse(yaml.safe_load(doc.read_text()))
    owner = Owner("bert-large-pretrain", "default", "uid-1")
    builders.build_vcjob(tutorial, owner, "train")  # one-time set-up is not per build
    rows = []
    for nodes in args.nodes:
        spec = dataclasses.replace(tutorial, nodes=nodes)
        for stage in STAGES:
            rows.append(row(spec, owner, stage))
    header = ["nodes", "stage", "JSON B before", "JSON B after", "before / after",
              "YAML B before", "YAML B after", "CPU ms before", "CPU ms after"]  # fmt: skip
    print(common.table(header, rows))
    print("\nbefore: one Volcano task per node (TorchX's dry run); after: one task of all nodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
