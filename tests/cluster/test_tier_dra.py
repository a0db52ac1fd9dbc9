"""spec.devices dra on the real API server: the ResourceClaimTemplate and the Volcano jobs that
claim from it are accepted (resource.k8s.io/v1 served; Volcano's webhooks admit pods with claims).

The tier has no Neuron DRA driver (no DeviceClass, no ResourceSlices) and its Volcano runs
without DRA scheduling, so nothing here schedules: the Volcano jobs go through --dry-run=server
(the API server's validation and Volcano's admission webhooks, nothing stored), the template is
created for real and read back (its bounded NoExecute toleration and the labels its claims
get included). A TrainiumJob created suspended owns them, so the operator (if
the session runs one) starts nothing for it.
"""

from __future__ import annotations

import json

import pytest

from cluster import Cluster
from jobs import TJ, create, get, small_job
from trainium_operator.api.spec import parse
from trainium_operator.manifests import appdef, builders, dra
from trainium_operator.manifests.ownership import Owner

#: (instance type, lnc): a trn2 job at LNC 1 and a trn3 job at AWS's default (2).
CASES = [("trn2.48xlarge", 1), ("trn3.48xlarge", None)]


@pytest.mark.parametrize(("instance", "lnc"), CASES)
def test_a_dra_jobs_manifests_are_accepted_by_the_api_server(
    cluster: Cluster, installed: str, ns: str, instance: str, lnc: int | None
) -> None:
    served = cluster.kubectl("api-resources", "--api-group=resource.k8s.io", "-o", "name").stdout
    assert "resourceclaimtemplates.resource.k8s.io" in served.split()
    extra = {"lnc": lnc} if lnc else {}
    body = small_job(
        "dra", ns, instanceType=instance, devices="dra", args=["causal-lm"],
        precompile={"policy": "Always"}, runPolicy={"suspend": True}, **extra,
    )  # fmt: skip
    create(cluster, body)
    job = get(cluster, TJ, "dra", ns)
    assert job is not None
    spec = parse(job)
    owner = Owner("dra", ns, job["metadata"]["uid"])

    template = builders.build_claim_template(spec, owner)
    create(cluster, template)
    name = template["metadata"]["name"]
    stored = get(cluster, "resourceclaimtemplates.resource.k8s.io", name, ns)
    assert stored is not None, "the template was not stored"
    devices = stored["spec"]["spec"]["devices"]
    assert devices["requests"][0]["exactly"]["count"] == spec.instance.neuron_devices
    # The bounded toleration of a NoExecute device taint (issue 42) is the v1 API's field.
    assert devices["requests"][0]["exactly"]["tolerations"] == [dra.tolerate_eviction()]
    assert stored["spec"]["metadata"]["labels"] == template["metadata"]["labels"]
    params = devices["config"][0]["opaque"]["parameters"]
    assert params["logicalNeuronCore"] == spec.effective_lnc
    assert stored["metadata"]["ownerReferences"][0]["uid"] == owner.uid

    for stage in (appdef.PRECOMPILE, appdef.TRAIN):
        vcjob = builders.build_vcjob(spec, owner, stage)
        proc = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                               stdin=json.dumps(vcjob), check=False)  # fmt: skip
        assert proc.returncode == 0, f"{stage}: {proc.stderr}"
        admitted = json.loads(proc.stdout)
        for task in admitted["spec"]["tasks"]:
            pod = task["template"]["spec"]
            assert pod["resourceClaims"] == dra.pod_claims("dra"), stage
            (container,) = pod["containers"]
            assert container["resources"]["claims"] == dra.container_claims(), stage
