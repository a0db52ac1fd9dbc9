"""The native runtime: TorchNeuron's `neuron` device and torch.compile, or the same code on CPU.

On Trn2/Trn3, AWS trains native PyTorch (TorchNeuron: torch-neuronx 2.13.3.x with PyTorch 2.13):
a PrivateUse1 device named `neuron`, a `neuron` process-group backend, and a `neuron` backend for
torch.compile. Where that package is absent (a laptop, CI) the same runtime runs on CPU: gloo,
and Inductor, whose persistent FX-graph and AOTAutograd caches stand in for TorchNeuron's NEFF
cache, so the precompile contract (compile into the job's cache, train from it) is testable here.
A cache entry serves runs of the same topology: Inductor specialises CPU kernels on the thread
count (torchrun sets OMP_NUM_THREADS=1 for several processes), as NEFFs depend on world size
and LNC. Part of the device layer: only device.make_runtime constructs it.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils._pytree import tree_map

from trainium_trainer import contract
from trainium_trainer.config import extract_graphs_only
from trainium_trainer.device import Batch, Runtime, launched_world_size

#: The device, process-group and torch.compile backend name of TorchNeuron; AWS, "How to use
#: torch.distributed on Neuron": init_process_group(backend="neuron"), torch.device("neuron")
#: (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/guides/torch-distributed.html).
NEURON = "neuron"
#: The torch.compile backend on CPU: it really compiles (C++ kernels) and caches on disk.
CPU_COMPILER = "inductor"
#: Sub-directories of $TRAINIUM_CACHE_DIR: TorchNeuron's NEFFs, and Inductor's caches.
NEFF_SUBDIR = "neff"
INDUCTOR_SUBDIR = "inductor"
#: Counters (torch._dynamo.utils.counters[group][name]) that tell a cache hit from a compile;
#: unique_graphs counts Dynamo's traces: one per compiled function unless a guard fails (a value
#: baked into a graph, such as the lr, would add one per step even when the cache hits).
CACHE_COUNTERS = (
    ("stats", "unique_graphs"),
    ("inductor", "fxgraph_cache_hit"),
    ("inductor", "fxgraph_cache_miss"),
    ("aot_autograd", "autograd_cache_hit"),
    ("aot_autograd", "autograd_cache_miss"),
)


def configure_caches(root: str | None) -> Path | None:
    """Point the compile caches at the job's cache directory (None: leave the defaults).

    $TRAINIUM_CACHE_DIR wins over an inherited TORCHINDUCTOR_CACHE_DIR: the precompile stage
    and training must meet in the cache the operator manages. Runs before torch_neuronx loads.
    """
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True  # persistent FX-graph cache (compiled kernels)
    functorch_config.enable_autograd_cache = True  # and AOTAutograd's (forward/backward split)
    if not root:
        return None
    base = Path(root)
    os.environ[contract.ENV_INDUCTOR_CACHE_DIR] = str(base / INDUCTOR_SUBDIR)
    os.environ[contract.ENV_NEFF_CACHE_DIR] = str(base / NEFF_SUBDIR)
    return base


def torchneuron_available() -> bool:
    """True when the native torch-neuronx (not the XLA one of the same name) registers `neuron`."""
    if importlib.util.find_spec("torch_neuronx") is None:
        return False
    if extract_graphs_only():  # the precompile stage: compile every graph, run none (AWS's mode)
        os.environ.setdefault(contract.ENV_NEURONX_COMPILE_ONLY, "1")
    try:
        import torch_neuronx  # noqa: F401  registers the device and its process-group backend
    except ImportError:
        return False
    return bool(torch._C._get_privateuse1_backend_name() == NEURON)


def cache_counters() -> dict[str, int]:
    """This process's compile-cache hits and misses so far."""
    from torch._dynamo.utils import counters

    return {name: int(counters[group][name]) for group, name in CACHE_COUNTERS}


def _resolve_loss(model: nn.Module) -> None:
    """Fix a transformers model's loss function before compiling.

    transformers picks it on first use and warns once where a model names no loss_type (GPT-2):
    that warning inside the compiled forward is a graph break, which fullgraph=True refuses.
    """
    if isinstance(getattr(type(model), "loss_function", None), property):
        model.loss_function = model.loss_function


class _Autocast(nn.Module):
    """The model's forward under bf16 autocast, weights in fp32: TorchNeuron's mixed precision.

    AWS's TorchNeuron FAQ: "Use standard torch.autocast(device_type="neuron")" (frameworks/torch/
    pytorch-native-overview in the Neuron docs).
    """

    def __init__(self, model: nn.Module, device_type: str) -> None:
        super().__init__()
        self.model = model
        self.device_type = device_type

    def forward(self, **batch: torch.Tensor) -> Any:
        """Forward in bf16 where autocast picks it (matmuls), fp32 elsewhere."""
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            return self.model(**batch)


class NativeRuntime(Runtime):
    """Native PyTorch: DDP, the step's forward/backward and update under torch.compile."""

    kind = contract.BACKEND_NATIVE

    def __init__(self) -> None:
        self.cache_dir = configure_caches(os.environ.get(contract.ENV_CACHE_DIR))
        self.on_neuron = torchneuron_available()
        self.device = torch.device(NEURON if self.on_neuron else "cpu")
        self.compiler = NEURON if self.on_neuron else CPU_COMPILER
        if launched_world_size() > 1 and not dist.is_initialized():
            dist.init_process_group(NEURON if self.on_neuron else "gloo")
        self.distributed = dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world_size = dist.get_world_size() if self.distributed else 1
        self._autocast = False
        self._gloo: Any = None
        self._counted = cache_counters()

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """torch.compile as AWS recommends: fullgraph=True, dynamic=False (dynamic is refused).

        AWS, "torch.compile backend reference" (https://awsdocs-neuron.readthedocs-hosted.com/
        en/latest/torch/compile/reference-torch-compile.html).
        """
        return torch.compile(fn, backend=self.compiler, fullgraph=True, dynamic=False)

    def prepare_model(self, model: nn.Module, precision: str) -> None:
        """Weights stay fp32 on the device; bf16 is autocast in the forward (wrap_model)."""
        self._autocast = precision == "bf16"
        model.to(self.device)

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """torch.compile of the (autocast) model, inside DDP over the world (gloo or neuron).

        DDP goes outside: fullgraph=True cannot trace DDP's own forward (its Reducer), and the
        compiled backward hands DDP's hooks every gradient to all-reduce, as eager does.
        """
        _resolve_loss(model)
        inner = _Autocast(model, self.device.type) if self._autocast else model
        compiled = self.compile(inner)
        assert isinstance(compiled, nn.Module)
        if self.world_size == 1:
            return compiled
        self._ddp = nn.parallel.DistributedDataParallel(compiled)
        return self._ddp

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Compile the optimizer's update; the lr enters as a device tensor, never a constant."""
        update = getattr(optimizer, "apply_update", None)
        if callable(update):
            optimizer.apply_update = self.compile(update)  # type: ignore[attr-defined]

    def reseed(self, seed: int) -> None:
        """On `neuron`, every generator (torch.manual_seed seeds the device's too); CPU's alone."""
        if self.on_neuron:
            torch.manual_seed(seed)
        else:
            super().reseed(seed)

    def _host_group(self) -> Any:
        """gloo for host flags: the default group on CPU, a side group beside `neuron`."""
        if not self.on_neuron:
            return None
        if self._gloo is None:
            self._gloo = dist.new_group(backend="gloo")
        return self._gloo

    def loader(self, batches: Iterable[Batch]) -> Iterator[Batch]:
        """Batches on the device (CPU tensors already are)."""
        for batch in batches:
            yield {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def to_cpu(self, obj: Any) -> Any:
        """Device tensors to host memory before torch.save (no copy on CPU)."""
        if not self.on_neuron:
            return obj
        return tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, obj)

    def report(self) -> dict[str, Any]:
        """Compile-cache hits and misses of this process since the runtime started."""
        now = cache_counters()
        counts = {name: now[name] - self._counted[name] for name in now}
        where = str(self.cache_dir) if self.cache_dir else None
        return {"compile_cache": {"compiler": self.compiler, "dir": where, **counts}}
