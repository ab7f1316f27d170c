"""Activation checkpointing applied to a plain model from outside.

Each chosen module's ``forward`` is replaced, on that instance only, by one that runs the
original under ``torch.utils.checkpoint`` (non-reentrant, RNG state preserved, so dropout
masks are drawn again identically in the recomputation): its inner activations are freed
after the forward pass and recomputed in backward. Parameter names and state dicts do not
change, and FSDP2 / tensor-parallel hooks (on ``__call__``) keep working around it.

* ``full``: every transformer block; only each block's input is kept;
* ``selective``: the attention sub-layer of every block, the one its family's plan names
  (``every=0``; its q/k/v and scores are the largest activations per FLOP of recomputation),
  or every ``every``-th whole block.
"""

from __future__ import annotations

import functools

from torch import nn
from torch.utils.checkpoint import checkpoint

from train.models.registry import spec_of_model


def checkpoint_module(module: nn.Module) -> None:
    """Make ``module``'s forward recompute its activations in backward (in place)."""
    forward = module.forward

    @functools.wraps(forward)
    def checkpointed(*args, **kwargs):
        return checkpoint(forward, *args, use_reentrant=False, preserve_rng_state=True, **kwargs)

    module.forward = checkpointed


def modules_to_checkpoint(model: nn.Module, mode: str, every: int = 0) -> list[nn.Module]:
    """The modules ``mode`` ("none", "full", "selective") checkpoints in ``model.blocks``."""
    blocks = list(model.blocks)
    if mode == "none":
        return []
    if mode == "full":
        return blocks
    if mode != "selective":
        raise ValueError(f"unknown activation checkpointing mode {mode!r}")
    if every > 0:
        return blocks[every - 1 :: every]
    attention = spec_of_model(model).parallel.attention
    return [block.get_submodule(attention) for block in blocks]


def apply_activation_checkpointing(model: nn.Module, mode: str, every: int = 0) -> nn.Module:
    for module in modules_to_checkpoint(model, mode, every):
        checkpoint_module(module)
    return model
