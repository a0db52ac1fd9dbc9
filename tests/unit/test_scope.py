"""The namespaces our own watches keep (runtime/scope.py): kopf's with `-n`, every one without."""

from __future__ import annotations

import pytest

from trainium_operator.manifests.ownership import LABEL_MANAGED_BY, MANAGED_BY
from trainium_operator.runtime import kueuewatch, scope


@pytest.mark.parametrize(
    ("namespace", "globs", "kept"),
    [
        ("team-a", [], True),
        ("team-a", ["team-a", "team-b"], True),
        ("team-c", ["team-a", "team-b"], False),
        ("team-c", ["team-*"], True),
        ("team-c", ["team-*", "!team-c"], False),
        ("other", ["!team-c"], True),
        ("", ["team-a"], True),  # cluster-scoped: ResourceFlavors
    ],
)
def test_watched_follows_kopfs_patterns(namespace: str, globs: list[str], kept: bool) -> None:
    assert scope.watched(namespace, globs) is kept


def test_patterns_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(scope.NAMESPACES_ENV, raising=False)
    assert scope.patterns() == []
    monkeypatch.setenv(scope.NAMESPACES_ENV, "team-a,team-*")
    assert scope.patterns() == ["team-a", "team-*"]


def test_the_workload_watch_keeps_ours_in_our_namespaces_only() -> None:
    """Another operator's Workloads (its namespaces) are neither woken nor swept by this one."""
    wanted = kueuewatch._wanted(f"{LABEL_MANAGED_BY}={MANAGED_BY}", ["team-a"])

    def workload(namespace: str, ours: bool = True) -> dict[str, object]:
        labels = {LABEL_MANAGED_BY: MANAGED_BY} if ours else {}
        return {"metadata": {"namespace": namespace, "name": "w", "labels": labels}}

    assert wanted(workload("team-a"))
    assert not wanted(workload("team-b"))
    assert not wanted(workload("team-a", ours=False))


def test_the_operator_command_hands_its_namespaces_to_our_watches() -> None:
    from trainium_operator.cli.operator import operator_parser, scope_env

    a = operator_parser().parse_args(["--standalone", "-n", "team-a", "-n", "team-*"])
    assert scope_env(a.namespace) == {scope.NAMESPACES_ENV: "team-a,team-*"}
    assert scope_env(operator_parser().parse_args(["-A"]).namespace) == {}
