"""Child names: DNS labels within 63 characters for every valid TrainiumJob name, deterministic."""

from __future__ import annotations

import random
import re
import string

import pytest

from trainium_operator.api import naming

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_NODES = 1024
STAGES = ("precompile", "train")


def _subdomain(rng: random.Random, length: int) -> str:
    """A random valid object name (DNS-1123 subdomain) of exactly length characters."""
    labels, left = [], length
    while left > 0:
        size = min(left, rng.randint(1, 63))
        if left - size == 1:  # a 1-char remainder cannot follow a dot
            size = max(1, size - 1)
        inner = "".join(
            rng.choice(string.ascii_lowercase + string.digits + "-") for _ in range(size)
        )
        ends = string.ascii_lowercase + string.digits
        label = rng.choice(ends) + inner[1:-1] + rng.choice(ends) if size > 1 else rng.choice(ends)
        labels.append(label)
        left -= size + 1
    name = ".".join(labels)
    assert len(name) == length, name
    return name


def _job_names() -> list[str]:
    rng = random.Random(20240601)  # fixed seed: the same names on every run
    fixed = ["a", "bert", "bert-large-pretrain", "my.job", "a.b.c", "1job", "x" * 253]
    fixed += ["a" * n for n in (40, 41, 47, 48, 52, 53, 63, 64)]
    return fixed + [_subdomain(rng, n) for n in (1, 2, 30, 52, 53, 63, 64, 100, 200, 252, 253)]


JOB_NAMES = _job_names()


def _is_label(name: str) -> bool:
    return len(name) <= naming.DNS_LABEL_MAX and bool(DNS_LABEL.match(name))


@pytest.mark.parametrize("job", JOB_NAMES)
@pytest.mark.parametrize("stage", STAGES)
def test_vcjob_and_every_pod_name_is_a_dns_label(job: str, stage: str) -> None:
    vcjob = naming.vcjob_name(job, stage)
    assert _is_label(vcjob), vcjob
    for replica in range(MAX_NODES):
        pod = naming.pod_name(vcjob, replica)
        assert _is_label(pod), pod
    assert naming.pod_name(vcjob, 1023) == f"{vcjob}-node-1023"


@pytest.mark.parametrize("job", JOB_NAMES)
def test_claim_and_volume_names_are_dns_labels(job: str) -> None:
    assert _is_label(naming.claim_name(job))
    assert _is_label(naming.volume_name("a-long-team-namespace-name", job))


def test_short_names_are_kept_readable() -> None:
    assert naming.vcjob_name("bert", "train") == "bert-train"
    assert naming.vcjob_name("bert", "precompile") == "bert-compile"
    assert naming.claim_name("bert") == "bert-fsx"
    assert naming.TASK == "node" and naming.pod_name("bert-train", 3) == "bert-train-node-3"


@pytest.mark.parametrize("job", JOB_NAMES)
def test_names_are_deterministic(job: str) -> None:
    assert naming.vcjob_name(job, "train") == naming.vcjob_name(job, "train")
    assert naming.claim_name(job) == naming.claim_name(job)


def test_stages_never_share_a_name() -> None:
    for job in JOB_NAMES:
        assert naming.vcjob_name(job, "precompile") != naming.vcjob_name(job, "train")


def test_long_names_with_a_common_prefix_do_not_collide() -> None:
    prefix = "p" * 60
    a, b = prefix + "-alpha", prefix + "-beta"
    for stage in STAGES:
        assert naming.vcjob_name(a, stage) != naming.vcjob_name(b, stage)
    assert naming.claim_name(a) != naming.claim_name(b)
    assert naming.volume_name("ns", a) != naming.volume_name("ns", b)


def test_dotted_and_dashed_names_do_not_collide() -> None:
    assert naming.vcjob_name("my.job", "train") != naming.vcjob_name("my-job", "train")


def test_all_generated_names_are_distinct() -> None:
    names = [naming.vcjob_name(j, "train") for j in JOB_NAMES]
    assert len(set(names)) == len(set(JOB_NAMES))


def test_volume_name_includes_the_namespace() -> None:
    assert naming.volume_name("team-a", "bert") == "team-a-bert-fsx"
    assert naming.volume_name("team-a", "bert") != naming.volume_name("team-b", "bert")
    long_job = "j" * 80
    assert naming.volume_name("team-a", long_job) != naming.volume_name("team-b", long_job)


def test_rank0_host_is_pod_zero_under_the_job_service() -> None:
    vcjob = naming.vcjob_name("bert", "train")
    assert naming.rank0_host(vcjob) == "bert-train-node-0.bert-train"


NODES = (0, 1, 9, 10, 127, 128, 1023)


@pytest.mark.parametrize("job", JOB_NAMES)
def test_a_pod_name_gives_back_its_gang_and_node(job: str) -> None:
    """node_index and gang_of are pod_name's inverse, for gangs made before the one task too."""
    gangs = [naming.vcjob_name(job, s) for s in STAGES]
    gangs += [naming.vcjob_name(job, "precompile", 8), naming.successor(job, "uid-1234")]
    for gang in gangs:
        for node in NODES:
            for pod in (naming.pod_name(gang, node), f"{gang}-node-{node}-0"):
                assert naming.node_index(pod) == node, pod
                assert naming.node_index(pod, gang) == node, pod
                assert naming.gang_of(pod) == gang, pod
    assert naming.node_index(f"{gangs[0]}-node-3", "another-train") is None
    assert naming.node_index("coredns-5d78c9869d-abcde") is None
    assert naming.gang_of("coredns-5d78c9869d-abcde") == ""


def test_the_builders_pods_are_named_as_naming_says() -> None:
    """Volcano names pod i of a task `<job>-<task>-<i>` (helpers.MakePodName): the builders' one
    task gives the names pod_name makes, so every reader of a name agrees with the writer."""
    from support import node_pods, spec_of

    from trainium_operator.manifests import builders
    from trainium_operator.manifests.ownership import Owner

    owner = Owner("bert", "default", "uid-1")
    for stage in STAGES:
        vcjob = builders.build_vcjob(spec_of(nodes=12), owner, stage)
        name = vcjob["metadata"]["name"]
        (task,) = vcjob["spec"]["tasks"]
        for node in range(task["replicas"]):
            pod = f"{name}-{task['name']}-{node}"  # Volcano's PodNameFmt "%s-%s-%d"
            assert pod == naming.pod_name(name, node) and naming.node_index(pod) == node
        assert [p["metadata"]["name"] for _, p in node_pods(vcjob)][-1] == f"{name}-node-11"


def test_no_other_module_parses_or_builds_a_pod_name() -> None:
    """One source: only naming.py spells `-node-` (the role between a gang and a node index)."""
    from support import REPO

    for path in sorted((REPO / "operator" / "trainium_operator").rglob("*.py")):
        if path.name == "naming.py":
            continue
        text = path.read_text("utf-8")
        assert "-node-" not in text.replace("network-node-layer", ""), path
        assert "-{naming.ROLE}" not in text and "naming.ROLE}-" not in text, path


def test_vcjob_names_start_with_a_letter_for_volcano_services() -> None:
    # Volcano's svc plugin creates a Service named after the job: DNS-1035, letter first.
    assert naming.vcjob_name("1job", "train") == "tj-1job-train"
    assert naming.vcjob_name("job1", "train") == "job1-train"
    assert naming.vcjob_name("9" * 253, "precompile")[0].isalpha()


# --- label values: 63 characters at most, for TrainiumJob names of up to 253 ------------------

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@pytest.mark.parametrize("job", JOB_NAMES)
def test_label_values_are_valid_for_every_job_name(job: str) -> None:
    value = naming.label_value(job)
    assert len(value) <= naming.LABEL_VALUE_MAX and LABEL_VALUE.match(value), value


@pytest.mark.parametrize("job", [n for n in JOB_NAMES if len(n) <= 63])
def test_names_that_fit_are_label_values_unchanged(job: str) -> None:
    # Selectors written against existing jobs keep matching.
    assert naming.label_value(job) == job


def test_long_names_get_distinct_label_values() -> None:
    prefix = "p" * 60
    values = {naming.label_value(prefix + s) for s in ("-alpha", "-beta", ".gamma", "-alpha1")}
    assert len(values) == 4
    long_names = {n for n in JOB_NAMES if len(n) > 63}
    assert len({naming.label_value(n) for n in long_names}) == len(long_names)


def test_a_long_label_value_keeps_the_start_of_the_name() -> None:
    value = naming.label_value("bert-large-" + "x" * 100)
    assert value.startswith("bert-large-xxx") and value == naming.label_value(
        "bert-large-" + "x" * 100
    )
