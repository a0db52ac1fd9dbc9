"""The installed `trainium` as a user runs it: `--help` everywhere, `--version`, one-line errors.

Every case runs the console script pip installed (`.venv/bin/trainium`) in a subprocess, as
kubectl and helm are run: errors are one `error:` line on stderr, never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from support import CRD_FILE

from harness import EmulatorServer, apply, free_port, kubectl, write_kubeconfig
from trainium_operator.domain import logs

TRAINIUM = Path(sys.executable).with_name("trainium")


def trainium(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`trainium ARGS` with the installed console script (a hang fails the case, not the run)."""
    assert TRAINIUM.is_file(), f"{TRAINIUM} is not installed (make install)"
    return subprocess.run(
        [str(TRAINIUM), *args], capture_output=True, text=True, timeout=120, check=False,
        env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def one_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The single `error:` line a failed command printed (and nothing else)."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


HELP = [
    [],
    ["render"],
    ["run"],
    ["logs"],
    ["operator"],
    ["data"],
    ["data", "synth-bert"],
]


@pytest.mark.parametrize("command", HELP, ids=lambda c: " ".join(c) or "trainium")
def test_every_help_exits_0(command: list[str]) -> None:
    result = trainium(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {' '.join(['trainium', *command])}"), result.stdout
    assert result.stderr == ""


def test_data_help_names_its_tools() -> None:
    out = trainium("data", "--help").stdout
    assert "synth-bert" in out and "trainium data synth-bert --out" in out


def test_version() -> None:
    result = trainium("--version")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"trainium {version('trainium-operator')}\n"


@pytest.mark.parametrize(
    ("argv", "says", "help_of"),
    [
        ([], "a command is required", "trainium"),
        (["render"], "the following arguments are required: -f/--filename", "trainium render"),
        (["logs", "j", "--rank", "x"], "argument --rank: invalid int value: 'x'", "trainium logs"),
        (["data"], "a tool is required", "trainium data"),
        (["data", "nope"], "invalid choice: 'nope'", "trainium data"),
        (["data", "synth-bert"], "required: --out", "trainium data synth-bert"),
        (["operator", "--standalon"], "unrecognized arguments: --standalon", "trainium operator"),
        (
            ["render", "-f", "j.yaml", "--fsx-id"],
            "unrecognized arguments: --fsx-id",
            "trainium render",
        ),
        (["--bogus", "render", "-f", "j.yaml"], "unrecognized arguments: --bogus", "trainium"),
    ],
    ids=[
        "none",
        "render",
        "logs-rank",
        "data",
        "data-tool",
        "synth-bert",
        "operator",
        "render-flag",
        "top-flag",
    ],
)
def test_a_usage_mistake_is_one_line_that_points_at_help(
    argv: list[str], says: str, help_of: str
) -> None:
    line = one_error(trainium(*argv), 2)
    assert says in line, line
    assert line.endswith(f"(see {help_of} --help)"), line


def test_logs_without_a_kubeconfig_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=str(tmp_path / "no-such-kubeconfig"), HOME=str(tmp_path))
    line = one_error(trainium("logs", "bert", "-n", "team-a", env=env), 1)
    assert "kubeconfig" in line and "KUBECONFIG" in line, line


def test_logs_with_no_api_server_listening_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    url = f"http://127.0.0.1:{free_port()}"
    write_kubeconfig(config, url)
    env = {**os.environ, "KUBECONFIG": str(config)}
    line = one_error(trainium("logs", "bert", "-n", "team-a", env=env), 1)
    assert line.startswith(f"error: cannot reach the Kubernetes API at {url}: "), line


@pytest.fixture(scope="module")
def crd(k8s: EmulatorServer) -> None:
    """The TrainiumJob CRD in the emulator, as `helm install` puts it."""
    kubectl("apply", "--validate=false", "-f", str(CRD_FILE))
    kubectl("wait", "--for=condition=Established", "crd/trainiumjobs.trainium.dev", "--timeout=10s")


def a_job(ns: str, name: str, status: dict[str, Any] | None = None) -> None:
    """A 32-rank TrainiumJob (1 x trn1.32xlarge), with a status when given."""
    apply({"apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"image": "i", "instanceType": "trn1.32xlarge", "nodes": 1,
                    "storage": {"claimName": "c"}}})  # fmt: skip
    if status is not None:
        kubectl("patch", "tj", name, "-n", ns, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": status}))  # fmt: skip


def test_a_rank_outside_the_job_names_the_world_size(crd: None, ns: str) -> None:
    a_job(ns, "wide")
    line = one_error(trainium("logs", "wide", "-n", ns, "--rank", "99"), 2)
    assert line == ("error: --rank 99: job wide has 32 ranks (0-31: 1 node x 32 processes)"), line
    line = one_error(trainium("logs", "wide", "-n", ns, "--node", "1"), 2)
    assert line == "error: --node 1: job wide has 1 node (0)", line


def test_a_missing_job_is_one_line(crd: None, ns: str) -> None:
    line = one_error(trainium("logs", "nope", "-n", ns), 2)
    assert line == f"error: TrainiumJob 'nope' not found in namespace '{ns}'"


def test_the_failed_job_hint_names_the_namespace(crd: None, ns: str) -> None:
    failure = {"reason": "OOMKilled", "message": "pod x: OOMKilled (exit 137)",
               "logTail": ["step 9 loss 2.1", "Killed"]}  # fmt: skip
    a_job(ns, "oom", {"phase": "Failed", "lastFailure": failure})
    result = trainium("logs", "oom", "-n", ns)
    assert "Traceback" not in result.stderr
    hint = f"kubectl get tj oom -n {ns} -o jsonpath='{logs.TAIL_PATH}'"
    assert hint in result.stderr, result.stderr
    # The hint is a command a user can paste: it prints the log tail, a line each.
    pasted = kubectl("get", "tj", "oom", "-n", ns, "-o", f"jsonpath={logs.TAIL_PATH}")
    assert pasted.stdout == "step 9 loss 2.1\nKilled\n"


CLOSED_PIPE = [
    ["render", "-f", "examples/bert-claim.yaml", "-o", "json"],
    ["render", "-f", "examples/bert-claim.yaml"],
    ["--version"],
    *[[*c, "--help"] for c in HELP],
]


@pytest.mark.parametrize("command", CLOSED_PIPE, ids=" ".join)
def test_a_closed_pipe_ends_quietly(command: list[str]) -> None:
    """`trainium ... | head -1`: no BrokenPipeError traceback; 141 (SIGPIPE's) as kubectl."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write: every write meets EPIPE
    try:
        proc = subprocess.run([str(TRAINIUM), *command], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120, check=False, cwd=Path(__file__).parents[2],
                              stdin=subprocess.DEVNULL)  # fmt: skip
    finally:
        os.close(write)
    assert proc.stderr == ""
    # argparse prints --help and --version itself and ignores a failed write: those end 0.
    assert proc.returncode == (0 if command[-1] in ("--help", "--version") else 141)


def test_followed_logs_stop_on_a_closed_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """`trainium logs -f | head`: the pod threads stop and the command ends (no hang)."""
    import io
    import itertools

    from trainium_operator.cli import logs as cli_logs

    class Closed(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError

    monkeypatch.setattr(sys, "stdout", Closed())
    endless = [(n, f"p{n}", (f"[default0]:line {i}" for i in itertools.count())) for n in (0, 1)]
    with pytest.raises(BrokenPipeError):
        cli_logs._print_labelled(endless, logs.Target("train", None, None, 1), parallel=True)
