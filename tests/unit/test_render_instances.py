"""`trainium render -f` of the trn2 and trn3 examples asks for what AWS's pages say those have.

Two sources checked against each other: the instance table (api/instances.py) and the numbers as
AWS's pages give them, written out here by hand, so a wrong table entry cannot pass by itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from support import EXAMPLES

from trainium_operator import cli
from trainium_operator.api.instances import EFA_RESOURCE, INSTANCE_TYPES, LNC_ENV
from trainium_operator.manifests import dra
from trainium_trainer import contract

Json = dict[str, Any]

#: AWS Neuron, "Amazon EC2 Trn2 Architecture" / "Trn3 Architecture" and "Logical NeuronCore
#: configuration": chips per instance, physical NeuronCores per chip, default LNC; device memory
#: per chip (GiB). EFA interfaces: trn2's 16 is unverified (instances.py), trn3's unpublished.
AWS = {
    "trn2.48xlarge": {"chips": 16, "cores_per_chip": 8, "lnc": 2, "hbm": 96, "efa": 16},
    "trn2u.48xlarge": {"chips": 16, "cores_per_chip": 8, "lnc": 2, "hbm": 96, "efa": 16},
    "trn3.48xlarge": {"chips": 16, "cores_per_chip": 8, "lnc": 2, "hbm": 144, "efa": None},
}


@pytest.mark.parametrize("name", list(AWS))
def test_the_table_has_aws_numbers(name: str) -> None:
    t, aws = INSTANCE_TYPES[name], AWS[name]
    assert t.neuron_devices == aws["chips"]
    assert t.physical_cores == aws["chips"] * aws["cores_per_chip"]
    assert t.family.default_lnc == aws["lnc"]
    assert t.neuron_cores == t.physical_cores // aws["lnc"]
    assert t.logical_cores(1) == t.physical_cores
    assert t.device_memory_gib == aws["chips"] * aws["hbm"]
    assert t.efa_interfaces == aws["efa"]
    assert t.family.default_backend == contract.BACKEND_NATIVE
    assert t.family.lncs == (1, 2)


def test_trn1_stays_on_xla_at_lnc_1() -> None:
    for name in ("trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge"):
        family = INSTANCE_TYPES[name].family
        assert (family.backends, family.lncs) == ((contract.BACKEND_XLA,), (1,))


def render(tmp_path: Path, capsys: pytest.CaptureFixture[str], example: str) -> list[Json]:
    """What `trainium render -f examples/<example>` prints, as objects."""
    assert cli.main(["render", "-f", str(EXAMPLES / example)]) == 0
    out, _ = capsys.readouterr()
    return [d for d in yaml.safe_load_all(out) if d]


def pods(vcjob: Json) -> list[Json]:
    """The pod spec of every task (one task per node)."""
    return [task["template"]["spec"] for task in vcjob["spec"]["tasks"]]


def env(c: Json) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in c["env"]}


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def stages(docs: list[Json]) -> dict[str, Json]:
    return {d["metadata"]["labels"]["trainium.dev/stage"]: d for d in docs if d["kind"] == "Job"}


#: (example, instance type, LNC, backend, devices): the trn2 and trn3 examples.
EXAMPLE_CASES = [
    ("trn2-native-causal-lm.yaml", "trn2.48xlarge", 2, "native", "plugin"),
    ("trn2-causal-lm.yaml", "trn2.48xlarge", 2, "xla", "plugin"),
    ("trn3-native-dra.yaml", "trn3.48xlarge", 1, "native", "dra"),
]


@pytest.mark.parametrize(("example", "name", "lnc", "backend", "devices"), EXAMPLE_CASES)
def test_render_asks_for_the_instances_cores_lnc_and_efa(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    example: str,
    name: str,
    lnc: int,
    backend: str,
    devices: str,
) -> None:
    docs = render(tmp_path, capsys, example)
    assert set(stages(docs)) == {"precompile", "train"}
    for stage, vcjob in stages(docs).items():
        for pod in pods(vcjob):
            check_pod(pod, stage, name, lnc, backend, devices)


def check_pod(pod: Json, stage: str, name: str, lnc: int, backend: str, devices: str) -> None:
    aws = AWS[name]
    c = pod["containers"][0]
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == name
    assert flag(c["command"], "--nproc_per_node") == str(
        aws["chips"] * aws["cores_per_chip"] // lnc
    )
    variables = env(c)
    assert (variables[LNC_ENV], variables[contract.ENV_BACKEND]) == (str(lnc), backend)
    limits = c["resources"].get("limits") or {}
    efa = limits.get(EFA_RESOURCE)
    assert (None if efa is None else int(efa)) == aws["efa"]
    assert ("FI_PROVIDER" in variables) == bool(aws["efa"])
    if devices == "plugin":
        assert int(limits["aws.amazon.com/neuron"]) == aws["chips"]
        assert "resourceClaims" not in pod
    else:
        assert not any(k.startswith("aws.amazon.com/") for k in limits)
        assert c["resources"]["claims"] == [{"name": dra.CLAIM}]
        assert pod["resourceClaims"][0]["name"] == dra.CLAIM
    precompiles_with_xla = c["command"][0] == "neuron_parallel_compile"
    assert precompiles_with_xla == (stage == "precompile" and backend == "xla")


def test_the_dra_example_claims_every_chip_at_its_lnc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = render(tmp_path, capsys, "trn3-native-dra.yaml")
    (template,) = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    assert template["apiVersion"] == "resource.k8s.io/v1"
    devices = template["spec"]["spec"]["devices"]
    (request,) = devices["requests"]
    assert request["exactly"]["deviceClassName"] == "neuron.aws.com"
    assert request["exactly"]["count"] == AWS["trn3.48xlarge"]["chips"]
    (config,) = devices["config"]
    assert config["opaque"]["parameters"]["logicalNeuronCore"] == 1
    for vcjob in stages(docs).values():
        for pod in pods(vcjob):
            (claim,) = pod["resourceClaims"]
            assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
    assert docs[0] is template  # created before the gangs that claim from it
