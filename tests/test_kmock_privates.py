"""kmock 0.8's privates the emulator uses: a kmock upgrade that changes one fails here, by name."""

from __future__ import annotations

import inspect

import attrs
import kmock
import pytest

from emulator import KMOCK_PRIVATES, K8sEmulator


def _has(owner: object, name: str) -> bool:
    """A class attribute, an attrs field (kmock's state lives in fields), or a module member."""
    if hasattr(owner, name):
        return True
    return inspect.isclass(owner) and attrs.has(owner) and name in attrs.fields_dict(owner)


IDS = [f"{getattr(owner, '__name__', owner)}.{name}" for owner, name in KMOCK_PRIVATES]


@pytest.mark.parametrize(("owner", "name"), KMOCK_PRIVATES, ids=IDS)
def test_every_kmock_private_the_emulator_uses_is_still_there(owner: object, name: str) -> None:
    assert _has(owner, name), f"kmock {kmock.__version__} no longer has {owner}.{name}"


@pytest.mark.parametrize(("owner", "name"), KMOCK_PRIVATES, ids=IDS)
def test_the_overridden_hooks_keep_kmocks_signatures(owner: object, name: str) -> None:
    """kmock calls our overrides with its own arguments: a renamed parameter would break them."""
    ours, theirs = K8sEmulator.__dict__.get(name), getattr(owner, name, None)
    if not (inspect.isclass(owner) and callable(ours) and callable(theirs)):
        pytest.skip("not an overridden method")
    assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters), (
        f"kmock's {owner}.{name} changed its signature"
    )


def test_kmocks_path_parser_still_returns_the_fields_we_build() -> None:
    from kmock._internal import parsing

    assert "namespaces" in str(parsing.ParsedPath("", "v1", "namespaces", None, "ns", None))


def test_kmock_is_the_pinned_version() -> None:
    """The privates above were read against kmock 0.8; another version needs them re-read."""
    assert kmock.__version__.startswith("0.8"), kmock.__version__
