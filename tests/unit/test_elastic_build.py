"""An elastic job's gangs: built at a size, G and B for the trainer, one cache entry per size."""

from __future__ import annotations

from typing import Any

from support import job

from trainium_operator.api import spec
from trainium_operator.cluster import elasticio
from trainium_operator.cluster.reads import Kind
from trainium_operator.domain import elastic
from trainium_operator.manifests import builders, cache
from trainium_operator.manifests.ownership import Owner
from trainium_trainer import contract

Json = dict[str, Any]
SPEC = spec.parse(
    job(nodes=3, elastic={"minNodes": 2, "globalBatchSize": 192, "batchSizePerProcess": 1})
)
OWNER = Owner("j", "default", "uid-1")


def env(vcjob: Json) -> dict[str, str]:
    container = vcjob["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_the_training_gang_is_built_at_its_size_with_the_global_batch() -> None:
    two = builders.build_vcjob(elastic.at_size(SPEC, 2), OWNER, "train")
    assert two["metadata"]["name"] == "j-train" and two["spec"]["minAvailable"] == 2
    assert [t["replicas"] for t in two["spec"]["tasks"]] == [2]
    argv = two["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"]
    assert argv[argv.index("--nnodes") + 1] == "2"
    assert env(two)[contract.ENV_GLOBAL_BATCH_SIZE] == "192"
    assert env(two)[contract.ENV_BATCH_SIZE] == "1"


def test_each_precompile_size_is_its_own_job_and_cache_entry() -> None:
    jobs = [builders.build_vcjob(elastic.at_size(SPEC, n), OWNER, "precompile") for n in (3, 2)]
    assert [j["metadata"]["name"] for j in jobs] == ["j-compile-n3", "j-compile-n2"]
    entries = {j["metadata"]["labels"][cache.LABEL_CACHE_ENTRY] for j in jobs}
    assert len(entries) == 2
    assert all(contract.ENV_GLOBAL_BATCH_SIZE in env(j) for j in jobs)


def test_a_job_without_elastic_sets_no_batch_env() -> None:
    plain = builders.build_vcjob(spec.parse(job(nodes=2)), OWNER, "train")
    assert contract.ENV_GLOBAL_BATCH_SIZE not in env(plain)
    assert plain["metadata"]["name"] == "j-train"


class Records:
    """A Reader with some cache entries Ready."""

    def __init__(self, ready: set[int]) -> None:
        self.objects: dict[str, Json] = {}
        for n in ready:
            sized = elastic.at_size(SPEC, n)
            ident = cache.identity(sized)
            self.objects[ident.record_name] = cache.record(
                ident, sized, OWNER, cache.READY, started_at="2026-11-27T10:00:00Z",
                now="2026-11-27T10:01:00Z",
            )  # fmt: skip

    def get(self, kind: Kind, namespace: str, name: str) -> Json | None:
        return self.objects.get(name) if kind is Kind.RECORD else None


def test_the_precompile_stage_walks_the_sizes_then_trains_at_the_current_one() -> None:
    before = {"phase": "Precompiling"}
    sizes = [elasticio.stage_spec(SPEC, OWNER, before, Records(r)).nodes  # type: ignore[arg-type]
             for r in (set(), {3}, {3, 2})]  # fmt: skip
    assert sizes == [3, 2, 3]
    shrunk = {"phase": "Training", "elastic": {"currentNodes": 2}}
    assert elasticio.stage_spec(SPEC, OWNER, shrunk, Records(set())).nodes == 2  # type: ignore[arg-type]
