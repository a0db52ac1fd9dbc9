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
from trainium_operator.cli import operator

TUTORIAL = EXAMPLES / "bert-large-pretrain.yaml"
HEAD = "apiVersion: trainium.dev/v1alpha1\nkind: TrainiumJob\n"
SPEC = "spec: {image: i, instanceType: trn1.2xlarge, storage: {claimName: c}}\n"


def _bad_tutorial() -> str:
    job = yaml.safe_load(TUTORIAL.read_text(encoding="utf-8"))
    job["spec"].update(nodes=0, precision="fp16", instanceType="p4d.24xlarge")
    return json.dumps(job)  # JSON is YAML; safe_dump would leave 4e-4 unquoted


def _alias_bomb(levels: int = 9) -> str:
    """'Billion laughs': 9 levels of 9 aliases each expand to 9**9 strings in spec.args."""
    lines = ["x-lol:", '  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    spec = "spec: {image: i, instanceType: trn1.2xlarge, storage: {claimName: c}, args: *l%d}"
    spec %= levels
    return HEAD + "metadata: {name: x}\n" + "\n".join(lines) + "\n" + spec + "\n"


#: The subprocess cases: name -> (argv after `trainium`, stdin). A subprocess also bounds a hang.
COMMANDS: dict[str, tuple[list[str], str | None]] = {
    "yaml": (["render", "-f", str(TUTORIAL)], None),
    "alias-bomb": (["render", "-f", "-"], _alias_bomb()),
    "deep": (["render", "-f", "-"], HEAD + "metadata: {name: x}\nspec: " + "[" * 50_000 + "\n"),
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
        try:
            out, err = proc.communicate(COMMANDS[name][1] or "", timeout=120)
        except subprocess.TimeoutExpired:  # a hang is a failure of that case, not a leak
            proc.kill()
            out, err = proc.communicate()
            err += "\n(killed: no answer within 120 s)"
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
    result = run_inline("render", "-f", "-", stdin=json.dumps(job))
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
    lines = _errors(run_inline("render", "-f", "-", stdin=json.dumps(job)))
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


@pytest.mark.parametrize("api_version", ["example.com/v1", "trainium.dev/v1", "trainium.dev"])
def test_wrong_api_group_or_version(run_inline: Any, api_version: str) -> None:
    text = f"apiVersion: {api_version}\nkind: TrainiumJob\nmetadata: {{name: x}}\n" + SPEC
    (line,) = _errors(run_inline("render", "-f", "-", stdin=text))
    assert line == (
        f"error: -: document 1: apiVersion '{api_version}' is not served; use trainium.dev/v1alpha1"
    )


def test_not_yaml(run_inline: Any) -> None:
    (line,) = _errors(run_inline("render", "-f", "-", stdin="spec: [unclosed\n"))
    assert "not valid YAML" in line


def test_a_tab_is_one_line_with_file_line_and_column(run_inline: Any, tmp_path: Any) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(HEAD + "metadata: {name: x}\nspec:\n\timage: i\n", encoding="utf-8")
    for command in ("render", "run"):
        (line,) = _errors(run_inline(command, "-f", str(job)))
        assert line.startswith(f"error: {job}:5:1: not valid YAML: "), line
        assert "tab" in line  # what is wrong, in the user's words


def test_a_duplicated_key_is_refused_with_its_position(run_inline: Any) -> None:
    text = HEAD + "metadata: {name: x}\n" + SPEC + "spec: {image: j}\n"
    (line,) = _errors(run_inline("render", "-f", "-", stdin=text))
    assert line == "error: -:5:1: not valid YAML: duplicate key 'spec' (first at line 4)"


def test_a_duplicated_nested_key_is_refused(run_inline: Any) -> None:
    text = HEAD + "metadata: {name: x, name: y}\n" + SPEC
    (line,) = _errors(run_inline("render", "-f", "-", stdin=text))
    assert line == "error: -:3:21: not valid YAML: duplicate key 'name' (first at line 3)"


def test_empty_input(run_inline: Any) -> None:
    assert _errors(run_inline("render", "-f", "-", stdin="")) == ["error: -: no TrainiumJob found"]


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


def test_help_says_what_the_tool_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "run PyTorch training on AWS Trainium from one TrainiumJob" in out
    assert "argument parsing only" not in out  # the module docstring is for developers
    assert "trainium render -f examples/bert-large-pretrain.yaml" in out


def test_alias_bomb_is_one_error_line(runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert _errors(runs["alias-bomb"]) == [
        "error: -: refused: expands to more than 100,000 nodes (YAML aliases)"
    ]


def test_deep_nesting_is_one_error_line(runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert _errors(runs["deep"]) == ["error: -: refused: nested deeper than 100 levels"]


def test_recursive_alias_is_one_error_line(run_inline: Any) -> None:
    text = HEAD + "metadata: {name: x}\nspec: &s {image: i, nested: *s}\n"
    assert _errors(run_inline("render", "-f", "-", stdin=text)) == [
        "error: -: refused: alias *s refers to itself"
    ]


def test_a_few_ordinary_aliases_still_render(run_inline: Any) -> None:
    text = HEAD + "metadata: {name: x}\nx-args: &a [bert-pretrain, --seq-len, '128']\n"
    text += "spec: {image: i, instanceType: trn1.2xlarge, storage: {claimName: c}, args: *a}\n"
    result = run_inline("render", "-f", "-", stdin=text)
    assert result.returncode == 0, result.stderr


FSX_ID_ONLY = HEAD + (
    "metadata: {name: bert}\n"
    "spec: {image: i, instanceType: trn1.2xlarge,\n"
    "       storage: {fsx: {fileSystemId: fs-0123456789abcdef0}}}\n"
)


def test_fsx_by_id_only_names_what_was_skipped_and_why(run_inline: Any) -> None:
    result = run_inline("render", "-f", "-", stdin=FSX_ID_ONLY)
    assert result.returncode == 0, result.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(result.stdout)]
    assert kinds == ["Job", "Job"]
    (note,) = result.stderr.splitlines()
    assert note.startswith(
        "note: bert: skipped PersistentVolume default-bert-fsx and PersistentVolumeClaim bert-fsx"
    )
    assert "fs-0123456789abcdef0 (fsx:DescribeFileSystems)" in note
    assert "--fsx-lookup" in note


def test_fsx_lookup_renders_the_volume_with_the_looked_up_names() -> None:
    from trainium_operator.cluster import fsx
    from trainium_operator.local import render

    def lookup(fs_id: str) -> fsx.FsxNames:
        assert fs_id == "fs-0123456789abcdef0"
        return fsx.FsxNames(f"{fs_id}.fsx.eu-west-1.amazonaws.com", "mnt1234")

    rendered = render.render_job(yaml.safe_load(FSX_ID_ONLY), lookup)
    assert rendered.notes == []
    volume, claim = rendered.manifests[:2]
    assert volume["spec"]["csi"]["volumeAttributes"] == {
        "dnsname": "fs-0123456789abcdef0.fsx.eu-west-1.amazonaws.com",
        "mountname": "mnt1234",
    }
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]


def test_fsx_lookup_flag_asks_aws_and_reports_its_answer(
    run_inline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto import mock_aws

    for key, value in {"AWS_DEFAULT_REGION": "us-west-2", "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    with mock_aws():  # an account without that file system
        lines = _errors(run_inline("render", "-f", "-", "--fsx-lookup", stdin=FSX_ID_ONLY))
    assert lines == [
        "error: bert: spec.storage.fsx.fileSystemId: FSx file system fs-0123456789abcdef0 not found"
    ]


def test_fsx_lookup_without_a_region_is_one_line(
    run_inline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_fsx import no_region

    no_region(monkeypatch)
    (line,) = _errors(run_inline("render", "-f", "-", "--fsx-lookup", stdin=FSX_ID_ONLY))
    assert line.startswith("error: bert: spec.storage.fsx.fileSystemId: cannot describe FSx")
    assert "region" in line


def test_operator_help_is_ours_not_kopfs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["operator", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trainium operator")
    assert "PATHS" not in out and "--module" not in out  # kopf's `run [PATHS]` is not ours
    for flag in (
        "--standalone",
        "--leader-elect",
        "-A, --all-namespaces",
        "-n NAMESPACE, --namespace",
    ):
        assert flag in out, flag


@pytest.mark.parametrize(
    ("argv", "kopf"),
    [
        (
            ["--standalone", "-A", "--liveness=http://0.0.0.0:8080/healthz"],
            ["--standalone", "--all-namespaces", "--liveness=http://0.0.0.0:8080/healthz"],
        ),
        (  # the election is ours (a Lease): kopf runs alone in every replica
            ["--leader-elect=ops", "-n", "a", "--namespace=b", "-v", "--log-format", "json"],
            ["--standalone", "--namespace=a", "--namespace=b", "--verbose", "--log-format=json"],
        ),
        (["-A", "--standalone", "-d", "--no-log-prefix"], None),
        (["-A", "--log-format=text"], ["--standalone", "--all-namespaces", "--log-format=full"]),
    ],
    ids=["chart", "peering", "debug", "text"],
)
def test_operator_flags_become_kopf_run_arguments(argv: list[str], kopf: list[str] | None) -> None:
    got = operator.kopf_argv(argv)
    assert got[:3] == ["run", "-m", "trainium_operator.runtime.handlers"]
    if kopf is not None:
        assert got[3:] == kopf
    else:
        assert set(got[3:]) == {"--all-namespaces", "--standalone", "--debug", "--no-log-prefix"}


def test_operator_refuses_an_unknown_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["operator", "--standalon"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "error: unrecognized arguments: --standalon (see trainium operator --help)\n"
    )


#: `trainium ARGS` as an operator-only install runs it: the [trainer] extra's packages missing.
WITHOUT_TRAINER = """
import sys
for name in ("numpy", "h5py", "torch"):
    sys.modules[name] = None  # import fails, as when the package is not installed
from trainium_operator.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("argv", [["data", "--help"], ["data", "synth-bert", "--help"]])
def test_data_help_needs_no_trainer_packages(argv: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_TRAINER, *argv],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert result.stdout.startswith(f"usage: trainium {' '.join(argv[:-1])}")
    assert "--seq-len" in result.stdout or "synth-bert" in result.stdout


def test_data_without_trainer_packages_is_one_line(tmp_path: Any) -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_TRAINER, "data", "synth-bert", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.startswith("error: trainium data needs the trainer's packages ")
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_an_unknown_flag_of_a_command_points_at_its_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["render", "-f", "job.yaml", "--fsx-id"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "error: unrecognized arguments: --fsx-id (see trainium render --help)\n"
    )


def test_a_misspelt_spec_field_is_one_line(run_inline: Any) -> None:
    text = HEAD + "metadata: {name: x}\n" + SPEC.replace("image:", "imagee:")
    assert _errors(run_inline("render", "-f", "-", stdin=text)) == [
        "error: x: spec.imagee: unknown field (did you mean spec.image?)"
    ]
