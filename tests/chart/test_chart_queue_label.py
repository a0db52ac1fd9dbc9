"""The queue-name label under Kueue (issue 41): the chart's admission policy does for TrainiumJobs
what Kueue's webhook does for its own jobs. Its CEL is core CEL, evaluated here with
`common-expression-language` (tests/cluster/test_tier_kueue.py has the real API server enforce
it). On main there was no such policy: any change went through, and removing the label from a
waiting job started its gang outside the quota."""

from __future__ import annotations

from typing import Any

import cel
import pytest

from helmchart import by_kind, render

Obj = dict[str, Any]
NAME = "trainiumjobs.trainium.dev-queue-name"
LABEL = "kueue.x-k8s.io/queue-name"


def policy(*sets: str) -> Obj | None:
    found = [d for d in by_kind(render(*sets), "ValidatingAdmissionPolicy")
             if d["metadata"]["name"] == NAME]  # fmt: skip
    return found[0] if found else None


@pytest.fixture(scope="module")
def rendered(helm_bin: Any) -> Obj:
    found = policy()
    assert found is not None
    return found


def job(queue: str | None, phase: str | None) -> Obj:
    body: Obj = {"metadata": {"name": "j", "labels": {"app": "x"}}}
    if queue is not None:
        body["metadata"]["labels"][LABEL] = queue
    if phase is not None:
        body["status"] = {"phase": phase}
    return body


def verdict(doc: Obj, old: Obj, new: Obj) -> tuple[bool, str]:
    context: Obj = {"oldObject": old, "object": new}
    context["variables"] = {
        v["name"]: cel.evaluate(v["expression"], context) for v in doc["spec"]["variables"]
    }
    [rule] = doc["spec"]["validations"]
    ok = bool(cel.evaluate(rule["expression"], context))
    return ok, "" if ok else str(cel.evaluate(rule["messageExpression"], context))


CASES = [
    # (old label, new label, phase, allowed)
    ("team-a", "team-b", "Pending", True),  # waiting: its Workload moves to the new queue
    ("team-a", "team-b", None, True),  # not looked at yet
    ("team-a", None, "Pending", False),  # waiting: its gang would start outside the quota
    ("team-a", None, "WaitingForCache", False),
    ("team-a", "team-b", "Training", False),  # admitted and running: Kueue's webhook refuses
    ("team-a", None, "Precompiling", False),
    (None, "team-a", "Training", False),  # a running gang is not put under quota midway
    (None, "team-a", "Pending", True),
    ("team-a", None, "Suspended", True),  # nothing runs, its Workloads are deactivated
    ("team-a", None, "Succeeded", True),
    ("team-a", "team-a", "Training", True),  # other edits of a running job
    (None, None, "Training", True),
]


@pytest.mark.parametrize(("before", "after", "phase", "allowed"), CASES)
def test_the_label_is_kept_while_a_gang_may_run_or_waits_for_quota(
    rendered: Obj, before: str | None, after: str | None, phase: str | None, allowed: bool
) -> None:
    ok, message = verdict(rendered, job(before, phase), job(after, phase))
    assert ok is allowed, message
    if not ok:
        assert LABEL in message and "suspend" in message


def test_it_matches_updates_of_trainiumjobs_only_and_denies(rendered: Obj) -> None:
    (rule,) = rendered["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["trainium.dev"] and rule["operations"] == ["UPDATE"]
    assert rule["resources"] == ["trainiumjobs"]  # not trainiumjobs/status: the operator's writes
    (binding,) = [d for d in by_kind(render(), "ValidatingAdmissionPolicyBinding")
                  if d["metadata"]["name"] == NAME]  # fmt: skip
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_it_can_be_turned_off(helm_bin: Any) -> None:
    assert policy("kueue.guardQueueLabel=false") is None
