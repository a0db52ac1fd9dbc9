"""The managed compile cache end to end: one writer per entry, waiting jobs, identity, restarts."""

from __future__ import annotations

import pytest
from test_operator_e2e import (
    claim,
    condition,
    job,
    prerequisites,
    status,
    vcjob,
    vcjobs,
    wait_phase,
)

from harness import EmulatorServer, OperatorProcess, apply, kubectl, simulate_vcjob_phase, wait_for
from trainium_operator.api.spec import parse
from trainium_operator.manifests import cache
from trainium_operator.manifests.ownership import MANAGED_BY, Owner

RECORDS, LEASES = "v1/configmaps", "coordination.k8s.io/v1/leases"


def entry_state(k8s: EmulatorServer, ns: str) -> list[str]:
    return [r["data"]["state"] for r in k8s.list(RECORDS, ns) if "state" in r.get("data", {})]


def test_two_jobs_with_one_key_compile_once(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    apply(job(ns, "first", q))
    vcjob(k8s, ns, "first-compile")
    wait_phase(ns, "first", "Precompiling")
    assert entry_state(k8s, ns) == []  # recorded once, when the compile ends
    lease = k8s.list(LEASES, ns)[0]
    assert lease["spec"]["holderIdentity"].startswith(f"{ns}/first/")

    apply(job(ns, "second", q))  # same graphs, same claim, same cacheset
    st = wait_phase(ns, "second", "WaitingForCache")
    assert f"{ns}/first" in st["message"]
    assert condition(ns, "second", "Precompiled")["reason"] == "WaitingForCache"

    simulate_vcjob_phase(ns, "first-compile", "Completed")
    vcjob(k8s, ns, "second-train")  # woken by the entry turning Ready, not by a timer
    assert "second-compile" not in vcjobs(k8s, ns)
    wait_for(lambda: entry_state(k8s, ns) == ["Ready"], what="the entry Ready")
    assert k8s.list(LEASES, ns) == []  # released by its writer
    record = k8s.list(RECORDS, ns)[0]["data"]
    assert record["startedAt"] == lease["spec"]["acquireTime"]  # the lease dated the compile
    assert record["compiledBy"] == f"{ns}/first" and "durationSeconds" in record
    second = wait_for(lambda: status(ns, "second").get("cache", {}).get("hit") is True,
                      what="second: cache hit")  # fmt: skip
    assert second
    cache = status(ns, "second")["cache"]
    assert "savedSeconds" in cache and cache["entry"] == status(ns, "first")["cache"]["entry"]
    wait_for(lambda: "compileSeconds" in status(ns, "first")["cache"], what="first: compile time")


def test_another_claim_is_another_cache(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    claim(ns, "other-claim")
    apply(job(ns, "here", q, precompile={"policy": "Always"}))
    vcjob(k8s, ns, "here-compile")
    simulate_vcjob_phase(ns, "here-compile", "Completed")
    vcjob(k8s, ns, "here-train")
    apply(job(ns, "there", q, storage={"claimName": "other-claim"}))
    vcjob(k8s, ns, "there-compile")  # the graphs are not on this volume: compile, no false hit
    st = wait_phase(ns, "there", "Precompiling")
    assert (
        st["cache"]["outcome"] == "miss"
        and st["cache"]["entry"] != status(ns, "here")["cache"]["entry"]
    )
    apply(job(ns, "elsewhere", q, cache={"name": "bert-large", "path": "other_cache"}))
    vcjob(k8s, ns, "elsewhere-compile")


def test_operator_restarted_while_a_job_waits_for_the_cache(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    apply(job(ns, "writer", q))
    vcjob(k8s, ns, "writer-compile")
    apply(job(ns, "reader", q))
    wait_phase(ns, "reader", "WaitingForCache")
    operator.kill()
    simulate_vcjob_phase(ns, "writer-compile", "Completed")
    operator.start()
    vcjob(k8s, ns, "reader-train")
    assert "reader-compile" not in vcjobs(k8s, ns)


def test_a_stale_lease_is_taken_over(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """The writer was deleted mid-compile: the next job takes its lease over and compiles."""
    q = prerequisites(ns)
    apply(job(ns, "gone", q))
    vcjob(k8s, ns, "gone-compile")
    apply(job(ns, "next", q))
    wait_phase(ns, "next", "WaitingForCache")
    kubectl("delete", "trainiumjobs.v1alpha1.trainium.dev", "gone", "-n", ns, "--wait=false")
    vcjob(k8s, ns, "next-compile", timeout=30)  # the stale holder is judged by its job
    lease = k8s.list(LEASES, ns)[0]
    assert lease["spec"]["holderIdentity"].startswith(f"{ns}/next/")
    assert lease["spec"]["leaseTransitions"] == 1


def test_a_graph_field_changed_on_a_live_job_is_refused_and_records_nothing(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """The emulator, like an API server without CEL, stores the edit: the operator refuses it."""
    q = prerequisites(ns)
    apply(job(ns, "resized", q))
    vcjob(k8s, ns, "resized-compile")
    compiling = wait_phase(ns, "resized", "Precompiling")["cache"]
    kubectl("patch", "trainiumjobs.v1alpha1.trainium.dev", "resized", "-n", ns, "--type=merge",
            "-p", '{"spec": {"nodes": 4}}')  # fmt: skip
    wait_for(lambda: condition(ns, "resized", "Validated").get("reason") == "ImmutableFieldChanged",
             what="Validated=False ImmutableFieldChanged")  # fmt: skip
    assert "spec.nodes" in condition(ns, "resized", "Validated")["message"]  # among the fields
    # Status describes what runs (the 2-node compile), not the refused 4-node key (issue 21).
    assert status(ns, "resized")["cache"] == compiling
    simulate_vcjob_phase(ns, "resized-compile", "Completed")  # a 2-node compile finishing
    wait_for(lambda: condition(ns, "resized", "Precompiled").get("status") == "True",
             what="the operator saw the compile finish")  # fmt: skip
    assert entry_state(k8s, ns) == []  # not Ready: no 4-node job may trust it
    assert "resized-train" not in vcjobs(k8s, ns)
    kubectl("patch", "trainiumjobs.v1alpha1.trainium.dev", "resized", "-n", ns, "--type=merge",
            "-p", '{"spec": {"nodes": 2}}')  # fmt: skip
    vcjob(k8s, ns, "resized-train")
    assert entry_state(k8s, ns) == ["Ready"]


def test_a_forced_recompile_of_a_ready_entry_makes_readers_wait_then_rerecords_it(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """policy Always over a Ready entry: the graphs are being rewritten, so no one trusts them."""
    q = prerequisites(ns)
    apply(job(ns, "first", q))
    vcjob(k8s, ns, "first-compile")
    simulate_vcjob_phase(ns, "first-compile", "Completed")
    vcjob(k8s, ns, "first-train")
    wait_for(lambda: entry_state(k8s, ns) == ["Ready"], what="the entry Ready")

    apply(job(ns, "again", q, precompile={"policy": "Always"}))
    vcjob(k8s, ns, "again-compile")
    apply(job(ns, "reader", q))  # IfNotCached, same entry
    st = wait_phase(ns, "reader", "WaitingForCache")
    assert f"{ns}/again" in st["message"] and "reader-train" not in vcjobs(k8s, ns)
    before = k8s.list(RECORDS, ns)
    simulate_vcjob_phase(ns, "first-train", "Running")  # the first writer is woken meanwhile
    wait_for(lambda: condition(ns, "first", "Running").get("status") == "True", what="first runs")
    assert k8s.list(RECORDS, ns) == before  # and does not re-record what "again" rewrites

    simulate_vcjob_phase(ns, "again-compile", "Completed")
    vcjob(k8s, ns, "reader-train")
    assert "reader-compile" not in vcjobs(k8s, ns)

    def by_again() -> list[dict[str, str]]:
        mine = f"{ns}/again"
        return [r["data"] for r in k8s.list(RECORDS, ns) if r["data"]["compiledBy"] == mine]

    record = wait_for(by_again, what="the entry re-recorded by its new writer")
    assert record[0]["state"] == "Ready" and len(k8s.list(RECORDS, ns)) == 1
    assert record[0]["startedAt"]  # the writer's lease dated it


def test_a_lease_deleted_mid_precompile_does_not_start_a_second_compile(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    """A user or a namespace cleanup deletes the Lease: the Volcano jobs still say who compiles."""
    q = prerequisites(ns)
    apply(job(ns, "first", q))
    vcjob(k8s, ns, "first-compile")
    wait_for(lambda: k8s.list(LEASES, ns), what="first's lease")
    kubectl("delete", "leases.v1.coordination.k8s.io", "--all", "-n", ns)
    apply(job(ns, "second", q))
    st = wait_phase(ns, "second", "WaitingForCache")
    assert f"{ns}/first" in st["message"]
    assert "second-compile" not in vcjobs(k8s, ns) and k8s.list(LEASES, ns) == []
    simulate_vcjob_phase(ns, "first-compile", "Completed")
    vcjob(k8s, ns, "second-train")
    assert "second-compile" not in vcjobs(k8s, ns)
    assert entry_state(k8s, ns) == ["Ready"]


@pytest.mark.parametrize(("edit", "hit"), [({}, True), ({"key": "bogus"}, False)])
def test_an_edited_record_is_not_a_hit(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer, edit: dict[str, str], hit: bool
) -> None:
    """The record of a writer that is gone: a hit as written, a miss once its data is edited."""
    q = prerequisites(ns)
    body = job(ns, "reader", q)
    spec = parse(body)
    gone = Owner("gone", ns, "uid-gone")
    done = cache.record(cache.identity(spec), spec, gone, cache.READY,
                        started_at="2026-01-01T00:00:00Z", now="2026-01-01T00:10:00Z")  # fmt: skip
    done["data"].update(edit)
    apply(done)
    apply(body)
    vcjob(k8s, ns, "reader-train" if hit else "reader-compile")
    outcome = wait_for(lambda: status(ns, "reader").get("cache", {}).get("outcome"), what="cache")
    assert outcome == ("hit" if hit else "miss")
    assert ("reader-compile" in vcjobs(k8s, ns)) is not hit


def test_a_hand_made_ready_record_is_not_a_hit(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    q = prerequisites(ns)
    body = job(ns, "trusting", q)
    ident = cache.identity(parse(body))
    labels = {
        "trainium.dev/cache-entry": ident.record_name,
        "trainium.dev/cache-key": ident.key,
        "trainium.dev/cache-name": ident.name,
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }
    md = {"name": ident.record_name, "namespace": ns, "labels": labels}
    data = {"state": "Ready", "key": ident.key}
    apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data})
    apply(body)
    vcjob(k8s, ns, "trusting-compile")
    assert wait_phase(ns, "trusting", "Precompiling")["cache"]["outcome"] == "miss"
