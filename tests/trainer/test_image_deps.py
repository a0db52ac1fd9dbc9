"""The trainer images install only the trainer, within what their base pins.

pip resolves pyproject's [trainer] extra against each image's constraints file, as the image build
does: docker/trainer-constraints.txt (what the Neuron PyTorch/XLA DLC ships) and
docker/trainer-native-constraints.txt (the TorchNeuron stack the native image installs first).
Nothing pinned there may move, nothing of the operator may come along.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
#: Each trainer image: its Dockerfile and the constraints file it installs within.
IMAGES = {
    "xla": (DOCKER / "trainer.Dockerfile", DOCKER / "trainer-constraints.txt"),
    "native": (DOCKER / "trainer-native.Dockerfile", DOCKER / "trainer-native-constraints.txt"),
}


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _constraints(path: Path) -> dict[str, Requirement]:
    lines = path.read_text(encoding="utf-8").splitlines()
    reqs = [Requirement(ln) for ln in lines if ln.strip() and not ln.startswith("#")]
    return {canonicalize_name(r.name): r for r in reqs}


def _pinned_release(req: Requirement) -> str:
    """The lowest release an `==X` or `==X.*` pin admits."""
    (spec,) = req.specifier
    assert spec.operator == "==", req
    return spec.version.removesuffix(".*")


@pytest.fixture(scope="module", params=sorted(IMAGES))
def image(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def resolved(image: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """{name: version} pip picks for the [trainer] extra (torch comes with the base)."""
    trainer = _project()["optional-dependencies"]["trainer"]
    reqs = [r for r in trainer if canonicalize_name(Requirement(r).name) != "torch"]
    report = tmp_path_factory.mktemp("pip") / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    cmd += ["--report", str(report), "--constraint", str(IMAGES[image][1]), *reqs]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    items = json.loads(report.read_text())["install"]
    return {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


def test_resolved_set_keeps_every_base_pin(image: str, resolved: dict[str, str]) -> None:
    for name, req in _constraints(IMAGES[image][1]).items():
        if name in resolved:
            assert req.specifier.contains(resolved[name], prereleases=True), (name, resolved[name])
    assert resolved["transformers"].startswith("4.")
    if image == "xla":  # neuronx-cc of the PyTorch/XLA DLC needs protobuf < 4
        assert resolved["protobuf"].startswith("3.")


def test_resolved_set_has_nothing_of_the_operator(resolved: dict[str, str]) -> None:
    operator = {canonicalize_name(Requirement(r).name) for r in _project()["dependencies"]}
    # pyyaml comes with transformers itself, prometheus-client serves the trainer's live metrics;
    # everything else the operator needs must stay out.
    assert operator & set(resolved) == {"pyyaml", "prometheus-client"}


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_trainer_extra_admits_the_base_torch(image: str) -> None:
    torch_req = next(
        Requirement(r)
        for r in _project()["optional-dependencies"]["trainer"]
        if r.startswith("torch")
    )
    assert torch_req.specifier.contains(_pinned_release(_constraints(IMAGES[image][1])["torch"]))


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_dockerfile_installs_the_package_alone_then_the_constrained_extra(image: str) -> None:
    dockerfile, constraints = IMAGES[image]
    text = dockerfile.read_text(encoding="utf-8")
    assert "pip install --no-cache-dir --no-deps ." in text
    assert f"--constraint /tmp/{constraints.name}" in text
    assert f"COPY docker/{constraints.name} /tmp/{constraints.name}" in text
    assert "-freeze.txt --constraint" in text  # the base's own pip freeze
    assert ".[trainer]" not in text  # that would pull the operator's dependencies in too


def test_xla_image_checks_its_base_stack_offline() -> None:
    """The DLC's torch, torch-xla and Neuron packages are the pinned ones, or the build fails."""
    text = IMAGES["xla"][0].read_text(encoding="utf-8")
    names = [n for n in _constraints(IMAGES["xla"][1]) if n in text]
    assert {"torch", "torch-xla", "torch-neuronx", "neuronx-cc", "libneuronxla"} <= set(names)
    assert "--no-index --no-deps \\\n      --constraint /tmp/trainer-constraints.txt" in text


def test_native_image_installs_its_stack_from_the_constraints_file() -> None:
    text = IMAGES["native"][0].read_text(encoding="utf-8")
    assert "--requirement /tmp/trainer-native-constraints.txt" in text
    assert "--extra-index-url https://pip.repos.neuron.amazonaws.com" in text
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text  # no CUDA wheels
