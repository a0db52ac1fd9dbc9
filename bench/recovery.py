"""Recovery time per failure class on the real-cluster tier: the operator's share, then Volcano's.

    python bench/recovery.py --cluster ASSETS [--classes nrt efa ...] [--repeat 3]

ASSETS is the tier's TRAINIUM_CLUSTER_ASSETS (default: that variable). One control plane with
real Volcano, the bench's fake kubelet (bench/recovery_tier.py) and the operator as a process.
For each class, `--repeat` times, one at a time: a 2-node TrainiumJob runs, the bench injects the
failure as the tier tests do, and times three moments, each the arrival of a watch event at the
bench (or, for a hang, the bench's own clock):

- visible: the failure in the API. A pod failure (Neuron runtime, EFA, preflight): the first
  event showing a pod of the running gang Failed (phase, or a container terminated non-zero).
  An eviction: the first event showing a gang pod disrupted (DisruptionTarget True, or a
  deletionTimestamp). A node gone: the Node's deletion (its DELETE answered); the first event
  showing its gang pod disrupted is shown apart as `node->pod s` (the operator removes it; the
  pod garbage collector would only after its 40 s quarantine). Elastic (a 3-node job, minNodes 2,
  pinned to a pool of 3 nodes, one deleted: no spare): the Node's deletion too. Spare (a 2-node
  job with 2 spares, pinned to a pool of 4 nodes, training pod 1's Node deleted): the same. A
  hang: the moment the step stood still plus runPolicy.progressDeadlineSeconds (the fake
  trainer stops at 50 steps a second, so the last step was at most 20 ms before).
- restarted: the replacement Volcano job ADDED (a name of its own, from the old one's uid: the
  operator replaced the gang; elastic: the 2-node gang it resized to), or, for a gang Volcano
  restarts itself (RestartJob on an evicted pod), the last of the gang's new pods ADDED under the
  same Volcano job. Spare: the operator's swap, the same Volcano job shown with its
  minAvailable lowered.
- bound: the last of the new gang's training pods shown with spec.nodeName (Volcano's binding);
  running: the last of them shown Running (the world at work again, at its size).

(a) operator's share = restarted - visible; (b) Volcano's share = bound - restarted. A swap's (a)
is the operator's two writes' waits: the loss to the lost pod's removal (`node->pod s`) plus the
gang shown restarted (retryCount up: Volcano's answer to that removal) to the patch
(`restarted->patch s`); Volcano's restart between them (`pod->restarted s`) is in total, not in
(a). Elastic's (a) waits shrinkAfterSeconds by design (the gang may form again at its size),
so its target is shrinkAfterSeconds + 2 s. A pool's lost node comes back after each repetition.
A class is a `Scenario`: one more row is one more entry in CLASSES.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import urllib.error
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
from recovery_tier import (
    TJS,
    Scenario,
    Stage,
    Trial,
    first,
    owned_by,
    pod_names,
    run_trial,
)

from conftest import PROGRESS_ENV
from jobs import fsx_claim
from kubelet import TRN1_32XLARGE, Behavior, Metrics

Obj = dict[str, Any]
TRAINING = {"trainium.dev/stage": "train"}
#: Rank 0's figures: 50 steps a second, so a stall's last step is at most 20 ms old.
STEADY = Behavior(outcome="RunForever", metrics=Metrics(total_steps=10_000_000, rate=50.0))
HANG_DEADLINE = 60  # the CRD's least progressDeadlineSeconds
LINES = {
    "NeuronRuntimeError": "2026-Nov-25 04:00:00.0000 1234:1234 ERROR   NRT:nrt_init  Failed to "
    "initialize devices",
    "EfaInitFailed": "CCOM WARN NET/OFI aws-ofi-nccl initialization failed",
}
#: The elastic class's pool: three of the bench's nodes, so a node lost leaves no spare.
POOL_LABEL, POOL = "bench.trainium.dev/elastic-pool", ("trn1-32xl-7", "trn1-32xl-8", "trn1-32xl-9")
#: The spare class's pool: the job's 2 training nodes and 2 spares, no free node beside them.
SPARES, SPARE_POOL = 2, ("bench.trainium.dev/spares-pool", tuple(f"trn1-32xl-{i}" for i in
                                                                 range(3, 7)))  # fmt: skip
SPARE_SPEC = {"spares": SPARES,
              "scheduling": {"queue": "test", "nodeSelector": {SPARE_POOL[0]: "4"}}}  # fmt: skip
SHRINK_AFTER = 10  # spec.elastic.shrinkAfterSeconds: the CRD's least, as test_tier_elastic's
#: A 3-node job that may shrink to 2: a global batch of 192 = 3 x 32 x 2 = 2 x 32 x 3.
ELASTIC = {
    "elastic": {"minNodes": 2, "globalBatchSize": 192, "batchSizePerProcess": 1,
                "shrinkAfterSeconds": SHRINK_AFTER},
    "scheduling": {"queue": "test", "nodeSelector": {POOL_LABEL: "3"}},
}  # fmt: skip
# ---- injections ---------------------------------------------------------------------------------


def fail_with(reason: str) -> Callable[[Stage, Trial], None]:
    """The pod on one node fails with the class's log line (tests/cluster/test_tier_failures)."""

    def inject(stage: Stage, trial: Trial) -> None:
        assert stage.kubelet is not None
        node = sorted(trial.pod_uids.values())[0]
        behavior = Behavior(exit_code=1, logs=("starting", LINES[reason]), run_seconds=0.5)
        trial.injected = time.monotonic()
        assert stage.kubelet.fail_node(node, behavior), f"nothing ran on {node}"

    return inject


def preflight_plan(stage: Stage, trial: Trial) -> None:
    """The first training pod's preflight init container fails (test_tier_supervise)."""
    assert stage.kubelet is not None
    unfit = Behavior(init_exit_code=4, init_message="preflight failed: 15 Neuron devices in /dev")
    stage.kubelet.plan(TRAINING, unfit, namespace=trial.ns, times=1)


def no_op(stage: Stage, trial: Trial) -> None:
    trial.injected = time.monotonic()


def evict(stage: Stage, trial: Trial) -> None:
    """One gang pod through the Eviction API, as `kubectl drain` does."""
    pods = pod_names(stage, trial)
    victim = pods[0]
    body = {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": victim, "namespace": trial.ns}}  # fmt: skip
    trial.injected = time.monotonic()
    stage.api.request("POST", f"/api/v1/namespaces/{trial.ns}/pods/{victim}/eviction", body)


def delete_node(stage: Stage, trial: Trial, node: str = "") -> None:
    """The Node of one gang pod is deleted (an instance terminated); its CSINode goes with it.

    `injected` is when the API server answered the DELETE: the Node is gone from then on.
    """
    node = node or sorted(trial.pod_uids.values())[0]
    trial.injected = time.monotonic()
    stage.api.request("DELETE", f"/api/v1/nodes/{node}")
    trial.injected = time.monotonic()
    with contextlib.suppress(urllib.error.HTTPError):  # 404: the garbage collector's already
        stage.api.request("DELETE", f"/apis/storage.k8s.io/v1/csinodes/{node}")
    assert stage.kubelet is not None
    stage.kubelet.nodes.pop(node, None)  # no more heartbeats: the instance is gone


def delete_training_node(stage: Stage, trial: Trial) -> None:
    """The Node of training pod 1 (not a spare's) is deleted, as `delete_node`."""
    listed = stage.api.get(f"/api/v1/namespaces/{trial.ns}/pods")["items"]
    [node] = [p["spec"]["nodeName"] for p in listed
              if p["metadata"]["name"] == f"{trial.vcjob}-node-1"]  # fmt: skip
    delete_node(stage, trial, node)


def full_pool(label: str, nodes: tuple[str, ...]) -> Callable[[Stage], None]:
    """The pool's nodes are there and labelled (a repetition's lost node comes back)."""

    def reset(stage: Stage) -> None:
        assert stage.kubelet is not None
        for node in nodes:
            if stage.get(f"/api/v1/nodes/{node}") is None:
                stage.kubelet.add_node(node, TRN1_32XLARGE)
            labels = {label: str(len(nodes))}
            stage.api.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}})

    return reset


def stall(stage: Stage, trial: Trial) -> None:
    """Rank 0's step stops moving (a gang hung in a collective)."""
    assert stage.kubelet is not None
    trial.injected = time.monotonic()
    assert stage.kubelet.stall(trial.ns) >= 1


# ---- visibility ---------------------------------------------------------------------------------


def _gang_pod(trial: Trial) -> Callable[[Obj], bool]:
    return lambda pod: pod["metadata"]["uid"] in trial.pod_uids


def failed(pod: Obj) -> bool:
    """Failed in the API: phase Failed, or a container (init included) terminated non-zero."""
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        return True
    for cs in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        if ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") not in (None, 0):
            return True
    return False


def disrupted(pod: Obj) -> bool:
    """Being taken away: a DisruptionTarget condition, or a deletionTimestamp."""
    if pod["metadata"].get("deletionTimestamp"):
        return True
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in conditions
    )


def when_pod(test: Callable[[Obj], bool]) -> Callable[[Stage, Trial], float | None]:
    def visible(stage: Stage, trial: Trial) -> float | None:
        gang = _gang_pod(trial)
        arrivals = stage.pods.arrivals(trial.ns, trial.injected)
        return first(arrivals, lambda pod: gang(pod) and test(pod))

    return visible


def when_any_pod_failed(stage: Stage, trial: Trial) -> float | None:
    """The first pod of this job's training gang shown Failed (a preflight fails at start)."""
    arrivals = stage.pods.arrivals(trial.ns, 0.0)
    return first(arrivals, lambda pod: owned_by(pod, trial.vc_uid) and failed(pod))


def deadline_passed(stage: Stage, trial: Trial) -> float | None:
    return trial.injected + HANG_DEADLINE


def node_deleted(stage: Stage, trial: Trial) -> float | None:
    return trial.injected


def swap_moments(stage: Stage, trial: Trial) -> None:
    """A swap's moments between the loss and the patch, from the Volcano job's events: the
    gang shown restarted (status.retryCount up: Volcano's answer to the lost pod's removal;
    until then it waits as Pending and no swap is due), then the patch."""
    assert trial.restarted is not None
    removed = trial.injected + trial.extra["node->pod s"]
    restarted = lambda job: job["metadata"]["uid"] == trial.vc_uid and int(  # noqa: E731
        (job.get("status") or {}).get("retryCount") or 0) > 0  # fmt: skip
    restarting = first(stage.vcjobs.arrivals(trial.ns, removed), restarted)
    if restarting is not None:
        trial.extra["pod->restarted s"] = restarting - removed
        trial.extra["restarted->patch s"] = trial.restarted - restarting
    body = stage.get(f"{TJS}/namespaces/{trial.ns}/trainiumjobs/{trial.job}") or {}
    status = body.get("status") or {}  # no retry spent, one swap, the same gang
    trial.extra["restarts"] = float(status.get("restarts", 0))
    trial.extra["swaps"] = float((status.get("spares") or {}).get("swaps", 0))


def swap_share(trial: Trial) -> float | None:
    """The operator's share of a swap: the loss to its removal of the lost pod, and the gang
    shown restarted to its patch (Volcano's restart between the two is Volcano's)."""
    parts = [trial.extra.get("node->pod s"), trial.extra.get("restarted->patch s")]
    return None if None in parts else sum(parts)  # type: ignore[arg-type]


CLASSES: dict[str, Scenario] = {
    "nrt": Scenario("nrt", "NeuronRuntimeError", "operator", fail_with("NeuronRuntimeError"),
                    when_pod(failed)),
    "efa": Scenario("efa", "EfaInitFailed", "operator", fail_with("EfaInitFailed"),
                    when_pod(failed)),
    "preflight": Scenario("preflight", "PreflightFailed", "operator", no_op, when_any_pod_failed,
                          before=preflight_plan),
    "hang": Scenario("hang", "Hung", "operator", stall, deadline_passed,
                     run_policy={"progressDeadlineSeconds": HANG_DEADLINE}, behavior=STEADY),
    "eviction": Scenario("eviction", "Evicted", "volcano", evict, when_pod(disrupted)),
    "node-gone": Scenario("node-gone", "Evicted", "volcano", delete_node, node_deleted,
                          lag="node->pod s", shown=when_pod(disrupted), operator_acts=True),
    "elastic": Scenario("elastic", "Evicted", "operator", delete_node, node_deleted,
                        nodes=3, new_nodes=2, spec=ELASTIC, waits=SHRINK_AFTER,
                        reset=full_pool(POOL_LABEL, POOL)),
    "spare": Scenario("spare", "Evicted", "swap", delete_training_node, node_deleted,
                      lag="node->pod s", shown=when_pod(disrupted), operator_acts=True,
                      spares=SPARES, spec=SPARE_SPEC, reset=full_pool(*SPARE_POOL),
                      share=swap_share, detail=swap_moments),
}  # fmt: skip


# ---- the table ----------------------------------------------------------------------------------

#: The operator's share may be at most this (issue 28); a hang's counts from the deadline, so
#: it may take one progress read more (TRAINIUM_PROGRESS_INTERVAL_SECONDS).
TARGET_S = 2.0


def target(sc: Scenario, env: dict[str, str]) -> float:
    if sc.name != "hang":
        return TARGET_S + sc.waits
    return TARGET_S + float({**PROGRESS_ENV, **env}["TRAINIUM_PROGRESS_INTERVAL_SECONDS"])


def row(sc: Scenario, trials: list[Trial], env: dict[str, str]) -> list[object]:
    """class, restarted by, n, lost, median/max of (a), (b), total, the target and if it is met."""
    done = [t for t in trials if t.bound is not None and not t.lost]
    a = [x for x in (share(sc, t) for t in trials) if x is not None]
    b = [t.bound - t.restarted for t in done if t.bound and t.restarted]  # type: ignore[operator]
    total = [t.bound - t.visible for t in done if t.bound and t.visible]  # type: ignore[operator]
    running = [t.running - t.visible for t in done if t.running and t.visible]
    by = "/".join(sorted({t.by for t in done})) or "-"
    reasons = "/".join(sorted({t.reason for t in done})) or "-"

    def mm(xs: list[float]) -> list[object]:
        return [statistics.median(xs), max(xs)] if xs else ["-", "-"]

    goal = target(sc, env)
    ours = [x for t in trials if (t.by == "operator" or sc.operator_acts)
            and (x := share(sc, t)) is not None]  # fmt: skip
    met = ("yes" if max(ours) <= goal else "no") if ours else "n/a: Volcano restarts"
    return [sc.name, by, reasons, len(done), len(trials) - len(done), *mm(a), *mm(b), *mm(total),
            *mm(running), goal, met]  # fmt: skip


def share(sc: Scenario, t: Trial) -> float | None:
    """The operator's share of one trial (restarted - visible unless the class says)."""
    if sc.share is not None:
        return sc.share(t)
    return t.restarted - t.visible if t.restarted and t.visible else None


HEADER = [
    "class",
    "restarted by",
    "lastFailure",
    "n",
    "lost",
    "(a) median s",
    "(a) max s",
    "(b) median s",
    "(b) max s",
    "total median s",
    "total max s",
    "running median s",
    "running max s",
    "target (a) s",
    "met",
]


def machine() -> str:
    load = os.getloadavg()
    return (f"{platform.node()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, load average {load[0]:.2f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cluster", metavar="ASSETS", type=Path,
                   default=os.environ.get("TRAINIUM_CLUSTER_ASSETS") or None,
                   help="the tier's binaries (default: $TRAINIUM_CLUSTER_ASSETS)")  # fmt: skip
    p.add_argument("--classes", nargs="+", choices=list(CLASSES), default=list(CLASSES))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--operator-env", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = common.parse(p, argv, classes=["nrt", "spare"], repeat=1)
    if args.cluster is None:
        p.error("--cluster ASSETS or TRAINIUM_CLUSTER_ASSETS is required")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally blocks stop the cluster
    env = dict(kv.split("=", 1) for kv in args.operator_env)
    started = datetime.datetime.now(datetime.timezone.utc)
    began, rows = time.monotonic(), []
    work = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    with Stage(args.cluster.resolve(), work, env) as stage:
        for name in args.classes:
            sc, ns = CLASSES[name], f"rec-{name}"
            stage.cluster.kubectl("create", "namespace", ns)
            fsx_claim(stage.cluster, ns)
            assert stage.kubelet is not None
            stage.kubelet.plan({}, sc.behavior, namespace=ns)
            trials = []
            for i in range(args.repeat):
                trial = run_trial(stage, sc, ns, i)
                print(f"# {name} {i}: {_line(trial, sc)}", file=sys.stderr, flush=True)
                trials.append(trial)
            rows.append(row(sc, trials, env))
    print(f"# {' '.join(sys.argv)}\n# {started:%Y-%m-%d %H:%M} UTC; {machine()}")
    print(f"# wall time {time.monotonic() - began:.0f} s; logs in {work}\n")
    print(common.table(HEADER, rows))
    return 0


def _line(t: Trial, sc: Scenario) -> str:
    """One repetition's figures (and a reason other than the class's), or why it was lost."""
    extra = "".join(f" {k}={v:.2f}" for k, v in t.extra.items())
    if t.lost or t.visible is None or t.restarted is None or t.bound is None:
        return f"lost ({t.lost}); restarted by {t.by or '-'}{extra}"
    said = t.reason if t.reason == sc.reason else f"{t.reason} (expected {sc.reason})"
    return (f"by {t.by}, reason {said}: (a) {share(sc, t) or 0:.3f} s, "
            f"(b) {t.bound - t.restarted:.3f} s{extra}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
