"""values.schema.json: typos and wrong types fail `helm template` (so `helm install`) loudly."""

from __future__ import annotations

from pathlib import Path

import pytest

from helmchart import helm, template_args

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
]


@pytest.mark.parametrize(("value", "message"), REJECTED, ids=[v for v, _ in REJECTED])
def test_schema_rejects(helm_bin: Path, value: str, message: str) -> None:
    proc = helm(*template_args(value), check=False)
    assert proc.returncode != 0, f"--set {value} was accepted"
    assert "don't meet the specifications of the schema" in proc.stderr
    assert message in proc.stderr, proc.stderr


ACCEPTED = [
    ("--set-string", "image.tag=12"),
    ("--set", "operator.awsRegion=us-west-2"),
    ("--set", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/x"),
    ("--set", "env[0].name=LOG_LEVEL,env[0].value=debug"),
    ("--set", "tolerations[0].key=dedicated,tolerations[0].operator=Exists"),
]


@pytest.mark.parametrize(("flag", "value"), ACCEPTED, ids=[v for _, v in ACCEPTED])
def test_schema_accepts_valid_values(helm_bin: Path, flag: str, value: str) -> None:
    args = template_args()
    helm(*args, flag, value)
