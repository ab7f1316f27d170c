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
from torch.distributed.tensor import DTensor, Partial, Replicate

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
    """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning") as NVIDIA's apex
    ``FusedLAMB`` computes it, the optimizer of the BERT pretraining records:

    1. gradients are divided by ``max(1, ||g|| / max_grad_norm)``, ``||g||`` the global norm
       over all parameters (``max_grad_norm=0``: not);
    2. Adam moments with bias correction; the update is ``m_hat / (sqrt(v_hat) + eps)`` plus
       ``weight_decay * w`` (decoupled);
    3. the step is ``lr * ||w|| / ||update||`` times the update (ratio 1 where either norm is
       0) for parameters with weight decay, and plain ``lr`` times the update for those
       without (biases, norms), unless ``nvlamb`` (apex's ``use_nvlamb``) applies the trust
       ratio to every parameter.

    Norms of DTensor shards are global; every norm of a step (gradients; then weights and
    updates) is one batched reduction per mesh, not a collective per parameter.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        max_grad_norm: float = 1.0,
        nvlamb: bool = False,
    ) -> None:
        if lr <= 0 or eps <= 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid LAMB hyper-parameters lr={lr} betas={betas} eps={eps}")
        if max_grad_norm < 0:
            raise ValueError(f"max_grad_norm must be >= 0, got {max_grad_norm}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.max_grad_norm, self.nvlamb = max_grad_norm, nvlamb

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch.optim signature
        """One LAMB step in a handful of multi-tensor (``torch._foreach_*``) kernels per
        parameter group, none per parameter except the trust-ratio scaling, and no host sync:
        the clip factor and trust ratios stay on the device."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        groups = []
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                groups.append((group, params))
        if not groups:
            return loss
        clip = None
        if self.max_grad_norm > 0:
            grads = [p.grad for _, params in groups for p in params]
            grad_norm = batched_global_norms(grads).square().sum().sqrt()
            clip = torch.clamp(grad_norm / self.max_grad_norm, min=1.0)
        updates = [self._adam_updates(group, params, clip) for group, params in groups]
        flat_params = [p for _, params in groups for p in params]
        flat_updates = [u for group_updates in updates for u in group_updates]
        norms = batched_global_norms(
            flat_params + [_like(u, p) for u, p in zip(flat_updates, flat_params)]
        )
        weight_norms, update_norms = norms[: len(flat_params)], norms[len(flat_params) :]
        trusted = (weight_norms > 0) & (update_norms > 0)
        ratios = torch.where(trusted, weight_norms / update_norms.clamp(min=1e-30), 1.0)
        first = 0
        for (group, params), group_updates in zip(groups, updates):
            local = [_local(p) for p in params]
            if self.nvlamb or group["weight_decay"]:
                # one factor per parameter, on the device: a 0-dim tensor each
                factors = (ratios[first : first + len(params)] * -group["lr"]).unbind()
                torch._foreach_mul_(group_updates, factors)
                torch._foreach_add_(local, group_updates)
            else:
                torch._foreach_add_(local, group_updates, alpha=-group["lr"])
            first += len(params)
        return loss

    def _adam_updates(
        self, group: dict, params: list[torch.Tensor], clip: torch.Tensor | None
    ) -> list[torch.Tensor]:
        """Adam moments updated in place; returns ``m_hat / (sqrt(v_hat) + eps) + wd * w`` per
        parameter (shard-local: a parameter, its gradient and moments share one placement)."""
        beta1, beta2 = group["betas"]
        exp_avgs, exp_avg_sqs, steps = [], [], []
        for param in params:
            state = self.state[param]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(param)
                state["exp_avg_sq"] = torch.zeros_like(param)
            state["step"] += 1  # a CPU tensor: reading it never waits for the GPU
            steps.append(state["step"].item())
            exp_avgs.append(_local(state["exp_avg"]))
            exp_avg_sqs.append(_local(state["exp_avg_sq"]))
        grads = [_local(p.grad) for p in params]
        if clip is not None:
            grads = torch._foreach_div(grads, clip)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        # m_hat / (sqrt(v_hat) + eps) written as m * (c2 / c1) / (sqrt(v) + eps * c2), with
        # c1 = 1 - beta1^t, c2 = sqrt(1 - beta2^t): the bias corrections become scalars of
        # kernels that run anyway, two passes over the state fewer
        corrections = [math.sqrt(1 - beta2**step) for step in steps]
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_add_(denom, [group["eps"] * c2 for c2 in corrections])
        scales = [c2 / (1 - beta1**step) for c2, step in zip(corrections, steps)]
        if group["weight_decay"]:
            updates = torch._foreach_mul([_local(p) for p in params], group["weight_decay"])
            torch._foreach_addcdiv_(updates, exp_avgs, denom, scales)
        else:
            updates = torch._foreach_div(exp_avgs, denom)
            torch._foreach_mul_(updates, scales)
        return updates


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _like(local: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``local`` as a DTensor laid out like ``reference`` (itself if ``reference`` is plain)."""
    if not isinstance(reference, DTensor):
        return local
    return DTensor.from_local(
        local, reference.device_mesh, reference.placements, run_check=False,
        shape=reference.shape, stride=reference.stride(),
    )  # fmt: skip


@torch.no_grad()
def batched_global_norms(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of each (possibly sharded) tensor, as one float32 vector on every rank.

    Local squared norms come from one ``_foreach_norm``; those of DTensors sharing a mesh and
    placements are summed over their sharded mesh dimensions in one reduction (a Partial
    DTensor made Replicate), so n parameters cost a collective per layout, not n.
    """
    result: list[torch.Tensor | None] = [None] * len(tensors)
    layouts: dict[tuple, list[int]] = {}
    for index, tensor in enumerate(tensors):
        key = (tensor.device_mesh, tensor.placements) if isinstance(tensor, DTensor) else None
        layouts.setdefault(key, []).append(index)
    for key, indices in layouts.items():
        local = [_local(tensors[i]) for i in indices]
        squares = torch.stack(torch._foreach_norm(local)).float().square()
        if key is not None:
            mesh, placements = key
            partial = [Partial() if p.is_shard() else Replicate() for p in placements]
            squares = DTensor.from_local(squares, mesh, partial, run_check=False).full_tensor()
        for position, i in enumerate(indices):
            result[i] = squares[position]
    return torch.stack([r.to(result[0].device) for r in result]).sqrt()


def build_optimizer(
    model: nn.Module,
    name: str,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
    decay_embeddings: bool = True,
    max_grad_norm: float = 1.0,
    nvlamb: bool = False,
) -> torch.optim.Optimizer:
    """AdamW (torch's) or :class:`Lamb`. ``max_grad_norm`` and ``nvlamb`` are LAMB's: it
    normalises gradients by their global norm itself, as FusedLAMB does."""
    groups = param_groups(model, weight_decay, decay_embeddings)
    if name == "lamb":
        return Lamb(
            groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
            max_grad_norm=max_grad_norm, nvlamb=nvlamb,
        )  # fmt: skip
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
        # here warmup_steps <= step < decay_steps, so the decay spans at least one step
        progress = (step - self.warmup_steps) / (self.decay_steps - self.warmup_steps)
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
