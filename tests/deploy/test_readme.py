"""The README's commands work as written: its make targets exist, `make render > x.yaml` is pure
YAML, its TrainiumJob renders, and its helm install line passes the chart's schema and renders."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helmchart import HELM, REPO, helm_bin  # noqa: F401  (helm_bin is a fixture)

README = (REPO / "README.md").read_text()
VENV = Path(sys.prefix)


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def commands() -> list[list[str]]:
    """Each shell command of the README's bash blocks, continuation lines joined, no comments."""
    out = []
    for block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                out.append(argv)
    return out


def make(*args: str) -> subprocess.CompletedProcess[str]:
    """make in the repository with this venv, its install stamp taken as up to date (-o)."""
    return subprocess.run(
        ["make", "--no-print-directory", f"VENV={VENV}", "-o", f"{VENV}/.installed", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_every_make_target_in_the_readme_exists() -> None:
    listed = {line.split()[0] for line in make("help").stdout.splitlines() if line.strip()}
    named = set(re.findall(r"\bmake ([a-z][a-z0-9-]*)", README))
    assert named and named <= listed, named - listed


def test_make_render_prints_only_yaml() -> None:
    proc = make("render")
    assert proc.returncode == 0, proc.stderr
    docs = list(yaml.safe_load_all(proc.stdout))
    assert [d["kind"] for d in docs] == ["PersistentVolume", "PersistentVolumeClaim", "Job", "Job"]


def test_the_readme_job_renders_and_names_what_it_skipped() -> None:
    from trainium_operator.local import render

    docs = [d for b in blocks("yaml") for d in yaml.safe_load_all(b)]
    [doc] = [d for d in docs if d.get("kind") == "TrainiumJob"]
    rendered = render.render_job(doc)
    assert [m["kind"] for m in rendered.manifests] == ["Job", "Job"]
    [note] = rendered.notes
    assert "skipped PersistentVolume" in note and "--fsx-lookup" in note


def test_paths_the_readme_names_exist() -> None:
    paths = set(re.findall(r"`((?:examples|deploy|charts|crds|docker|scripts)/[^`\s]*)`", README))
    assert paths
    missing = [p for p in sorted(paths) if not (REPO / p.rstrip("/")).exists()]
    assert not missing, missing


def test_the_helm_install_line_works_as_written(helm_bin: Path) -> None:  # noqa: F811
    """Run the README's install commands with `helm template` instead of a cluster."""
    cmds = commands()
    [export] = [c for c in cmds if c[0] == "export"]
    assert export == ["export", "PATH=$PWD/.tools/bin:$PATH"]
    assert HELM == REPO / ".tools" / "bin" / "helm" or "HELM" in os.environ
    [install] = [c for c in cmds if c[:2] == ["helm", "install"]]
    proc = subprocess.run(
        [str(HELM), "template", *install[2:]], cwd=REPO, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [sa] = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "ServiceAccount"]
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    assert sa["metadata"]["namespace"] == "trainium-system"


@pytest.mark.parametrize("argv", [c for c in commands() if c[0].endswith("trainium")],
                         ids=lambda c: " ".join(c[1:]))  # fmt: skip
def test_trainium_commands_run(argv: list[str]) -> None:
    proc = subprocess.run([str(VENV / "bin" / "trainium"), *argv[1:]], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def test_the_contents_list_every_section_in_order() -> None:
    """A reader finds install, a first job and Kueue from the top (issue 43, item 7)."""
    heads = re.findall(r"^(##+) (.+)$", README, flags=re.M)
    listed = re.findall(r"^( *)- \[(.+?)\]\(#([^)]+)\)$", README, flags=re.M)
    assert [(len(i) // 2, t, a) for i, t, a in listed] == [
        (len(h) - 2, t, anchor(t)) for h, t in heads
    ]
    top = README.split("\n## ", 1)[0]
    for section in ("install", "two-commands", "a-trainiumjob", "quota-with-kueue"):
        assert f"(#{section})" in top


def test_kubectl_get_samples_show_the_crds_columns() -> None:
    """Every `kubectl get tj` sample header is what the CRD prints (its columns of priority 0)."""
    crd = yaml.safe_load((REPO / "crds" / "trainiumjobs.trainium.dev.yaml").read_text())
    [version] = crd["spec"]["versions"]
    cols = [c["name"].upper() for c in version["additionalPrinterColumns"] if not c.get("priority")]
    headers = [line.split() for line in README.splitlines() if line.startswith("NAME  ")]
    assert len(headers) >= 2
    for header in headers:
        assert header == ["NAME", *cols], header


def test_the_phase_sentence_allows_kueues_way_back_to_pending() -> None:
    """A Kueue job goes Precompiling -> Pending -> Training: the README may not say otherwise."""
    assert "never moves back" not in README and "never\nmoves back" not in README
    assert "`Precompiling` -> `Pending` -> `Training`" in " ".join(README.split())


def test_the_kueue_setup_in_the_readme_is_the_file_users_apply() -> None:
    """README shows examples/kueue-setup.yaml verbatim and says to apply it (issue 43, item 4)."""
    section = README.split("## Quota with Kueue", 1)[1].split("\n## ", 1)[0]
    setup = (REPO / "examples" / "kueue-setup.yaml").read_text()
    body = setup[setup.index("apiVersion") :]
    assert f"```yaml\n{body}```" in section
    assert "kubectl apply -f examples/kueue-setup.yaml" in section
    install = README.split("\n## Install", 1)[1].split("\n## ", 1)[0]
    assert "Kueue v0.19 or later" in install and "Kueue v0.19 or later" in section
