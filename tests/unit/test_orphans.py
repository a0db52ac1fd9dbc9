"""A gang pod whose Node was deleted: the pure decision, and the writes PodGC would make."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from trainium_operator.cluster import k8s, orphans
from trainium_operator.cluster.reads import Kind
from trainium_operator.domain import budget, failures
from trainium_operator.domain import orphans as decide
from trainium_operator.domain.orphans import Orphan
from trainium_operator.runtime.leadership import NotLeader

JOB = {"apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob",
       "metadata": {"name": "j", "namespace": "ns", "uid": "job-1"}}  # fmt: skip


def pod(name: str, node: str, phase: str = "Running", gang: str = "j-train") -> dict[str, Any]:
    """The pod index's entry of replica `name` ("p1": the pod j-train-node-1-0) of a gang."""
    full = f"{gang}-node-{name[1:]}-0" if name.startswith("p") else name
    return {"namespace": "ns", "name": full, "uid": f"uid-{name}", "node": node, "phase": phase}


def vcjob(name: str, phase: str, owner: str = "job-1", **meta: Any) -> dict[str, Any]:
    ref = {"uid": owner, "controller": True, "kind": "TrainiumJob", "name": "j"}
    return {"metadata": {"name": name, "namespace": "ns", "ownerReferences": [ref], **meta},
            "status": {"state": {"phase": phase}}}  # fmt: skip


class Gangs:
    """The Volcano jobs as a pass reads them (by name)."""

    def __init__(self, *jobs: dict[str, Any]) -> None:
        self.jobs = {j["metadata"]["name"]: j for j in jobs}

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        assert kind is Kind.VCJOB and namespace == "ns"
        return self.jobs.get(name)

    def wrote(self, *_: Any) -> None: ...

    def deleted(self, *_: Any) -> None: ...


P1 = "j-train-node-1-0"
#: The training gang runs.
LIVE = Gangs(vcjob("j-train", "Running"))


def test_only_pods_bound_to_a_missing_node_are_orphaned() -> None:
    bound = [decide.from_index(pod("p1", "gone")), decide.from_index(pod("p0", "here"))]
    found = decide.orphaned([p for p in bound if p], lambda node: node == "here")
    assert [p.name for p in found] == [P1]


def test_an_unbound_or_partial_index_entry_is_not_an_orphan() -> None:
    assert decide.from_index({"namespace": "ns", "name": "p", "uid": "u"}) is None
    assert decide.from_index({**pod("p", ""), "node": ""}) is None


def test_the_patch_is_podgcs_condition_and_a_terminal_pod_is_only_deleted() -> None:
    orphan = Orphan("ns", "p", "u", "ip-1", "Running")
    patch = decide.status_patch(orphan, "2026-11-27T05:00:00Z")
    assert patch is not None and patch["metadata"] == {"uid": "u"}
    assert patch["status"]["phase"] == "Failed"
    (cond,) = patch["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("DisruptionTarget", "True",
                                                              "DeletionByPodGC")  # fmt: skip
    assert "ip-1" in cond["message"]
    assert decide.status_patch(Orphan("ns", "p", "u", "ip-1", "Failed"), "t") is None
    # The operator's classification reads it as a disruption: no maxRetries spent.
    shown = {"metadata": {"name": "p"}, "status": patch["status"]}
    found = failures.classify_pod(shown)
    assert found is not None and found.reason == "Evicted"
    assert decide.event_message(orphan) == (
        "node ip-1 was deleted: its pod p removed so the gang restarts"
    )


class Api:
    """core/v1 as far as orphans.py calls it: records each call."""

    def __init__(
        self, nodes: set[str], missing: set[str] = frozenset(),  # type: ignore[assignment]
        deleted_by: dict[str, int] | None = None,
    ) -> None:  # fmt: skip
        self.nodes, self.missing, self.calls = nodes, missing, []  # type: ignore[var-annotated]
        #: Pods someone else deletes (404) or replaces (409) between our status patch and delete.
        self.deleted_by = deleted_by or {}

    def read_node(self, name: str, **_: Any) -> Any:
        self.calls.append(("read_node", name))
        if name not in self.nodes:
            raise ApiException(status=404)
        return {"metadata": {"name": name}}

    def patch_namespaced_pod_status(self, name: str, ns: str, body: Any, **kw: Any) -> Any:
        self.calls.append(("patch_status", name, body, kw.get("_content_type")))
        if name in self.missing:
            raise ApiException(status=404)
        return {}

    def delete_namespaced_pod(self, name: str, ns: str, **kw: Any) -> Any:
        self.calls.append(("delete", name, kw["body"]))
        if name in self.deleted_by:
            raise ApiException(status=self.deleted_by[name])
        return {}


def indices(*pods: dict[str, Any], nodes: tuple[str, ...] = ("here",)) -> Any:
    return ({n: [True] for n in nodes}, {("job", "job-1"): list(pods)})


def run(
    monkeypatch: pytest.MonkeyPatch, api: Api, index: Any, gangs: Gangs = LIVE
) -> tuple[int, list[Any]]:
    emitted: list[Any] = []
    monkeypatch.setattr(k8s, "core", lambda: api)
    count = orphans.reap(JOB, index, lambda *a: emitted.append(a), gangs)
    return count, emitted


def test_a_pod_of_a_deleted_node_is_marked_then_force_deleted_with_its_uid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = Api(nodes={"here"})
    count, emitted = run(monkeypatch, api, indices(pod("p0", "here"), pod("p1", "gone")))
    assert count == 1
    (read, patched, deleted) = api.calls
    assert read == ("read_node", "gone")  # confirmed with the API server, as PodGC does
    assert patched[1] == P1 and patched[3] == orphans.STRATEGIC_MERGE
    assert patched[2]["status"]["conditions"][0]["reason"] == "DeletionByPodGC"
    options = deleted[2]
    assert (deleted[1], options.grace_period_seconds, options.preconditions.uid) == (
        P1, 0, "uid-p1")  # fmt: skip
    ((body, kind, reason, message, _action),) = emitted
    assert (body, kind, reason) == (JOB, "Warning", "NodeGone") and "gone" in message


def test_a_node_the_index_lags_is_asked_for_and_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = Api(nodes={"here", "new"})
    count, emitted = run(monkeypatch, api, indices(pod("p1", "new")))
    assert (count, emitted, api.calls) == (0, [], [("read_node", "new")])


def test_a_pod_already_gone_is_neither_deleted_nor_told(monkeypatch: pytest.MonkeyPatch) -> None:
    api = Api(nodes=set(), missing={P1})
    count, emitted = run(monkeypatch, api, indices(pod("p1", "gone")))
    assert (count, emitted) == (0, [])
    assert [c[0] for c in api.calls] == ["read_node", "patch_status"]


@pytest.mark.parametrize("code", [404, 409])
def test_a_pod_we_failed_that_its_gangs_restart_deleted_first_still_names_its_node(
    monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    # The tier's interleaving: our status patch fails the pod (DeletionByPodGC), Volcano's
    # RestartJob deletes the gang's pods at once, and our force-delete finds it gone (404) or
    # its name already the restarted gang's pod (409). The node is lost all the same: a spare
    # swap must name it (status.spares.lost), and the Event tell it.
    api = Api(nodes=set(), deleted_by={P1: code})
    gone: list[Any] = []
    emitted: list[Any] = []
    monkeypatch.setattr(k8s, "core", lambda: api)
    count = orphans.reap(JOB, indices(pod("p1", "gone")), lambda *a: emitted.append(a), LIVE, gone)
    assert [c[0] for c in api.calls] == ["read_node", "patch_status", "delete"]
    assert count == 1 and [o.node for o in gone] == ["gone"]
    ((_body, _kind, reason, _message, _action),) = emitted
    assert reason == "NodeGone"


def test_without_the_watches_nothing_is_read_or_written(monkeypatch: pytest.MonkeyPatch) -> None:
    api = Api(nodes=set())
    assert run(monkeypatch, api, None) == (0, []) and api.calls == []


def test_a_standby_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside its leadership term the fence refuses the first write: no patch, no delete."""

    def closed() -> None:
        raise NotLeader("not ours")

    monkeypatch.setattr(k8s, "fence", closed)
    api = Api(nodes=set())
    with pytest.raises(NotLeader):
        run(monkeypatch, api, indices(pod("p1", "gone")))
    assert api.calls == [("read_node", "gone")]  # a read only


def test_a_finished_precompile_jobs_succeeded_pod_is_left_with_its_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 34 5(c): the lost node held a precompile pod that finished; nothing restarts."""
    done = Gangs(vcjob("j-train", "Running"), vcjob("j-compile-n2", "Completed"))
    compiled = pod("p0", "gone", "Succeeded", gang="j-compile-n2")
    api = Api(nodes={"here"})
    assert run(monkeypatch, api, indices(compiled), done) == (0, [])
    assert api.calls == []  # not even the node is asked for


def test_only_a_live_gangs_pods_go_and_the_event_says_what_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gangs = Gangs(
        vcjob("j-train-1", "Running"),
        vcjob("j-train", "Running", deletionTimestamp="2026-11-27T05:00:00Z"),  # replaced
        vcjob("j-compile", "Failed"),
        vcjob("other-train", "Running", owner="job-2"),  # a name this job does not control
    )
    bound = (
        pod("p0", "gone", gang="j-train-1"), pod("p1", "gone", "Succeeded", gang="j-train-1"),
        pod("p2", "gone", gang="j-train"), pod("p3", "gone", "Failed", gang="j-compile"),
        pod("p4", "gone", gang="other-train"), pod("p5", "gone", gang="j-vanished"),
    )  # fmt: skip
    count, emitted = run(monkeypatch, Api(nodes=set()), indices(*bound), gangs)
    told = {m.split(" removed so ")[0].split()[-1]: (m.split(" removed so ")[1], a)
            for (_b, _k, _r, m, a) in emitted}  # fmt: skip
    assert count == 2 and told == {
        "j-train-1-node-0-0": ("the gang restarts", "Restart"),
        "j-train-node-2-0": ("its gang j-train can stop", "Stop"),
    }, told


def test_a_pod_is_ours_by_its_gangs_name() -> None:
    assert decide.gang_of(Orphan("ns", "j-train-1a2b-node-3-0", "u", "n")) == "j-train-1a2b"
    assert decide.gang_of(Orphan("ns", "someone-else", "u", "n")) == ""


def test_a_pass_over_a_fleet_gang_on_live_nodes_parses_only_the_orphan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1,024 pods on nodes that exist and one on a deleted node: only that one becomes an
    Orphan (issue 35: every pass parsed every pod, 80% of a 1,024-node job's pass CPU)."""
    parsed: list[Any] = []
    real = decide.from_index
    monkeypatch.setattr(decide, "from_index", lambda e: parsed.append(e) or real(e))
    live = tuple(f"n{i}" for i in range(1024))
    gang = [pod(f"p{i}", f"n{i}") for i in range(1024)]
    count, _ = run(monkeypatch, Api(nodes=set(live)), indices(*gang, pod("p1024", "gone"),
                                                              nodes=live))  # fmt: skip
    assert count == 1
    assert [e["name"] for e in parsed] == ["j-train-node-1024-0"]


def test_a_restart_for_a_pod_removed_for_its_node_is_a_disruption_though_no_pass_saw_it_fail() -> (
    None
):
    # The pass that removes the pod lists the gang after Volcano's restart deleted it: no
    # failed pod to see (the watch's Failed event trails). Without the removal as evidence the
    # restart counted as Unknown: a runPolicy.maxRetries spent (main's tier run, restarts 1).
    removed = [Orphan("ns", P1, "uid-p1", "gone", "Running")]
    running, restarted = budget.Gang("g1", 0), budget.Gang("g1", 1)  # then Volcano restarted

    def counted(failure: failures.Failure | None) -> tuple[int, int]:
        first = budget.account(budget.Tally(), running, failure, 3)
        tally = budget.account(first.tally, restarted, None, 3).tally  # no pod seen failed
        return tally.restarts, tally.disruptions

    assert counted(None) == (1, 0)  # what the removal alone left: a retry spent
    seen = decide.explain(None, removed)
    assert seen is not None and (seen.reason, seen.node) == ("Evicted", "gone")
    assert counted(seen) == (0, 1)


def test_a_disruption_already_seen_stays_and_no_removal_explains_nothing() -> None:
    removed = [Orphan("ns", P1, "uid-p1", "gone")]
    make_failure = failures.make_failure
    preempted = make_failure("Preempted", "pod x: Preempted")
    assert decide.explain(preempted, removed) is preempted
    assert decide.explain(None, []) is None
    oom = make_failure("OOMKilled", "pod y: OOMKilled")
    assert decide.explain(oom, []) is oom
    explained = decide.explain(oom, removed)
    assert explained is not None and explained.reason == "Evicted"
