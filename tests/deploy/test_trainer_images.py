"""Versions of the trainer images that appear twice agree with their one source.

The sources: each Dockerfile's FROM line and its constraints file (docker/). Named again in the
README's "Which backend" table, in `make install`'s torch (the CPU tests of the native runtime run
the native image's torch), in scripts/xla-env.sh (`make test-xla` runs the XLA image's torch-xla)
and in the examples' image names (a native job names the native image).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from trainium_operator.api.spec import parse

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
README = (REPO / "README.md").read_text(encoding="utf-8")
#: backend -> (Dockerfile, constraints file, the image name its build line tags)
IMAGES = {
    "xla": ("trainer.Dockerfile", "trainer-constraints.txt", "trainium-trainer"),
    "native": (
        "trainer-native.Dockerfile",
        "trainer-native-constraints.txt",
        "trainium-trainer-native",
    ),
}


def pins(backend: str) -> dict[str, str]:
    """{package: the version its `==` pin names (a wildcard pin keeps its `.*`)}."""
    text = (DOCKER / IMAGES[backend][1]).read_text(encoding="utf-8")
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            out[canonicalize_name(req.name)] = spec.version
    return out


def from_line(backend: str) -> str:
    (image,) = re.findall(r"^FROM (\S+)", (DOCKER / IMAGES[backend][0]).read_text(), flags=re.M)
    return image


def readme_row(family: str) -> str:
    (row,) = [ln for ln in README.splitlines() if ln.startswith(f"| {family} (")]
    return row


def test_the_xla_dlc_tag_names_the_pinned_torch_and_sdk() -> None:
    image = from_line("xla")
    m = re.fullmatch(
        r"public\.ecr\.aws/neuron/pytorch-training-neuronx:"
        r"(?P<torch>[\d.]+)-neuronx-py\d+-sdk(?P<sdk>[\d.]+)-ubuntu[\d.]+",
        image,
    )
    assert m, image
    assert Requirement(f"torch=={pins('xla')['torch']}").specifier.contains(m["torch"])
    constraints = (DOCKER / IMAGES["xla"][1]).read_text(encoding="utf-8")
    assert f"Neuron SDK {m['sdk']}" in constraints and f"tag {m['sdk']}" in constraints
    row = readme_row("trn1")
    assert f"`docker/{IMAGES['xla'][0]}`" in row and f"Neuron SDK {m['sdk']}" in row, row
    assert f"torch-xla {pins('xla')['torch-xla']}" in row, row


def test_make_test_xla_runs_the_xla_images_torch_xla() -> None:
    script = (REPO / "scripts" / "xla-env.sh").read_text(encoding="utf-8")
    (version,) = re.findall(r'^TORCH_VERSION="([^"]+)"', script, flags=re.M)
    assert version == pins("xla")["torch-xla"]
    assert Requirement(f"torch=={pins('xla')['torch']}").specifier.contains(version)


def test_make_install_tests_the_native_images_torch() -> None:
    (version,) = re.findall(r"pip install --quiet torch==(\S+)", (REPO / "Makefile").read_text())
    assert version == pins("native")["torch"]
    assert re.search(
        rf"\[\d/\d\] torch {re.escape(version)} \(CPU\)", (REPO / "Makefile").read_text()
    )


def test_the_readme_names_the_native_images_versions() -> None:
    row = readme_row("trn2")
    native = pins("native")
    assert f"`docker/{IMAGES['native'][0]}`" in row, row
    assert f"torch-neuronx {native['torch-neuronx']} with PyTorch {native['torch']}" in row, row


@pytest.mark.parametrize("backend", sorted(IMAGES))
def test_the_dockerfile_builds_the_image_name_the_examples_use(backend: str) -> None:
    dockerfile, _, name = IMAGES[backend]
    text = (DOCKER / dockerfile).read_text(encoding="utf-8")
    assert f"docker build -f docker/{dockerfile} -t {name} ." in text


EXAMPLES = sorted(
    p
    for p in (REPO / "examples").glob("*.yaml")
    # examples/kueue-setup.yaml holds several documents, none a TrainiumJob
    if any(d and d.get("kind") == "TrainiumJob" for d in yaml.safe_load_all(p.read_text()))
)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_names_the_image_of_its_backend(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    spec = parse(doc)
    repository = spec.image.rsplit("/", 1)[-1].split(":")[0]
    if repository.startswith("trainium-trainer"):  # not AWS's own script image
        assert repository == IMAGES[spec.effective_backend][2], (path.name, spec.image)
