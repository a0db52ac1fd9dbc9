"""What stops a job before it runs, and what ends it on a real cluster: queues, deadlines, specs.

Each issue 17 bug these scenarios showed (2, 3, 6, 7, 8, 9) was a strict xfail here until fixed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cluster import Cluster, wait_until
from harness import OperatorProcess
from jobs import (
    EXAMPLES,
    REPO,
    TJ,
    VCJOB,
    children,
    condition,
    create,
    fsx_claim,
    get,
    small_job,
    wait_condition,
)
from kubelet import Behavior, FakeKubelet

RUNNING = Behavior(outcome="RunForever")


def blocked(cluster: Cluster, name: str, namespace: str, reason: str) -> dict:
    """Wait until some condition of the job carries `reason`; the job then."""

    def found() -> dict | None:
        job = get(cluster, TJ, name, namespace) or {}
        conds = (job.get("status") or {}).get("conditions") or []
        return job if any(c.get("reason") == reason for c in conds) else None

    try:
        return dict(wait_until(found, 60, f"{name}: a condition with reason {reason}", every=0.5))
    except TimeoutError as err:
        status = (get(cluster, TJ, name, namespace) or {}).get("status") or {}
        seen = [
            (c.get("type"), c.get("reason"), c.get("message")) for c in status.get("conditions", [])
        ]
        raise AssertionError(f"{err}; phase {status.get('phase')}, conditions {seen}") from None


def assert_waiting(cluster: Cluster, name: str, namespace: str) -> None:
    job = get(cluster, TJ, name, namespace) or {}
    assert job["status"].get("phase") not in ("Failed", "Succeeded"), job["status"]
    assert children(cluster, VCJOB, namespace, name) == []


def test_missing_queue_blocks_and_still_does_after_an_operator_restart(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    create(cluster, small_job("lost", ns, scheduling={"queue": "no-such-queue"}))
    blocked(cluster, "lost", ns, "QueueNotFound")
    assert_waiting(cluster, "lost", ns)
    running_operator.kill()
    running_operator.start(timeout=60)
    wait_until(lambda: running_operator.passes() >= 1, 60, "a pass of the restarted operator")
    blocked(cluster, "lost", ns, "QueueNotFound")
    assert_waiting(cluster, "lost", ns)


def test_non_leaf_queue_blocks_and_still_does_after_operator_restarts(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """Four jobs on a parent queue, six operator restarts: blocked, never submitted/Failed."""
    fsx_claim(cluster, ns)
    parent, child = f"{ns[:40]}-p", f"{ns[:40]}-c"
    cluster.ensure_queue(parent)
    cluster.ensure_queue(child, {"weight": 1, "reclaimable": True, "parent": parent})
    names = [f"parent-q-{i}" for i in range(4)]
    for name in names:
        create(cluster, small_job(name, ns, scheduling={"queue": parent}))
    for name in names:
        blocked(cluster, name, ns, "QueueNotLeaf")
    for _ in range(6):
        running_operator.kill()
        running_operator.start(timeout=60)
        wait_until(lambda: running_operator.passes() >= len(names), 60, "a pass per job")
        for name in names:
            blocked(cluster, name, ns, "QueueNotLeaf")
            assert_waiting(cluster, name, ns)


def queue_command(cluster: Cluster, queue: str, action: str) -> None:
    """Open or close a queue as `vcctl queue operate` does: a bus.volcano.sh Command for it."""
    uid = cluster.api.get(f"/apis/scheduling.volcano.sh/v1beta1/queues/{queue}")["metadata"]["uid"]
    target = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "name": queue,
              "uid": uid}  # fmt: skip
    command = {
        "apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
        "metadata": {"name": f"{queue[:40]}-{action.lower()}", "namespace": "default",
                     "ownerReferences": [{**target, "controller": True}]},
        "action": action, "target": target,
    }  # fmt: skip
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(command))
    want = "Closed" if action == "CloseQueue" else "Open"

    def state() -> bool:
        got = cluster.api.get(f"/apis/scheduling.volcano.sh/v1beta1/queues/{queue}") or {}
        return (got.get("status") or {}).get("state") == want

    wait_until(state, 60, f"queue {queue} {want}", every=0.5)


def test_closed_queue_blocks_across_a_restart_and_the_job_runs_once_it_opens(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    """Volcano refuses jobs into a Closed queue: the job waits (QueueNotOpen), never fails."""
    fsx_claim(cluster, ns)
    queue = f"{ns[:40]}-shut"
    cluster.ensure_queue(queue)
    queue_command(cluster, queue, "CloseQueue")
    create(cluster, small_job("shut", ns, scheduling={"queue": queue}))
    blocked(cluster, "shut", ns, "QueueNotOpen")
    assert_waiting(cluster, "shut", ns)
    running_operator.kill()
    running_operator.start(timeout=60)
    wait_until(lambda: running_operator.passes() >= 1, 60, "a pass of the restarted operator")
    blocked(cluster, "shut", ns, "QueueNotOpen")
    assert_waiting(cluster, "shut", ns)
    queue_command(cluster, queue, "OpenQueue")
    job = wait_condition(cluster, "shut", ns, "Succeeded", timeout=180)
    assert job["status"]["phase"] == "Succeeded"


def test_active_deadline_stops_the_gang(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    kubelet.plan({}, RUNNING, namespace=ns)
    create(cluster, small_job("slow", ns, runPolicy={"activeDeadlineSeconds": 5}))
    job = wait_condition(cluster, "slow", ns, "Failed", timeout=90)
    assert condition(job, "Failed")["reason"] == "DeadlineExceeded", job["status"]
    wait_until(lambda: kubelet.running(ns) == [], 60, "the gang stopped")


def test_a_succeeded_job_ignores_suspend(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    create(cluster, small_job("done", ns))
    wait_condition(cluster, "done", ns, "Succeeded", timeout=90)
    cluster.kubectl("patch", TJ, "done", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"runPolicy":{"suspend":true}}}')  # fmt: skip
    generation = get(cluster, TJ, "done", ns)["metadata"]["generation"]  # type: ignore[index]
    wait_until(
        lambda: (
            (get(cluster, TJ, "done", ns) or {}).get("status", {}).get("observedGeneration")
            == generation
        ),
        60,
        "the operator to observe the suspend",
    )
    job = get(cluster, TJ, "done", ns) or {}
    assert job["status"]["phase"] == "Succeeded"
    assert condition(job, "Succeeded").get("status") == "True"


def test_a_failed_job_does_not_run_again_on_resume(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    kubelet.plan({}, Behavior(outcome="OOMKilled"), namespace=ns)
    create(cluster, small_job("oom", ns))
    wait_condition(cluster, "oom", ns, "Failed", timeout=90)
    before = len(children(cluster, VCJOB, ns, "oom"))
    for suspend in ("true", "false"):
        cluster.kubectl("patch", TJ, "oom", "-n", ns, "--type=merge",
                        "-p", f'{{"spec":{{"runPolicy":{{"suspend":{suspend}}}}}}}')  # fmt: skip
        generation = get(cluster, TJ, "oom", ns)["metadata"]["generation"]  # type: ignore[index]

        def observed(g: int = generation) -> bool:
            status = (get(cluster, TJ, "oom", ns) or {}).get("status", {})
            return bool(status.get("observedGeneration") == g)

        wait_until(observed, 60, "the operator to observe the change")
    job = get(cluster, TJ, "oom", ns) or {}
    assert job["status"]["phase"] == "Failed"
    assert len(children(cluster, VCJOB, ns, "oom")) <= before
    assert kubelet.running(ns) == []


def test_missing_priority_class_is_named(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    fsx_claim(cluster, ns)
    create(cluster, small_job("vip", ns, scheduling={"queue": "test", "priorityClassName": "gold"}))

    def named() -> bool:
        job = get(cluster, TJ, "vip", ns) or {}
        return any(
            "gold" in (c.get("message") or "") and c.get("reason") != "SpecValid"
            for c in (job.get("status") or {}).get("conditions") or []
        )

    wait_until(named, 45, "a condition naming the missing PriorityClass gold", every=1)


def test_fsx_lookup_without_region_fails_with_a_reason(
    cluster: Cluster, kubelet: FakeKubelet, running_operator: OperatorProcess, ns: str
) -> None:
    job = small_job("nofsx", ns)
    job["spec"]["storage"] = {"fsx": {"fileSystemId": "fs-0123456789abcdef0"}}
    create(cluster, job)
    blocked(cluster, "nofsx", ns, "FsxLookupFailed")


def render(example: str) -> str:
    """`trainium render -f examples/X.yaml` as the README shows it."""
    proc = subprocess.run(
        [sys.executable, "-m", "trainium_operator", "render", "-f", str(EXAMPLES / example)],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


RENDERABLE = ["bert-large-pretrain.yaml", "bert-claim.yaml", "aws-bert-script.yaml"]


@pytest.mark.parametrize("example", RENDERABLE)
def test_render_output_is_accepted_by_the_api_server_and_volcano(
    cluster: Cluster, kubelet: FakeKubelet, example: str
) -> None:
    """`trainium render | kubectl create --dry-run=server -f -` (Go YAML, the real webhook)."""
    manifests = render(example)  # issue 17 bug 8: `- 4e-4` was written plain, read as a float
    proc = cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=manifests, check=False)
    assert proc.returncode == 0, proc.stderr


#: What pod validation refuses, which the CRD should refuse before anything is submitted.
POD_INVALID: dict[str, dict[str, Any]] = {
    "toleration-exists-with-value": {"scheduling": {"tolerations": [
        {"key": "k", "operator": "Exists", "value": "v"}]}},
    "toleration-seconds-without-noexecute": {"scheduling": {"tolerations": [
        {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule",
         "tolerationSeconds": 5}]}},
    "node-selector-bad-key": {"scheduling": {"nodeSelector": {"bad key!": "x"}}},
    "node-selector-bad-value": {"scheduling": {"nodeSelector": {"team": "not a label value"}}},
    "priority-class-bad-name": {"scheduling": {"priorityClassName": "Not_A_Name"}},
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(POD_INVALID))
def test_the_crd_refuses_what_pod_validation_refuses(
    cluster: Cluster, installed: str, case: str
) -> None:
    body = small_job("bad", "default", **POD_INVALID[case])
    proc = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", stdin=json.dumps(body), check=False
    )
    assert proc.returncode != 0, f"{case} accepted"


def test_env_value_null_is_refused_by_server_side_apply_and_render(
    cluster: Cluster, installed: str, tmp_path: Path
) -> None:
    """A create prunes `value: null` (the pod gets an empty value); server-side apply refuses it.

    `trainium render` refuses it too, so a file that renders is one `kubectl apply
    --server-side` accepts (issue 17 bug 9).
    """
    body = small_job("nulled", "default", env=[{"name": "A", "value": None}])
    proc = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", stdin=json.dumps(body),
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "null" in proc.stderr.lower(), proc.stderr
    path = tmp_path / "nulled.json"
    path.write_text(json.dumps(body))
    out = subprocess.run(
        [sys.executable, "-m", "trainium_operator", "render", "-f", str(path)],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode != 0 and "null" in out.stderr, out.stderr
