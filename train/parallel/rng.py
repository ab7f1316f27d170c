"""A random stream of its own for each tensor-parallel rank, for attention dropout.

Without sequence parallelism the tensor-parallel ranks of one data-parallel group share their
random streams, because the hidden dropouts act on replicated activations and must drop the
same elements everywhere. Attention dropout is different: each rank holds its own heads, and
drawing the same stream there gives every rank's heads the same mask pattern (correlated
dropout across heads). Megatron-LM forks a model-parallel RNG for it; so does this module.

Each call of a hooked attention core draws one seed from the CPU default generator, which
every tensor-parallel rank holds in the same state, and runs the core under a forked RNG
seeded from (that seed, this rank). So the masks differ between tp ranks; the default streams
afterwards are where they would be without the fork except for that one CPU draw, the same
on every rank; and activation checkpointing, which saves and restores the default generators'
states around a recomputed block, recomputes the very same masks.
"""

from __future__ import annotations

import torch
from torch import nn

from train.models.layers import DotProductAttention

_SEED_RANGE = 2**62


def tensor_parallel_seed(seed: int, tp_rank: int) -> int:
    """This rank's seed for one attention call (a fixed odd multiplier keeps the ranks of
    neighbouring draws apart)."""
    return (seed * 0x9E3779B97F4A7C15 + tp_rank + 1) % 2**63


class TensorParallelDropoutRNG:
    """Forward hooks that run a module under a per-rank forked RNG while it trains with
    dropout; a no-op in evaluation or without dropout."""

    def __init__(self, tp_rank: int, device_type: str) -> None:
        self.tp_rank = tp_rank
        self.device_type = device_type
        self._forks: list = []

    def _active(self, module: nn.Module) -> bool:
        return module.training and module.dropout > 0

    def enter(self, module: nn.Module, args) -> None:  # noqa: ANN001 - hook signature
        if not self._active(module):
            return
        seed = tensor_parallel_seed(int(torch.randint(_SEED_RANGE, ())), self.tp_rank)
        if self.device_type == "cuda":
            fork = torch.random.fork_rng(devices=[torch.cuda.current_device()])
        else:
            fork = torch.random.fork_rng(devices=[], device_type=self.device_type)
        fork.__enter__()
        self._forks.append(fork)
        if self.device_type == "cuda":
            torch.cuda.manual_seed(seed)  # this device's generator only
        else:
            torch.default_generator.manual_seed(seed)

    def exit(self, module: nn.Module, args, output) -> None:  # noqa: ANN001 - hook signature
        if self._forks:
            self._forks.pop().__exit__(None, None, None)


def fork_attention_rng(model: nn.Module, tp_rank: int, device_type: str) -> int:
    """Hook every attention core of ``model`` so its dropout draws this rank's stream.
    Returns how many cores were hooked."""
    rng = TensorParallelDropoutRNG(tp_rank, device_type)
    hooked = 0
    for module in model.modules():
        if isinstance(module, DotProductAttention):
            module.register_forward_pre_hook(rng.enter)
            # always_call: a forward that raises still restores the default streams
            module.register_forward_hook(rng.exit, always_call=True)
            hooked += 1
    return hooked
