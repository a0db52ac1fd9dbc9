"""Optimizers (a small LAMB, or AdamW) and the warm-up/linear-decay schedule BERT phase 1 uses."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

NO_DECAY = ("bias", "LayerNorm", "layer_norm", "ln_", "norm.weight")


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al., 2019): Adam moments with a per-tensor trust ratio ||w|| / ||update||.

    Branch-free (torch.where, tensor step count) so XLA traces one graph for every step.
    """

    def __init__(
        self,
        params: Iterable[nn.Parameter] | Iterable[dict[str, object]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
    ) -> None:
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        """One LAMB update of every parameter that has a gradient."""
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, group, beta1, beta2)

    def _update(self, p: torch.Tensor, group: dict, beta1: float, beta2: float) -> None:
        """Update one parameter tensor in place."""
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        step, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
        grad = p.grad
        step.add_(1.0)
        m.mul_(beta1).add_(grad, alpha=1.0 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        m_hat = m / (1.0 - torch.pow(beta1, step)).to(m.dtype)
        v_hat = v / (1.0 - torch.pow(beta2, step)).to(v.dtype)
        update = m_hat / (v_hat.sqrt() + group["eps"])
        if group["weight_decay"]:
            update = update.add(p, alpha=group["weight_decay"])
        w_norm = p.float().norm()
        u_norm = update.float().norm()
        ones = torch.ones_like(w_norm)
        trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, ones)
        p.sub_(update * (trust * group["lr"]).to(p.dtype))


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, object]]:
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


def build_optimizer(model: nn.Module, name: str, lr: float) -> torch.optim.Optimizer:
    """LAMB for large-batch BERT pretraining, AdamW for everything else."""
    groups = param_groups(model, weight_decay=0.01)
    if name == "lamb":
        return Lamb(groups, lr=lr)
    return torch.optim.AdamW(groups, lr=lr, eps=1e-6)


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
