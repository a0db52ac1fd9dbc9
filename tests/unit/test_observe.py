"""observe's verdicts on what it reads: the queue Volcano will admit into, and the storage."""

from __future__ import annotations

from typing import Any

import pytest
from support import job

from trainium_operator.api.spec import parse
from trainium_operator.cluster import k8s, observe, storage, watches
from trainium_operator.cluster.observe import Views
from trainium_operator.cluster.reads import Kind
from trainium_operator.manifests import cache
from trainium_operator.manifests.ownership import Owner


def queue(state: str | None) -> dict[str, Any]:
    q: dict[str, Any] = {"metadata": {"name": "q"}, "spec": {"weight": 1}}
    if state:
        q["status"] = {"state": state}
    return q


@pytest.mark.parametrize(
    ("found", "children", "reason"),
    [
        (None, {}, "QueueNotFound"),
        (queue("Closed"), {}, "QueueNotOpen"),
        (queue("Closing"), {}, "QueueNotOpen"),
        (queue("Open"), {"root": ["q"], "q": ["child"]}, "QueueNotLeaf"),
        (queue("Open"), {"root": ["q"]}, None),
        (queue(None), {}, None),  # a new queue before Volcano's controller set its state
    ],
)
def test_queue_blocker(
    monkeypatch: pytest.MonkeyPatch, found: Any, children: dict[str, list[str]], reason: str | None
) -> None:
    monkeypatch.setattr(k8s, "get_queue", lambda name: found)
    blocker = observe.queue_blocker("q", Views(children))
    assert (blocker.reason if blocker else None) == reason
    if blocker:
        assert "spec.scheduling.queue" in blocker.message and "'q'" in blocker.message


def claim(phase: str | None, uid: str = "c1") -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"name": "job-fsx", "uid": uid}}
    if phase:
        out["status"] = {"phase": phase}
    return out


def pv(ref_uid: str | None, deleting: bool = False) -> dict[str, Any]:
    md: dict[str, Any] = {"name": "ns-job-fsx", "resourceVersion": "7"}
    if deleting:
        md["deletionTimestamp"] = "2026-11-22T00:00:00Z"
    ref = {"namespace": "ns", "name": "job-fsx", **({"uid": ref_uid} if ref_uid else {})}
    return {"metadata": md, "spec": {"claimRef": ref}}


@pytest.mark.parametrize(
    ("volume", "found_claim", "ready", "released", "reason"),
    [
        (pv("c1"), claim("Bound"), True, False, None),
        (pv(None), claim("Pending"), False, False, "ClaimPending"),
        (pv("old"), claim("Pending"), False, True, None),  # bound to a claim that is gone
        (pv("old"), None, False, True, None),
        (pv("c1", deleting=True), None, False, False, "VolumeTerminating"),
        (pv(None), None, False, False, None),  # the claim is still to be created
    ],
)
def test_static_volume(
    volume: Any, found_claim: Any, ready: bool, released: bool, reason: str | None
) -> None:
    got = storage.static_volume(volume, found_claim)
    assert (got.ready, got.released) == (ready, released)
    assert (got.blocker.reason if got.blocker else None) == reason


def vcjob(phase: str, created: str, retries: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": "job-train", "creationTimestamp": created},
        "status": {"state": {"phase": phase}, "retryCount": retries},
    }


def test_startup_deadline_counts_from_the_gangs_creation_while_it_is_unscheduled() -> None:
    now = "2026-11-22T10:10:00Z"
    created = "2026-11-22T10:00:00Z"
    assert observe.startup_left(vcjob("Pending", created), 900, now) == 300.0
    assert observe.startup_left(vcjob("Pending", created), 600, now) == 0.0
    assert observe.startup_left(vcjob("Running", created), 60, now) is None
    assert observe.startup_left(vcjob("Pending", created, retries=1), 60, now) is None
    assert observe.startup_left(vcjob("Pending", created), None, now) is None


def test_a_stuck_gang_names_what_is_short(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainium_operator.manifests.ownership import Owner

    pod = {
        "metadata": {"name": "job-train-node-0-0"},
        "status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/4 nodes are available: 4 Insufficient aws.amazon.com/neuron.",
        }]},
    }  # fmt: skip
    monkeypatch.setattr(k8s, "list_pods", lambda ns, selector: [pod])
    failure = observe.stuck_failure(Owner("job", "ns", "u"), "train")
    assert failure.reason == "Unschedulable" and failure.short == "aws.amazon.com/neuron"
    assert failure.retry is False


# ---- the compile cache: a Ready record and who holds the entry's lease -------------------------


class World:
    """A reader over fixed objects (what the watches would hold)."""

    def __init__(self, objects: dict[tuple[Kind, str], Any]) -> None:
        self.objects = objects

    def get(self, kind: Kind, namespace: str, name: str) -> Any:
        return self.objects.get((kind, name))

    def wrote(self, kind: Kind, namespace: str, name: str, response: Any) -> None:
        return None

    def deleted(self, kind: Kind, namespace: str, name: str) -> None:
        return None


WRITER = Owner("w", "default", "uid-w")


def genuine_record(spec: Any) -> dict[str, Any]:
    """The record an operator writes when a compile of this entry completes."""
    return cache.record(
        cache.identity(spec), spec, WRITER, cache.READY,
        started_at="2026-01-01T00:00:00Z", now="2026-01-01T00:10:00Z",
    )  # fmt: skip


def cache_verdict(
    policy: str,
    holder_phase: str | None,
    record: dict[str, Any] | None = None,
    vcjobs: list[dict[str, Any]] | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[bool, str, str]:
    """(cache_recorded, cache_holder, holder job) of job "j" seeing a record and a lease."""
    spec = parse(job("j", precompile={"policy": policy}))
    name = cache.identity(spec).record_name
    bound = {"metadata": {"name": "fsx-claim"}, "status": {"phase": "Bound"}}
    objects: dict[tuple[Kind, str], Any] = {
        (Kind.RECORD, name): genuine_record(spec) if record is None else record,
        (Kind.CLAIM, "fsx-claim"): bound,
    }
    if holder_phase is not None:
        lease = {"metadata": {"name": name}, "spec": {"holderIdentity": "default/w/uid-w"}}
        writer = {"metadata": {"name": "w", "uid": "uid-w"}, "status": {"phase": holder_phase}}
        objects |= {(Kind.LEASE, name): lease, (Kind.TRAINIUMJOB, "w"): writer}
    listed: list[str] = []

    def list_vcjobs(namespace: str, selector: str) -> list[dict[str, Any]]:
        listed.append(selector)
        return vcjobs or []

    if monkeypatch is not None:
        monkeypatch.setattr(k8s, "list_vcjobs", list_vcjobs)
    seen = observe.observe(spec, Owner("j", "default", "uid-j"), Views(reader=World(objects)))
    if vcjobs is not None:
        assert listed == [f"trainium.dev/cache-entry={name},trainium.dev/stage=precompile"]
    obs = seen.observed
    return obs.cache_recorded, obs.cache_holder, obs.cache_holder_job


@pytest.mark.parametrize(
    ("holder_phase", "holder"),
    [
        (None, "none"),  # Ready, nobody writing
        ("Precompiling", "other"),  # compiled again (policy Always): the lifecycle waits for it
        ("Succeeded", "none"),  # the stale lease of a finished writer holds nothing
    ],
)
def test_a_ready_record_and_who_holds_its_lease(
    monkeypatch: pytest.MonkeyPatch, holder_phase: str | None, holder: str
) -> None:
    verdict = cache_verdict("IfNotCached", holder_phase, monkeypatch=monkeypatch)
    assert verdict[:2] == (True, holder)


def edited(spec_record: dict[str, Any], **data: str | None) -> dict[str, Any]:
    out = {**spec_record, "data": {**spec_record["data"], **data}}
    out["data"] = {k: v for k, v in out["data"].items() if v is not None}
    return out


def test_only_a_genuine_record_is_a_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Edited data or a hand-made record with our labels and state Ready is not a hit."""
    spec = parse(job("j"))
    real = genuine_record(spec)
    assert real["data"]["writer"] == "default/w/uid-w"
    hand_made = {"metadata": real["metadata"], "data": {"state": "Ready"}}
    for record, hit in [
        (real, True),
        (edited(real, key="bogus"), False),
        (edited(real, volume="claim:elsewhere"), False),
        (edited(real, cacheName="other"), False),
        (hand_made, False),
        (edited(real, writer=None), False),  # no writer: not written by a compiling job
        (edited(real, writer="default/w"), False),
        (edited(real, writer="other-ns/w/uid-w", compiledBy="other-ns/w"), False),
        (edited(real, compiledBy="default/someone-else"), False),
    ]:
        got = cache_verdict("IfNotCached", None, record, monkeypatch=monkeypatch)[0]
        assert got is hit, record["data"]
        entry = cache.read_entry(record, cache.identity(spec))
        assert entry is not None and (entry.state == cache.READY) is hit


def precompile_job(
    job_name: str, phase: str, *, deleting: bool = False, uid: str = ""
) -> dict[str, Any]:
    """A precompile Volcano job of job_name, controlled by uid (default: uid-<job_name>)."""
    ref = {"apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob", "name": job_name}
    ref |= {"uid": uid or f"uid-{job_name}", "controller": True}
    md: dict[str, Any] = {
        "name": f"{job_name}-compile",
        "annotations": {"trainium.dev/owner": f"default/{job_name}"},
        "ownerReferences": [ref],
    }
    if deleting:
        md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": md, "status": {"state": {"phase": phase}}}


@pytest.mark.parametrize(
    ("jobs", "holder", "holder_job"),
    [
        ([precompile_job("w", "Running")], "other", "default/w"),  # its Lease deleted mid-compile
        ([precompile_job("w", "Pending")], "other", "default/w"),
        ([precompile_job("w", "Completed"), precompile_job("x", "Failed")], "none", ""),  # done
        ([precompile_job("w", "Running", deleting=True)], "none", ""),
        ([precompile_job("j", "Running")], "none", ""),  # its own (a lagging watch)
        ([], "none", ""),
    ],
    ids=["running", "pending", "finished", "deleting", "own", "none"],
)
def test_a_running_compile_is_found_from_the_volcano_jobs_without_a_lease(
    monkeypatch: pytest.MonkeyPatch, jobs: list[dict[str, Any]], holder: str, holder_job: str
) -> None:
    verdict = cache_verdict("Always", None, vcjobs=jobs, monkeypatch=monkeypatch)
    assert verdict[1:] == (holder, holder_job)


@pytest.mark.parametrize(
    ("jobs", "holder"),
    [([precompile_job("w", "Running")], "other"), ([precompile_job("w", "Completed")], "none"),
     ([precompile_job("w", "Running", deleting=True)], "none"),
     ([precompile_job("j", "Running")], "none"), ([], "none"),
     ([precompile_job("j", "Running", uid="an-earlier-j")], "other")],
    ids=["running", "finished", "deleting", "own", "none", "earlier-object-of-this-name"],
)  # fmt: skip
def test_the_operator_finds_a_running_compile_in_its_index_without_a_list(
    monkeypatch: pytest.MonkeyPatch, jobs: list[dict[str, Any]], holder: str
) -> None:
    """The operator's index of precompile jobs (watches.precompiles) answers as a list would."""
    spec = parse(job("j", precompile={"policy": "Always"}))
    entry = cache.identity(spec).record_name
    monkeypatch.setattr(k8s, "list_vcjobs", lambda *_: pytest.fail("listed Volcano jobs"))
    index = {("default", entry): [watches.slim_precompile(j) for j in jobs]}
    found = observe.compiling_elsewhere(cache.identity(spec), Owner("j", "default", "uid-j"), index)
    holder_job = f"default/{jobs[0]['metadata']['name'].removesuffix('-compile')}" if jobs else ""
    assert found == ((holder, holder_job) if holder == "other" else ("none", ""))


def test_a_backstop_lists_the_precompiles_its_index_shows_and_trusts_an_empty_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fresh pass checks a ghost (deleted while a watch re-listed), never an absence."""
    spec = parse(job("j", precompile={"policy": "Always"}))
    ident, owner = cache.identity(spec), Owner("j", "default", "u")
    monkeypatch.setattr(k8s, "list_vcjobs", lambda *_: pytest.fail("listed Volcano jobs"))
    assert observe.compiling_elsewhere(ident, owner, {}, True) == ("none", "")
    ghost = {("default", ident.record_name): [watches.slim_precompile(
        precompile_job("w", "Running"))]}  # fmt: skip
    monkeypatch.setattr(k8s, "list_vcjobs", lambda *_: [])  # it is gone
    assert observe.compiling_elsewhere(ident, owner, ghost, True) == ("none", "")
    assert observe.compiling_elsewhere(ident, owner, ghost)[0] == "other"  # as watched


def test_a_replaced_gangs_pods_are_no_failures_of_the_next_instance() -> None:
    def pod(name: str, owner: str | None) -> dict:
        refs = [{"kind": "Job", "name": "j-train", "uid": owner}] if owner else []
        return {"metadata": {"name": name, "ownerReferences": refs}, "status": {}}

    old, new, plain = (
        pod("j-train-node-0-0", "uid-1"),
        pod("j-train-node-0-0", "uid-2"),
        pod("x", None),
    )
    job = {"metadata": {"name": "j-train", "uid": "uid-2"}}
    assert observe.of_instance([old, new, plain], job) == [new, plain]
    assert observe.of_instance([old, new], None) == [old, new]
    deleting = {
        "metadata": {"name": "j-train", "uid": "uid-1", "deletionTimestamp": "2026-11-25T06:00:00Z"}
    }
    assert observe.of_instance([old], deleting) == []
