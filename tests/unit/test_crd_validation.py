"""What `kubectl apply` would reject, checked offline with the real CRD file (schema + CEL)."""

from __future__ import annotations

from typing import Any

import pytest
from support import CRD_FILE, job, job_without
from test_elastic_spec import ELASTIC_BAD, ELASTIC_CHANGED
from test_pod_rules import OWNED_ENV, POD_REFUSES, PREFIX_TOO_LONG

from trainium_operator.api import crd

Json = dict[str, Any]

#: (id, TrainiumJob, substring one of the errors must contain; it names the field).
BAD: list[tuple[str, Json, str]] = [
    ("missing-image", job_without("image"), "spec.image: required"),
    (
        "spares-past-the-gang-limit",
        job(nodes=1000, spares=25),
        "spec.nodes + spec.spares may not exceed 1,024",
    ),
    (
        "placement-required-without-layer",
        job(scheduling={"placement": {"mode": "Required"}}),
        "spec.scheduling.placement.networkNodeLayer is required with mode Required",
    ),
    (
        "placement-preferred-with-layer",
        job(scheduling={"placement": {"mode": "Preferred", "networkNodeLayer": 3}}),
        "spec.scheduling.placement.networkNodeLayer bounds a Required placement only",
    ),
    (
        "placement-layer-4",
        job(scheduling={"placement": {"networkNodeLayer": 4}}),
        "spec.scheduling.placement.networkNodeLayer: 4 is greater than the maximum of 3",
    ),
    (
        "placement-layer-0",
        job(scheduling={"placement": {"networkNodeLayer": 0}}),
        "spec.scheduling.placement.networkNodeLayer: 0 is less than the minimum of 1",
    ),
    (
        "placement-mode-hard",
        job(scheduling={"placement": {"mode": "hard", "networkNodeLayer": 3}}),
        "spec.scheduling.placement.mode: 'hard' is not one of",
    ),
    (
        "placement-required-on-trn3",
        job(instanceType="trn3.48xlarge", scheduling={"placement": {"networkNodeLayer": 3}}),
        "spec.scheduling.placement mode Required needs nodes EKS labels",
    ),
    ("missing-instance-type", job_without("instanceType"), "spec.instanceType: required"),
    ("missing-storage", job_without("storage"), "spec.storage: required"),
    (
        "unknown-instance-type",
        job(instanceType="p4d.24xlarge"),
        "spec.instanceType: 'p4d.24xlarge'",
    ),
    ("nodes-0", job(nodes=0), "spec.nodes: 0 is less than the minimum of 1"),
    ("nodes-1025", job(nodes=1025), "spec.nodes: 1025 is greater than the maximum of 1024"),
    ("nodes-string", job(nodes="2"), "spec.nodes: '2' is not of type 'integer'"),
    ("nproc-33-trn1.32xlarge", job(nprocPerNode=33), "spec.nprocPerNode may not exceed"),
    (
        "nproc-3-trn1.2xlarge",
        job(instanceType="trn1.2xlarge", nprocPerNode=3),
        "spec.nprocPerNode may not exceed the logical NeuronCores of spec.instanceType",
    ),
    ("nproc-65-trn2-lnc2", job(instanceType="trn2.48xlarge", nprocPerNode=65), "may not exceed"),
    (
        "nproc-129-trn2-lnc1",
        job(instanceType="trn2.48xlarge", lnc=1, nprocPerNode=129),
        "spec.nprocPerNode: 129",
    ),
    ("native-on-trn1", job(backend="native"), "spec.backend native (TorchNeuron) does not run"),
    ("backend-unknown", job(backend="cuda"), "spec.backend: 'cuda' is not one of"),
    ("lnc-2-on-trn1", job(lnc=2), "spec.lnc may only be 1 on trn1"),
    ("lnc-4", job(instanceType="trn2.48xlarge", lnc=4), "spec.lnc: 4 is greater than the maximum"),
    ("devices-unknown", job(devices="cdi"), "spec.devices: 'cdi' is not one of"),
    (
        "env-lnc",
        job(env=[{"name": "NEURON_LOGICAL_NC_CONFIG", "value": "1"}]),
        "spec.env may not set NEURON_LOGICAL_NC_CONFIG",
    ),
    ("module-and-script", job(module="m", script="s.py"), "spec.module and spec.script"),
    ("bad-module-name", job(module="my-module"), "spec.module: 'my-module' does not match"),
    ("script-with-space", job(script="train me.py"), "spec.script: 'train me.py' does not match"),
    ("args-not-strings", job(args=["--steps", 5]), "spec.args[1]: 5 is not of type 'string'"),
    ("env-without-name", job(env=[{"value": "1"}]), "spec.env[0].name: required"),
    ("env-bad-name", job(env=[{"name": "1BAD"}]), "spec.env[0].name: '1BAD' does not match"),
    (
        "env-neuron-cc-flags",
        job(env=[{"name": "NEURON_CC_FLAGS", "value": "-O1"}]),
        "spec.env may not set NEURON_CC_FLAGS",
    ),
    ("precision-fp16", job(precision="fp16"), "spec.precision: 'fp16' is not one of"),
    (
        "compiler-flags-cache-dir",
        job(compilerFlags=["--model-type=transformer", "--cache_dir=/tmp/x"]),
        "spec.compilerFlags may not contain --cache_dir",
    ),
    (
        "compiler-flag-with-space",
        job(compilerFlags=["--model-type transformer"]),
        "spec.compilerFlags[0]: '--model-type transformer' does not match",
    ),
    (
        "storage-claim-and-fsx",
        job(storage={"claimName": "c", "fsx": {"fileSystemId": "fs-0123456789abcdef0"}}),
        "spec.storage needs exactly one of claimName",
    ),
    ("storage-neither", job(storage={"mountPath": "/data"}), "spec.storage needs exactly one of"),
    (
        "bad-file-system-id",
        job(storage={"fsx": {"fileSystemId": "fsx-12345"}}),
        "spec.storage.fsx.fileSystemId: 'fsx-12345' does not match",
    ),
    (
        "fsx-without-id",
        job(storage={"fsx": {"dnsName": "x.example"}}),
        "spec.storage.fsx.fileSystemId: required",
    ),
    (
        "claim-name-uppercase",
        job(storage={"claimName": "FsxClaim"}),
        "spec.storage.claimName: 'FsxClaim' does not match",
    ),
    (
        "mount-path-relative",
        job(storage={"claimName": "c", "mountPath": "data"}),
        "spec.storage.mountPath: 'data' does not match",
    ),
    (
        "mount-path-dotdot",
        job(storage={"claimName": "c", "mountPath": "/data/../etc"}),
        "spec.storage.mountPath may not contain '..'",
    ),
    ("cache-name-slash", job(cache={"name": "a/b"}), "spec.cache.name: 'a/b' does not match"),
    (
        "cache-path-dotdot",
        job(cache={"path": "cache/../x"}),
        "spec.cache.path may not contain '..'",
    ),
    ("cache-path-absolute", job(cache={"path": "/abs"}), "spec.cache.path: '/abs' does not match"),
    (
        "precompile-policy-sometimes",
        job(precompile={"policy": "Sometimes"}),
        "spec.precompile.policy: 'Sometimes' is not one of",
    ),
    ("precompile-steps-0", job(precompile={"steps": 0}), "spec.precompile.steps: 0 is less than"),
    (
        "precompile-steps-arg-bad",
        job(precompile={"stepsArg": "steps"}),
        "spec.precompile.stepsArg: 'steps' does not match",
    ),
    (
        "queue-uppercase",
        job(scheduling={"queue": "Test"}),
        "spec.scheduling.queue: 'Test' does not match",
    ),
    (
        "neuron-resource-gpu",
        job(scheduling={"neuronResourceName": "aws.amazon.com/gpu"}),
        "spec.scheduling.neuronResourceName: 'aws.amazon.com/gpu' is not one of",
    ),
    (
        "toleration-operator-maybe",
        job(scheduling={"tolerations": [{"key": "k", "operator": "Maybe"}]}),
        "spec.scheduling.tolerations[0].operator: 'Maybe' is not one of",
    ),
    (
        "node-selector-not-string",
        job(scheduling={"nodeSelector": {"zone": 1}}),
        "spec.scheduling.nodeSelector.zone: 1 is not of type 'string'",
    ),
    (
        "cpu-lots",
        job(resources={"requests": {"cpu": "lots"}}),
        "spec.resources.requests.cpu: 'lots' does not match",
    ),
    (
        "resources-gpu-unknown",
        job(resources={"limits": {"nvidia.com/gpu": "1"}}),
        "spec.resources.limits.nvidia.com/gpu: unknown field",
    ),
    (
        "cpu-decimal",
        job(resources={"requests": {"cpu": "0.5"}}),
        "spec.resources.requests.cpu: '0.5' does not match",
    ),
    (
        "memory-decimal",
        job(resources={"limits": {"memory": "1.5Gi"}}),
        "spec.resources.limits.memory: '1.5Gi' does not match",
    ),
    (
        "cpu-request-above-limit",
        job(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}),
        "spec.resources.requests.cpu may not exceed spec.resources.limits.cpu",
    ),
    (
        "memory-request-above-limit",
        job(resources={"requests": {"memory": "500Gi"}, "limits": {"memory": "480Gi"}}),
        "spec.resources.requests.memory may not exceed spec.resources.limits.memory",
    ),
    (
        "memory-units-differ",
        job(resources={"requests": {"memory": "400Gi"}, "limits": {"memory": "480000Mi"}}),
        "written in the same unit",
    ),
    (
        "hugepages-request-without-limit",
        job(resources={"requests": {"memory": "1Gi", "hugepages-2Mi": "512Mi"}}),
        "spec.resources.requests.hugepages-2Mi needs spec.resources.limits.hugepages-2Mi",
    ),
    (
        "hugepages-request-not-limit",
        job(
            resources={
                "requests": {"memory": "4Gi", "hugepages-1Gi": "2Gi"},
                "limits": {"hugepages-1Gi": "1Gi"},
            }
        ),
        "spec.resources.requests.hugepages-1Gi needs spec.resources.limits.hugepages-1Gi",
    ),
    (
        "hugepages-without-cpu-or-memory",
        job(resources={"limits": {"hugepages-2Mi": "512Mi"}}),
        "spec.resources: huge pages need a cpu or memory",
    ),
    (
        "hugepages-2mi-odd-mebibytes",
        job(resources={"limits": {"memory": "1Gi", "hugepages-2Mi": "3Mi"}}),
        "spec.resources.limits.hugepages-2Mi: '3Mi' does not match",
    ),
    (
        "hugepages-1gi-in-mebibytes",
        job(resources={"limits": {"memory": "1Gi", "hugepages-1Gi": "512Mi"}}),
        "spec.resources.limits.hugepages-1Gi: '512Mi' does not match",
    ),
    (
        "max-retries-negative",
        job(runPolicy={"maxRetries": -1}),
        "spec.runPolicy.maxRetries: -1 is less than the minimum of 0",
    ),
    (
        "unknown-spec-field",
        job(gpus=4),
        "spec.gpus: unknown field",
    ),
    (
        "unknown-nested-field",
        job(storage={"claimName": "c", "readOnly": True}),
        "spec.storage.readOnly: unknown field",
    ),
]


#: Resources pods accept (ValidatePodTemplate), in the forms the CRD's core-CEL rules compare.
GOOD_RESOURCES: list[Json] = [
    {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}},
    {"requests": {"cpu": "1000m"}, "limits": {"cpu": "1"}},  # equal, in two units
    {"requests": {"cpu": "9"}, "limits": {"cpu": "10"}},  # 9 < 10 though "9" > "10" as text
    {"requests": {"cpu": "0"}, "limits": {"cpu": "5m"}},
    {"requests": {"cpu": "120", "memory": "400Gi"}, "limits": {"memory": "480Gi"}},
    {"requests": {"memory": "999"}, "limits": {"memory": "1000"}},
    {"limits": {"cpu": "2", "hugepages-2Mi": "1Gi"}},  # requests default to the limits
    {"requests": {"memory": "2Gi", "hugepages-2Mi": "512Mi"}, "limits": {"hugepages-2Mi": "512Mi"}},
    {"requests": {"memory": "8Gi"}, "limits": {"hugepages-1Gi": "2Gi", "hugepages-2Mi": "0"}},
    {"requests": {}, "limits": {}},
]


@pytest.mark.parametrize("resources", GOOD_RESOURCES, ids=lambda r: str(r))
def test_resources_pods_accept_are_valid(resources: Json) -> None:
    _, errors = crd.validate(job(resources=resources))
    assert errors == []


def test_every_cel_rule_of_the_crd_rejects_a_case_in_these_tables() -> None:
    def rules(schema: Json) -> list[Json]:
        found = list(schema.get("x-kubernetes-validations", []))
        for sub in schema.get("properties", {}).values():
            found += rules(sub)
        return found + (rules(schema["items"]) if "items" in schema else [])

    expected = [e for _, _, e in BAD] + [e for _, _, e in IMMUTABLE] + [SCRIPT_CHANGED]
    expected += [e for _, _, _, e in TRN2_IMMUTABLE]
    expected += [e for _, _, e in POD_REFUSES + OWNED_ENV] + [PREFIX_TOO_LONG]
    expected += [e for _, _, e in ELASTIC_BAD] + [e for _, _, _, e in ELASTIC_CHANGED]
    for rule in rules(crd.version_schema()):
        assert any(e in rule["message"] for e in expected), rule["message"]


def test_the_table_is_big_enough() -> None:
    assert len(BAD) >= 30
    assert len({case_id for case_id, _, _ in BAD}) == len(BAD)


def test_the_crd_under_test_is_the_repository_file() -> None:
    assert crd.crd_path().resolve() == CRD_FILE.resolve()


def test_minimal_job_is_valid() -> None:
    _, errors = crd.validate(job())
    assert errors == []


@pytest.mark.parametrize(
    ("obj", "expected"), [(o, e) for _, o, e in BAD], ids=[i for i, _, _ in BAD]
)
def test_bad_job_is_rejected_naming_the_field(obj: Json, expected: str) -> None:
    _, errors = crd.validate(obj)
    assert errors, "accepted, but the API server would reject it"
    assert any(expected in e for e in errors), errors


def test_a_misspelt_field_is_one_line_naming_the_field_meant() -> None:
    doc = job_without("image")
    doc["spec"]["imagee"] = "trainer:1"
    doc["spec"]["storage"]["claimNme"] = "c"
    del doc["spec"]["storage"]["claimName"]
    _, errors = crd.validate(doc)
    assert errors == [
        "spec.imagee: unknown field (did you mean spec.image?)",
        "spec.storage.claimNme: unknown field (did you mean spec.storage.claimName?)",
    ]


def test_an_unknown_field_like_no_other_has_no_guess() -> None:
    _, errors = crd.validate(job(zzz=1))
    assert errors == ["spec.zzz: unknown field"]


def test_schema_errors_are_all_reported_at_once() -> None:
    _, errors = crd.validate(job(nodes=0, precision="fp16", gpus=1))
    joined = "\n".join(errors)
    for field in ("spec.nodes", "spec.precision", "spec.gpus: unknown field"):
        assert field in joined


def test_minimal_job_gets_the_crd_defaults() -> None:
    defaulted, errors = crd.validate(job())
    assert errors == []
    spec = defaulted["spec"]
    assert spec["nodes"] == 1
    assert spec["precision"] == "bf16"
    assert spec["storage"]["mountPath"] == "/data"
    assert spec["cache"] == {"path": "neuron_cache"}
    assert spec["precompile"] == {"policy": "IfNotCached", "steps": 10, "stepsArg": "--max-steps"}
    assert spec["scheduling"]["queue"] == "default"
    assert spec["scheduling"]["neuronResourceName"] == "aws.amazon.com/neuron"
    assert spec["runPolicy"]["maxRetries"] == 3
    assert "nprocPerNode" not in spec  # derived from the instance type, never stored


def test_defaults_do_not_override_given_values() -> None:
    defaulted, errors = crd.validate(job(nodes=4, precompile={"policy": "Never"}))
    assert errors == []
    assert defaulted["spec"]["nodes"] == 4
    assert defaulted["spec"]["precompile"] == {
        "policy": "Never",
        "steps": 10,
        "stepsArg": "--max-steps",
    }


def test_validate_does_not_mutate_its_input() -> None:
    doc = job()
    crd.validate(doc)
    assert doc == job()


@pytest.mark.parametrize(
    ("nproc", "instance"),
    [
        (2, "trn1.2xlarge"),
        (32, "trn1.32xlarge"),
        (32, "trn1n.32xlarge"),
        (64, "trn2.48xlarge"),
        (64, "trn2u.48xlarge"),
        (64, "trn3.48xlarge"),
    ],
)
def test_nproc_up_to_the_neuron_cores_is_valid(nproc: int, instance: str) -> None:
    _, errors = crd.validate(job(instanceType=instance, nprocPerNode=nproc))
    assert errors == []


# --- transitions: graph-defining fields are immutable, runPolicy is not -----------------------

OLD = job(args=["bert-pretrain"], runPolicy={"maxRetries": 3})

#: (id, new object, substring of the expected error).
IMMUTABLE: list[tuple[str, Json, str]] = [
    (
        "image",
        job(image="registry.example/trainer:2", args=["bert-pretrain"]),
        "spec.image is immutable",
    ),
    ("nodes", job(nodes=2, args=["bert-pretrain"]), "spec.nodes is immutable"),
    ("spares", job(spares=1, args=["bert-pretrain"]), "spec.spares is immutable"),
    (
        "instance-type",
        job(instanceType="trn1n.32xlarge", args=["bert-pretrain"]),
        "spec.instanceType is immutable",
    ),
    ("args", job(args=["causal-lm"]), "spec.args is immutable"),
    ("args-removed", job(), "spec.args"),
    (
        "storage",
        job(storage={"claimName": "other-claim"}, args=["bert-pretrain"]),
        "spec.storage is immutable",
    ),
    ("nproc-added", job(nprocPerNode=16, args=["bert-pretrain"]), "spec.nprocPerNode"),
    ("precision", job(precision="fp32", args=["bert-pretrain"]), "spec.precision is immutable"),
    ("module-added", job(module="my_trainer", args=["bert-pretrain"]), "spec.module"),
    (
        "compiler-flags-added",
        job(compilerFlags=["-O1"], args=["bert-pretrain"]),
        "spec.compilerFlags",
    ),
    (
        "precompile-policy",
        job(args=["bert-pretrain"], precompile={"policy": "Never"}),
        "spec.precompile is immutable",
    ),
    (
        "cache-path",
        job(args=["bert-pretrain"], cache={"path": "elsewhere"}),
        "spec.cache is immutable",
    ),
]


def trn2(**spec: Any) -> Json:
    return job(instanceType="trn2.48xlarge", args=["causal-lm"], **spec)


#: (id, old, new, message): the backend, the LNC and how devices are requested stay as created.
TRN2_IMMUTABLE: list[tuple[str, Json, Json, str]] = [
    ("backend", trn2(backend="xla"), trn2(backend="native"), "spec.backend is immutable"),
    ("backend-added", trn2(), trn2(backend="native"), "spec.backend"),
    ("lnc", trn2(lnc=1), trn2(lnc=2), "spec.lnc is immutable"),
    ("lnc-added", trn2(), trn2(lnc=2), "spec.lnc"),
    ("devices", trn2(), trn2(devices="dra"), "spec.devices is immutable"),
]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [(o, n, e) for _, o, n, e in TRN2_IMMUTABLE],
    ids=[i for i, _, _, _ in TRN2_IMMUTABLE],
)
def test_backend_lnc_and_devices_are_immutable(old: Json, new: Json, expected: str) -> None:
    assert crd.validate(old)[1] == []
    _, errors = crd.validate(new, old=old)
    assert any(expected in e for e in errors), errors


@pytest.mark.parametrize(
    ("new", "expected"), [(n, e) for _, n, e in IMMUTABLE], ids=[i for i, _, _ in IMMUTABLE]
)
def test_graph_defining_change_is_rejected(new: Json, expected: str) -> None:
    _, errors = crd.validate(new, old=OLD)
    assert any(expected in e for e in errors), errors


@pytest.mark.parametrize(
    "new",
    [
        job(args=["bert-pretrain"], runPolicy={"maxRetries": 7}),
        job(args=["bert-pretrain"], runPolicy={"maxRetries": 3, "suspend": True}),
        job(args=["bert-pretrain"], scheduling={"queue": "other"}),
        job(args=["bert-pretrain"]),
        job(args=["bert-pretrain"], nodes=1),  # explicit value equal to the default
    ],
    ids=[
        "maxRetries",
        "suspend",
        "queue",
        "unchanged",
        "default-made-explicit",
    ],
)
def test_allowed_updates(new: Json) -> None:
    _, errors = crd.validate(new, old=OLD)
    assert errors == []


SCRIPT_CHANGED = "spec.script is immutable"


def test_changing_the_script_is_rejected() -> None:
    _, errors = crd.validate(job(script="b.py"), old=job(script="a.py"))
    assert any(SCRIPT_CHANGED in e for e in errors), errors


def test_transition_rules_do_not_run_on_create() -> None:
    # The same object that fails as an update from OLD is fine when created.
    _, errors = crd.validate(job(nprocPerNode=16))
    assert errors == []


def test_immutable_fields_come_from_the_crd_and_digests_see_a_change() -> None:
    from trainium_operator.api import crd

    fields = crd.immutable_fields()
    assert {"image", "nodes", "args", "storage", "instanceType"} <= set(fields)
    assert "runPolicy" not in fields
    body = {"spec": {"image": "i", "instanceType": "trn1.32xlarge", "storage": {"claimName": "c"}}}
    same = crd.spec_digests({"spec": {**body["spec"], "nodes": 1}})  # the default, written out
    assert crd.spec_digests(body) == same
    moved = crd.spec_digests({"spec": {**body["spec"], "nodes": 4}})
    assert [f for f in fields if moved[f] != same[f]] == ["nodes"]
