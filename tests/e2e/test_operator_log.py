"""The operator's own log, as an SRE reads it (issue 26, item 3): a line per job transition,
nothing per health probe, text or JSON, and a metrics port that is taken stops it at once."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from test_operator_e2e import claim, job, queue, vcjob, wait_phase

from harness import (
    OPERATOR_COMMAND,
    EmulatorServer,
    OperatorProcess,
    apply,
    get,
    simulate_vcjob_phase,
    started,
    wait_for,
)
from trainium_operator.manifests import workload

TJ = "trainiumjobs.v1alpha1.trainium.dev"
#: Kueue is optional: where its CRDs are not installed (this worker's emulator until a Kueue test
#: module ran on it), kopf says once that it cannot watch its kinds. Any other kind unresolved is
#: a fault the test must see.
OPTIONAL_GROUPS = {workload.GROUP}


def optional_kinds_unresolved(line: str) -> bool:
    """kopf's line that kinds have no CRD, naming only optional ones."""
    groups = set(re.findall(r"group='([^']*)'", line))
    unresolved = "Unresolved resources cannot be served" in line
    return unresolved and bool(groups) and groups <= OPTIONAL_GROUPS


@pytest.fixture
def json_operator(crd: Path, request: pytest.FixtureRequest, tmp_path: Path) -> OperatorProcess:
    """The operator with `--log-format=json` (the chart's `operator.logFormat: json`)."""
    proc = OperatorProcess([*OPERATOR_COMMAND, "--log-format=json"], tmp_path / "operator.log")
    return started(request, proc)


def run_job(k8s: EmulatorServer, ns: str, name: str) -> str:
    """A job without precompile: Pending on a missing queue, then Training; its uid."""
    claim(ns)
    q = f"q-{ns}"
    apply(job(ns, name, q, precompile={"policy": "Never"}))
    wait_phase(ns, name, "Pending")
    queue(q)
    vcjob(k8s, ns, f"{name}-train")
    simulate_vcjob_phase(ns, f"{name}-train", "Running")
    wait_phase(ns, name, "Training")
    return str((get(TJ, name, ns) or {})["metadata"]["uid"])


def probe(proc: OperatorProcess, times: int) -> None:
    for _ in range(times):
        with urllib.request.urlopen(proc.liveness_url, timeout=5) as response:
            assert response.status == 200


def logged(proc: OperatorProcess, text: str) -> list[str]:
    return [line for line in proc.log().splitlines() if text in line]


def test_each_transition_is_one_line_and_probes_write_none(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    uid = run_job(k8s, ns, "told")
    probe(operator, 20)
    line = f"job {ns}/told (uid {uid}): Pending -> Training"
    wait_for(lambda: logged(operator, line), what=f"the line {line!r} in the operator's log")
    assert len(logged(operator, f"job {ns}/told ")) == 2, logged(operator, f"{ns}/told")
    assert logged(operator, f"job {ns}/told (uid {uid}): New -> Pending (QueueNotFound)")
    assert logged(operator, "GET /healthz") == []  # aiohttp's access line: one a probe before


def test_an_elected_start_up_logs_no_warning(
    crd: Path, ns: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Standing for the Lease and acquiring it are the election working: INFO, not WARNING."""
    command = [c for c in OPERATOR_COMMAND if c != "--standalone"] + ["--leader-elect=logs"]
    env = {"POD_NAME": "op-0", "POD_NAMESPACE": ns}
    proc = started(request, OperatorProcess(command, tmp_path / "operator.log", env))
    wait_for(lambda: logged(proc, "acquired by op-0"), timeout=30, what="the Lease acquired")
    start_up = proc.log()  # the start-up; kopf's own stop may warn of streams it left unread
    warned = [ln for ln in start_up.splitlines() if "WARNING" in ln]
    assert [ln for ln in warned if not optional_kinds_unresolved(ln)] == []
    assert proc.stop() == 0
    assert logged(proc, "standing for the Lease") and logged(proc, "shutting down")


def test_json_lines_are_objects_and_a_transition_has_its_fields(
    json_operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    uid = run_job(k8s, ns, "parsed")
    probe(json_operator, 5)

    def moved() -> list[dict[str, str]]:
        records = [json.loads(ln) for ln in json_operator.log().splitlines() if ln[:1] == "{"]
        return [r for r in records if r.get("job") == f"{ns}/parsed"]

    found = wait_for(lambda: [r for r in moved() if r["to_phase"] == "Training"], what="JSON")
    assert found[0]["uid"] == uid and found[0]["from_phase"] == "Pending", found
    assert found[0]["severity"] == "info" and found[0]["reason"] and found[0]["message"]
    lines = [ln for ln in json_operator.log().splitlines() if ln and not ln.startswith("===")]
    assert lines and all(ln.startswith("{") and json.loads(ln) for ln in lines), lines[:5]


def test_a_metrics_port_that_is_taken_stops_the_operator_with_one_line(
    crd: Path, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = dict(OperatorProcess(OPERATOR_COMMAND, tmp_path / "x").env,
                   TRAINIUM_METRICS_PORT=str(port), TRAINIUM_METRICS_ADDR="127.0.0.1")  # fmt: skip
        for fmt, check in (("text", str), ("json", json.loads)):
            cmd = [*OPERATOR_COMMAND, f"--log-format={fmt}", "--liveness=http://127.0.0.1:0/h"]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
            out = (done.stdout + done.stderr).strip().splitlines()
            assert done.returncode == 1 and len(out) == 1, (done.returncode, out)
            assert f"127.0.0.1:{port}" in out[0] and "Traceback" not in out[0], out
            check(out[0])
    assert sys.executable  # the operator ran as its own process, never imported here
