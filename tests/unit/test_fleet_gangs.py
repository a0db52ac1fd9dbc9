"""Fleet-size gangs (issue 35): one Volcano task of `nodes` replicas, small and flat at any size.

TorchX writes one task per replica; the overlay keeps its replica 0 as the task of every node.
These pin that each node still runs what TorchX writes for its replica, and that the objects
the operator writes do not grow with the node count.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from support import EXAMPLES as EXAMPLES_DIR
from support import example_spec, load_example, node_pods, spec_of
from torchx.specs.overlays import set_overlay

from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.manifests import appdef, builders, workload
from trainium_operator.manifests.ownership import Owner
from trainium_trainer import contract, rendezvous

Json = dict[str, Any]
STAGES = (appdef.PRECOMPILE, appdef.TRAIN)
SIZES = (8, 128, 1024)
LIMIT = 64 * 1024
OWNER = Owner("bert-large-pretrain", "default", "uid-1")


def _size(obj: Json) -> int:
    """Bytes of the object as the API server stores it (compact JSON)."""
    return len(json.dumps(obj, separators=(",", ":")))


def _at(nodes: int) -> TrainiumJobSpec:
    spec, _ = example_spec("bert-large-pretrain.yaml")
    return dataclasses.replace(spec, nodes=nodes)


@pytest.mark.parametrize("stage", STAGES)
def test_both_volcano_jobs_stay_small_and_flat_in_the_node_count(stage: str) -> None:
    sizes = {n: _size(builders.build_vcjob(_at(n), OWNER, stage)) for n in SIZES}
    assert max(sizes.values()) <= LIMIT, sizes
    # Only the digits of the node count differ (--nnodes, replicas, minAvailable x 2).
    assert max(sizes.values()) - min(sizes.values()) <= 4 * len("1024"), sizes


def test_the_kueue_pod_set_counts_every_node_of_the_one_task() -> None:
    vcjob = builders.build_vcjob(_at(1024), OWNER, appdef.TRAIN)
    pod_set = workload.pod_set(vcjob, "main")
    assert pod_set["count"] == 1024 and _size(pod_set) <= LIMIT


def _torchx_replicas(spec: TrainiumJobSpec, stage: str) -> list[Json]:
    """What TorchX writes for each replica (one task each), replica 0 with the store host's flags:
    the Volcano job as it was built before the one task."""
    ctx = dataclasses.replace(builders.stage_context(spec, OWNER, stage), one_task=False)
    app = appdef.build_appdef(spec, ctx)
    set_overlay(app.roles[0], "kubernetes", "V1Pod", builders.pod_overlay(spec, OWNER, stage))
    cfg = {"queue": "default", "namespace": "default", "validate_spec": False}
    resource = builders._submit_dryrun(app, cfg).request.resource
    tasks = builders._serializer.sanitize_for_serialization(resource)["spec"]["tasks"]
    out = []
    for i, task in enumerate(tasks):
        (container,) = task["template"]["spec"]["containers"]
        if i == appdef.STORE_HOST_REPLICA:
            container["command"] = rendezvous.store_host_argv(container["command"])
        out.append(container)
    return out


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(
    "entry",
    [{}, {"module": "my_trainer"}, {"script": "/app/train.py"}],
    ids=["trainer", "module", "script"],
)
def test_every_node_runs_what_torchx_writes_for_its_replica(stage: str, entry: Json) -> None:
    """argv and env of node i (index from Volcano, node 0's flags from the launcher) are TorchX's
    replica i's; only TorchX's rank0_env bookkeeping, which our argv never reads, is gone."""
    spec = spec_of(nodes=3, compilerFlags=["--opt=$$x"], **entry)
    vcjob = builders.build_vcjob(spec, OWNER, stage)
    replicas = _torchx_replicas(spec, stage)
    nodes = node_pods(vcjob)
    assert len(nodes) == len(replicas) == 3
    for (i, pod), theirs in zip(nodes, replicas, strict=True):
        (ours,) = pod["spec"]["containers"]
        assert ours["command"] == theirs["command"], i
        env = {e["name"]: e.get("value") for e in ours["env"]}
        assert env.pop(contract.ENV_NODE_INDEX) == str(i)
        want = {e["name"]: e.get("value") for e in theirs["env"]}
        want.pop(builders.TORCHX_RANK0_ENV, None)
        assert env == want, i


def test_the_program_for_images_without_the_trainer_is_the_rendezvous_module() -> None:
    """`python3 -c` of rendezvous.py: stdlib only, and nothing the kubelet or TorchX expands."""
    program = appdef.RENDEZVOUS_PROGRAM
    assert "$" not in program and "import trainium" not in program
    vcjob = builders.build_vcjob(spec_of(nodes=2, module="my_trainer"), OWNER, appdef.TRAIN)
    (container,) = vcjob["spec"]["tasks"][0]["template"]["spec"]["containers"]
    assert container["command"][1:3] == ["-c", program]
    compiled = compile(program, "<rendezvous>", "exec")
    assert compiled.co_filename == "<rendezvous>"


@pytest.mark.parametrize(
    ("index", "endpoint", "is_host"),
    [
        ("0", "localhost:29500", "1"),
        ("1", "j-train-node-0.j-train:29500", "0"),
        (None, "j-train-node-0.j-train:29500", "0"),
    ],
)
def test_only_node_0_hosts_the_store(index: str | None, endpoint: str, is_host: str) -> None:
    argv = [
        "--rdzv_endpoint",
        "j-train-node-0.j-train:29500",
        "--rdzv_conf",
        "is_host=0,read_timeout=60",
    ]
    argv += ["-m", "x", "--rdzv_endpoint", "mine:1", "--rdzv_conf", "is_host=0"]
    env = {} if index is None else {contract.ENV_NODE_INDEX: index}
    got = rendezvous.node_argv(argv, env)
    assert got[:4] == [
        "--rdzv_endpoint",
        endpoint,
        "--rdzv_conf",
        f"is_host={is_host},read_timeout=60",
    ]
    assert got[4:] == argv[4:]  # the user's look-alike flags are theirs


def test_volcanos_hosts_env_fits_in_one_env_string_at_the_crds_maximum() -> None:
    """The CRD's spec.nodes maximum: Volcano's svc plugin gives every pod VC_NODE_HOSTS, all
    `<pod>.<vcjob>` names joined by commas; Linux refuses an env string over MAX_ARG_STRLEN."""
    from trainium_operator.api import crd, naming

    spec = crd.version_schema()["properties"]["spec"]["properties"]
    nodes = spec["nodes"]["maximum"]
    assert spec["elastic"]["properties"]["minNodes"]["maximum"] == nodes
    assert spec["elastic"]["properties"]["precompileSizes"]["items"]["maximum"] == nodes
    longest = "a" * 253
    for gang in (
        naming.vcjob_name(longest, "train"),
        naming.vcjob_name(longest, "precompile", nodes),
    ):
        hosts = ",".join(f"{naming.pod_name(gang, i)}.{gang}" for i in range(nodes))
        assert len(f"VC_NODE_HOSTS={hosts}") + 1 <= 128 * 1024


EXAMPLES = sorted(
    p.name for p in EXAMPLES_DIR.glob("*.yaml") if "\nkind: TrainiumJob" in p.read_text("utf-8")
)


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_at_1024_nodes_is_admitted_and_renders_small(example: str) -> None:
    """Each example at the CRD's maximum (elastic ones without elastic: its batch rules are
    per size): the CRD admits it and both Volcano jobs stay within 64 KiB."""
    from trainium_operator.api import crd
    from trainium_operator.api.spec import parse

    doc = load_example(example)
    doc["spec"]["nodes"] = 1024
    doc["spec"].pop("elastic", None)
    stored, problems = crd.validate(doc)
    assert problems == [], problems
    spec = parse(stored)
    for stage in STAGES:
        vcjob = builders.build_vcjob(spec, OWNER, stage)
        assert vcjob["spec"]["tasks"][0]["replicas"] == 1024
        assert _size(vcjob) <= LIMIT, (stage, _size(vcjob))
