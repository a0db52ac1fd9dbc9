"""`trainium render`: YAML or JSON out, one `error:` line per problem, never a traceback.

A few cases run the real command in a subprocess (each costs ~2 s of imports); the rest call
`cli.main` in-process, where an uncaught exception would fail the test just the same.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest
import yaml
from support import EXAMPLES, REPO

from trainium_operator import cli

TUTORIAL = EXAMPLES / "bert-large-pretrain.yaml"


def _bad_tutorial() -> str:
    job = yaml.safe_load(TUTORIAL.read_text(encoding="utf-8"))
    job["spec"].update(nodes=0, precision="fp16", instanceType="p4d.24xlarge")
    return yaml.safe_dump(job)


#: The subprocess cases: name -> (argv after `trainium`, stdin).
COMMANDS: dict[str, tuple[list[str], str | None]] = {
    "yaml": (["render", "-f", str(TUTORIAL)], None),
    "json": (["render", "-f", str(TUTORIAL), "-o", "json"], None),
    "invalid": (["render", "-f", "-"], _bad_tutorial()),
    "missing": (["render", "-f", "examples/does-not-exist.yaml"], None),
}


@pytest.fixture(scope="module")
def runs() -> dict[str, subprocess.CompletedProcess[str]]:
    """Every subprocess case, started at once so their import time overlaps."""
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "trainium_operator", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for name, (argv, _) in COMMANDS.items()
    }
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(COMMANDS[name][1] or "", timeout=120)
        results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return results


@pytest.fixture
def run_inline(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    """`trainium ARGS` in this process, with the same result shape as the subprocess."""

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin or ""))
        code = cli.main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out, err)

    return run


@pytest.fixture(scope="module")
def rendered_yaml(runs: dict[str, subprocess.CompletedProcess[str]]) -> list[dict[str, Any]]:
    result = runs["yaml"]
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def test_render_prints_pv_pvc_precompile_and_training(rendered_yaml: list[dict[str, Any]]) -> None:
    kinds = [(d["apiVersion"], d["kind"], d["metadata"]["name"]) for d in rendered_yaml]
    assert kinds == [
        ("v1", "PersistentVolume", "default-bert-large-pretrain-fsx"),
        ("v1", "PersistentVolumeClaim", "bert-large-pretrain-fsx"),
        ("batch.volcano.sh/v1alpha1", "Job", "bert-large-pretrain-compile"),
        ("batch.volcano.sh/v1alpha1", "Job", "bert-large-pretrain-train"),
    ]
    stages = [d["metadata"]["labels"]["trainium.dev/stage"] for d in rendered_yaml[2:]]
    assert stages == ["precompile", "train"]


def test_offline_render_has_no_owner_without_a_uid(rendered_yaml: list[dict[str, Any]]) -> None:
    assert all("ownerReferences" not in d["metadata"] for d in rendered_yaml)


def test_render_json_parses_to_the_same_objects(
    runs: dict[str, subprocess.CompletedProcess[str]], rendered_yaml: list[dict[str, Any]]
) -> None:
    result = runs["json"]
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    assert doc["items"] == rendered_yaml


def test_render_from_stdin_and_never_policy_has_no_precompile(run_inline: Any) -> None:
    job = yaml.safe_load(TUTORIAL.read_text(encoding="utf-8"))
    job["spec"]["precompile"] = {"policy": "Never"}
    result = run_inline("render", "-f", "-", stdin=yaml.safe_dump(job))
    assert result.returncode == 0, result.stderr
    stages = [
        d["metadata"]["labels"].get("trainium.dev/stage")
        for d in yaml.safe_load_all(result.stdout)
        if d["kind"] == "Job"
    ]
    assert stages == ["train"]


def _errors(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), lines
    return lines


def test_invalid_job_gives_one_line_per_problem(
    runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    lines = _errors(runs["invalid"])
    assert len(lines) == 3
    for field in ("spec.nodes", "spec.precision", "spec.instanceType"):
        assert sum(field in line for line in lines) == 1, field
    assert all("bert-large-pretrain" in line for line in lines)  # which job, in a multi-doc file


def test_cel_rule_violation_is_reported(run_inline: Any) -> None:
    job = yaml.safe_load(TUTORIAL.read_text(encoding="utf-8"))
    job["spec"]["compilerFlags"] = ["--cache_dir=/tmp"]
    lines = _errors(run_inline("render", "-f", "-", stdin=yaml.safe_dump(job)))
    assert lines == [
        "error: bert-large-pretrain: spec.compilerFlags may not contain --cache_dir: "
        "the operator manages the cache directory (see spec.cache)"
    ]


def test_missing_file(runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    lines = _errors(runs["missing"])
    assert lines == ["error: examples/does-not-exist.yaml: No such file or directory"]


@pytest.mark.parametrize(
    "text",
    [
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
        "- just\n- a list\n",
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: x}\n",
    ],
    ids=["configmap", "list", "volcano-job"],
)
def test_non_trainiumjob_document(run_inline: Any, text: str) -> None:
    lines = _errors(run_inline("render", "-f", "-", stdin=text))
    assert lines == ["error: -: document 1 is not a TrainiumJob"]


def test_wrong_api_group(run_inline: Any) -> None:
    text = "apiVersion: example.com/v1\nkind: TrainiumJob\nmetadata: {name: x}\nspec: {}\n"
    (line,) = _errors(run_inline("render", "-f", "-", stdin=text))
    assert "apiVersion must be trainium.dev/v1alpha1" in line


def test_not_yaml(run_inline: Any) -> None:
    (line,) = _errors(run_inline("render", "-f", "-", stdin="spec: [unclosed\n"))
    assert "not valid YAML" in line


def test_empty_input(run_inline: Any) -> None:
    assert _errors(run_inline("render", "-f", "-", stdin="")) == ["error: -: no TrainiumJob found"]


HEAD = "apiVersion: trainium.dev/v1alpha1\nkind: TrainiumJob\n"
SPEC = "spec: {image: i, instanceType: trn1.2xlarge, storage: {claimName: c}}\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (SPEC, "metadata.name: required"),
        ("metadata: {name: x}\n", "x: spec: required"),
        ("metadata: just-a-string\n" + SPEC, "metadata: must be a mapping"),
        ("metadata: {name: [1]}\n" + SPEC, "metadata.name: [1] must be a lowercase DNS"),
        ("metadata: {name: Bert}\n" + SPEC, "metadata.name: 'Bert' must be a lowercase DNS"),
        ("metadata: {name: x, namespace: 5}\n" + SPEC, "metadata.namespace: 5 must be"),
        ("metadata: {name: x}\nspec: null\n", "x: spec: required"),  # pruned, as the server
    ],
    ids=["no-name", "no-spec", "metadata-string", "name-list", "name-upper", "ns-int", "null-spec"],
)
def test_malformed_documents_are_errors_not_tracebacks(
    run_inline: Any, body: str, expected: str
) -> None:
    lines = _errors(run_inline("render", "-f", "-", stdin=HEAD + body))
    assert any(expected in line for line in lines), lines


def test_dotted_job_name_renders_dns_label_children(run_inline: Any) -> None:
    result = run_inline("render", "-f", "-", stdin=HEAD + "metadata: {name: bert.v2}\n" + SPEC)
    assert result.returncode == 0, result.stderr
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(result.stdout)]
    assert names and all("." not in n for n in names)


def test_usage_error_from_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["render"])
    assert exit_.value.code == 2
    assert "-f/--filename" in capsys.readouterr().err
