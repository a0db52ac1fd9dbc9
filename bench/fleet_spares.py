"""The spare swap at fleet size on the real-cluster tier: a lost node of 8, 128, 1,024-node gangs.

    python bench/fleet_spares.py --cluster ASSETS [--sizes 8 128 1024] [--spares 2]

ASSETS is the tier's TRAINIUM_CLUSTER_ASSETS (default: that variable). The stage is
fleet_scale.py's (one control plane with real Volcano, fake trn1.32xlarge nodes without
heartbeats, the operator as a process under a ServiceAccount token of its own, the bench's
watches on pods, Volcano jobs, PodGroups and TrainiumJobs). The sizes run one after the other:
the fleet grows to N nodes, and one TrainiumJob of N - spares training nodes and `--spares` spares
(N pods: the CRD allows nodes + spares <= 1,024; every node the gang's, no free one; precompile
Never; every pod runs until stopped) runs all its pods,
then training pod 1's Node is deleted as EKS loses an instance (kubelet.lose_node). Every moment
is the bench's monotonic clock when a watch event reached it:

- loss: just before the Node's DELETE is sent (so the operator's share below includes the DELETE's
  own round trip);
- removed: the lost pod shown disrupted (the operator's DisruptionTarget patch, then its delete);
- restarted: the Volcano job shown with its status.retryCount up (Volcano's restart of the gang,
  its answer to the removal; until then the gang waits as Pending and no swap is due);
- patched: the Volcano job shown with its minAvailable below N + spares (the operator's swap);
- bound / running: the last of the N training pods of the gang formed again shown with
  spec.nodeName / Running.

The operator's share = (removed - loss) + (patched - restarted); Volcano's restart between them
and its binding after the patch are Volcano's. Also the operator's CPU seconds from the loss to
the patch and its requests in that span (the audit log). The lost node comes back after each size.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common
from fleet_scale import Stage, Watches, quiet, resource, utc_now
from recovery import disrupted, machine

from cluster import wait_until
from jobs import fsx_claim, small_job
from kubelet import TRN1_32XLARGE, Behavior

Obj = dict[str, Any]
TJS = "/apis/trainium.dev/v1alpha1"
RUNS = Behavior(outcome="RunForever")


@dataclass
class Marks:
    """One namespace's swap moments as the bench's watches delivered them."""

    #: pod uid -> (when first shown disrupted, its node).
    disrupted: dict[str, tuple[float, str]] = field(default_factory=dict)
    #: Volcano job events: (when, its uid, minAvailable, phase, retryCount).
    vcjob: list[tuple[float, str, int, str, int]] = field(default_factory=list)
    #: pod uid -> (name, when first shown bound, when first shown Running).
    pods: dict[str, list[Any]] = field(default_factory=dict)


class SwapWatches(Watches):
    """fleet_scale's watches, also keeping the moments of a swap."""

    def __init__(self, api: Any) -> None:
        super().__init__(api)
        self.marks: dict[str, Marks] = {}
        self.marks_lock = threading.Lock()

    def _see(self, kind: str, obj: Obj, at: float) -> None:
        super()._see(kind, obj, at)
        meta = obj["metadata"]
        with self.marks_lock:
            marks = self.marks.setdefault(meta.get("namespace", ""), Marks())
            if kind == "vcjobs":
                status = obj.get("status") or {}
                phase = (status.get("state") or {}).get("phase", "")
                least, retries = obj["spec"].get("minAvailable", 0), status.get("retryCount", 0)
                marks.vcjob.append((at, meta["uid"], least, phase, retries))
            elif kind == "pods":
                self._pod(marks, obj, at)

    @staticmethod
    def _pod(marks: Marks, obj: Obj, at: float) -> None:
        meta, node = obj["metadata"], obj["spec"].get("nodeName") or ""
        if disrupted(obj):
            marks.disrupted.setdefault(meta["uid"], (at, node))
        seen = marks.pods.setdefault(meta["uid"], [meta["name"], None, None])
        if node and seen[1] is None:
            seen[1] = at
        if (obj.get("status") or {}).get("phase") == "Running" and seen[2] is None:
            seen[2] = at


@dataclass
class Swap:
    """One size's swap figures (None: not seen)."""

    nodes: int  # the gang's pods (training and spares): the fleet's nodes
    loss: float
    node: str
    training: int = 0
    removed: float | None = None
    restarting: float | None = None
    patched: float | None = None
    bound: float | None = None
    running: float | None = None
    cpu_s: float | None = None
    until: str = ""
    requests: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    @property
    def share(self) -> float | None:
        if None in (self.removed, self.restarting, self.patched):
            return None
        return self.removed - self.loss + self.patched - self.restarting  # type: ignore[operator]


def _after(at: float | None, since: float) -> float | str:
    return "-" if at is None else at - since


def row(s: Swap) -> list[object]:
    return [s.nodes, _after(s.removed, s.loss),
            _after(s.restarting, s.removed) if s.removed else "-",
            _after(s.patched, s.restarting) if s.restarting else "-",
            s.share if s.share is not None else "-",
            _after(s.bound, s.patched) if s.patched else "-",
            _after(s.bound, s.loss), _after(s.running, s.loss),
            s.cpu_s if s.cpu_s is not None else "-",
            *reads_writes(s.requests)]  # fmt: skip


def reads_writes(requests: Counter[str]) -> list[int]:
    """The requests' reads (get, list) and writes (all but those and watches)."""
    verbs: Counter[str] = Counter()
    for k, n in requests.items():
        verbs[k.split()[0]] += n
    reads = verbs["get"] + verbs["list"]
    return [reads, sum(verbs.values()) - reads - verbs["watch"]]


HEADER = ["gang (nodes + spares)", "loss->removed s", "removed->restarted s",
          "restarted->patched s", "operator's share s", "patched->bound s", "loss->bound s",
          "loss->running s",
          "operator CPU s (loss->patched)", "reads", "writes"]  # fmt: skip
TARGET_S = 2.0


class SwapStage(Stage):
    """fleet_scale's stage with SwapWatches."""

    def __init__(self, assets: Path, workdir: Path, env: dict[str, str]) -> None:
        super().__init__(assets, workdir, env)
        self.watches = SwapWatches(self.cluster.api)

    def marks(self, ns: str) -> Marks:
        assert isinstance(self.watches, SwapWatches)
        with self.watches.marks_lock:
            return self.watches.marks.setdefault(ns, Marks())

    def swap(self, size: int, spares: int, recover_s: float) -> Swap:
        """One gang of `size` pods (size - spares training nodes, and the spares) on exactly
        `size` nodes; a training node lost."""
        self.grow(size)
        nodes = size - spares
        ns = job = f"spares-{size}"
        self.cluster.kubectl("create", "namespace", ns)
        fsx_claim(self.cluster, ns)
        assert self.kubelet is not None
        self.kubelet.plan({}, RUNS, namespace=ns)
        body = small_job(job, ns, nodes=nodes, spares=spares)
        self.cluster.api.request("POST", f"{TJS}/namespaces/{ns}/trainiumjobs", body)
        kubelet = self.kubelet
        wait_until(lambda: len(kubelet.running_uids(ns)) == nodes + spares, 240 + nodes * 1.0,
                   f"{job}'s {nodes + spares} pods running", every=0.5)  # fmt: skip
        quiet(self.pid)  # the operator digested the gang's start
        first = set(kubelet.running_uids(ns))
        pod = self.cluster.api.get(f"/api/v1/namespaces/{ns}/pods/{job}-train-node-1")
        cpu0, since = common.cpu_seconds(self.pid), utc_now()
        out = Swap(size, time.monotonic(), pod["spec"]["nodeName"], nodes)
        kubelet.lose_node(out.node)
        try:
            self._timeline(out, ns, size, first, recover_s, cpu0)
        except TimeoutError as exc:
            out.notes.append(f"{size} nodes: {exc}")
        time.sleep(2)  # the audit log's last lines of the span
        self.audit.read()
        spans = self.audit.between(since, out.until or utc_now())
        out.requests = Counter(f"{e['verb']} {resource(e)}" for e in spans)
        kubelet.add_node(out.node, TRN1_32XLARGE, heartbeat=False)  # the fleet is whole again
        return out

    def drop(self, nodes: int, wait: bool) -> None:
        """Delete the size's job; with `wait`, until its pods are gone (the next size's room)."""
        ns = job = f"spares-{nodes}"
        self.cluster.api.request("DELETE", f"{TJS}/namespaces/{ns}/trainiumjobs/{job}")
        if wait:
            gone = lambda: not self.cluster.api.get(f"/api/v1/namespaces/{ns}/pods")["items"]  # noqa: E731
            wait_until(gone, 120 + nodes, f"{job}'s pods gone", every=1)

    def _timeline(
        self, out: Swap, ns: str, gang: int, first: set[str], recover_s: float, cpu0: float
    ) -> None:
        marks = lambda: self.marks(ns)  # noqa: E731
        before = max((r for at, _u, _m, _p, r in list(marks().vcjob) if at < out.loss), default=0)

        def removed() -> float | None:
            lost = [at for at, node in list(marks().disrupted.values())
                    if node == out.node and at >= out.loss]  # fmt: skip
            return min(lost, default=None)

        def vcjob(test: Any) -> float | None:
            return next((at for at, _u, least, _p, retries in list(marks().vcjob)
                         if at >= out.loss and test(least, retries)), None)  # fmt: skip

        out.removed = wait_until(removed, 60, "the lost pod removed", every=0.2)
        out.restarting = wait_until(lambda: vcjob(lambda _m, r: r > before), recover_s,
                                    "Volcano's restart (retryCount up)", every=0.2)  # fmt: skip
        out.patched = wait_until(lambda: vcjob(lambda m, _r: m < gang), 120, "the swap's patch",
                                 every=0.2)  # fmt: skip
        out.cpu_s, out.until = common.cpu_seconds(self.pid) - cpu0, utc_now()
        shown = [(round(at - out.loss, 3), m, phase, r) for at, _u, m, phase, r in marks().vcjob
                 if at >= out.loss - 1]  # fmt: skip
        print(
            f"# {out.nodes}: the Volcano job after the loss (s, minAvailable, phase, "
            f"retryCount): {shown[:40]}",
            file=sys.stderr,
            flush=True,
        )
        n = out.training

        def formed(index: int) -> float | None:
            fresh = [
                seen[index]
                for uid, seen in list(marks().pods.items())
                if uid not in first and "-node-" in seen[0] and seen[index] is not None
            ]
            return max(fresh) if len(fresh) >= n else None  # fmt: skip

        out.bound = wait_until(lambda: formed(1), recover_s, f"{n} training pods bound", every=1)
        out.running = wait_until(lambda: formed(2), 120, f"{n} training pods Running", every=1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cluster", metavar="ASSETS", type=Path,
                   default=os.environ.get("TRAINIUM_CLUSTER_ASSETS") or None,
                   help="the tier's binaries (default: $TRAINIUM_CLUSTER_ASSETS)")  # fmt: skip
    p.add_argument("--sizes", nargs="+", type=int, default=[8, 128, 1024])
    p.add_argument("--spares", type=int, default=2)
    p.add_argument("--recover-per-node", type=float, default=0.4, metavar="S",
                   help="seconds per node (plus 120) for the gang to form again")  # fmt: skip
    p.add_argument("--operator-env", nargs="*", default=[], metavar="KEY=VALUE")
    args = common.parse(p, argv, sizes=[4])
    if args.cluster is None:
        p.error("--cluster ASSETS or TRAINIUM_CLUSTER_ASSETS is required")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally blocks stop the cluster
    env = dict(kv.split("=", 1) for kv in args.operator_env)
    started = datetime.datetime.now(datetime.timezone.utc)
    began, swaps, loads = time.monotonic(), [], []
    work = Path(tempfile.mkdtemp(prefix="bench-fleet-spares-"))
    sizes = sorted(args.sizes)
    with SwapStage(args.cluster.resolve(), work, env) as stage:
        for nodes in sizes:
            swap = stage.swap(nodes, args.spares, 120 + nodes * args.recover_per_node)
            loads.append(os.getloadavg()[0])
            print(f"# {nodes} nodes: {row(swap)} {dict(swap.requests)} {'; '.join(swap.notes)}"
                  f" (load average {loads[-1]:.2f})", file=sys.stderr, flush=True)  # fmt: skip
            swaps.append(swap)
            stage.drop(nodes, wait=nodes != sizes[-1])
    print(f"# {' '.join(sys.argv)}\n# {started:%Y-%m-%d %H:%M} UTC; {machine()}")
    print(f"# wall time {time.monotonic() - began:.0f} s; logs in {work}; load average after "
          f"each size: {', '.join(f'{x:.2f}' for x in loads)}\n")  # fmt: skip
    print(common.table(HEADER, [row(s) for s in swaps]), end="\n\n")
    keys = sorted({k for s in swaps for k in s.requests})
    print(common.table(["request (loss->patched)", *[f"{s.nodes} nodes" for s in swaps]],
                       [[k, *[s.requests.get(k, 0) for s in swaps]] for k in keys]))  # fmt: skip
    worst = max((s.share for s in swaps if s.share is not None), default=None)
    print(
        f"\n# operator's share at {sizes[-1]} nodes: "
        f"{swaps[-1].share if swaps[-1].share is not None else '-'} s (target {TARGET_S} s)"
    )
    notes = [n for s in swaps for n in s.notes]
    for note in notes:
        print(f"# {note}")
    return 1 if notes or worst is None else 0


if __name__ == "__main__":
    sys.exit(main())
