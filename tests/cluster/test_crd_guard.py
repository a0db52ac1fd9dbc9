"""On a real API server, an update of the TrainiumJob CRD that drops a field is refused.

What `helm rollback` to an older revision sends (the older CRD, applied server-side), sent with
--dry-run=server so the session's CRD never changes: the chart's ValidatingAdmissionPolicy
(installed with the chart by the `installed` fixture) must refuse it, and let the same CRD and
one with more fields through.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from cluster import Cluster, wait_until
from helmchart import CRD_SOURCE

Obj = dict[str, Any]


def apply_dry_run(cluster: Cluster, crd: Obj) -> tuple[int, str]:
    proc = cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-",
        stdin=yaml.safe_dump(crd), check=False,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def test_a_crd_update_that_drops_a_field_is_refused(cluster: Cluster, installed: str) -> None:
    current = yaml.safe_load(CRD_SOURCE.read_text())
    older = copy.deepcopy(current)
    spec = older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    del spec["properties"]["runPolicy"]["properties"]["maxRetries"]
    # The policy takes effect once the API server has loaded it (seconds): poll for the refusal.
    code, out = wait_until(
        lambda: (result := apply_dry_run(cluster, older))[0] != 0 and result,
        60,
        "the CRD guard refusing a CRD without spec.runPolicy.maxRetries",
        every=1,
    )
    assert "trainiumjobs.trainium.dev-keep-fields" in out, out
    assert "drops fields from the TrainiumJob schema" in out, out
    assert apply_dry_run(cluster, current)[0] == 0
    newer = copy.deepcopy(current)
    newer["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "addedLater"
    ] = {"type": "string"}
    code, out = apply_dry_run(cluster, newer)
    assert code == 0, out
