"""values.schema.json: typos and wrong types fail `helm template` (so `helm install`) loudly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from helmchart import CHART, helm, template_args

REJECTED = [
    ("imagee.repository=x", "additional properties 'imagee' not allowed"),
    ("metrics.serviceMonitor.enable=true", "additional properties 'enable' not allowed"),
    ("metrics.port=abc", "at '/metrics/port': got string, want integer"),
    ("metrics.port=70000", "at '/metrics/port': maximum: got 70,000, want 65,535"),
    ("image.pullPolicy=Sometimes", "value must be one of 'Always', 'IfNotPresent', 'Never'"),
    ("watchNamespaces=default", "at '/watchNamespaces': got string, want array"),
    ("watchNamespaces={Bad_NS}", "at '/watchNamespaces/0': 'Bad_NS' does not match pattern"),
    ("crds.enabled=yes", "at '/crds/enabled': got string, want boolean"),
    ("operator.resyncSeconds=0", "at '/operator/resyncSeconds': minimum: got 0, want 1"),
    ("podSecurityContext.runAsUser=0", "at '/podSecurityContext/runAsUser': minimum: got 0"),
    ("metrics.prometheusRule.failureWindow=15", "failureWindow': got number, want string"),
    ("image.tag=12", "at '/image/tag': got number, want string"),  # --set-string image.tag=12
    ("image.digest=0123abcd", "at '/image/digest': '0123abcd' does not match pattern"),
    (f"image.digest=sha256:{'A' * 64}", "at '/image/digest'"),  # lowercase hex only
    ("peering.enabled=false,replicaCount=2", "at '/replicaCount': maximum: got 2, want 1"),
    (
        "leaderElection.enabled=false,replicaCount=2",
        "at '/replicaCount': maximum: got 2, want 1",
    ),
    ("peering.name=Trainium", "at '/peering/name'"),
    ("leaderElection.leaseName=Trainium", "at '/leaderElection/leaseName'"),
    ("env[0].nmae=X", "at '/env/0': additional properties 'nmae' not allowed"),
    (
        "env[0].name=X,env[0].valueFrom.secretKeyRef.name=s,env[0].valueFrom.fieldRef.x=y",
        "at '/env/0/valueFrom': maxProperties",
    ),
    ("tolerations[0].keyy=X", "at '/tolerations/0': additional properties 'keyy' not allowed"),
    ("tolerations[0].operator=Exist", "at '/tolerations/0/operator': value must be one of"),
    ("imagePullSecrets={regcred}", "at '/imagePullSecrets/0': got string, want object"),
    ("podSecurityContext.runAsUsr=5", "additional properties 'runAsUsr' not allowed"),
    ("securityContext.readOnlyRootFileSystem=true", "'readOnlyRootFileSystem' not allowed"),
    ("readinessProbe.period=5", "at '/readinessProbe': additional properties 'period' not"),
    ("metrics.serviceMonitor.namespace=Mon", "at '/metrics/serviceMonitor/namespace'"),
    ("metrics.serviceMonitor.interval=5s5s", "'5s5s' does not match pattern"),
    ("metrics.prometheusRule.precompileSlowAfter=2hours", "'2hours' does not match pattern"),
]


@pytest.mark.parametrize(("value", "message"), REJECTED, ids=[v for v, _ in REJECTED])
def test_schema_rejects(helm_bin: Path, value: str, message: str) -> None:
    proc = helm(*template_args(value), check=False)
    assert proc.returncode != 0, f"--set {value} was accepted"
    assert "don't meet the specifications of the schema" in proc.stderr
    assert message in proc.stderr, proc.stderr


ACCEPTED = [
    ("--set-string", "image.tag=12"),
    ("--set", f"image.digest=sha256:{'0a' * 32}"),
    ("--set", "operator.awsRegion=us-west-2"),
    ("--set", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/x"),
    ("--set", "env[0].name=LOG_LEVEL,env[0].value=debug"),
    ("--set", "tolerations[0].key=dedicated,tolerations[0].operator=Exists"),
    ("--set", "env[0].name=NODE,env[0].valueFrom.fieldRef.fieldPath=spec.nodeName"),
    ("--set", "replicaCount=0"),
    ("--set", "podSecurityContext.runAsUser=null"),
    ("--set", "metrics.serviceMonitor.interval=1m30s"),
    ("--set", "metrics.prometheusRule.failureWindow=1h"),
]


@pytest.mark.parametrize(("flag", "value"), ACCEPTED, ids=[v for _, v in ACCEPTED])
def test_schema_accepts_valid_values(helm_bin: Path, flag: str, value: str) -> None:
    args = template_args()
    helm(*args, flag, value)


#: prometheus-operator's monitoringv1.Duration (pkg/apis/monitoring/v1/types.go), which its
#: ServiceMonitor `interval` and PrometheusRule `for` are validated against.
PROMETHEUS_OPERATOR_DURATION = (
    "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)


def _refs(node: object, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        if "$ref" in node:
            yield path, node["$ref"]
        for k, v in node.items():
            yield from _refs(v, f"{path}/{k}")


def test_every_duration_uses_prometheus_operators_pattern() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["definitions"]["duration"]["pattern"] == PROMETHEUS_OPERATOR_DURATION
    durations = {p for p, ref in _refs(schema) if ref == "#/definitions/duration"}
    assert {p.rsplit("/", 1)[-1] for p in durations} == {
        "interval",
        "failureWindow",
        "precompileSlowAfter",
    }
    # No other copy of a duration pattern anywhere in the schema.
    assert json.dumps(schema).count("([0-9]+)ms") == 1


def test_replica_limit_says_why() -> None:
    """Standalone operators: never two (both would act); peered ones: any number stand by."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    replicas = schema["properties"]["replicaCount"]
    assert "maximum" not in replicas
    assert "--standalone" in replicas["description"]
    assert "leaderElection" in replicas["description"]
    for name in ("leaderElection", "peering"):  # peering: its deprecated name
        [rule] = [r for r in schema["allOf"] if name in r["if"]["properties"]]
        assert rule["then"]["properties"]["replicaCount"]["maximum"] == 1


@pytest.mark.parametrize("sets", [("metrics.port=8080",), ("health.port=9090",)])
@pytest.mark.parametrize("command", ["template", "install"])
def test_metrics_port_equal_to_the_health_port_is_refused(
    helm_bin: Path, command: str, sets: tuple[str, ...]
) -> None:
    """Both servers bind in one pod: the operator would die with "address already in use".

    A JSON schema cannot compare two fields, so the chart's templates refuse it (`fail`); helm
    lint only logs a template's `fail` (lint mode), install and template exit non-zero.
    """
    args = template_args(*sets)
    if command == "install":
        args = ["install", *args[1:], "--dry-run=client"]
    proc = helm(*args, check=False)
    assert proc.returncode != 0, f"{command} accepted {sets}"
    assert "metrics.port and health.port must differ (both are " in proc.stderr


def test_distinct_ports_are_accepted(helm_bin: Path) -> None:
    helm(*template_args("metrics.port=9091", "health.port=9090"))
