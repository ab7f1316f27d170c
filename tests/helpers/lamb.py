"""LAMB's references for the optimizer tests, in one process and sharded under torchrun: a tiny
GPT config, the per-parameter LAMB step and a run of seeded gradients."""

from __future__ import annotations

import torch
from torch import nn

from train.models.gpt import GPTConfig
from train.optim import Lamb, _like, _local, batched_global_norms, param_groups

TINY_GPT = GPTConfig(vocab_size=128, n_layer=2, n_head=2, n_embd=32, block_size=16)


class PerParameterLamb(Lamb):
    """The LAMB step as it was before the multi-tensor one: about ten kernels per parameter.
    Kept in the tests as the reference the multi-tensor step must equal."""

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001
        entries = [(g, p) for g in self.param_groups for p in g["params"] if p.grad is not None]
        clip = 1.0
        if self.max_grad_norm > 0:
            grad_norm = batched_global_norms([p.grad for _, p in entries]).square().sum().sqrt()
            clip = torch.clamp(grad_norm / self.max_grad_norm, min=1.0)
        updates = []
        for group, param in entries:
            beta1, beta2 = group["betas"]
            state = self.state[param]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(param)
                state["exp_avg_sq"] = torch.zeros_like(param)
            state["step"] += 1
            step = state["step"].item()
            grad = _local(param.grad) / clip
            exp_avg, exp_avg_sq = _local(state["exp_avg"]), _local(state["exp_avg_sq"])
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq / (1 - beta2**step)).sqrt_().add_(group["eps"])
            update = (exp_avg / (1 - beta1**step)).div_(denom)
            if group["weight_decay"]:
                update.add_(_local(param), alpha=group["weight_decay"])
            updates.append(update)
        params = [p for _, p in entries]
        norms = batched_global_norms(params + [_like(u, p) for u, p in zip(updates, params)])
        weight_norms, update_norms = norms[: len(params)], norms[len(params) :]
        trusted = (weight_norms > 0) & (update_norms > 0)
        ratios = torch.where(trusted, weight_norms / update_norms.clamp(min=1e-30), 1.0)
        for index, ((group, param), update) in enumerate(zip(entries, updates)):
            ratio = ratios[index] if (self.nvlamb or group["weight_decay"]) else 1.0
            _local(param).add_(update * (ratio * -group["lr"]))


def run_lamb(optimizer_class, model: nn.Module, steps: int, nvlamb: bool = False) -> None:
    """``steps`` LAMB steps on seeded random gradients, every third one large enough to be
    normalised by the global gradient norm; gradients are built whole and laid out like each
    parameter, so a sharded model gets the very gradients an unsharded one does."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    groups = param_groups(model, weight_decay=0.01)
    optimizer = optimizer_class(groups, lr=0.02, nvlamb=nvlamb)
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        scale = 2.0 if step % 3 == 0 else 0.01
        for group in groups:
            for param in group["params"]:
                full = torch.randn(param.shape, generator=generator) * scale
                if isinstance(param, DTensor):
                    full = distribute_tensor(full, param.device_mesh, param.placements)
                param.grad = full
        optimizer.step()
