"""Argo CD's testdata are TrainiumJobs the operator really wrote, and stay so.

Drives the real operator (emulator + kubectl, Volcano simulated) through every phase and, at
each, checks that the live object has the health health_test.yaml expects for its testdata file
(restricted Lua, as Argo CD runs it) and the same status shape (phase, condition types, statuses
and reasons). TRAINIUM_WRITE_ARGOCD_TESTDATA=1 rewrites the files from the live objects instead.
"""

from __future__ import annotations

import os
import re
from typing import Any

import yaml
from test_operator_e2e import claim

from argocd import CUSTOMIZATION, health, health_tests
from harness import EmulatorServer, OperatorProcess, apply, get, simulate_vcjob_phase, wait_for

TJ = "trainiumjobs.v1alpha1.trainium.dev"
VCJOBS = "batch.volcano.sh/v1alpha1/jobs"
WRITE = os.environ.get("TRAINIUM_WRITE_ARGOCD_TESTDATA") == "1"
NS = "ml"  # the namespace testdata files show
Obj = dict[str, Any]


class _Indented(yaml.SafeDumper):
    """Block sequences indented under their key, as yamllint (.yamllint.yaml) wants."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def manifest(ns: str, name: str, queue: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/trainer:1.0",
                 "args": ["bert-pretrain", "--data-dir", "/data/bert"],
                 "instanceType": "trn1.32xlarge", "nodes": 2, "storage": {"claimName": "data"},
                 "cache": {"name": "bert"}, "scheduling": {"queue": queue}, **spec},
    }  # fmt: skip


def published(live: Obj, ns: str) -> Obj:
    """The live object as a testdata file: no server-assigned ids, kopf's annotations or test
    namespace (messages say `ml`)."""
    text = yaml.safe_dump(live, sort_keys=False).replace(ns, NS)
    obj: Obj = yaml.safe_load(re.sub(r"q-ml\b", "test", text))
    meta = obj["metadata"]
    for key in ("uid", "resourceVersion", "managedFields"):
        meta.pop(key, None)
    kept = {k: v for k, v in (meta.pop("annotations", None) or {}).items()
            if not k.startswith(("trainium.dev/", "kubectl.kubernetes.io/"))}  # fmt: skip
    if kept:
        meta["annotations"] = kept
    return obj


def shape(obj: Obj) -> tuple[Any, ...]:
    st = obj.get("status") or {}
    conds = sorted((c["type"], c["status"], c["reason"]) for c in st.get("conditions") or [])
    return st.get("phase"), tuple(conds)


def check(live: Obj, ns: str, input_path: str) -> None:
    """Compare live with its testdata file (or write it): same shape, the expected health."""
    path = CUSTOMIZATION / input_path
    if WRITE:
        header = "# Written by the operator (tests/e2e/test_argocd_health.py), ids stripped.\n"
        path.write_text(header + yaml.dump(published(live, ns), Dumper=_Indented, sort_keys=False))
    expected = {p: h for _, h, p in health_tests()}[input_path]
    stored = yaml.safe_load(path.read_text())
    assert shape(published(live, ns)) == shape(stored), input_path
    got = health(published(live, ns))
    assert got["status"] == expected["status"], (input_path, got)


def phase_is(ns: str, name: str, phase: str, reason: str | None = None) -> Obj | None:
    live = get(TJ, name, ns) or {}
    st = live.get("status") or {}
    reasons = {c.get("reason") for c in st.get("conditions") or []}
    return live if st.get("phase") == phase and (reason is None or reason in reasons) else None


def wait_live(ns: str, name: str, phase: str, reason: str | None = None) -> Obj:
    return wait_for(lambda: phase_is(ns, name, phase, reason), timeout=20,
                    what=f"{name} {phase} {reason or ''}")  # fmt: skip


def test_testdata_are_what_the_operator_writes(
    operator: OperatorProcess, ns: str, k8s: EmulatorServer
) -> None:
    queue = f"q-{ns}"
    claim(ns, "data")  # bound by the emulated provisioner
    check(manifest(ns, "bert", queue), ns, "testdata/new.yaml")  # as created: no status yet
    apply(manifest(ns, "bert", queue))
    check(wait_live(ns, "bert", "Pending", "QueueNotFound"), ns, "testdata/pending.yaml")
    apply({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
           "metadata": {"name": queue}, "spec": {"weight": 1}})  # fmt: skip
    check(wait_live(ns, "bert", "Precompiling"), ns, "testdata/precompiling.yaml")
    simulate_vcjob_phase(ns, "bert-compile", "Completed")
    wait_for(lambda: k8s.get(VCJOBS, ns, "bert-train"), timeout=20, what="bert-train")
    simulate_vcjob_phase(ns, "bert-train", "Running")
    check(wait_live(ns, "bert", "Training"), ns, "testdata/training.yaml")
    simulate_vcjob_phase(ns, "bert-train", "Completed")
    check(wait_live(ns, "bert", "Succeeded"), ns, "testdata/succeeded.yaml")

    apply(manifest(ns, "oom", queue, precompile={"policy": "Never"}))
    wait_for(lambda: k8s.get(VCJOBS, ns, "oom-train"), timeout=20, what="oom-train")
    simulate_vcjob_phase(ns, "oom-train", "Failed",
                         state={"phase": "Failed", "reason": "PodFailed",
                                "message": "pod oom-train-worker-0 OOMKilled"})  # fmt: skip
    check(wait_live(ns, "oom", "Failed"), ns, "testdata/failed.yaml")

    apply(manifest(ns, "wide", queue, nprocPerNode=64))  # the emulator does not enforce the CRD
    check(wait_live(ns, "wide", "Failed", "InvalidSpec"), ns, "testdata/invalid.yaml")
