"""The device layer: the only module that touches torch_xla; CPU with gloo when it is absent.

Everything above this module calls a Runtime and never asks which backend it runs on, so the same
step code runs on Trainium (PJRT/XLA, or native PyTorch: native.py, this layer's other module)
and on a laptop (CPU, DDP over gloo).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from trainium_trainer import contract
from trainium_trainer.config import apply_compiler_defaults

Batch = dict[str, torch.Tensor]


def xla_available() -> bool:
    """True when torch_xla can be imported (a Neuron DLC, or the .venv-xla test venv)."""
    return importlib.util.find_spec("torch_xla") is not None


def launched_world_size() -> int:
    """World size torchrun announced, 1 when started as a plain process."""
    return int(os.environ.get(contract.ENV_WORLD_SIZE, "1"))


class Runtime:
    """Plain torch on CPU: DDP over gloo under torchrun, a single process otherwise."""

    kind = "cpu"

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        if launched_world_size() > 1 and not dist.is_initialized():
            dist.init_process_group("gloo")
        self.distributed = dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world_size = dist.get_world_size() if self.distributed else 1

    @property
    def is_main(self) -> bool:
        """Rank 0 writes checkpoints, metrics and the summary."""
        return self.rank == 0

    def barrier(self) -> None:
        """Wait for every rank (e.g. before rank 0 reads what all ranks must have finished)."""
        if self.distributed:
            dist.barrier()

    def prepare_model(self, model: nn.Module, precision: str) -> None:
        """Cast for the precision and move to the device, in place.

        bf16 casts the model itself, not XLA_DOWNCAST_BF16 (deprecated in torch-xla 2.4+).
        """
        if precision == "bf16":
            model.to(torch.bfloat16)
        model.to(self.device)

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """DDP on multi-process CPU: it all-reduces gradients during backward."""
        if self.world_size == 1:
            return model
        return nn.parallel.DistributedDataParallel(model)

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Prepare the optimizer's update for this backend (nothing to do: it runs eagerly)."""

    def no_sync(self, model: nn.Module, sync: bool) -> contextlib.AbstractContextManager[Any]:
        """Skip DDP's all-reduce on accumulation micro-steps; the last micro-step syncs."""
        if sync or not isinstance(model, nn.parallel.DistributedDataParallel):
            return contextlib.nullcontext()
        return model.no_sync()

    def reduce_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """All-reduce (average) gradients across ranks; DDP already did it on CPU."""

    def mean_over_ranks(self, value: torch.Tensor) -> torch.Tensor:
        """The mean of a device tensor over all ranks (what every rank then logs and checks)."""
        if not self.distributed:
            return value
        total = value.detach().clone()
        dist.all_reduce(total)
        return total / self.world_size

    def agree(self, flags: list[int]) -> list[int]:
        """Element-wise max of small host ints over all ranks: any rank's request binds all."""
        if not self.distributed:
            return flags
        values = torch.tensor(flags, dtype=torch.int64)
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self._host_group())
        return [int(v) for v in values.tolist()]

    def gather_host(self, values: list[float]) -> list[list[float]]:
        """A few host floats from every rank, in rank order (over the host group, no device)."""
        if not self.distributed:
            return [list(values)]
        mine = torch.tensor(values, dtype=torch.float64)
        out = [torch.zeros_like(mine) for _ in range(self.world_size)]
        dist.all_gather(out, mine, group=self._host_group())
        return [[float(v) for v in t.tolist()] for t in out]

    def _host_group(self) -> Any:
        """The process group host-side agreement runs in (the default gloo one on CPU)."""
        return None

    def step_closure(self, fn: Callable[..., None], args: tuple[Any, ...] = ()) -> None:
        """Run fn after the step's values exist: at once on CPU."""
        fn(*args)

    def mark_step(self) -> None:
        """End of one step's graph: nothing to cut on CPU."""

    def loader(self, batches: Iterable[Batch]) -> Iterator[Batch]:
        """Batches on this device (CPU tensors already are)."""
        return iter(batches)

    def reseed(self, seed: int) -> None:
        """Seed the generator dropout uses, so a resumed run draws what an unbroken one would.

        Only the CPU generator: torch.manual_seed also queues a lazy seed for CUDA, XPU and MTIA,
        each with a traceback.format_stack() of the caller (~0.4 ms a step in the loop, issue 26).
        """
        torch.default_generator.manual_seed(seed)

    def rng_state(self) -> dict[str, Any]:
        """Device RNG state beyond torch's CPU generator (none on CPU)."""
        return {}

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Restore what rng_state returned."""

    def to_cpu(self, obj: Any) -> Any:
        """Tensors to host memory before torch.save (no-op on CPU)."""
        return obj

    def snapshot(self, obj: Any, buffers: dict[int, torch.Tensor]) -> Any:
        """A host copy of obj that no later step can change: a background write reads it.

        Each tensor is copied into a host buffer kept in `buffers` for the next snapshot (the
        caller's previous snapshot must be written by then): fresh memory costs page faults,
        ~3x the copy itself. Once per view of a storage, so tied weights stay tied in the file.
        """
        leaves, spec = tree_flatten(obj)
        views: dict[tuple[Any, ...], torch.Tensor] = {}
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor) and _view(leaf) not in views:
                views[_view(leaf)] = _host_copy(leaf, buffers, len(views))
        copied = [views[_view(x)] if isinstance(x, torch.Tensor) else x for x in leaves]
        return tree_unflatten(copied, spec)

    def save(self, obj: Any, path: Path) -> None:
        """Serialise obj to path (the caller makes it atomic)."""
        torch.save(self.to_cpu(obj), path)

    def report(self) -> dict[str, Any]:
        """Backend facts for summary.json (the native runtime's compile-cache hits)."""
        return {}

    def close(self) -> None:
        """Leave the process group so torchrun sees a clean exit."""
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()


class XlaRuntime(Runtime):
    """PyTorch/XLA over PJRT (Trainium NeuronCores, or PJRT_DEVICE=CPU in tests)."""

    kind = "xla"

    def __init__(self) -> None:
        apply_compiler_defaults()  # before torch-neuronx reads NEURON_CC_FLAGS
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        with contextlib.suppress(ImportError):  # registers Neuron's PJRT plugin on a DLC
            import torch_neuronx  # noqa: F401
        if launched_world_size() > 1 and not dist.is_initialized():
            import torch_xla.distributed.xla_backend  # registers the "xla" backend

            dist.init_process_group("xla", init_method="xla://")
        self._xla, self._xm = torch_xla, xm
        self._gloo: Any = None
        self.device = torch_xla.device()
        self.distributed = dist.is_initialized()
        self.rank = xr.global_ordinal()
        self.world_size = xr.world_size()

    def barrier(self) -> None:
        """XLA rendezvous across all replicas."""
        if self.world_size > 1:
            self._xm.rendezvous("trainium_trainer.barrier")

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """No DDP wrapper on XLA: reduce_gradients all-reduces inside the step graph."""
        return model

    def reduce_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """xm.optimizer_step's all-reduce, split out so clipping sees the averaged gradients."""
        if self.world_size > 1:
            self._xm.reduce_gradients(optimizer)

    def mean_over_ranks(self, value: torch.Tensor) -> torch.Tensor:
        """All-reduce inside the step graph (no host read), scaled to the mean."""
        if self.world_size == 1:
            return value
        return self._xm.all_reduce(self._xm.REDUCE_SUM, value, scale=1.0 / self.world_size)

    def _host_group(self) -> Any:
        """A gloo group beside the XLA one, so agreeing on host flags never touches the device."""
        if self._gloo is None:
            self._gloo = dist.new_group(backend="gloo")
        return self._gloo

    def step_closure(self, fn: Callable[..., None], args: tuple[Any, ...] = ()) -> None:
        """Defer fn until the step graph ran, so reading tensors does not cut the graph."""
        self._xm.add_step_closure(fn, args)

    def mark_step(self) -> None:
        """Cut and launch this step's graph (one graph per step kind)."""
        self._xla.sync()

    def loader(self, batches: Iterable[Batch]) -> Iterator[Batch]:
        """Background host-to-device transfer overlapping the step."""
        from torch_xla.distributed.parallel_loader import MpDeviceLoader

        return iter(MpDeviceLoader(batches, self.device))

    def reseed(self, seed: int) -> None:
        """Seed both the CPU generator and the XLA device generator."""
        torch.manual_seed(seed)
        self._xm.set_rng_state(seed)

    def rng_state(self) -> dict[str, Any]:
        """The XLA generator's seed."""
        return {"xla": self._xm.get_rng_state()}

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Restore the XLA generator's seed."""
        if "xla" in state:
            self._xm.set_rng_state(int(state["xla"]))

    def to_cpu(self, obj: Any) -> Any:
        """Copy every XLA tensor of obj to host memory in one batched transfer, as xm.save does.

        One `.cpu()` per tensor is one device round trip each (~1,600 for BERT-large).
        """
        return self._xm._maybe_convert_to_cpu(obj)

    def snapshot(self, obj: Any, buffers: dict[int, torch.Tensor]) -> Any:
        """to_cpu's batched transfer makes new host tensors; one already on the host is copied."""
        leaves, spec = tree_flatten(obj)
        moved = tree_flatten(self.to_cpu(obj))[0]
        if len(moved) != len(leaves):  # another structure: copy what is on the host already
            return super().snapshot(self.to_cpu(obj), buffers)
        copied = [
            host.detach().clone() if isinstance(host, torch.Tensor) and host is live else host
            for live, host in zip(leaves, moved, strict=True)
        ]
        return tree_unflatten(copied, spec)


def _view(tensor: torch.Tensor) -> tuple[Any, ...]:
    """What makes two tensors the same view of the same storage (tied weights)."""
    storage = tensor.untyped_storage().data_ptr()
    return (storage, tensor.storage_offset(), tensor.shape, tensor.stride(), tensor.dtype)


def _host_copy(tensor: torch.Tensor, buffers: dict[int, torch.Tensor], index: int) -> torch.Tensor:
    """tensor copied into buffers[index] (made, or remade when its shape or dtype changed)."""
    buffer = buffers.get(index)
    if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
        buffer = buffers[index] = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
    return buffer.copy_(tensor.detach())


def make_runtime(prefer: str = "auto") -> Runtime:
    """The runtime --backend names; auto: XLA when torch_xla is importable, CPU otherwise."""
    if prefer == contract.BACKEND_NATIVE:
        from trainium_trainer.native import NativeRuntime

        return NativeRuntime()
    if prefer == "xla" or (prefer == "auto" and xla_available()):
        return XlaRuntime()
    return Runtime()
