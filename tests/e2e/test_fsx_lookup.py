"""FSx named by fileSystemId only, on an operator without an AWS region: a condition, no loop."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_operator_e2e import condition, job, queue, wait_phase

from harness import OPERATOR_COMMAND, EmulatorServer, OperatorProcess, apply, started, wait_for


@pytest.fixture
def regionless(crd: Path, request: pytest.FixtureRequest, tmp_path: Path) -> OperatorProcess:
    """The operator with no AWS region anywhere (env, config file, instance metadata)."""
    proc = OperatorProcess(OPERATOR_COMMAND, tmp_path / "operator.log")
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        proc.env.pop(var, None)
    proc.env.update(
        AWS_CONFIG_FILE=str(tmp_path / "no-aws-config"), AWS_EC2_METADATA_DISABLED="true"
    )
    return started(request, proc)


def test_no_region_gives_fsx_lookup_failed_with_the_reason(
    regionless: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = f"q-{ns}"
    queue(q)
    apply(job(ns, "lustre", q, storage={"fsx": {"fileSystemId": "fs-0123456789abcdef0"}}))
    wait_phase(ns, "lustre", "Pending")
    ready = wait_for(lambda: condition(ns, "lustre", "StorageReady"), what="StorageReady")
    assert ready["status"] == "False" and ready["reason"] == "FsxLookupFailed", ready
    assert "fs-0123456789abcdef0" in ready["message"] and "region" in ready["message"]
    assert "Traceback" not in regionless.log()
