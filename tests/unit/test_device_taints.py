"""Issue 42, DRA device taints: a gang pod whose claim holds a NoSchedule/NoExecute-tainted
device puts its node out as a NeuronHealth error does; the claim template tolerates a NoExecute
taint for a bounded time, so the operator's SIGTERM checkpoint lands before the eviction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from trainium_operator.api.spec import parse
from trainium_operator.cluster import devicetaints as io
from trainium_operator.cluster import nodehealth
from trainium_operator.domain import devicetaints, health
from trainium_operator.manifests import builders, dra
from trainium_operator.manifests.ownership import ANNOTATION_OWNER_UID, LABEL_MANAGED_BY, Owner

OWNER = Owner("bert", "team-a", "uid-1")
HARD = {"key": "neuron.aws.com/unhealthy", "value": "hbm", "effect": "NoExecute"}


def claim(pod: str, node: str, *devices: str, ns: str = "team-a") -> dict[str, Any]:
    results = [{"request": "neurons", "driver": dra.DRIVER, "pool": node, "device": d}
               for d in devices]  # fmt: skip
    return {
        "metadata": {"namespace": ns, "name": f"{pod}-neuron-x", "resourceVersion": "1",
                     "annotations": {ANNOTATION_OWNER_UID: "uid-1"},
                     "ownerReferences": [{"kind": "Pod", "name": pod, "controller": True,
                                          "uid": "p"}]},
        "status": {"allocation": {"devices": {"results": results}}},
    }  # fmt: skip


def piece(node: str, taints: dict[str, list[dict[str, str]]] | None = None) -> dict[str, Any]:
    devices = [{"name": f"neuron-{i}", "attributes": {"x": {"int": 1}},
                "taints": (taints or {}).get(f"neuron-{i}", [])} for i in range(2)]  # fmt: skip
    return {
        "metadata": {"name": f"{node}-slice", "resourceVersion": "1"},
        "spec": {"driver": dra.DRIVER, "pool": {"name": node}, "nodeName": node,
                 "devices": devices},
    }  # fmt: skip


PODS = [health.GangPod("bert-train-node-0", "ip-1"), health.GangPod("bert-train-node-1", "ip-2")]
CLAIMS = [claim("bert-train-node-0", "ip-1", "neuron-0", "neuron-1"),
          claim("bert-train-node-1", "ip-2", "neuron-0", "neuron-1")]  # fmt: skip


def test_a_hard_taint_on_a_device_a_gang_pods_claim_holds_names_its_node() -> None:
    slices = [piece("ip-1"), piece("ip-2", {"neuron-1": [HARD]})]
    said = devicetaints.verdicts(PODS, CLAIMS, slices)
    assert list(said) == ["ip-2"]
    assert (
        "neuron.aws.com/ip-2/neuron-1 is tainted neuron.aws.com/unhealthy=hbm:NoExecute"
        in (said["ip-2"])
    )
    assert "bert-train-node-1" in said["ip-2"]


def test_soft_taints_untainted_slices_and_others_claims_say_nothing() -> None:
    soft = {"key": "k", "effect": "PreferNoSchedule"}
    assert devicetaints.verdicts(PODS, CLAIMS, [piece("ip-1", {"neuron-0": [soft]})]) == {}
    other = [claim("someone-else", "ip-1", "neuron-0")]
    assert devicetaints.verdicts(PODS, other, [piece("ip-1", {"neuron-0": [HARD]})]) == {}
    assert devicetaints.verdicts([], CLAIMS, [piece("ip-1", {"neuron-0": [HARD]})]) == {}


def test_the_watches_keep_only_what_the_verdict_reads() -> None:
    full = claim("bert-train-node-0", "ip-1", "neuron-0")
    full["spec"] = {"devices": {"requests": [{"name": "neurons"}]}}
    slim = devicetaints.slim_claim(full)
    assert "spec" not in slim and devicetaints.claim_pod(slim) == "bert-train-node-0"
    assert health.allocated(slim) == health.allocated(full)
    cut = devicetaints.slim_slice(piece("ip-1", {"neuron-0": [HARD]}))
    assert "attributes" not in cut["spec"]["devices"][0] and devicetaints.hard(cut)
    assert not devicetaints.hard(devicetaints.slim_slice(piece("ip-1")))


def test_the_pass_takes_a_tainted_node_out_as_an_unhealthy_one() -> None:
    pods = {("job", "uid-1"): [
        {"namespace": "team-a", "name": p.name, "uid": p.name, "node": p.node, "phase": "Running"}
        for p in PODS
    ]}  # fmt: skip
    watches = io.DeviceWatches(lambda _uid: None, lambda _node: None, start=False)
    for body in CLAIMS:
        watches.claims.put(body)
    watches.slices.put(piece("ip-2", {"neuron-0": [HARD]}))

    def devices(on: Any) -> dict[str, str]:
        return watches.verdicts("team-a", on)

    assert nodehealth.look(OWNER, ({}, pods), "bert-train", (), devices) is None  # not listed
    watches.claims.listed = watches.slices.listed = True
    found = nodehealth.look(OWNER, ({}, pods), "bert-train", (), devices)
    assert found is not None and found.node == "ip-2" and found.reason == health.REASON
    assert "tainted" in found.message
    assert nodehealth.look(OWNER, ({}, pods), "bert-train", ("ip-2",), devices) is None
    assert watches.verdicts("team-b", PODS) == {}  # another namespace's claims are not read


def test_a_tainted_slice_wakes_the_jobs_on_its_node_and_those_holding_its_pool() -> None:
    woken: list[str] = []
    nodes: list[str] = []
    watches = io.DeviceWatches(woken.append, nodes.append, start=False)
    watches.claims.put(CLAIMS[1])
    watches.need()
    assert len(watches.watches) == 2 and not any(w._thread.is_alive() for w in watches.watches)
    slices = watches.watches[1]
    slices.take({"type": "ADDED", "object": piece("ip-1")})
    assert woken == [] and nodes == []  # an untainted slice wakes nobody
    slices.take({"type": "MODIFIED", "object": piece("ip-2", {"neuron-0": [HARD]})})
    assert nodes == ["ip-2"] and woken == ["uid-1"]
    watches.watches[0].take({"type": "MODIFIED", "object": CLAIMS[0]})
    assert woken == ["uid-1", "uid-1"]  # a claim's change wakes its job


def test_an_unserved_resource_api_is_quiet_and_trusted_absent() -> None:
    watches = io.DeviceWatches(lambda _uid: None, lambda _node: None, start=False)
    watches.need()
    claims = watches.watches[0]

    def unserved() -> tuple[list[Any], str]:
        raise ApiException(status=404, reason="Not Found")

    claims._list = unserved
    assert claims.relist() is None and not watches.claims.listed
    watches.stop()
    assert watches._served_later(3600) is False  # stopped: no wait


def test_the_claim_template_tolerates_a_no_execute_taint_for_a_bounded_time() -> None:
    body = {"apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob",
            "metadata": {"name": "bert", "namespace": "team-a"},
            "spec": {"image": "i", "instanceType": "trn2.48xlarge", "devices": "dra",
                     "storage": {"claimName": "c"}}}  # fmt: skip
    template = builders.build_claim_template(parse(body), OWNER)
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    (toleration,) = request["exactly"]["tolerations"]
    assert toleration == {"operator": "Exists", "effect": "NoExecute",
                          "tolerationSeconds": dra.TOLERATION_SECONDS}  # fmt: skip
    assert dra.TOLERATION_SECONDS > dra.POD_GRACE_SECONDS  # the checkpoint's grace and a margin
    claims = template["spec"]["metadata"]  # what each generated claim carries: ours to watch
    assert claims["labels"][LABEL_MANAGED_BY] == template["metadata"]["labels"][LABEL_MANAGED_BY]
    assert claims["annotations"][ANNOTATION_OWNER_UID] == "uid-1"
    assert (
        io.SELECTORS["resourceclaims"][0]
        == f"{LABEL_MANAGED_BY}={claims['labels'][LABEL_MANAGED_BY]}"
    )


def test_readme_and_kubectl_explain_say_the_tolerations_seconds() -> None:
    """One source (dra.TOLERATION_SECONDS): what README and the CRD's description say of it."""
    root = Path(__file__).resolve().parents[2]
    readme = " ".join((root / "README.md").read_text().split())
    seconds, grace, reaction = dra.TOLERATION_SECONDS, dra.POD_GRACE_SECONDS, dra.REACTION_SECONDS
    toleration = f"{{operator: Exists, effect: NoExecute, tolerationSeconds: {seconds}}}"
    assert f"`exactly.tolerations: [{toleration}]`" in readme
    assert f"tolerates every `NoExecute` device taint for {seconds} seconds" in readme
    assert f"the pods' {grace}-second termination grace plus {reaction}" in readme
    crd = " ".join((root / "crds" / "trainiumjobs.trainium.dev.yaml").read_text().split())
    said = f"tolerates a NoExecute device taint for {seconds} seconds (the pods' {grace} s grace"
    assert f"{said} and {reaction} s for the operator)" in crd
