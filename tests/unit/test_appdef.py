"""The AppDef's text survives TorchX's macro substitution; the rendezvous timeout is per job."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from support import job, spec_of
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _get_timeout
from torch.distributed.run import config_from_args, parse_args
from torchx.specs import macros

from trainium_operator.api.spec import SpecError, parse
from trainium_operator.manifests import appdef
from trainium_trainer import contract, rendezvous

#: Values TorchX gives each replica; the same substitution its schedulers run on args and env.
VALUES = macros.Values(img_root="/img", app_id="app-x1y2", replica_id="1", rank0_env="RANK0")


@pytest.mark.parametrize(
    "text",
    ["cost$$5", "$app_id", "${replica_id}", "${img_root}", "$rank0_env", "$", "a$", "$$$", "${"],
)
def test_escaped_text_comes_back_from_torchx_substitution(text: str) -> None:
    assert VALUES.substitute(appdef.escape(text)) == text


def test_substitution_would_rewrite_the_text_unescaped() -> None:
    # Guards the test above: these strings really are what TorchX rewrites.
    assert VALUES.substitute("cost$$5 $app_id ${replica_id}") == "cost$5 app-x1y2 1"


def test_rendezvous_timeout_defaults_to_half_an_hour() -> None:
    assert spec_of().runPolicy.rendezvousTimeoutSeconds == 1800


@pytest.mark.parametrize("seconds", [0, 59, 86401])
def test_rendezvous_timeout_out_of_range_is_one_line_naming_the_field(seconds: int) -> None:
    with pytest.raises(SpecError) as err:
        parse(job(runPolicy={"rendezvousTimeoutSeconds": seconds}))
    assert "spec.runPolicy.rendezvousTimeoutSeconds" in str(err.value)
    assert "\n" not in str(err.value)


def test_rendezvous_conf_names_the_host_and_both_timeouts() -> None:
    spec = spec_of(runPolicy={"rendezvousTimeoutSeconds": 60})
    assert appdef.rendezvous_conf(spec, host=True) == "is_host=1,join_timeout=60,read_timeout=60"
    assert appdef.rendezvous_conf(spec, host=False) == "is_host=0,join_timeout=60,read_timeout=60"


def _as_torchrun_parses(argv: list[str]) -> RendezvousParameters:
    """The rendezvous parameters torchrun builds from argv (torch.distributed.run's own parser)."""
    config, _, _ = config_from_args(parse_args(argv[argv.index("-m") + 2 :]))
    return RendezvousParameters(
        config.rdzv_backend,
        config.rdzv_endpoint,
        config.run_id,
        config.min_nodes,
        config.max_nodes,
        **config.rdzv_configs,
    )


def test_torchrun_reads_who_hosts_the_store_and_how_long_to_wait() -> None:
    spec = spec_of(nodes=2, runPolicy={"rendezvousTimeoutSeconds": 2400})
    ctx = appdef.StageContext(
        job_name="j",
        stage=appdef.TRAIN,
        cache_name="c",
        run_id="j-train",
        rank0_host="j-train-node-0-0.j-train",
        mount_root="/data",
    )
    others = appdef.torchrun_argv(spec, ctx)
    host = rendezvous.store_host_argv(others)
    for argv, is_host, endpoint in (
        (host, True, "localhost:29500"),
        (others, False, "j-train-node-0-0.j-train:29500"),
    ):
        params = _as_torchrun_parses(argv)
        assert params.endpoint == endpoint
        assert params.get_as_bool("is_host") is is_host
        assert params.get_as_int("read_timeout") == 2400  # c10d_rendezvous_backend's store timeout
        assert _get_timeout(params, "join") == timedelta(seconds=2400)  # dynamic_rendezvous


def test_the_trainer_runs_under_the_torchrun_wrapper_others_under_torchrun() -> None:
    """The wrapper exits 143 on a SIGTERM stop (issue 20); a script's image may lack it."""
    assert appdef.launcher(spec_of()) == contract.TORCHRUN_MODULE
    assert appdef.launcher(spec_of(module="my_trainer")) == "torch.distributed.run"
    assert appdef.launcher(spec_of(script="/app/train.py")) == "torch.distributed.run"
    importlib.import_module(contract.TORCHRUN_MODULE)  # the module the argv names exists


@pytest.mark.parametrize("stage", [appdef.PRECOMPILE, appdef.TRAIN])
def test_torchrun_tees_both_streams_with_rank_prefixes_in_both_stages(stage: str) -> None:
    from torch.distributed.elastic.multiprocessing import Std

    spec = spec_of(nodes=2)
    ctx = appdef.StageContext(
        job_name="j", stage=stage, cache_name="c", run_id="j-x", rank0_host="h", mount_root="/d"
    )
    argv = appdef.build_appdef(spec, ctx).roles[0].args
    args = parse_args(argv[argv.index(appdef.launcher(spec)) + 1 :])
    assert Std.from_str(args.tee) == Std.ALL
    assert args.tee == "3"
