"""Optimizers (AdamW, LAMB), weight-decay parameter groups, the lr schedule, grad-norm clipping.

Everything here works on plain tensors and on DTensors (FSDP2 / tensor-parallel shards), and on
models that mix the two (tensor parallelism leaves LayerNorms and position tables as plain,
replicated tensors). Parameter groups never mix DTensors with plain tensors, so the foreach
kernels of the optimizers never see a mixed list.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn
from torch.distributed.tensor import DTensor

NORM_TYPES = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.RMSNorm)


def param_groups(
    model: nn.Module, weight_decay: float, decay_embeddings: bool = True
) -> list[dict]:
    """Split parameters into decayed / not decayed groups (each also split by DTensor-ness).

    Not decayed: biases and normalisation weights (Megatron, BERT, GPT-2 practice), and
    embedding tables when ``decay_embeddings`` is False. Decayed: every other weight matrix.
    A tied parameter (GPT's lm_head = wte) is classified once, by the first module holding it.
    """
    seen: set[int] = set()
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            if isinstance(module, NORM_TYPES) or name == "bias" or param.ndim < 2:
                decay = False
            elif isinstance(module, nn.Embedding):
                decay = decay_embeddings
            else:
                decay = True
            groups.setdefault((decay, isinstance(param, DTensor)), []).append(param)
    result = []
    for (decay, is_dtensor), params in sorted(groups.items()):
        result.append(
            {
                "params": params,
                "weight_decay": weight_decay if decay else 0.0,
                "name": ("decay" if decay else "no_decay") + ("/dtensor" if is_dtensor else ""),
            }
        )
    return result


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning"), algorithm 2.

    Adam moments with bias correction, decoupled weight decay added to the update, then a
    per-tensor trust ratio ||w|| / ||update|| (1 where either norm is 0) scales the step, as in
    NVIDIA's FusedLAMB used for BERT pretraining. Norms of DTensor shards are global norms.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
    ) -> None:
        if lr <= 0 or eps <= 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid LAMB hyper-parameters lr={lr} betas={betas} eps={eps}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch.optim signature
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad
                state = self.state[param]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                step = state["step"].item()
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (exp_avg_sq / (1 - beta2**step)).sqrt_().add_(group["eps"])
                update = (exp_avg / (1 - beta1**step)).div_(denom)
                if group["weight_decay"]:
                    update.add_(param, alpha=group["weight_decay"])
                weight_norm = _global_norm(param)
                update_norm = _global_norm(update)
                # tensors, not floats: no host sync per parameter on GPU
                trust = torch.where(
                    (weight_norm > 0) & (update_norm > 0),
                    weight_norm / update_norm,
                    torch.ones_like(weight_norm),
                )
                step_size = trust * -group["lr"]
                if isinstance(param, DTensor):
                    # same placements for the parameter and its update: the step is shard-local
                    param.to_local().add_(update.to_local() * step_size)
                else:
                    param.add_(update * step_size)
        return loss


def _global_norm(tensor: torch.Tensor) -> torch.Tensor:
    """L2 norm of the whole tensor as a plain 0-d tensor (a DTensor's norm is reduced)."""
    norm = torch.linalg.vector_norm(tensor)
    return norm.full_tensor() if isinstance(norm, DTensor) else norm


def build_optimizer(
    model: nn.Module,
    name: str,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
    decay_embeddings: bool = True,
) -> torch.optim.Optimizer:
    groups = param_groups(model, weight_decay, decay_embeddings)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if name != "adamw":
        raise ValueError(f"unknown optimizer {name!r}")
    params = [p for g in groups for p in g["params"]]
    # The fused kernel (CUDA and CPU) is the fastest AdamW; it takes plain tensors only.
    fused = all(p.device.type in ("cuda", "cpu") and not isinstance(p, DTensor) for p in params)
    return torch.optim.AdamW(
        groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused or None
    )


class LRSchedule:
    """Linear warmup from 0 to ``lr`` over ``warmup_steps``, then cosine or linear decay to
    ``min_lr`` at ``decay_steps``, constant ``min_lr`` after. A pure function of the step, so a
    resumed run gets the same rates with no state to restore beyond the settings."""

    def __init__(
        self, lr: float, min_lr: float, warmup_steps: int, decay_steps: int, decay: str
    ) -> None:
        if decay not in ("cosine", "linear"):
            raise ValueError(f"decay must be cosine or linear, got {decay!r}")
        if warmup_steps > decay_steps:
            raise ValueError(
                f"warmup_steps ({warmup_steps}) must not exceed decay_steps ({decay_steps})"
            )
        self.lr, self.min_lr = lr, min_lr
        self.warmup_steps, self.decay_steps, self.decay = warmup_steps, decay_steps, decay

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        if step >= self.decay_steps:
            return self.min_lr
        progress = (step - self.warmup_steps) / max(1, self.decay_steps - self.warmup_steps)
        if self.decay == "cosine":
            coefficient = 0.5 * (1.0 + math.cos(math.pi * progress))
        else:
            coefficient = 1.0 - progress
        return self.min_lr + coefficient * (self.lr - self.min_lr)

    def apply(self, optimizer: torch.optim.Optimizer, step: int) -> float:
        lr = self(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr

    def state_dict(self) -> dict:
        return {
            "lr": self.lr,
            "min_lr": self.min_lr,
            "warmup_steps": self.warmup_steps,
            "decay_steps": self.decay_steps,
            "decay": self.decay,
        }


def _grads(params: Iterable[torch.Tensor]) -> tuple[list[torch.Tensor], list[DTensor]]:
    plain, distributed = [], []
    for param in params:
        if param.grad is not None:
            (distributed if isinstance(param.grad, DTensor) else plain).append(param.grad)
    return plain, distributed


@torch.no_grad()
def grad_norm(params: Iterable[torch.Tensor]) -> float:
    """Global L2 norm of all gradients (inf/nan if any gradient is), identical on every rank.

    DTensor gradients are reduced over their mesh; they are grouped by mesh first, because a
    tensor-parallel model under FSDP holds DTensors on two meshes (2-D for sharded weights,
    the data-parallel one for LayerNorms). Plain gradients are already identical across ranks
    (DDP all-reduces them; tensor parallelism computes replicated ones).
    """
    plain, distributed = _grads(params)
    squares = []
    if plain:
        squares.append(torch.nn.utils.get_total_norm(plain).float() ** 2)
    by_mesh: dict[object, list[DTensor]] = {}
    for grad in distributed:
        by_mesh.setdefault(grad.device_mesh, []).append(grad)
    for grads in by_mesh.values():
        norm = torch.nn.utils.get_total_norm(grads)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        squares.append(norm.float() ** 2)
    if not squares:
        return 0.0
    return math.sqrt(float(sum(s.cpu() for s in squares)))


@torch.no_grad()
def scale_grads_(params: Iterable[torch.Tensor], factor: float) -> None:
    """Multiply every gradient by ``factor`` in place (foreach; plain and DTensor kept apart)."""
    for grads in _grads(params):
        if grads:
            torch._foreach_mul_(grads, factor)


def clip_grads_(params: Iterable[torch.Tensor], max_norm: float, total_norm: float) -> None:
    """Scale gradients so their global norm is at most ``max_norm`` (torch's 1e-6 guard)."""
    if max_norm > 0 and total_norm > max_norm:
        scale_grads_(params, max_norm / (total_norm + 1e-6))
