"""Every example manifest is a valid TrainiumJob; the AWS tutorial example says what it means."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support import EXAMPLES, example_spec

from trainium_operator.api import crd

#: Examples that are not TrainiumJobs (they go with one).
COMPANIONS = {"tensorboard.yaml", "kueue-setup.yaml"}
EXAMPLE_FILES = sorted(p for p in EXAMPLES.glob("*.yaml") if p.name not in COMPANIONS)
REQUIRED = {
    "bert-large-pretrain.yaml",
    "bert-claim.yaml",
    "aws-bert-script.yaml",
    "trn2-causal-lm.yaml",
    "trn2-native-causal-lm.yaml",
    "trn3-native-dra.yaml",
}


def test_the_documented_examples_exist() -> None:
    assert {p.name for p in EXAMPLE_FILES} >= REQUIRED


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_validates_against_the_crd(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert docs, f"{path.name} holds no document"
    for doc in docs:
        assert doc["apiVersion"] == f"{crd.GROUP}/{crd.VERSION}"
        assert doc["kind"] == crd.KIND
        assert doc["metadata"]["name"]
        _, errors = crd.validate(doc)
        assert errors == [], f"{path.name}: {errors}"


def test_tutorial_example_matches_the_aws_tutorial() -> None:
    spec, _ = example_spec("bert-large-pretrain.yaml")
    assert (spec.instanceType, spec.nodes, spec.procs_per_node) == ("trn1.32xlarge", 2, 32)
    assert spec.storage.fsx is not None
    assert spec.storage.fsx.dnsName and spec.storage.fsx.mountName
    assert spec.cache.name == "bert-large"
    assert spec.scheduling.queue == "test"
    assert spec.args[0] == "bert-pretrain"
    flags = dict(zip(spec.args[1::2], spec.args[2::2], strict=True))
    assert flags["--data-dir"] == "/data/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128"
    assert (flags["--batch-size"], flags["--grad-accum-steps"]) == ("16", "32")
    assert flags["--model-config"] == "large"


def test_aws_script_example_uses_the_scripts_own_flags() -> None:
    spec, _ = example_spec("aws-bert-script.yaml")
    assert spec.script == "dp_bert_large_hf_pretrain_hdf5.py"
    assert spec.entry_module is None
    assert spec.precompile.stepsArg == "--steps_this_run"
    assert list(spec.args) == [
        "--batch_size", "16", "--grad_accum_usteps", "32",
        "--data_dir", "/data/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128",
        "--output_dir", "/data/output",
    ]  # fmt: skip


def test_claim_example_tolerates_the_neuron_taint() -> None:
    spec, _ = example_spec("bert-claim.yaml")
    assert spec.storage.claimName == "fsx-claim"
    assert (spec.instanceType, spec.nodes) == ("trn1.32xlarge", 1)
    assert {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"} in (
        spec.scheduling.tolerations
    )


def test_tensorboard_serves_the_tutorial_jobs_events_from_its_claim() -> None:
    import kubernetes_validate

    from trainium_operator.api import naming
    from trainium_operator.manifests import appdef, builders
    from trainium_trainer.metrics import TENSORBOARD_DIR

    pod = yaml.safe_load((EXAMPLES / "tensorboard.yaml").read_text(encoding="utf-8"))
    kubernetes_validate.validate(pod, "1.33.0", strict=True)
    spec, owner = example_spec("bert-large-pretrain.yaml")
    (volume,) = pod["spec"]["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == builders.claim_for(spec, owner)
    assert builders.claim_for(spec, owner) == naming.claim_name(owner.name)
    (container,) = pod["spec"]["containers"]
    assert container["image"] == spec.image
    ctx = builders.stage_context(spec, owner, appdef.TRAIN)
    logdir = container["command"][container["command"].index("--logdir") + 1]
    assert logdir == f"{appdef.output_dir(spec, ctx)}/{TENSORBOARD_DIR}"
    assert container["volumeMounts"][0]["mountPath"] == spec.storage.mountPath


def test_the_kueue_setup_has_what_the_kueue_example_names() -> None:
    """examples/kueue-setup.yaml holds the namespace, LocalQueue and WorkloadPriorityClass that
    kueue-bert.yaml's labels name, a flavor of its instance type, and a ClusterQueue covering
    every resource its pods request (issue 43, item 4: README gave no such objects)."""
    from trainium_operator.local import render

    setup = list(yaml.safe_load_all((EXAMPLES / "kueue-setup.yaml").read_text()))
    by_kind = {d["kind"]: d for d in setup}
    job = yaml.safe_load((EXAMPLES / "kueue-bert.yaml").read_text())
    labels, ns = job["metadata"]["labels"], job["metadata"]["namespace"]
    assert by_kind["Namespace"]["metadata"]["name"] == ns
    local = by_kind["LocalQueue"]
    assert (local["metadata"]["name"], local["metadata"]["namespace"]) == (
        labels["kueue.x-k8s.io/queue-name"], ns)  # fmt: skip
    assert (
        by_kind["WorkloadPriorityClass"]["metadata"]["name"]
        == (labels["kueue.x-k8s.io/priority-class"])
    )
    cq, flavor = by_kind["ClusterQueue"], by_kind["ResourceFlavor"]
    assert local["spec"]["clusterQueue"] == cq["metadata"]["name"]
    instance = flavor["spec"]["nodeLabels"]["node.kubernetes.io/instance-type"]
    assert instance == job["spec"]["instanceType"]
    [group] = cq["spec"]["resourceGroups"]
    assert [f["name"] for f in group["flavors"]] == [flavor["metadata"]["name"]]
    shown = render.render_job(job).manifests  # the Workloads' pod sets: what Kueue counts
    requested = {
        name
        for m in shown
        if m["kind"] == "Workload"
        for pod_set in m["spec"]["podSets"]
        for c in pod_set["template"]["spec"]["containers"]
        + pod_set["template"]["spec"].get("initContainers", [])
        for part in ("requests", "limits")
        for name in (c.get("resources") or {}).get(part) or {}
    }
    assert [m["kind"] for m in shown].count("Workload") == 2
    assert requested and requested <= set(group["coveredResources"]), requested
