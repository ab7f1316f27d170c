"""Materialise a model built on the meta device after it was sharded, initialising only the
local shards, with the weights an eager build of the same seed has.

``init_weights()`` of the models draws each parameter with ``nn.init.normal_`` and friends in a
fixed order. Under :func:`sharded_init` such a draw on a DTensor (an FSDP2 or tensor-parallel
shard) makes the full tensor of that one parameter, draws into it exactly as the eager model
would (same generator, same order), and keeps only this rank's piece; plain tensors are drawn
as usual. So every rank holds at most its shards plus one full parameter at a time, never the
full model, and the result equals ``torch.manual_seed(seed); model.init_weights()`` on an
unsharded model. (DTensor's own random ops would draw each shard from its own offset of the
stream on CUDA and from the local generator on CPU: other values than an unsharded model's.)
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.overrides import TorchFunctionMode

RANDOM_INITS = (nn.init.normal_, nn.init.uniform_, nn.init.trunc_normal_)


class _ShardedRandomInit(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = dict(kwargs or {})
        if func in RANDOM_INITS:
            tensor = kwargs.pop("tensor") if "tensor" in kwargs else args[0]
            rest = args[1:] if args else ()
            if isinstance(tensor, DTensor):
                local = tensor.to_local()
                full = torch.empty(tensor.shape, dtype=tensor.dtype, device=local.device)
                func(full, *rest, **kwargs)
                shape, offset = compute_local_shape_and_global_offset(
                    tensor.shape, tensor.device_mesh, tensor.placements
                )
                with torch.no_grad():
                    local.copy_(full[tuple(slice(o, o + n) for o, n in zip(offset, shape))])
                return tensor
            return func(tensor, *rest, **kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def sharded_init():
    """Random ``nn.init`` draws on DTensors give the unsharded model's values (see module)."""
    with _ShardedRandomInit():
        yield


def materialize(model: nn.Module, device: torch.device, seed: int) -> nn.Module:
    """Allocate a meta-device (possibly sharded) model's local storage on ``device`` and
    initialise it: the weights of ``torch.manual_seed(seed); model.init_weights()`` on the
    unsharded model. Returns ``model``."""
    model.to_empty(device=device)
    torch.manual_seed(seed)
    with sharded_init():
        model.init_weights()
    return model
