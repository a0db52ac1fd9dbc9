"""Generated manifests carry what AWS's tutorial job carries (neuron-eks.md §1, §6, §9) and more."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
from support import example_spec, job, node_pods
from torch.distributed.elastic.utils.api import macros as torchrun_macros
from torch.distributed.run import config_from_args, parse_args

from trainium_operator.api import naming
from trainium_operator.api.spec import TrainiumJobSpec, parse
from trainium_operator.domain import budget
from trainium_operator.manifests import builders, cache
from trainium_operator.manifests.ownership import Owner
from trainium_trainer import config

Json = dict[str, Any]
K8S_VERSION = "1.33.0"
OWNER = Owner("bert", "team-a", "0c4a1f0e-1111-2222-3333-444455556666")
STAGES = ("precompile", "train")


@pytest.fixture(scope="module")
def tutorial() -> tuple[TrainiumJobSpec, Owner]:
    return example_spec("bert-large-pretrain.yaml")


@pytest.fixture(scope="module")
def tutorial_jobs(tutorial: tuple[TrainiumJobSpec, Owner]) -> dict[str, Json]:
    spec, owner = tutorial
    return {stage: builders.build_vcjob(spec, owner, stage) for stage in STAGES}


def pods(vcjob: Json) -> Iterator[tuple[int, Json, Json]]:
    """(node, pod, its only container) of every node, as each runs (support.node_pods)."""
    for i, pod in node_pods(vcjob):
        (container,) = pod["spec"]["containers"]
        yield i, pod, container


def env_of(container: Json) -> dict[str, str]:
    names = [e["name"] for e in container["env"]]
    assert len(names) == len(set(names)), f"duplicate env: {names}"
    return {e["name"]: e.get("value", "") for e in container["env"]}


def build(stage: str = "train", **spec: Any) -> Json:
    return builders.build_vcjob(parse(job(**spec)), OWNER, stage)


def first_container(vcjob: Json) -> Json:
    return next(pods(vcjob))[2]


# --- the Volcano job ----------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_job_level_fields(tutorial_jobs: dict[str, Json], stage: str) -> None:
    vcjob = tutorial_jobs[stage]
    assert vcjob["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert vcjob["kind"] == "Job"
    assert vcjob["metadata"]["name"] == naming.vcjob_name("bert-large-pretrain", stage)
    assert vcjob["metadata"]["namespace"] == "default"
    spec = vcjob["spec"]
    assert spec["schedulerName"] == "volcano"
    assert spec["queue"] == "test"
    assert spec["minAvailable"] == 2
    assert spec["maxRetry"] == budget.VOLCANO_MAX_RETRY
    assert spec["plugins"]["svc"] == ["--publish-not-ready-addresses"]


@pytest.mark.parametrize("retries", [0, 7, 100])
def test_volcano_gets_a_retry_ceiling_the_operator_keeps_the_budget(retries: int) -> None:
    """runPolicy.maxRetries is the operator's: Volcano restarts on every failure, even at 0."""
    vcjob = build(runPolicy={"maxRetries": retries}, nodes=2)
    assert vcjob["spec"]["maxRetry"] == budget.VOLCANO_MAX_RETRY
    for task in vcjob["spec"]["tasks"]:
        assert task["maxRetry"] == budget.VOLCANO_MAX_RETRY
        assert {p["event"]: p["action"] for p in task["policies"]} == {
            "PodEvicted": "RestartJob",
            "PodFailed": "RestartJob",
        }


@pytest.mark.parametrize("stage", STAGES)
def test_one_task_of_a_replica_per_node_restarting_the_whole_gang(
    tutorial_jobs: dict[str, Json], stage: str
) -> None:
    tasks = tutorial_jobs[stage]["spec"]["tasks"]
    assert [t["name"] for t in tasks] == [naming.TASK]
    for task in tasks:
        assert task["replicas"] == task["minAvailable"] == 2
        assert {p["event"]: p["action"] for p in task["policies"]} == {
            "PodEvicted": "RestartJob",
            "PodFailed": "RestartJob",
        }
        assert task["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("nodes", [1, 3])
def test_gang_size_is_the_node_count(nodes: int) -> None:
    vcjob = build(nodes=nodes)
    assert vcjob["spec"]["minAvailable"] == nodes
    assert [t["replicas"] for t in vcjob["spec"]["tasks"]] == [nodes]


@pytest.mark.parametrize("stage", STAGES)
def test_owner_reference_and_labels(tutorial_jobs: dict[str, Json], stage: str) -> None:
    _, owner = example_spec("bert-large-pretrain.yaml")
    vcjob = tutorial_jobs[stage]
    (ref,) = vcjob["metadata"]["ownerReferences"]
    assert ref == {
        "apiVersion": "trainium.dev/v1alpha1",
        "kind": "TrainiumJob",
        "name": "bert-large-pretrain",
        "uid": owner.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    wanted = {
        "app.kubernetes.io/managed-by": "trainium-operator",
        "trainium.dev/job-name": "bert-large-pretrain",
        "trainium.dev/stage": stage,
    }
    assert wanted.items() <= vcjob["metadata"]["labels"].items()
    for _, template, _ in pods(vcjob):
        assert wanted.items() <= template["metadata"]["labels"].items()


# --- pod placement and devices ------------------------------------------------------------------


def test_node_selector_is_the_instance_type_plus_the_users() -> None:
    vcjob = build(scheduling={"nodeSelector": {"topology.kubernetes.io/zone": "us-west-2d"}})
    assert next(pods(vcjob))[1]["spec"]["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "trn1.32xlarge",
        "topology.kubernetes.io/zone": "us-west-2d",
    }


def test_user_cannot_point_the_instance_type_label_elsewhere() -> None:
    vcjob = build(scheduling={"nodeSelector": {"node.kubernetes.io/instance-type": "m5.large"}})
    selector = next(pods(vcjob))[1]["spec"]["nodeSelector"]
    assert selector["node.kubernetes.io/instance-type"] == "trn1.32xlarge"


def test_tolerations_reach_every_pod() -> None:
    spec, owner = example_spec("bert-claim.yaml")
    for stage in STAGES:
        for _, template, _ in pods(builders.build_vcjob(spec, owner, stage)):
            assert template["spec"]["tolerations"] == [
                {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}
            ]


def test_no_tolerations_unless_asked(tutorial_jobs: dict[str, Json]) -> None:
    for _, template, _ in pods(tutorial_jobs["train"]):
        assert not template["spec"].get("tolerations")


@pytest.mark.parametrize(
    ("instance", "limits"),
    [
        ("trn1.32xlarge", {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "8"}),
        ("trn1n.32xlarge", {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "16"}),
        ("trn2.48xlarge", {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "16"}),
        ("trn1.2xlarge", {"aws.amazon.com/neuron": "1"}),
    ],
)
def test_device_limits_per_instance_type(instance: str, limits: dict[str, str]) -> None:
    container = first_container(build(instanceType=instance))
    assert container["resources"]["limits"] == limits
    # Requested as the API server defaults a pod's (a limit alone is the request), written out
    # so Volcano's PodGroup counts the gang's devices (issue 43). Still BestEffort, as in AWS's
    # tutorial: QoS counts cpu and memory only.
    assert container["resources"]["requests"] == limits


def test_neurondevice_resource_name_when_chosen() -> None:
    vcjob = build(scheduling={"neuronResourceName": "aws.amazon.com/neurondevice"})
    limits = first_container(vcjob)["resources"]["limits"]
    assert limits == {"aws.amazon.com/neurondevice": "16", "vpc.amazonaws.com/efa": "8"}


def test_user_resources_are_added_to_the_device_limits() -> None:
    spec, owner = example_spec("trn2-causal-lm.yaml")
    container = first_container(builders.build_vcjob(spec, owner, "train"))
    assert container["resources"]["requests"] == {
        "cpu": "180", "memory": "1800Gi",
        "aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "16",
    }  # fmt: skip
    assert container["resources"]["limits"] == {
        "aws.amazon.com/neuron": "16",
        "vpc.amazonaws.com/efa": "16",
        "memory": "1900Gi",
    }


def test_priority_class_is_set() -> None:
    vcjob = build(scheduling={"priorityClassName": "high"})
    assert next(pods(vcjob))[1]["spec"]["priorityClassName"] == "high"


# --- env ------------------------------------------------------------------------------------------

TUTORIAL_ENV = {
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_FORK_SAFE": "1",
    "CCOM_SOCKET_IFNAME": "eth0",
    "NEURON_RT_RESET_CORES": "1",
    "XLA_TRANSFER_SEED_ASYNC": "1",
}


@pytest.mark.parametrize("stage", STAGES)
def test_tutorial_env_with_a_cache_dir_per_node(tutorial_jobs: dict[str, Json], stage: str) -> None:
    for i, _, container in pods(tutorial_jobs[stage]):
        env = env_of(container)
        assert TUTORIAL_ENV.items() <= env.items()
        assert env["NEURON_CC_FLAGS"] == f"--cache_dir=/data/neuron_cache/bert-large_{i}"
        assert env["TRAINIUM_CACHE_DIR"] == f"/data/neuron_cache/bert-large_{i}"
        assert env["TRAINIUM_STAGE"] == stage
        assert env["TRAINIUM_JOB_NAME"] == "bert-large-pretrain"
        assert env["TRAINIUM_PRECISION"] == "bf16"


def test_user_compiler_flags_follow_the_cache_dir() -> None:
    spec, owner = example_spec("trn2-causal-lm.yaml")
    for i, _, container in pods(builders.build_vcjob(spec, owner, "train")):
        assert env_of(container)["NEURON_CC_FLAGS"] == (
            f"--cache_dir=/fsx/caches/neuron/causal-lm-trn2_{i} "
            "--model-type=transformer --distribution-strategy=llm-training"
        )


def test_user_env_wins_over_operator_defaults() -> None:
    vcjob = build(nodes=2, env=[{"name": "CCOM_SOCKET_IFNAME", "value": "ens5"}])
    for _, _, container in pods(vcjob):
        env = env_of(container)  # also checks there is one entry, not two
        assert env["CCOM_SOCKET_IFNAME"] == "ens5"
        assert env["FI_PROVIDER"] == "efa"


def test_user_env_is_added() -> None:
    env = env_of(first_container(build(env=[{"name": "MALLOC_ARENA_MAX", "value": "64"}])))
    assert env["MALLOC_ARENA_MAX"] == "64"


def test_no_efa_env_without_efa_interfaces() -> None:
    env = env_of(first_container(build(instanceType="trn1.2xlarge")))
    assert not {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE"} & env.keys()
    assert env["CCOM_SOCKET_IFNAME"] == "eth0"


# --- volumes --------------------------------------------------------------------------------------


def _volumes(template: Json, container: Json) -> dict[str, tuple[Json, Json]]:
    """mountPath -> (volume, mount)."""
    by_name = {v["name"]: v for v in template["spec"]["volumes"]}
    return {m["mountPath"]: (by_name[m["name"]], m) for m in container["volumeMounts"]}


@pytest.mark.parametrize(
    ("example", "claim", "mount_path"),
    [
        ("bert-large-pretrain.yaml", "bert-large-pretrain-fsx", "/data"),
        ("bert-claim.yaml", "fsx-claim", "/data"),
        ("trn2-causal-lm.yaml", "trn2-causal-lm-fsx", "/fsx"),
    ],
)
def test_shm_and_the_claim_are_mounted(example: str, claim: str, mount_path: str) -> None:
    spec, owner = example_spec(example)
    for stage in STAGES:
        for _, template, container in pods(builders.build_vcjob(spec, owner, stage)):
            mounts = _volumes(template, container)
            shm, _ = mounts["/dev/shm"]
            assert shm["emptyDir"] == {"medium": "Memory"}
            data, mount = mounts[mount_path]
            assert data["persistentVolumeClaim"] == {"claimName": claim}
            assert not mount.get("readOnly")


# --- argv -----------------------------------------------------------------------------------------


def _argv(container: Json) -> list[str]:
    return [*container.get("command", []), *container.get("args", [])]


def _worker_argv(container: Json) -> list[str]:
    """What torchrun hands each worker: its own parsing and `${local_rank}` substitution."""
    argv = _argv(container)
    torchrun_args = parse_args(argv[argv.index("-m") + 2 :])
    _, _, worker_args = config_from_args(torchrun_args)
    return list(torchrun_macros.substitute(worker_args, "0"))


def _rdzv(argv: list[str]) -> tuple[str, dict[str, str]]:
    """(endpoint, conf) of torchrun's first --rdzv_endpoint/--rdzv_conf in argv."""
    endpoint = argv[argv.index("--rdzv_endpoint") + 1]
    conf = argv[argv.index("--rdzv_conf") + 1]
    return endpoint, dict(item.split("=", 1) for item in conf.split(","))


@pytest.mark.parametrize("stage", STAGES)
def test_argv_is_a_list_without_a_shell(tutorial_jobs: dict[str, Json], stage: str) -> None:
    vcjob = tutorial_jobs[stage]
    name = vcjob["metadata"]["name"]
    for _, _, container in pods(vcjob):
        argv = _argv(container)
        assert "bash" not in argv and "sh" not in argv and "-c" not in argv
        assert all(isinstance(a, str) for a in argv)
        assert argv[argv.index("--rdzv_backend") + 1] == "c10d"
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--nproc_per_node") + 1] == "32"
        assert argv[argv.index("--rdzv_id") + 1] == name


@pytest.mark.parametrize("stage", STAGES)
def test_pod_0_hosts_the_store_without_its_own_dns_record(
    tutorial_jobs: dict[str, Json], stage: str
) -> None:
    vcjob = tutorial_jobs[stage]
    name = vcjob["metadata"]["name"]
    wait = {"join_timeout": "1800", "read_timeout": "1800"}  # the CRD's default
    got = {i: _rdzv(_argv(c)) for i, _, c in pods(vcjob)}
    assert got[0] == ("localhost:29500", {"is_host": "1", **wait})
    assert got[1] == (f"{naming.pod_name(name, 0)}.{name}:29500", {"is_host": "0", **wait})
    assert f"{name}-node-0.{name}" == naming.rank0_host(name)  # Volcano: <job>-<task>-<index>


def test_rendezvous_timeouts_follow_run_policy() -> None:
    vcjob = build(nodes=3, runPolicy={"rendezvousTimeoutSeconds": 5400})
    for _, _, container in pods(vcjob):
        _, conf = _rdzv(_argv(container))
        assert conf["join_timeout"] == conf["read_timeout"] == "5400"


def test_nodes_differ_only_in_the_rendezvous_endpoint_and_host(
    tutorial_jobs: dict[str, Json],
) -> None:
    for vcjob in tutorial_jobs.values():
        argvs = set()
        for _, _, container in pods(vcjob):
            argv = _argv(container)
            for flag in ("--rdzv_endpoint", "--rdzv_conf"):
                argv[argv.index(flag) + 1] = "*"
            argvs.add(tuple(argv))
        assert len(argvs) == 1


def test_user_args_that_look_like_rendezvous_flags_are_left_alone() -> None:
    mine = ["--rdzv_endpoint", "elsewhere:1", "--rdzv_conf", "is_host=0"]
    for _, _, container in pods(build(nodes=2, args=mine)):
        assert _argv(container)[-4:] == mine


def test_training_argv_ends_with_the_module_and_the_users_args(
    tutorial: tuple[TrainiumJobSpec, Owner], tutorial_jobs: dict[str, Json]
) -> None:
    spec, _ = tutorial
    argv = _argv(first_container(tutorial_jobs["train"]))
    assert argv[:3] == ["python3", "-m", "trainium_trainer.torchrun"]
    assert argv[-len(spec.args) - 2 :] == ["-m", "trainium_trainer", *spec.args]


def test_precompile_argv_is_the_training_argv_plus_the_step_limit(
    tutorial_jobs: dict[str, Json],
) -> None:
    train, compile_ = tutorial_jobs["train"], tutorial_jobs["precompile"]
    train_argv = _argv(first_container(train))
    compile_argv = _argv(first_container(compile_))
    # Only the rendezvous differs: each Volcano job has its own pod-0 host and rendezvous id.
    same_rdzv = [
        a.replace(compile_["metadata"]["name"], train["metadata"]["name"]) for a in compile_argv
    ]
    i = train_argv.index("--max-steps")
    assert train_argv[i : i + 2] == ["--max-steps", "28125"]  # the example trains 28125 steps
    without_limit = train_argv[:i] + train_argv[i + 2 :]
    # The trainer's log and checkpoint periods come under the limit: every step kind is traced.
    cadence = config.precompile_args(without_limit, 10)
    assert cadence[-4:] == ["--log-every", "9", "--checkpoint-every", "9"]
    assert same_rdzv == ["neuron_parallel_compile", *cadence, "--max-steps", "10"]


@pytest.mark.parametrize(
    "given",
    [["--max-steps", "500"], ["--max-steps=500"], ["--max-steps", "5", "--max-steps=6"]],
)
def test_precompile_replaces_the_users_step_flag(given: list[str]) -> None:
    args = ["bert-pretrain", *given, "--lr", "0.1"]
    train = _argv(first_container(build("train", args=args)))
    compile_ = _argv(first_container(build("precompile", args=args)))
    assert train[-len(args) :] == args  # training keeps the user's own limit
    start = compile_.index("bert-pretrain")
    assert compile_[start:] == [
        "bert-pretrain",
        "--lr",
        "0.1",
        "--log-every",
        "9",
        "--max-steps",
        "10",
    ]


def test_aws_script_argv_and_its_own_step_flag() -> None:
    spec, owner = example_spec("aws-bert-script.yaml")
    train = _argv(first_container(builders.build_vcjob(spec, owner, "train")))
    compile_ = _argv(first_container(builders.build_vcjob(spec, owner, "precompile")))
    assert "-m" not in train[3:]  # the script is launched directly, not as a module
    tail = ["dp_bert_large_hf_pretrain_hdf5.py", *spec.args]
    assert train[-len(tail) :] == tail
    assert compile_[0] == "neuron_parallel_compile"
    assert compile_[-len(tail) - 2 :] == [*tail, "--steps_this_run", "10"]


@pytest.mark.parametrize(
    "hostile",
    ["$(rm -rf /)", "; ls", "a b", "'quoted'", '"double"', "`id`", "x && y", "${HOME}", "\\n"],
)
def test_user_args_pass_through_unchanged_as_single_elements(hostile: str) -> None:
    vcjob = build(args=["bert-pretrain", "--tag", hostile])
    argv = _worker_argv(first_container(vcjob))
    assert argv == ["-u", "-m", "trainium_trainer", "bert-pretrain", "--tag", hostile]


# --- user text reaches the process unchanged (TorchX and torchrun substitute macros) -------------

#: What TorchX's string.Template substitution would rewrite: `$$`, its macros, stray dollars.
MACRO_TEXT = ["cost$$5", "$app_id", "${replica_id}", "${img_root}", "$rank0_env", "$", "a$", "$$$"]


def _macro_job(stage: str) -> Json:
    env = [{"name": f"USER_{i}", "value": text} for i, text in enumerate(MACRO_TEXT)]
    return build(
        stage,
        nodes=2,
        script="train$app_id.py",
        args=MACRO_TEXT,
        env=env,
        compilerFlags=["--opt=$$x"],
    )


@pytest.mark.parametrize("stage", STAGES)
def test_user_text_with_macros_reaches_every_process_unchanged(stage: str) -> None:
    vcjob = _macro_job(stage)
    cacheset = vcjob["metadata"]["labels"]["trainium.dev/cache-name"]
    limit = ["--max-steps", "10"] if stage == "precompile" else []
    for i, _, container in pods(vcjob):
        assert _worker_argv(container) == ["-u", "train$app_id.py", *MACRO_TEXT, *limit]
        env = env_of(container)
        assert [env[f"USER_{j}"] for j in range(len(MACRO_TEXT))] == MACRO_TEXT
        # Our own macro is still expanded: one cache dir per node.
        assert env["NEURON_CC_FLAGS"] == f"--cache_dir=/data/neuron_cache/{cacheset}_{i} --opt=$$x"


def test_render_is_deterministic_with_app_id_in_the_args() -> None:
    assert _macro_job("train") == _macro_job("train")


def test_env_values_that_look_like_torchx_field_paths_stay_values() -> None:
    vcjob = build(nodes=2, env=[{"name": "POD", "value": "[FIELD_PATH]metadata.name"}])
    for _, _, container in pods(vcjob):
        (var,) = [e for e in container["env"] if e["name"] == "POD"]
        assert var == {"name": "POD", "value": "[FIELD_PATH]metadata.name"}


def test_aws_script_example_sets_the_tutorials_bf16_env() -> None:
    # AWS's tutorial component sets XLA_DOWNCAST_BF16=1 with --bf16 True on its 1.13-era image,
    # the image this example runs; the operator does not (torch-xla >= 2.4 deprecates it).
    spec, owner = example_spec("aws-bert-script.yaml")
    assert spec.precision == "bf16"
    for stage in STAGES:
        for _, _, container in pods(builders.build_vcjob(spec, owner, stage)):
            assert env_of(container)["XLA_DOWNCAST_BF16"] == "1"
    default_env = env_of(first_container(build(precision="bf16")))
    assert "XLA_DOWNCAST_BF16" not in default_env


# --- storage manifests and the cache record -------------------------------------------------------


@pytest.fixture(scope="module")
def fsx_manifests(tutorial: tuple[TrainiumJobSpec, Owner]) -> tuple[Json, Json]:
    spec, owner = tutorial
    pv = builders.build_fsx_volume(spec, owner, "fs-x.fsx.us-west-2.amazonaws.com", "abcdefgh")
    return pv, builders.build_fsx_claim(spec, owner)


def test_pv_mounts_the_file_system_with_flock(fsx_manifests: tuple[Json, Json]) -> None:
    pv, _ = fsx_manifests
    assert pv["spec"]["csi"] == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": "fs-0123456789abcdef0",
        "volumeAttributes": {
            "dnsname": "fs-x.fsx.us-west-2.amazonaws.com",
            "mountname": "abcdefgh",
        },
    }
    assert pv["spec"]["mountOptions"] == ["flock"]
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["capacity"] == {"storage": "1200Gi"}
    assert "default" in pv["metadata"]["name"]  # cluster-scoped: the namespace is in the name


def test_pvc_binds_to_the_pv_by_name(fsx_manifests: tuple[Json, Json]) -> None:
    pv, pvc = fsx_manifests
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["claimRef"] == {"namespace": "default", "name": pvc["metadata"]["name"]}
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["storageClassName"] == pv["spec"]["storageClassName"] == ""
    assert pvc["metadata"]["ownerReferences"][0]["uid"] == "uid-bert-large-pretrain"


def test_pod_claim_is_the_generated_pvc(
    fsx_manifests: tuple[Json, Json], tutorial_jobs: dict[str, Json]
) -> None:
    _, pvc = fsx_manifests
    _, template, _ = next(pods(tutorial_jobs["train"]))
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in template["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == [pvc["metadata"]["name"]]


def _cache_record(spec: TrainiumJobSpec, owner: Owner) -> Json:
    record = cache.record(
        cache.identity(spec), spec, owner, cache.READY,
        started_at="2026-01-01T00:00:00Z", now="2026-01-01T00:30:00Z",
    )  # fmt: skip
    assert record["data"]["durationSeconds"] == "1800"
    return record


def test_cache_record_names_the_key_and_is_not_owned(
    tutorial: tuple[TrainiumJobSpec, Owner], tutorial_jobs: dict[str, Json]
) -> None:
    spec, owner = tutorial
    record = _cache_record(spec, owner)
    assert "ownerReferences" not in record["metadata"]  # it outlives the job
    labels = tutorial_jobs["train"]["metadata"]["labels"]
    assert record["data"]["key"] == labels["trainium.dev/cache-key"]
    assert record["data"]["cacheName"] == labels["trainium.dev/cache-name"] == "bert-large"
    assert record["data"]["cachePath"] == "/data/neuron_cache"


def test_every_core_manifest_passes_strict_kubernetes_validation(
    tutorial: tuple[TrainiumJobSpec, Owner], fsx_manifests: tuple[Json, Json]
) -> None:
    spec, owner = tutorial
    lease = cache.lease(cache.identity(spec), owner, "2026-01-01T00:00:00.000000Z")
    for obj in (*fsx_manifests, _cache_record(spec, owner), lease):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    "example",
    ["bert-large-pretrain.yaml", "bert-claim.yaml", "aws-bert-script.yaml", "trn2-causal-lm.yaml"],
)
def test_every_pod_template_is_a_valid_pod(example: str) -> None:
    spec, owner = example_spec(example)
    for stage in STAGES:
        vcjob = builders.build_vcjob(spec, owner, stage)
        for i, template, _ in pods(vcjob):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    **template["metadata"],
                    "name": naming.pod_name(vcjob["metadata"]["name"], i),
                },
                "spec": template["spec"],
            }
            kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_strict_validation_would_catch_a_bad_manifest(fsx_manifests: tuple[Json, Json]) -> None:
    pv = copy.deepcopy(fsx_manifests[0])
    pv["spec"]["mountOptionz"] = ["flock"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pv, K8S_VERSION, strict=True)


# --- purity ---------------------------------------------------------------------------------------


def test_building_is_deterministic_and_leaves_the_spec_alone() -> None:
    spec, owner = example_spec("trn2-causal-lm.yaml")
    before = copy.deepcopy(spec)
    first = builders.build_vcjob(spec, owner, "train")
    first["spec"]["tasks"][0]["template"]["spec"]["tolerations"].append({"key": "x"})
    second = builders.build_vcjob(spec, owner, "train")
    assert spec == before
    assert second == builders.build_vcjob(spec, owner, "train")
    assert {"key": "x"} not in second["spec"]["tasks"][0]["template"]["spec"]["tolerations"]


def test_only_the_precompile_job_is_labelled_with_its_cache_entry(
    tutorial: tuple[TrainiumJobSpec, Owner], tutorial_jobs: dict[str, Json]
) -> None:
    """A running compile is found by this label even when its Lease was deleted."""
    spec, _ = tutorial
    entry = cache.identity(spec).record_name
    assert tutorial_jobs["precompile"]["metadata"]["labels"]["trainium.dev/cache-entry"] == entry
    assert "trainium.dev/cache-entry" not in tutorial_jobs["train"]["metadata"]["labels"]


# --- live metrics -------------------------------------------------------------------------------


def test_every_training_pod_declares_the_named_metrics_port_the_trainer_serves() -> None:
    from trainium_trainer import contract

    for _, _, container in pods(build("train", nodes=2)):
        assert container["ports"] == [
            {"name": contract.METRICS_PORT_NAME, "containerPort": contract.METRICS_PORT}
        ]
        assert env_of(container)[contract.ENV_METRICS_PORT] == str(contract.METRICS_PORT)


def test_precompile_pods_serve_no_metrics() -> None:
    from trainium_trainer import contract

    container = first_container(build("precompile"))
    assert not container.get("ports")
    assert contract.ENV_METRICS_PORT not in env_of(container)


# --- preflight ----------------------------------------------------------------------------------


def test_training_pods_check_their_node_first_with_the_trainers_devices() -> None:
    from trainium_trainer import contract

    for _, template, container in pods(build("train", nodes=2, instanceType="trn1.32xlarge")):
        (init,) = template["spec"]["initContainers"]
        assert init["name"] == contract.PREFLIGHT_CONTAINER
        assert init["image"] == container["image"]
        assert init["command"] == [
            "python3", "-m", "trainium_trainer", "preflight", "--neuron-devices", "16", "--efa", "8"
        ]  # fmt: skip
        assert init["resources"] == container["resources"]
        assert init["volumeMounts"] == [{"mountPath": "/dev/shm", "name": "dshm"}]
        assert init["env"][0]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_no_preflight_when_the_spec_says_so_nor_in_precompile() -> None:
    assert "initContainers" not in pods_spec(build("train", preflight=False))
    assert "initContainers" not in pods_spec(build("precompile"))


def pods_spec(vcjob: Json) -> Json:
    return next(pods(vcjob))[1]["spec"]


def test_17_bug5_a_failed_container_leaves_its_log_tail_as_its_termination_message() -> None:
    """FallbackToLogsOnError: the pod's watch event carries the evidence after Volcano's delete."""
    for stage in ("train", "precompile"):
        spec = pods_spec(build(stage))
        for container in (*spec["containers"], *spec.get("initContainers", ())):
            assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
