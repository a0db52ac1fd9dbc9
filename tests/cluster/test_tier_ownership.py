"""Issue 25 on a real cluster: one owner per job, with the chart's replicas and command line.

Each test runs the chart Deployment's two replicas as test_ha.py does (its command and env from
`helm template`, a token of the chart's ServiceAccount each, told apart in the audit log by the
token's JTI) and finds which one leads from what the product shows: the coordination Lease one
replica holds. The leadership term is the chart's own (its lease duration, read from the
rendered Deployment).

What is asserted on order comes from watches (recorder.Recorder: every version, by etcd
revision) and from the audit log (every request, by replica), never from sleeps.
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cluster import Cluster, wait_until
from conftest import OPERATOR_NS
from harness import OPERATORS, OperatorProcess
from jobs import TJ, create, fsx_claim, get, small_job, wait_condition
from kubelet import Behavior, FakeKubelet
from recorder import Recorder, Version
from test_ha import WRITES, Replica, chart_container, credential, received, replica
from trainium_trainer import termination

Obj = dict[str, Any]
TJ_PATH = "/apis/trainium.dev/v1alpha1/namespaces/{ns}/trainiumjobs"
VCJOB_PATH = "/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs"
#: The objects leader election itself writes (kopf peering, coordination Leases): not the work.
ELECTION = {"clusterkopfpeerings", "kopfpeerings", "leases"}
TERMINAL = ("Succeeded", "Failed")
#: status.phase in the order a job moves through it (model.Phase; Suspended stands aside).
RANK = {"Pending": 0, "WaitingForCache": 1, "Precompiling": 1, "Training": 2, "Succeeded": 3,
        "Failed": 3}  # fmt: skip
#: The chart's Lease is client-go's 15 s (issue 32 item 5: renewals that hold under CPU
#: pressure): a standby takes over within the lease, one 2 s retry and its first pass.
TAKEOVER_S = 20
NRT = "2026-Nov-25 04:00:00.0000 1234:1234 ERROR   NRT:nrt_init  Failed to initialize devices"
TRAINING = {"trainium.dev/stage": "train"}


# ---------------------------------------------------------------------------------------------
# The chart's replicas, who leads, and pausing a process.


def term_seconds(manifests: str) -> float:
    """The chart's leadership term: the longest lease/lifetime its Deployment sets, in seconds."""
    container = chart_container(manifests)
    found = [
        float(e["value"])
        for e in container.get("env") or []
        if "value" in e and re.search(r"LEASE|LIFETIME", e["name"]) and e["value"].isdigit()
    ]
    for arg in [*container.get("command", []), *container.get("args", [])]:
        match = re.fullmatch(r"--[a-z-]*(?:lease|lifetime)[a-z-]*=(\d+(?:\.\d+)?)s?", arg)
        if match:
            found.append(float(match.group(1)))
    assert found, f"the chart's Deployment sets no lease duration or lifetime: {container}"
    return max(found)


def _stamp(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def lease_holder(cluster: Cluster, pair: list[Replica]) -> Replica | None:
    """The replica that holds an unexpired coordination Lease in the operator's namespace."""
    leases = cluster.api.get(f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NS}/leases")
    now = datetime.datetime.now(datetime.timezone.utc)
    for lease in (leases or {}).get("items") or []:
        spec = lease.get("spec") or {}
        holder, renewed = spec.get("holderIdentity") or "", spec.get("renewTime")
        seconds = spec.get("leaseDurationSeconds") or 0
        if not renewed or _stamp(renewed) + datetime.timedelta(seconds=seconds) < now:
            continue
        for r in pair:
            if r.name in holder:
                return r
    return None


def leadership(cluster: Cluster, pair: list[Replica], manifests: str) -> tuple[Replica, Replica]:
    """(leader, standby) once one replica holds the election's Lease."""

    def settled() -> tuple[Replica, Replica] | None:
        holder = lease_holder(cluster, pair)
        if holder is None:
            return None
        return holder, next(r for r in pair if r is not holder)

    return wait_until(settled, 90, "one replica leading and the other standing by", every=0.5)


def process_state(r: Replica) -> str:
    """The replica process's state letter in /proc (R, S, T for stopped, ...)."""
    assert r.proc.process is not None
    stat = f"/proc/{r.proc.process.pid}/stat"
    return open(stat).read().rsplit(")", 1)[1].split()[0]


def freeze(r: Replica) -> None:
    """SIGSTOP: the process stands still (a GC pause, a frozen VM), until thaw()."""
    assert r.proc.running and r.proc.process is not None
    os.kill(r.proc.process.pid, signal.SIGSTOP)
    wait_until(lambda: process_state(r) == "T", 10, f"{r.name} stopped", every=0.05)


def thaw(r: Replica) -> None:
    if r.proc.running and r.proc.process is not None:
        os.kill(r.proc.process.pid, signal.SIGCONT)


@dataclass
class Pair:
    """The chart's two replicas as found once settled, the chart's term and its manifests."""

    leader: Replica
    standby: Replica
    term: float
    manifests: str


@pytest.fixture
def pair(
    cluster: Cluster, installed: str, chart_manifests: str, operator: OperatorProcess, ns: str,
    request: pytest.FixtureRequest,
) -> Iterator[Pair]:  # fmt: skip
    """The chart's two replicas (the session's standalone operator stopped), one leading."""
    operator.stop()
    reported = request.node.stash.setdefault(OPERATORS, [])
    tag = ns.rsplit("-", 1)[1]
    made = [replica(cluster, chart_manifests, f"trainium-operator-{tag}-{x}") for x in "ab"]
    try:
        for r in made:
            reported.append(r.proc)
            r.proc.start(timeout=90)
        leader, standby = leadership(cluster, made, chart_manifests)
        yield Pair(leader, standby, term_seconds(chart_manifests), chart_manifests)
    finally:
        for r in made:
            thaw(r)
            r.proc.stop()


# ---------------------------------------------------------------------------------------------
# What the audit log and the watches say.


def work_writes(audit: list[Obj], r: Replica) -> list[Obj]:
    """r's writes other than leader election's own (peering keep-alives, Lease renewals)."""
    return [
        e for e in r.requests(audit)
        if e["verb"] in WRITES and (e.get("objectRef") or {}).get("resource") not in ELECTION
    ]  # fmt: skip


def in_namespace(events: list[Obj], ns: str) -> list[Obj]:
    return [e for e in events if (e.get("objectRef") or {}).get("namespace") == ns]


def said(events: list[Obj]) -> list[str]:
    """Audit events as `time verb resource/name[/subresource] code`, oldest first."""
    lines = []
    for e in sorted(events, key=lambda e: e["requestReceivedTimestamp"]):
        ref = e.get("objectRef") or {}
        what = "/".join(
            p for p in (ref.get("resource"), ref.get("name"), ref.get("subresource")) if p
        )
        lines.append(f"{e['requestReceivedTimestamp'][11:]} {e['verb']} {what} {code(e)}")
    return lines


def vcjob_creates(audit: list[Obj], ns: str, name: str | None = None) -> list[Obj]:
    """The operator's `create jobs` (Volcano) requests in ns (of one name), any answer."""
    return [
        e for e in in_namespace(audit, ns)
        if credential(e) and e["verb"] == "create"
        and (e.get("objectRef") or {}).get("apiGroup") == "batch.volcano.sh"
        and (e.get("objectRef") or {}).get("resource") == "jobs"
        and name in (None, (e.get("objectRef") or {}).get("name"))
    ]  # fmt: skip


def code(event: Obj) -> int | None:
    return (event.get("responseStatus") or {}).get("code")


def moved_back(versions: list[Version]) -> list[str]:
    """Phase changes that go back (Succeeded -> Training, Training -> Pending, ...)."""
    back, last = [], None
    for v in versions:
        phase = v.phase
        if phase not in RANK:
            continue
        if last is not None and (RANK[phase] < RANK[last] or (last in TERMINAL and phase != last)):
            back.append(f"rv {v.rv}: {last} -> {phase}")
        last = phase
    return back


def phase_trail(versions: list[Version]) -> list[str]:
    trail: list[str] = []
    for v in versions:
        if v.phase and (not trail or trail[-1] != v.phase):
            trail.append(str(v.phase))
    return trail


def holds(check: Callable[[], Any], seconds: float, what: str) -> None:
    """Poll check() for `seconds`: fail as soon as it returns something (what went wrong)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        assert not found, f"{what}: {found}"
        time.sleep(0.2)


def running_elsewhere(cluster: Cluster, ns: str, avoid: list[str]) -> list[tuple[str, str]]:
    """(pod, node) of Running, undeleted pods of ns on nodes not in avoid."""
    items = json.loads(cluster.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    return [
        (p["metadata"]["name"], p["spec"].get("nodeName", ""))
        for p in items
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and p["spec"].get("nodeName") not in avoid
    ]


def status_of(cluster: Cluster, name: str, ns: str) -> Obj:
    return dict((get(cluster, TJ, name, ns) or {}).get("status") or {})


def conditions(status: Obj) -> list[tuple[str, str, str]]:
    return [
        (c.get("type"), c.get("reason"), c.get("message")) for c in status.get("conditions", [])
    ]


# ---------------------------------------------------------------------------------------------
# (a) a job deleted and created again under its name, taken over by a standby that slept.


def test_a_job_recreated_under_its_name_trains_after_a_takeover(
    cluster: Cluster, kubelet: FakeKubelet, pair: Pair, ns: str
) -> None:
    """The standby, paused through delete + re-create, runs the NEW job: a gang, then Succeeded."""
    fsx_claim(cluster, ns)
    with (
        Recorder(cluster.api, TJ_PATH.format(ns=ns)) as jobs,
        Recorder(cluster.api, VCJOB_PATH.format(ns=ns)) as vcjobs,
    ):
        body = small_job("again", ns)
        create(cluster, body)
        old = wait_condition(cluster, "again", ns, "Succeeded", timeout=120)
        writers = {credential(e) for e in work_writes_in(cluster, ns)}
        assert writers == {pair.leader.credential}, f"not only {pair.leader.name} acted: {writers}"

        # A hand-over while the job exists: both replicas have now seen it and its gang.
        leader, standby = hand_over(cluster, pair, ns)

        freeze(standby)
        cluster.kubectl("delete", TJ, "again", "-n", ns, "--timeout=60s")
        freeze(leader)  # it never sees the new object: only the standby can act on it
        gang = kubelet.plan({}, Behavior(), namespace=ns)
        create(cluster, body)
        new = get(cluster, TJ, "again", ns)
        assert new is not None and new["metadata"]["uid"] != old["metadata"]["uid"]
        uid = new["metadata"]["uid"]
        leader.proc.kill()
        thaw(standby)

        def finished() -> str | None:
            phase = next((v.phase for v in reversed(jobs.versions(uid=uid)) if v.phase), None)
            return phase if phase in TERMINAL else None

        phase = wait_until(finished, pair.term * 2 + 120, f"the new job (uid {uid}) finished")
        trail = phase_trail(jobs.versions(uid=uid))
        mine = [v for v in vcjobs.created().values() if uid in v.owners()]
        what = (
            f"new job uid {uid}: phases {trail}, conditions "
            f"{conditions(jobs.versions(uid=uid)[-1].obj.get('status') or {})}; "
            f"Volcano jobs created for it: {[(v.name, v.rv) for v in mine]}; audit: "
            f"{said(vcjob_creates(cluster.audit(), ns))}"
        )
        assert [v.name for v in mine if v.name == "again-train"], f"no again-train for it: {what}"
        made_at = min(v.rv for v in mine if v.name == "again-train")
        early = [v.rv for v in jobs.versions(uid=uid) if v.phase == "Succeeded" and v.rv < made_at]
        assert early == [], f"Succeeded (rv {early}) before its gang (rv {made_at}): {what}"
        assert phase == "Succeeded", what
        assert gang.pods, f"no pod of the new gang ever ran: {what}"


def hand_over(cluster: Cluster, pair: Pair, ns: str) -> tuple[Replica, Replica]:
    """Freeze the leader until the standby has run a job, thaw it: (leader, standby) then."""
    freeze(pair.leader)
    create(cluster, small_job("probe", ns))
    wait_condition(cluster, "probe", ns, "Succeeded", timeout=int(pair.term * 3 + 60))
    thaw(pair.leader)
    return leadership(cluster, [pair.leader, pair.standby], pair.manifests)


def work_writes_in(cluster: Cluster, ns: str) -> list[Obj]:
    """Every operator replica's writes in ns, election objects aside."""
    return [
        e for e in in_namespace(cluster.audit(), ns)
        if credential(e) and e["verb"] in WRITES
        and (e.get("objectRef") or {}).get("resource") not in ELECTION
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# (b) a leader that slept past its term wakes up after the other one acted.


def test_a_leader_woken_after_its_term_writes_nothing(
    cluster: Cluster, kubelet: FakeKubelet, pair: Pair, ns: str
) -> None:
    """SIGSTOP the leader past its term, the standby finishes the job, SIGCONT: no stale write."""
    fsx_claim(cluster, ns)
    kubelet.plan({}, Behavior(outcome="RunForever"), namespace=ns)
    old, new = pair.leader, pair.standby
    with Recorder(cluster.api, TJ_PATH.format(ns=ns)) as jobs:
        create(cluster, small_job("woken", ns))
        wait_until(lambda: kubelet.running(ns), 120, "the gang running")
        wait_until(lambda: status_of(cluster, "woken", ns).get("phase") == "Training", 120,
                   "the job Training")  # fmt: skip
        uid = get(cluster, TJ, "woken", ns)["metadata"]["uid"]  # type: ignore[index]
        frozen_at = datetime.datetime.now(datetime.timezone.utc)
        freeze(old)
        kubelet.finish(ns)  # the gang ends while the leader sleeps: only the standby can say so
        wait_condition(cluster, "woken", ns, "Succeeded", timeout=int(pair.term * 3 + 60))
        took = datetime.datetime.now(datetime.timezone.utc) - frozen_at
        print(f"{new.name} finished the job {took.total_seconds():.1f}s after {old.name} stopped")
        firsts = [e for e in work_writes(cluster.audit(), new) if received(e) >= frozen_at]
        assert firsts, f"{new.name} never wrote after {old.name} stopped"
        first = min(received(e) for e in firsts)

        thawed_at = datetime.datetime.now(datetime.timezone.utc)
        thaw(old)
        # Awake: it asks the API server something again (a keep-alive, a renewal, a read).
        wait_until(lambda: [e for e in old.requests(cluster.audit()) if received(e) > thawed_at],
                   60, f"a request of {old.name} after SIGCONT")  # fmt: skip
        # Time for stale work to surface: a second job, run start to end by whoever leads now.
        kubelet.plan({}, Behavior(), namespace=ns)
        create(cluster, small_job("after", ns))
        wait_condition(cluster, "after", ns, "Succeeded", timeout=int(pair.term * 3 + 60))
        versions = jobs.versions(uid=uid)

    stale = [e for e in work_writes(cluster.audit(), old) if received(e) >= first]
    back = moved_back(versions)
    assert (stale, back) == ([], []), (
        f"{old.name} wrote {len(stale)} times after {new.name}'s first write at "
        f"{first.isoformat()} (SIGCONT at {thawed_at.isoformat()}): {said(stale)[:12]}; "
        f"phase moved back: {back} (phases of woken: {phase_trail(versions)})"
    )


# ---------------------------------------------------------------------------------------------
# (c) the leader SIGKILLed mid-lifecycle.


def test_a_sigkilled_leader_is_replaced_within_20s_with_no_duplicate_create(
    cluster: Cluster, kubelet: FakeKubelet, pair: Pair, ns: str
) -> None:
    """Takeover (SIGKILL -> the standby's first write) <= 20 s; each child created once."""
    fsx_claim(cluster, ns)
    kubelet.plan({"trainium.dev/job-name": "steady"}, Behavior(outcome="RunForever"), ns)
    with Recorder(cluster.api, VCJOB_PATH.format(ns=ns)) as vcjobs:
        create(cluster, small_job("steady", ns, nodes=2))
        wait_until(lambda: len(kubelet.running(ns)) == 2, 120, "the gang running")
        wait_until(lambda: status_of(cluster, "steady", ns).get("phase") == "Training", 120,
                   "the job Training")  # fmt: skip
        create(cluster, small_job("late", ns))  # the leader may or may not get to it
        killed_at = datetime.datetime.now(datetime.timezone.utc)
        pair.leader.proc.kill()
        kubelet.finish(ns)  # steady's gang ends while nobody leads
        for name in ("steady", "late"):
            wait_condition(cluster, name, ns, "Succeeded", timeout=int(pair.term * 3 + 60))
        created = list(vcjobs.created().values())

    audit = cluster.audit()
    acted = [e for e in work_writes(audit, pair.standby) if received(e) >= killed_at]
    assert acted, f"{pair.standby.name} never wrote after the SIGKILL"
    took = (min(received(e) for e in acted) - killed_at).total_seconds()
    print(
        f"takeover: {pair.standby.name} wrote {took:.1f}s after the SIGKILL of {pair.leader.name}"
    )
    per_owner = collections.Counter((v.name, frozenset(v.owners())) for v in created)
    twice = {
        f"{name} (owner {sorted(owner)})": n for (name, owner), n in per_owner.items() if n > 1
    }
    creates = vcjob_creates(audit, ns)
    answered = collections.Counter((e["objectRef"]["name"]) for e in creates if code(e) == 201)
    assert twice == {}, f"Volcano jobs created twice for one owner: {twice}; {said(creates)}"
    assert answered == collections.Counter(v.name for v in created), said(creates)
    assert took <= TAKEOVER_S, f"the standby first wrote {took:.1f}s after the SIGKILL"


# ---------------------------------------------------------------------------------------------
# (d) the startup deadline, ten jobs at once: Failed means no gang ever again.


def test_jobs_failed_at_their_startup_deadline_get_no_new_gang(
    cluster: Cluster, kubelet: FakeKubelet, pair: Pair, ns: str
) -> None:
    """Ten one-node gangs that never start (on 6 nodes), deadline 60 s: Failed, then no create."""
    fsx_claim(cluster, ns)
    names = [f"deadline-{i}" for i in range(10)]
    with (
        Recorder(cluster.api, TJ_PATH.format(ns=ns)) as jobs,
        Recorder(cluster.api, VCJOB_PATH.format(ns=ns)) as vcjobs,
    ):
        # Pods that never start: the first gangs bind a node each and stay Pending there (as
        # an image that never arrives), the others find no node left; all pass the deadline.
        kubelet.plan({}, Behavior(outcome="NeverStart"), namespace=ns)
        for i, name in enumerate(names):
            kind = "trn1.2xlarge" if i < 2 else "trn1.32xlarge"
            run_policy = {"startupDeadlineSeconds": 60, "maxRetries": 2}
            create(cluster, small_job(name, ns, instanceType=kind, runPolicy=run_policy))

        def failed_at() -> dict[str, int]:
            """name -> the rv of the job's first version Failed."""
            found: dict[str, int] = {}
            for v in jobs.versions():
                if v.phase == "Failed":
                    found.setdefault(v.name, v.rv)
            return found

        def late() -> list[str]:
            """Volcano jobs created after their owner showed Failed."""
            failed = failed_at()
            return [
                f"{v.name} created at rv {v.rv}, after Failed at rv {failed[v.name[:-6]]}"
                for v in vcjobs.created().values()
                if v.name.endswith("-train")
                and v.name[:-6] in failed
                and v.rv > failed[v.name[:-6]]
            ]

        def all_failed() -> bool:
            assert not late(), f"a gang created after Failed: {late()}"
            return set(failed_at()) == set(names)

        wait_until(all_failed, 60 + 120, "all ten jobs Failed")
        holds(late, 15, "a Volcano job created after its TrainiumJob was Failed")
        finals = {n: jobs.versions(name=n)[-1].obj.get("status") or {} for n in names}

    reasons = {n: [c for c in conditions(s) if c[0] == "Failed"] for n, s in finals.items()}
    assert all(r and r[0][1] == "Unschedulable" for r in reasons.values()), reasons
    audit = cluster.audit()
    for name in names:
        answered = [e for e in vcjob_creates(audit, ns, f"{name}-train") if code(e) == 201]
        assert len(answered) == 1, f"{name}-train created {len(answered)} times: {said(answered)}"


# ---------------------------------------------------------------------------------------------
# (e) three bad nodes in a row: the job keeps going elsewhere.


def test_a_job_whose_pods_fail_on_three_nodes_succeeds_without_them(
    cluster: Cluster, kubelet: FakeKubelet, pair: Pair, ns: str
) -> None:
    """Neuron runtime failures on 3 distinct nodes: 3 excluded nodes, admitted gangs, Succeeded."""
    fsx_claim(cluster, ns)
    kubelet.plan(TRAINING, Behavior(outcome="RunForever"), namespace=ns)
    create(cluster, small_job("roaming", ns, runPolicy={"maxRetries": 8}))
    bad: list[str] = []
    failing = Behavior(exit_code=1, logs=("starting", NRT), run_seconds=0.5)

    def next_gang() -> list[tuple[str, str]] | None:
        status = status_of(cluster, "roaming", ns)
        assert status.get("phase") != "Failed", (
            f"Failed after bad nodes {bad}: {conditions(status)}; "
            f"{said(vcjob_creates(cluster.audit(), ns, 'roaming-train'))}"
        )
        return running_elsewhere(cluster, ns, bad) or None

    for _ in range(3):
        [(pod, node)] = wait_until(next_gang, 120, f"a gang running off {bad}", every=0.5)
        kubelet.plan(TRAINING, failing, namespace=ns, node=node)  # the node stays bad
        assert kubelet.fail_node(node, failing) == [pod]
        bad.append(node)

        def excluded(node: str = node) -> bool:
            status = status_of(cluster, "roaming", ns)
            assert status.get("phase") != "Failed", f"Failed after {bad}: {conditions(status)}"
            return any(e["node"] == node for e in status.get("excludedNodes") or [])

        wait_until(excluded, 120, f"{node} in status.excludedNodes", every=0.5)
    wait_until(next_gang, 120, f"a gang running off {bad}", every=0.5)
    kubelet.finish(ns)
    job = wait_condition(cluster, "roaming", ns, "Succeeded", timeout=120)
    entries = [(e["node"], e["reason"]) for e in job["status"]["excludedNodes"]]
    assert entries == [(n, "NeuronRuntimeError") for n in bad], entries
    refused = [e for e in vcjob_creates(cluster.audit(), ns) if code(e) not in (201, 409)]
    assert refused == [], said(refused)


# ---------------------------------------------------------------------------------------------
# (f) a user-code failure whose pod Volcano deletes at once keeps its class and tail.


def test_a_user_code_failure_keeps_its_class_and_log_tail(
    cluster: Cluster, kubelet: FakeKubelet, pair: Pair, ns: str
) -> None:
    """`RuntimeError: boom`, exit 1, the pod deleted by Volcano ms later: UserCodeError + tail."""
    fsx_claim(cluster, ns)
    lines = ("step 1 loss 2.5", "Traceback (most recent call last):",
             '  File "/app/train.py", line 9, in <module>', "RuntimeError: boom")  # fmt: skip
    names = [f"boom-{i}" for i in range(3)]
    # Rank 0 of boom-1 and boom-2 checkpointed first: the trainer's report is the termination
    # message, so the kubelet's FallbackToLogsOnError leaves the log tail out of it.
    for i, name in enumerate(names):
        saved = Path(f"/fsx/output/{name}/checkpoints/ckpt-00000005.pt")
        report = termination.report_line(5, saved, "2026-11-27T00:00:00Z")
        crash = Behavior(exit_code=1, logs=lines, run_seconds=1, message=report if i else "")
        kubelet.plan({"trainium.dev/job-name": name}, crash, namespace=ns)
    for i, name in enumerate(names):  # boom-2 is a gang of two: both pods fail
        create(cluster, small_job(name, ns, nodes=1 + i // 2, runPolicy={"maxRetries": 2}))
    lost = {}
    for name in names:
        job = wait_condition(cluster, name, ns, "Failed", timeout=120)
        last = job["status"].get("lastFailure") or {}
        if last.get("reason") != "UserCodeError" or "RuntimeError: boom" not in json.dumps(last):
            lost[name] = last
    print(f"failed pods deleted by Volcano {volcano_deletes(cluster.audit(), ns)} ms after "
          "their last status write")  # fmt: skip
    assert lost == {}, f"class or tail lost: {json.dumps(lost, indent=1)}"


def volcano_deletes(audit: list[Obj], ns: str) -> list[int]:
    """Milliseconds from each pod's last status write to Volcano's delete of it."""
    pods = [
        e for e in in_namespace(audit, ns) if (e.get("objectRef") or {}).get("resource") == "pods"
    ]
    out = []
    for e in pods:
        if e["verb"] != "delete" or "vc-controller" not in e.get("userAgent", ""):
            continue
        name = e["objectRef"].get("name")
        writes = [
            received(w) for w in pods
            if w["verb"] == "patch" and w["objectRef"].get("subresource") == "status"
            and w["objectRef"].get("name") == name and received(w) <= received(e)
        ]  # fmt: skip
        if writes:
            out.append(round((received(e) - max(writes)).total_seconds() * 1000))
    return sorted(out)
