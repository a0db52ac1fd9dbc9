"""Pod logs are read as text: lines stay lines, whatever the client version makes of text/plain.

kubernetes==36.0.3 hands a text/plain body back as a bytes repr (`b'...\\n...'`, one line;
kubernetes-client/python#2596): line-anchored failure rules then cannot match.
"""

from __future__ import annotations

import urllib.request

from harness import EmulatorServer, apply
from trainium_operator.cluster import k8s
from trainium_operator.domain import failures

LOG = "step 1 loss 7.1\nsecond line ü\nValueError: the batch size must divide the data\n"


def a_pod_with_a_log(server: EmulatorServer, ns: str, name: str, log: str) -> None:
    apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
           "spec": {"containers": [{"name": "node", "image": "trainer:1"}]}})  # fmt: skip
    server.emulator.pod_logs[(ns, name)] = log


def test_the_emulator_serves_logs_as_text_plain_like_the_api_server(
    k8s: EmulatorServer, ns: str
) -> None:
    a_pod_with_a_log(k8s, ns, "plain", LOG)
    url = f"{k8s.url}/api/v1/namespaces/{ns}/pods/plain/log"
    with urllib.request.urlopen(url) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        assert answer.read().decode() == LOG


def test_a_log_tail_is_real_lines(k8s: EmulatorServer, ns: str) -> None:
    a_pod_with_a_log(k8s, ns, "talker", LOG)
    lines = k8s_tail(ns, "talker", 50)
    assert lines == LOG.splitlines()
    assert k8s_tail(ns, "talker", 1) == ["ValueError: the batch size must divide the data"]


def test_undecodable_bytes_do_not_lose_the_tail() -> None:
    assert k8s.log_lines(b"ok\nbad \xff byte\r\nlast\n", 2) == ["bad \ufffd byte", "last"]


def test_a_line_anchored_rule_matches_what_was_read(k8s: EmulatorServer, ns: str) -> None:
    a_pod_with_a_log(k8s, ns, "user-bug", LOG)
    term = {"reason": "Error", "exitCode": 1}
    pod = {"metadata": {"name": "user-bug"}, "status": {"phase": "Failed", "containerStatuses": [
        {"name": "node", "state": {"terminated": term}}]}}  # fmt: skip
    failure = failures.classify_pod(pod, k8s_tail(ns, "user-bug", 50))
    assert failure is not None and failure.reason == "UserCodeError"
    assert failure.message.endswith("ValueError: the batch size must divide the data")


def k8s_tail(ns: str, pod: str, lines: int) -> list[str]:
    return k8s.pod_log_tail(ns, pod, "node", lines)
