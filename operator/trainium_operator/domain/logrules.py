"""Pure: the log lines that prove each failure class, each pattern from a public report.

failures.py classifies by them; kept apart because the table grows with every report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainium_trainer import contract


@dataclass(frozen=True)
class Rule:
    """Log lines that prove one failure class; the first line matching any pattern is shown."""

    reason: str
    patterns: tuple[re.Pattern[str], ...]


def _rule(reason: str, *patterns: str) -> Rule:
    """A rule with its patterns compiled once, at import."""
    return Rule(reason, tuple(re.compile(p) for p in patterns))


# Ordered by specificity: the first rule with a matching line wins, wherever the line is.
# Each pattern names the public report its text was taken from.
LOG_RULES: tuple[Rule, ...] = (
    # trainer/trainium_trainer/preflight.py: "preflight failed: 0 Neuron devices in /dev (...)".
    _rule("PreflightFailed", rf"^(?:\[[^\]]*\]:?\s*)?{re.escape(contract.PREFLIGHT_FAILED)} "),
    _rule(
        "LossDiverged",
        # trainer/trainium_trainer/errors.py NonFiniteLoss via __main__.py: "error: non-finite
        # loss nan (mean over ranks) at step 7; ..." and "error: 3 non-finite weights at step 7".
        r"\berror: .*\bnon-finite (?:loss|weights?)\b.*\bat step \d+",
    ),
    _rule(
        "NeuronCompilerError",
        # aws-neuron/aws-neuron-sdk#690 "neuronx-cc failed with 1", #1369 "neuronx-cc
        # compilation failed with 70", #601 "INTERNAL: neuronx-cc compilation failed."
        r"neuronx-cc (?:compilation )?failed\b",
        # huggingface/optimum-neuron#698, aws-neuron-sdk#947 "ERROR ||NEURON_CC_WRAPPER||: Failed
        # compilation with [...]", #1023 "Got a cached failed neff", #601 (||NCC_WRAPPER||).
        r"\|\|N(?:EURON_)?CC_WRAPPER\|\|: (?:Failed compilation|Compilation failed"
        r"|Got a cached failed neff|There was a compilation error)",
        # aws-neuron-sdk#1000 "[F134] neuronx-cc terminated abnormally".
        r"neuronx-cc terminated abnormally",
        # Compiler diagnostics: aws-neuron-sdk#1023 "[NLA001] Unhandled exception", #947
        # "[TEN404] ... Internal tensorizer error"; NCC_ codes as public trn1/trn2 ports quote
        # them: "[NCC_EVRF029] Operation sort is not supported", "[NCC_EOOM002] ... HBM limit".
        r"\[(?:NCC_[A-Z]+\d+|NLA\d{3}|TEN\d{3})\]",
        # aws-neuron-sdk#422/#284 "ERROR [neuron-cc]: An Internal Compiler Error has occurred".
        r"An Internal Compiler Error has occurred",
        # aws-neuron-sdk#947 "[root]: Subcommand returned with exitcode=70".
        r"Subcommand returned with exitcode=[1-9]\d*",
    ),
    _rule(
        "EfaInitFailed",
        # aws-neuron-sdk#851: "CCOM WARN NET/OFI aws-ofi-nccl initialization failed" and
        # "CCOM WARN OFI plugin initNet() failed is EFA enabled?"
        r"OFI plugin initNet\(\) failed",
        r"NET/OFI .*initiali[sz]ation failed",
        # ofiwg/libfabric#12708, aws/aws-ofi-nccl#889: "fi_getinfo: provider efa output empty
        # list", "fi_getinfo: -61 (No data available)"; libfabric#5689 "fi_getinfo failed".
        r"fi_getinfo(?:_\(\))?\b.*(?:empty list|-61|No data available|failed)",
        # aws/aws-ofi-nccl#24 "NET/OFI Couldn't open AV"; libfabric#12708 "ibv_open_device failed".
        r"NET/OFI Couldn't (?:open|create|get)",
        r"ibv_open_device failed",
    ),
    _rule(
        "DeviceOutOfMemory",
        # vllm-project/vllm#12443 'nrt_tensor_allocate status=4 message="Allocation Failure"'.
        r"nrt_tensor_allocate status=4\b",
        r'message="Allocation Failure"',
    ),
    _rule(
        "NeuronRuntimeError",
        # Runtime/driver log lines: aws-neuron-sdk#851 "ERROR   NRT:nrt_init  Failed to
        # initialize devices", "ERROR  TDRV:tdrv_init_mla_phase1 Could not open the nd3", #779
        # "ERROR   ENC:enc_load_operations", "ERROR  NMGR:dlr_kelf_stage".
        r"\bERROR\s+(?:NRT|TDRV|NMGR|ENC):\w+",
        # huggingface/optimum-neuron#668 "Failure: NRT_RESOURCE in nrt_load()"; aws-neuron-sdk#351
        # "nrt_execute: status=1004"; #493 "NRTD response code 'NERR_RESOURCE_NC'".
        r"Failure: NRT_\w+ in nrt_\w+",
        r"\bnrt_\w+:? status=\d+",
        r"\bNERR_[A-Z_]+",
        # aws-neuron-samples#44, aws-neuron-sdk#718 (runtime could not start).
        r"Neuron [Rr]untime (?:cannot|could not) be initiali[sz]ed",
        r"No neuron device available",
        # aws-neuron-sdk#713/#851: Neuron collectives (CCOM) bootstrap timeouts between nodes.
        r"CCOM WARN Timeout waiting for",
    ),
    _rule(
        "RendezvousTimeout",
        # torchrun/c10d: ymcui/Chinese-LLaMA-Alpaca-2#274 RendezvousTimeoutError; pytorch#79388
        # and meta-pytorch/torchtune#2676 RendezvousConnectionError ("The connection to the C10d
        # store has failed"); pytorch#116974 RendezvousClosedError.
        r"Rendezvous(?:Timeout|Connection|Closed)Error",
        # nvidia-cosmos/cosmos-rl#681 "torch.distributed.DistNetworkError: The client socket has
        # timed out after 300000ms"; pytorch#79388 "[c10d] The client socket has timed out".
        r"DistNetworkError",
        r"The client socket has timed out",
        # torchtune#2676 gloo "Timed out waiting 1800000ms for recv operation to complete";
        # aws-neuron-sdk#1369 gloo "Connection closed by peer".
        r"Timed out waiting \d+ms for (?:recv|send) operation",
        r"gloo.*Connection closed by peer",
    ),
    _rule(
        "OOMKilled",
        # Host-memory exhaustion a worker reports itself (the kernel OOM killer shows up as
        # terminated.reason OOMKilled instead): C++ std::bad_alloc, Python MemoryError, ENOMEM.
        r"std::bad_alloc",
        r"(?:^|[\s:\]])MemoryError\b",
        r"Cannot allocate memory",
    ),
    _rule(
        "Interrupted",
        # trainer/trainium_trainer/__main__.py after a SIGTERM: "stopped: SIGTERM: stopped after
        # step 40, checkpointed; ..." (torchrun --tee prefixes "[default0]:"), and its torchrun
        # wrapper (trainium_trainer/torchrun.py): "stopped: torchrun got signal 15 (SIGTERM)..."
        r"(?:^|\]:)\s*stopped: "
        r"(?:SIGTERM: stopped after step \d+|torchrun(?:'s workers)? got signal)",
        # torchrun's agent itself (torch/distributed/elastic/multiprocessing/api.py): ahead of
        # the generic traceback rule, which would read this exception as the user's code.
        r"\bSignalException: Process \d+ got signal: \d+",
    ),
    _rule(
        "UserCodeError",
        # trainer/trainium_trainer/__main__.py: a mistake the user can fix is one "error: ..."
        # line (torchrun --tee prefixes "[default0]:").
        r"(?:^|\]:)\s*error: \S",
        # The exception line that ends a Python traceback, but not torchrun's own summary.
        r"^(?:\[[^\]]*\]:?\s*)?(?:[A-Za-z_]\w*\.)*(?!ChildFailedError)[A-Za-z_]\w*"
        r"(?:Error|Exception)(?::\s|\s*$)",
    ),
    # A traceback whose exception line fell out of the tail still says the code raised.
    _rule("UserCodeError", r"Traceback \(most recent call last\)"),
)
