"""Optimizers (AdamW, or LAMB) with fp32 state, and the warm-up/linear-decay schedule of BERT.

Moments live in fp32 whatever the parameters' dtype: a bf16 running average cannot move by less
than 1/256 of itself, so beta2=0.999 leaves it stuck (AWS's default AdamW_FP32OptimParams keeps
them in fp32 for the same reason). Parameters stay in their dtype; on Trainium the operator turns
on the runtime's stochastic rounding for bf16 (NEURON_RT_STOCHASTIC_ROUNDING_EN).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

NO_DECAY = ("bias", "LayerNorm", "layer_norm", "ln_", "norm.weight")
Params = Iterable[nn.Parameter] | Iterable[dict[str, Any]]


#: One group's hyper-parameters without its lr: beta1, beta2, eps, weight decay.
Hyper = tuple[float, float, float, float]
#: One group for the update: (parameter, its state) of those with a gradient, and its Hyper.
Group = tuple[list[tuple[torch.Tensor, dict[str, torch.Tensor]]], Hyper]
#: The step size of an update direction: scale(p, direction, lr) (AdamW: lr; LAMB: trust ratio).
Scale = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
#: The same for a group at once: scales(params, directions, lr): one 0-d tensor, or one per param.
Scales = Callable[[list[torch.Tensor], list[torch.Tensor], torch.Tensor], Any]

#: Update a group's tensors with torch's multi-tensor ops (`torch._foreach_*`), one call per
#: operation for all of them, instead of ~12 Python-dispatched ops per parameter. Measured with
#: bench/trainer_loop.py (tiny BERT, LAMB, CPU): see BENCHMARKS.md's trainer/bare rows. The ops
#: are private in torch 2.13 (pytorch/pytorch#145355: "The _ means that it is a private API",
#: though torch.optim's own foreach paths use them); a public `torch.foreach` that calls the same
#: ops is on its way (pytorch/pytorch#193607). False: the per-parameter loop of public ops (the
#: reference the tests compare it with). torch.optim.AdamW(foreach=True) is no substitute: it
#: keeps the moments in the parameter's dtype, and torch has no LAMB.
FOREACH = True


class _Fp32State(torch.optim.Optimizer):
    """Adam moments in fp32 with a tensor step count: branch-free, so XLA traces one graph.

    The learning rate reaches the graph as device data too (lr_on_device), never as a Python
    float: torch_xla caches scalars by value, so a scheduled lr that equals another scalar of
    the step (the weight decay, say) merges with it and changes the graph (issue 21). The update
    itself (apply_updates) sees plain tensors and floats, never the optimizer: torch.compile
    guards every value of an optimizer's param_groups, the lr too, and would recompile per lr.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
    ) -> None:
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)
        self._lrs: torch.Tensor | None = None
        multi = FOREACH if foreach is None else foreach
        #: What step() runs: apply_updates with this class's scale, or the runtime's compiled one.
        self.apply_update: Callable[[list[Group], torch.Tensor], None] = (
            functools.partial(apply_updates_foreach, type(self).scales)
            if multi
            else functools.partial(apply_updates, type(self).scale)
        )

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        """One update of every parameter that has a gradient."""
        self.init_state()  # a no-op after the first step (and after a resume)
        self.apply_update(self.groups(), self.lr_on_device())

    def groups(self) -> list[Group]:
        """Each group's parameters that have a gradient, with their state and hyper-parameters."""
        found: list[Group] = []
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            entries = [(p, self.state[p]) for p in group["params"] if p.grad is not None]
            found.append((entries, (beta1, beta2, group["eps"], group["weight_decay"])))
        return found

    def lr_on_device(self) -> torch.Tensor:
        """Every group's current lr in one device tensor, overwritten in place from the host.

        A 1-d tensor copied from the host is fresh device data each step; a 0-d one or a Python
        scalar would go through torch_xla's by-value scalar cache (0 and 1 even become constants).
        """
        host = torch.tensor([float(g["lr"]) for g in self.param_groups], dtype=torch.float32)
        if self._lrs is None:
            device = self.param_groups[0]["params"][0].device
            self._lrs = torch.zeros(len(self.param_groups), dtype=torch.float32, device=device)
        self._lrs.copy_(host)
        return self._lrs

    def init_state(self) -> None:
        """Zero moments and step count for every parameter that has none (a fresh start).

        Set up before the first step, so that step's graph is every step's graph (issue 21).
        """
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros(1, dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's load, then the saved state again as fp32 on the parameter's device.

        torch casts floating state to each parameter's dtype (bf16 moments would get stuck) and
        leaves "step" on the host (the step count would enter the graph as a host scalar). The
        step is 1-d: torch_xla uploads a 0-d tensor through its by-value scalar cache, which
        merges the equal step counts of all parameters into one graph input.
        """
        super().load_state_dict(state_dict)
        params = [p for group in self.param_groups for p in group["params"]]
        for index, saved in state_dict["state"].items():
            p = params[index]
            state = {k: v.reshape(1) if k == "step" else v for k, v in saved.items()}
            self.state[p] = {k: v.to(p.device, torch.float32) for k, v in state.items()}

    @staticmethod
    def scale(p: torch.Tensor, update: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
        """The step size applied to the update direction (lr: this group's, on the device)."""
        raise NotImplementedError

    @staticmethod
    def scales(params: list[torch.Tensor], updates: list[torch.Tensor], lr: torch.Tensor) -> Any:
        """scale() for a whole group: one 0-d tensor for all, or a list with one per parameter."""
        raise NotImplementedError


def apply_updates_foreach(scales: Scales, groups: list[Group], lrs: torch.Tensor) -> None:
    """apply_updates with multi-tensor ops (FOREACH): the same arithmetic, op for op."""
    for i, (entries, hyper) in enumerate(groups):
        if not entries:
            continue
        params = [p for p, _ in entries]
        updates = _directions(entries, hyper)
        torch._foreach_mul_(updates, scales(params, updates, lrs[i]))
        pairs = zip(params, updates, strict=True)
        deltas = [u if u.dtype == p.dtype else u.to(p.dtype) for p, u in pairs]
        torch._foreach_sub_(params, deltas)


def _directions(
    entries: list[tuple[torch.Tensor, dict[str, torch.Tensor]]], hyper: Hyper
) -> list[torch.Tensor]:
    """_direction for a group's parameters at once (new tensors; the moments updated in place)."""
    beta1, beta2, eps, weight_decay = hyper
    params = [p for p, _ in entries]
    grads = [p.grad.float() for p in params if p.grad is not None]  # groups(): all have one
    steps = [state["step"] for _, state in entries]
    ms, vs = [state["exp_avg"] for _, state in entries], [s["exp_avg_sq"] for _, s in entries]
    torch._foreach_add_(steps, 1.0)
    torch._foreach_mul_(ms, beta1)
    torch._foreach_add_(ms, grads, alpha=1.0 - beta1)
    torch._foreach_mul_(vs, beta2)
    torch._foreach_addcmul_(vs, grads, grads, value=1.0 - beta2)
    counts = [step.reshape(()) for step in steps]
    bias1, bias2 = torch._foreach_pow(beta1, counts), torch._foreach_pow(beta2, counts)
    for bias in (bias1, bias2):  # 1 - beta ** count
        torch._foreach_neg_(bias)
        torch._foreach_add_(bias, 1.0)
    updates = torch._foreach_div(ms, bias1)  # m_hat
    denom = torch._foreach_div(vs, bias2)  # v_hat
    torch._foreach_sqrt_(denom)
    torch._foreach_add_(denom, eps)
    torch._foreach_div_(updates, denom)
    if weight_decay:
        torch._foreach_add_(updates, [p.float() for p in params], alpha=weight_decay)
    return list(updates)


def apply_updates(scale: Scale, groups: list[Group], lrs: torch.Tensor) -> None:
    """Update every parameter in groups in place; lrs: one per group, on the device."""
    for i, (entries, hyper) in enumerate(groups):
        for p, state in entries:
            update = _direction(p, state, hyper)
            p.sub_((update * scale(p, update, lrs[i])).to(p.dtype))


def _direction(p: torch.Tensor, state: dict[str, torch.Tensor], hyper: Hyper) -> torch.Tensor:
    """Update the fp32 moments of p; returns m_hat / (sqrt(v_hat) + eps) + wd * p in fp32."""
    beta1, beta2, eps, weight_decay = hyper
    step, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
    assert p.grad is not None  # groups() only passes parameters with a gradient
    grad = p.grad.float()
    step.add_(1.0)
    m.mul_(beta1).add_(grad, alpha=1.0 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
    count = step.reshape(())
    m_hat, v_hat = m / (1.0 - torch.pow(beta1, count)), v / (1.0 - torch.pow(beta2, count))
    update = m_hat / (v_hat.sqrt() + eps)
    if weight_decay:
        update = update.add(p.float(), alpha=weight_decay)
    return update


class AdamW(_Fp32State):
    """AdamW (decoupled weight decay) with fp32 moments, like AWS's AdamW_FP32OptimParams."""

    @staticmethod
    def scale(p: torch.Tensor, update: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
        """The learning rate."""
        return lr

    @staticmethod
    def scales(params: list[torch.Tensor], updates: list[torch.Tensor], lr: torch.Tensor) -> Any:
        """The learning rate, for all."""
        return lr


class Lamb(_Fp32State):
    """LAMB (You et al., 2019): Adam moments with a per-tensor trust ratio ||w|| / ||update||."""

    @staticmethod
    def scale(p: torch.Tensor, update: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
        """The learning rate times the trust ratio (1 where either norm is zero)."""
        w_norm, u_norm = p.float().norm(), update.norm()
        ones = torch.ones_like(w_norm)
        return torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, ones) * lr

    @staticmethod
    def scales(params: list[torch.Tensor], updates: list[torch.Tensor], lr: torch.Tensor) -> Any:
        """scale() of every parameter, the norms taken together and the ratios as one vector."""
        w_norm = torch.stack(torch._foreach_norm([p.float() for p in params]))
        u_norm = torch.stack(torch._foreach_norm(updates))
        ones = torch.ones_like(w_norm)
        ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, ones) * lr
        return list(ratio.unbind())


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Biases and norms get no weight decay (as in BERT's reference recipe)."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if any(k in name for k in NO_DECAY) else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(
    model: nn.Module, name: str, lr: float, foreach: bool | None = None
) -> torch.optim.Optimizer:
    """AdamW (AWS's default for BERT) or LAMB (large-batch pretraining), both with fp32 state."""
    groups = param_groups(model, weight_decay=0.01)
    if name == "lamb":
        return Lamb(groups, lr=lr, foreach=foreach)
    return AdamW(groups, lr=lr, foreach=foreach)


def build_scheduler(
    optimizer: torch.optim.Optimizer, warmup_steps: int, max_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to the peak lr, then linear decay to zero at max_steps."""

    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        remaining = max_steps - step
        return max(0.0, remaining / max(1, max_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def set_peak_lr(scheduler: torch.optim.lr_scheduler.LambdaLR, lr: float) -> float | None:
    """Make `lr` the schedule's peak (after loading a checkpoint); returns the replaced peak."""
    old = float(scheduler.base_lrs[0])
    if old == lr:
        return None
    scheduler.base_lrs = [lr for _ in scheduler.base_lrs]
    groups = scheduler.optimizer.param_groups
    for group, fn in zip(groups, scheduler.lr_lambdas, strict=True):
        group["initial_lr"] = lr
        group["lr"] = lr * fn(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in groups]  # what get_last_lr() reports
    return old
