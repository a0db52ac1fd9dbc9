"""`helm template` output: valid Kubernetes (kubernetes-validate --strict), the operator's
runtime contract (command, env, probes, hardening), and well-formed monitoring objects."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helmchart import CHART, NON_DEFAULT, by_kind, one, render, render_text
from trainium_operator.manifests import ownership

KUBE_VERSION = "1.33.0"  # the oldest Kubernetes we support
KUBERNETES_VALIDATE = str(Path(sys.executable).parent / "kubernetes-validate")
# Kinds kubernetes-validate has no schema for; checked structurally below instead.
CUSTOM_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
Obj = dict[str, Any]


@pytest.mark.parametrize("sets", [(), NON_DEFAULT], ids=["defaults", "non-default"])
def test_builtin_kinds_pass_kubernetes_validate_strict(helm_bin: Path, sets: tuple) -> None:  # type: ignore[type-arg]
    text = render_text(*sets)
    docs = [d for d in yaml.safe_load_all(text) if d]
    proc = subprocess.run(
        [KUBERNETES_VALIDATE, "--strict", "-k", KUBE_VERSION, "-"],
        input=text, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    passed = [line for line in proc.stdout.splitlines() if " passed for resource " in line]
    builtin = [d for d in docs if d["kind"] not in CUSTOM_KINDS]
    assert len(passed) == len(builtin), proc.stdout
    for line in proc.stdout.splitlines() + proc.stderr.splitlines():
        if line.startswith("WARN"):  # only the kinds we check ourselves may lack a schema
            assert any(f"kind {k} " in line for k in CUSTOM_KINDS), line


def deployment(*sets: str) -> Obj:
    return one(render(*sets), "Deployment")


def container(*sets: str) -> Obj:
    containers = deployment(*sets)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]  # type: ignore[no-any-return]


def test_two_peered_replicas_by_default_one_standalone_otherwise(helm_bin: Path) -> None:
    spec = deployment()["spec"]
    assert spec["replicas"] == 2 and spec["strategy"] == {"type": "RollingUpdate"}
    assert "--leader-elect=trainium" in container()["command"]
    pdb = one(render(), "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]
    alone = deployment("peering.enabled=false", "replicaCount=1")["spec"]
    assert alone["replicas"] == 1
    assert alone["strategy"] == {"type": "Recreate"}  # kopf --standalone: no peering to arbitrate
    assert not by_kind(render("peering.enabled=false", "replicaCount=1"), "PodDisruptionBudget")


def test_leader_election_values_and_their_deprecated_peering_names(helm_bin: Path) -> None:
    """leaderElection.* names what the chart does (a Lease election); peering.* (kopf peering's
    names) still works and wins when set, so an old values file means what it meant."""

    def election(*sets: str) -> tuple[list[str], dict[str, str | None], list[str]]:
        docs = render(*sets)
        [c] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
        leases = [
            name
            for role in by_kind(docs, "ClusterRole") + by_kind(docs, "Role")
            for rule in role.get("rules") or []
            if "leases" in rule.get("resources", [])
            for name in rule.get("resourceNames", [])
        ]
        return c["command"][2:3], {e["name"]: e.get("value") for e in c["env"]}, leases

    new = ("leaderElection.leaseName=ops", "leaderElection.leaseDurationSeconds=20")
    old = ("peering.name=ops", "peering.lifetimeSeconds=20")
    for sets in (new, old, ("leaderElection.leaseName=x", *old)):
        command, env, leases = election(*sets)
        assert command == ["--leader-elect=ops"], sets
        assert env["TRAINIUM_LEASE_DURATION_SECONDS"] == "20", sets
        assert leases == ["ops"], sets
    for off in ("leaderElection.enabled=false", "peering.enabled=false"):
        assert election(off, "replicaCount=1")[0] == ["--standalone"], off


def test_command_watches_all_namespaces_or_the_listed_ones(helm_bin: Path) -> None:
    assert container("peering.enabled=false", "replicaCount=1")["command"] == [
        "trainium", "operator", "--standalone", "--all-namespaces",
        "--liveness=http://0.0.0.0:8080/healthz", "--log-format=text",
    ]  # fmt: skip
    cmd = container("watchNamespaces={a,b}")["command"]
    assert "--all-namespaces" not in cmd
    assert cmd[3:5] == ["--namespace=a", "--namespace=b"]


def test_the_log_format_is_a_value_and_the_operator_takes_it(helm_bin: Path) -> None:
    """Issue 26: text or JSON log lines; `trainium operator` accepts what the chart passes."""
    from trainium_operator.cli import operator

    for value in ("text", "json"):
        cmd = container(f"operator.logFormat={value}")["command"]
        assert f"--log-format={value}" in cmd
        assert f"--log-format={'full' if value == 'text' else value}" in operator.kopf_argv(cmd[2:])
    with pytest.raises(AssertionError, match="value must be one of 'text', 'json'"):
        render("operator.logFormat=yaml")  # values.schema.json refuses it


def test_env_ports_and_liveness_probe(helm_bin: Path) -> None:
    c = container("operator.awsRegion=eu-west-1", "env[0].name=X,env[0].value=y")
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env == {
        "POD_NAME": None, "POD_ID": None, "TRAINIUM_LEASE_DURATION_SECONDS": "15",
        "POD_NAMESPACE": None, "TRAINIUM_METRICS_PORT": "9090",
        "TRAINIUM_RESYNC_SECONDS": "1800", "TRAINIUM_PROGRESS_INTERVAL_SECONDS": "30",
        "TRAINIUM_PROGRESS_WRITE_SECONDS": "60", "TRAINIUM_FIRST_STEP_ALLOWANCE_SECONDS": "900",
        "AWS_REGION": "eu-west-1", "X": "y",
    }  # fmt: skip
    assert c["env"][0]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    scoped = {e["name"] for e in container("watchNamespaces={a,b}")["env"]}
    assert "TRAINIUM_PEERING_NAMESPACES" not in scoped  # kopf peering is gone: nothing reads it
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"health": 8080, "metrics": 9090}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert "AWS_REGION" not in {e["name"] for e in container()["env"]}
    alone = {e["name"] for e in container("peering.enabled=false", "replicaCount=1")["env"]}
    assert not alone & {"POD_ID", "TRAINIUM_LEASE_DURATION_SECONDS"}


def test_the_lease_is_client_gos_and_lets_a_standby_take_over_within_17s(helm_bin: Path) -> None:
    """The chart's lifetime is the election's Lease duration: client-go's timing (issue 32: a
    tighter one flapped under CPU pressure), so a standby acts within ~17 s."""
    from trainium_operator.runtime import leadership

    env = {e["name"]: e.get("value") for e in container()["env"]}
    timing = leadership.timing_from(env)
    assert timing == leadership.Timing() and timing.duration + timing.retry <= 17


def test_resync_default_is_the_measured_code_default(helm_bin: Path) -> None:
    """BENCHMARKS.md measures the code's backstop; the chart must not ship a 90x busier one."""
    from trainium_operator.runtime.passes import RESYNC

    env = {e["name"]: e.get("value") for e in container()["env"]}
    assert float(env["TRAINIUM_RESYNC_SECONDS"]) == RESYNC


def test_hardened_pod_with_writable_tmp_only(helm_bin: Path) -> None:
    pod = deployment()["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = pod["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["containers"][0]["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert pod["volumes"][0]["emptyDir"]


def test_image_defaults_to_app_version_and_pod_options_pass_through(helm_bin: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert container()["image"].endswith(f":{chart['appVersion']}")
    d = deployment(
        "image.tag=dev", "imagePullSecrets[0].name=regcred", "nodeSelector.pool=system",
        "podAnnotations.a=b", "tolerations[0].key=k,tolerations[0].operator=Exists",
    )  # fmt: skip
    pod = d["spec"]["template"]
    assert pod["spec"]["containers"][0]["image"].endswith(":dev")
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["spec"]["nodeSelector"] == {"pool": "system"}
    assert pod["spec"]["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert pod["metadata"]["annotations"] == {"a": "b"}


#: An image digest (sha256: and 64 hex digits), as `docker buildx imagetools inspect` prints it.
DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_image_by_digest_runs_repository_at_digest_whatever_the_tag(helm_bin: Path) -> None:
    repository = yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"]
    assert container(f"image.digest={DIGEST}")["image"] == f"{repository}@{DIGEST}"
    assert container(f"image.digest={DIGEST}", "image.tag=dev")["image"] == f"{repository}@{DIGEST}"
    tagged = container("image.repository=r.example/op", "image.tag=dev")
    assert tagged["image"] == "r.example/op:dev"


def test_no_helm_hooks(helm_bin: Path) -> None:
    """Hooks fight Argo CD (it runs them as sync hooks, or not at all): none anywhere."""
    for doc in render(*NON_DEFAULT) + render():
        annotations = doc["metadata"].get("annotations") or {}
        assert not [a for a in annotations if a.startswith("helm.sh/hook")], doc["metadata"]


def test_service_account_annotations_for_irsa(helm_bin: Path) -> None:
    arn = "arn:aws:iam::123456789012:role/trainium-operator"
    sa = one(render(f"serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={arn}"),
             "ServiceAccount")  # fmt: skip
    assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": arn}


# ---- monitoring objects, checked structurally (no schema for them offline) -----------------


def exported_series() -> set[str]:
    """Every series name the operator's metrics module can export."""
    from prometheus_client import REGISTRY

    import trainium_operator.runtime.metrics  # noqa: F401  (registers the collectors)

    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    return {
        m.name + s
        for m in REGISTRY.collect()
        if m.name.startswith("trainium_operator_")
        for s in suffixes.get(m.type, [""])
    }


def metric_names(text: str) -> set[str]:
    return set(re.findall(r"trainium_operator_[a-z_]+", text))


def test_service_monitor_scrapes_the_metrics_service(helm_bin: Path) -> None:
    docs = render(*NON_DEFAULT)
    sm, svc = one(docs, "ServiceMonitor"), one(docs, "Service")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}
    [endpoint] = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert endpoint["honorLabels"] is True  # the per-job series' own `namespace` label
    assert sm["metadata"]["namespace"] == "ops"
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()


def test_pod_monitor_scrapes_the_trainers_named_port(helm_bin: Path) -> None:
    """Off by default; on, it selects training pods by the port the builders declare."""
    from trainium_trainer import contract

    assert not by_kind(render(), "PodMonitor")
    pm = one(render(*NON_DEFAULT), "PodMonitor")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert pm["spec"]["selector"] == {"matchLabels": {ownership.LABEL_STAGE: contract.STAGE_TRAIN}}
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    [endpoint] = pm["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == (contract.METRICS_PORT_NAME, "/metrics")
    assert endpoint["relabelings"][0]["targetLabel"] == "trainiumjob"
    anywhere = one(render("metrics.podMonitor.enabled=true"), "PodMonitor")
    assert anywhere["spec"]["namespaceSelector"] == {"any": True}


def test_prometheus_rules_use_exported_metrics(helm_bin: Path) -> None:
    rule = one(render(*NON_DEFAULT), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert rules["TrainiumJobFailed"]["expr"] == (
        "increase(trainium_operator_job_failures_total[15m]) > 0"
    )
    assert rules["TrainiumJobPrecompileSlow"]["expr"] == (
        'time() - trainium_operator_job_phase_start_time_seconds{phase="Precompiling"} > 7200'
    )
    exported = exported_series()
    for r in rules.values():
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}
        assert metric_names(r["expr"]) <= exported, r["expr"]
        assert "{{ $labels" not in r["expr"]  # Prometheus templates only in annotations


def test_dashboard_configmap_is_grafana_json_over_exported_metrics(helm_bin: Path) -> None:
    cm = one(render(*NON_DEFAULT), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["trainium-operator.json"])
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert exprs and dash["uid"] == "trainium-operator"
    used = set().union(*(metric_names(e) for e in exprs))
    assert used <= exported_series()
    assert {"trainium_operator_jobs", "trainium_operator_job_failures_total"} <= used
    assert "trainium_operator_estimated_cost_usd_total" in used  # the cost panels
    # Per-job panels over the trainers' own gauges (the PodMonitor scrapes them).
    from trainium_trainer import contract

    served = {v for k, v in vars(contract).items() if k.startswith("METRIC_")}
    trainer = set().union(*(set(re.findall(r"trainium_trainer_[a-z_]+", e)) for e in exprs))
    assert trainer <= served
    assert {
        contract.METRIC_SAMPLES_PER_SECOND,
        contract.METRIC_LOSS,
        contract.METRIC_STEP,
    } <= trainer
    per_job = [e for e in exprs if "trainium_trainer_" in e]
    assert all("trainiumjob" in e for e in per_job), per_job


def test_optional_parts_are_off_by_default(helm_bin: Path) -> None:
    kinds = {d["kind"] for d in render()}
    assert kinds == {
        "ServiceAccount", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
        "Service", "Deployment", "PodDisruptionBudget", "NetworkPolicy",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    }  # fmt: skip
    assert not by_kind(render("rbac.create=false"), "ClusterRole")


def test_service_monitor_namespace_is_overridable(helm_bin: Path) -> None:
    docs = render("metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.namespace=mon")
    sm = one(docs, "ServiceMonitor")
    assert sm["metadata"]["namespace"] == "mon"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}  # still the operator's


@pytest.mark.parametrize(
    ("duration", "seconds"), [("2h", 7200), ("1h30m", 5400), ("1d2h3m4s", 93784), ("45s", 45)]
)
def test_precompile_slow_threshold_is_the_duration_in_seconds(
    helm_bin: Path, duration: str, seconds: int
) -> None:
    sets = ("metrics.prometheusRule.enabled=true",
            f"metrics.prometheusRule.precompileSlowAfter={duration}")  # fmt: skip
    rule = one(render(*sets), "PrometheusRule")
    [slow] = [r for g in rule["spec"]["groups"] for r in g["rules"]
              if r["alert"] == "TrainiumJobPrecompileSlow"]  # fmt: skip
    assert slow["expr"].endswith(f"> {seconds}")


def test_openshift_restricted_scc_can_drop_the_fixed_ids(helm_bin: Path) -> None:
    unset = [f"podSecurityContext.{k}=null" for k in ("runAsUser", "runAsGroup", "fsGroup")]
    pod = deployment(*unset)["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True,
                                      "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    sc = container("securityContext.readOnlyRootFilesystem=false")["securityContext"]
    assert sc["readOnlyRootFilesystem"] is False and sc["capabilities"] == {"drop": ["ALL"]}


def test_readiness_probe_on_kopf_health_endpoint(helm_bin: Path) -> None:
    probe = container("readinessProbe.periodSeconds=7")["readinessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "health"}
    assert probe["periodSeconds"] == 7


def test_every_operator_env_the_chart_sets_is_read_by_the_operator(helm_bin: Path) -> None:
    """An env nothing reads is a setting that silently does nothing (as the old peering one)."""
    source = "\n".join(p.read_text() for p in (CHART.parents[1] / "operator").rglob("*.py"))
    every = ("watchNamespaces={a,b}", "operator.logFormat=json")
    names = {e["name"] for e in container(*every)["env"] if e["name"].startswith("TRAINIUM_")}
    unread = sorted(n for n in names if f'"{n}"' not in source)
    assert names and not unread, unread
