"""The operator image installs from a lock: every pyproject dependency pinned, and nothing else.

docker/operator-requirements.txt pins the operator's dependencies and all they pull in
(scripts/operator-lock.py writes it from the tested environment); the Dockerfile installs exactly
that with --no-deps, so a rebuild never picks up a release nobody tested.
"""

from __future__ import annotations

import importlib.util
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "docker" / "operator-requirements.txt"
DOCKERFILE = REPO / "docker" / "operator.Dockerfile"


def _dependencies() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [Requirement(r) for r in project["dependencies"]]


def _lock() -> dict[str, str]:
    """{name: version}; every line is `name==version`."""
    pins: dict[str, str] = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+!-]+)", line.strip())
        assert match, f"not an exact pin: {line!r}"
        name = canonicalize_name(match[1])
        assert name not in pins, f"{name} pinned twice"
        pins[name] = match[2]
    return pins


def test_every_dependency_is_pinned_within_its_specifier() -> None:
    pins = _lock()
    for req in _dependencies():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is not in {LOCK.name}"
        assert req.specifier.contains(pins[name], prereleases=True), (str(req), pins[name])


def _script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "operator_lock", REPO / "scripts/operator-lock.py"
    )
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_lock_is_closed_over_what_its_packages_require() -> None:
    """Each locked package's requirements (for the image's Python) are locked, within range.

    Read from the installed metadata of the packages installed at their locked version (the
    environment the lock was written from); a package installed at another version is skipped.
    """
    pins, env = _lock(), _script().IMAGE_ENV
    checked = 0
    for name, version in pins.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for req in map(Requirement, dist.requires or []):
            if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
                continue
            dep = canonicalize_name(req.name)
            assert dep in pins, f"{name} {version} needs {req}: not in {LOCK.name}"
            assert req.specifier.contains(pins[dep], prereleases=True), (name, str(req), pins[dep])
    assert checked >= len(pins) // 2, "the environment is far from the lock: regenerate it"


def test_the_lock_script_writes_this_lock_here() -> None:
    """In the environment the tests run in, the script reproduces the committed lock."""
    script = _script()
    pins = _lock()
    here = script.closure(script.direct())
    drifted = {n for n in pins if n in here and here[n] != pins[n]}
    if drifted:  # a newer environment: the closure check still holds
        pytest.skip(f"installed versions differ from the lock: {sorted(drifted)}")
    assert here == pins, "python scripts/operator-lock.py > docker/operator-requirements.txt"


def test_the_image_installs_exactly_the_lock() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "COPY docker/operator-requirements.txt" in text
    assert "pip install --no-cache-dir --no-deps -r docker/operator-requirements.txt" in text
    assert "pip install --no-cache-dir --no-deps ." in text
    assert "pip check" in text
    assert re.search(r"pip install --no-cache-dir \.(\s|$)", text) is None  # no unlocked resolve
