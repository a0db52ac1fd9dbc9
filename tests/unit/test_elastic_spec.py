"""spec.elastic: refused at apply naming the field, parsed into the typed spec, sizes derived."""

from __future__ import annotations

from typing import Any

import pytest
from support import job

from trainium_operator.api import crd, spec
from trainium_operator.domain import elastic

Json = dict[str, Any]
#: trn1.32xlarge: 32 processes a node; 192 = 3 x 32 x 2 = 2 x 32 x 3: sizes 3, 2 and 1 keep it.
KEEPS_3_2 = {"minNodes": 2, "globalBatchSize": 192, "batchSizePerProcess": 1}


def ejob(nodes: int = 3, **elastic_: Any) -> Json:
    return job(nodes=nodes, elastic={**KEEPS_3_2, **elastic_})


#: (id, TrainiumJob, substring of one error: it names the field).
ELASTIC_BAD: list[tuple[str, Json, str]] = [
    (
        "min-over-nodes",
        ejob(nodes=2, minNodes=3),
        "spec.elastic.minNodes may not exceed spec.nodes",
    ),
    ("min-0", ejob(minNodes=0), "spec.elastic.minNodes: 0 is less than the minimum of 1"),
    ("batch-not-kept-at-full", ejob(globalBatchSize=160), "spec.elastic.globalBatchSize must be"),
    (
        "batch-not-kept-at-min",
        job(nodes=4, elastic={**KEEPS_3_2, "minNodes": 3, "globalBatchSize": 256}),
        "spec.elastic.globalBatchSize must be",
    ),
    (
        "precompile-size-not-kept",
        job(
            nodes=4,
            elastic={
                "minNodes": 1,
                "globalBatchSize": 128,
                "batchSizePerProcess": 1,
                "precompileSizes": [4, 3],
            },
        ),
        "spec.elastic.precompileSizes: at every size listed",
    ),
    ("precompile-size-over", ejob(precompileSizes=[4]), "spec.elastic.precompileSizes: every size"),
    (
        "precompile-size-under",
        ejob(precompileSizes=[1]),
        "spec.elastic.precompileSizes: every size",
    ),
    (
        "batch-size-arg",
        {**ejob(), "spec": {**ejob()["spec"], "args": ["bert-pretrain", "--batch-size", "2"]}},
        "spec.args may not set --batch-size",
    ),
    (
        "grad-accum-arg",
        {**ejob(), "spec": {**ejob()["spec"], "args": ["--grad-accum-steps=4"]}},
        "spec.args may not set --batch-size, --grad-accum-steps",
    ),
    (
        "global-batch-arg",
        {**ejob(), "spec": {**ejob()["spec"], "args": ["--global-batch-size", "64"]}},
        "--global-batch-size with spec.elastic",
    ),
    (
        "env-global-batch",
        {**ejob(), "spec": {**ejob()["spec"], "env": [{"name": "TRAINIUM_BATCH_SIZE"}]}},
        "spec.env may not set TRAINIUM_GLOBAL_BATCH_SIZE or TRAINIUM_BATCH_SIZE",
    ),
    (
        "missing-global",
        job(nodes=3, elastic={"minNodes": 2, "batchSizePerProcess": 1}),
        "spec.elastic.globalBatchSize: required",
    ),
    ("shrink-after-5", ejob(shrinkAfterSeconds=5), "spec.elastic.shrinkAfterSeconds: 5 is less"),
]
#: (id, old, new, message): elastic is fixed at creation.
ELASTIC_CHANGED: list[tuple[str, Json, Json, str]] = [
    ("elastic-added", job(nodes=3), ejob(), "spec.elastic may not be added or removed"),
    ("elastic-changed", ejob(), ejob(minNodes=3), "spec.elastic is immutable"),
]


@pytest.mark.parametrize(
    ("obj", "expected"), [(o, e) for _, o, e in ELASTIC_BAD], ids=[i for i, _, _ in ELASTIC_BAD]
)
def test_bad_elastic_is_refused_naming_the_field(obj: Json, expected: str) -> None:
    _, errors = crd.validate(obj)
    assert any(expected in e for e in errors), errors
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(obj)
    assert any(expected in p for p in caught.value.problems)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [(o, n, e) for _, o, n, e in ELASTIC_CHANGED],
    ids=[i for i, _, _, _ in ELASTIC_CHANGED],
)
def test_elastic_is_fixed_at_creation(old: Json, new: Json, expected: str) -> None:
    assert crd.validate(old)[1] == []
    _, errors = crd.validate(new, old=old)
    assert any(expected in e for e in errors), errors


def test_a_good_elastic_job_parses_with_defaults() -> None:
    parsed = spec.parse(ejob())
    assert parsed.elastic == spec.Elastic(2, 192, 1, (), 300)
    assert elastic.allowed_sizes(parsed) == (3, 2)
    assert elastic.precompile_sizes(parsed) == (3, 2)
    assert [elastic.accumulation(parsed, n) for n in (3, 2)] == [2, 3]


def test_only_sizes_that_keep_the_global_batch_are_allowed() -> None:
    # 4 nodes x 32 x 1: 384 keeps 4, 3, 2 and 1... but not with minNodes 2 below 2.
    parsed = spec.parse(
        job(nodes=4, elastic={"minNodes": 2, "globalBatchSize": 256, "batchSizePerProcess": 1})
    )
    assert elastic.allowed_sizes(parsed) == (4, 2)  # 3 x 32 does not divide 256
    assert elastic.precompile_sizes(parsed) == (4, 2)  # the next size that keeps it
    assert elastic.fitting(parsed, 3) == 2 and elastic.fitting(parsed, 1) == 2


def test_listed_precompile_sizes_are_compiled_largest_first() -> None:
    parsed = spec.parse(ejob(minNodes=1, precompileSizes=[1, 3]))
    assert elastic.precompile_sizes(parsed) == (3, 1)


def test_processes_per_node_follow_the_instance_type_lnc_and_nproc() -> None:
    """The CRD's CEL and the typed spec agree on processes per node (trn2 at LNC 2 and 1)."""
    for fields, ppn in [
        ({"instanceType": "trn2.48xlarge", "args": ["causal-lm"]}, 64),
        ({"instanceType": "trn2.48xlarge", "lnc": 1}, 128),
        ({"nprocPerNode": 8}, 8),
    ]:
        good = job(
            nodes=2,
            elastic={"minNodes": 1, "globalBatchSize": 2 * ppn, "batchSizePerProcess": 1},
            **fields,
        )
        assert crd.validate(good)[1] == [], fields
        assert spec.parse(good).procs_per_node == ppn
        bad = job(
            nodes=2,
            elastic={"minNodes": 1, "globalBatchSize": ppn + ppn // 2, "batchSizePerProcess": 1},
            **fields,
        )
        assert crd.validate(bad)[1], fields


def test_the_precompile_job_of_each_size_has_its_own_name() -> None:
    parsed = spec.parse(ejob())
    from trainium_operator.api import naming

    names = {
        naming.vcjob_name("j", "precompile", elastic.at_size(parsed, n).precompile_size)
        for n in (3, 2)
    }
    assert names == {"j-compile-n3", "j-compile-n2"}
    assert naming.vcjob_name("j", "precompile") == "j-compile"
