"""Parallelism applied to a plain GPT / Bert from outside, torchtitan style.

The models know nothing about distribution; these functions rewrite them in place (FSDP2,
tensor parallelism) or wrap them (DDP), over a ``DeviceMesh`` with dimensions ("dp", "tp"):

* :func:`apply_ddp`: ``DistributedDataParallel`` over the dp mesh (replicated weights,
  all-reduced gradients);
* :func:`apply_fsdp`: FSDP2 ``fully_shard`` on every block, then on the root (embeddings,
  final norm, head), so parameters are all-gathered one block at a time;
* :func:`apply_tensor_parallel`: Megatron-style tensor parallelism with DTensor
  ``parallelize_module``: q/k/v and fc_in column-parallel (each rank holds n_head / tp heads
  and 1/tp of the MLP), out_proj and fc_out row-parallel (their outputs are all-reduced), and a
  vocab-parallel token embedding whose sharded table is also the tied output head.

With ``--parallel tp`` on more ranks than ``--tp``, the remaining data-parallel dimension is
FSDP2 over the tensor-parallel model (2-D, as torchtitan); DDP does not take DTensor weights.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
from torch.nn.parallel import DistributedDataParallel


def build_mesh(device_type: str, world_size: int, tp: int) -> DeviceMesh:
    """A 2-D ("dp", "tp") mesh; tp ranks are adjacent (within a node, where bandwidth is)."""
    if world_size % tp:
        raise ValueError(f"world size {world_size} is not divisible by --tp {tp}")
    return init_device_mesh(device_type, (world_size // tp, tp), mesh_dim_names=("dp", "tp"))


def apply_ddp(model: nn.Module, dp_mesh: DeviceMesh, device: torch.device) -> nn.Module:
    """Wrap ``model`` in DDP over the dp mesh's process group; returns the wrapper."""
    device_ids = [device.index] if device.type == "cuda" else None
    # broadcast_buffers off: the models have no buffers that change during training.
    return DistributedDataParallel(
        model, device_ids=device_ids, process_group=dp_mesh.get_group(), broadcast_buffers=False
    )


def apply_fsdp(
    model: nn.Module,
    dp_mesh: DeviceMesh,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype = torch.float32,
    reshard_after_forward: bool = True,
) -> nn.Module:
    """FSDP2 in place: each block its own unit, then the root. Returns ``model``.

    ``param_dtype`` bf16/fp16 all-gathers weights in that dtype (half the traffic) while the
    sharded fp32 parameters stay the master copy; gradients are reduced in ``reduce_dtype``.
    """
    mp_policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    for index, block in enumerate(model.blocks):
        # The last block's weights are needed again first in backward: keeping them gathered
        # saves one all-gather per step (torchtitan does the same).
        last = index == len(model.blocks) - 1
        fully_shard(
            block,
            mesh=dp_mesh,
            mp_policy=mp_policy,
            reshard_after_forward=reshard_after_forward and not last,
        )
    fully_shard(
        model, mesh=dp_mesh, mp_policy=mp_policy, reshard_after_forward=reshard_after_forward
    )
    return model


def _output_head(model: nn.Module) -> nn.Module:
    """The Linear whose weight is tied to ``wte``: GPT's lm_head, Bert's MLM decoder."""
    if hasattr(model, "lm_head"):
        return model.lm_head
    return model.mlm_head.decoder


def apply_tensor_parallel(
    model: nn.Module, tp_mesh: DeviceMesh, vocab_parallel: bool = True
) -> nn.Module:
    """Megatron tensor parallelism in place over ``tp_mesh``. Returns ``model``.

    Needs ``n_head`` and the MLP width divisible by the tp degree, and (with
    ``vocab_parallel``) the vocabulary too: pad it with ``pad_vocab_size(v, tensor_parallel=tp)``.
    LayerNorms, position tables and row-parallel biases stay replicated; their gradients come
    out identical on every tp rank because the activations they see are replicated.
    """
    tp = tp_mesh.size()
    config = model.config
    if config.n_head % tp:
        raise ValueError(f"n_head {config.n_head} is not divisible by tensor-parallel degree {tp}")
    if vocab_parallel and config.vocab_size % tp:
        raise ValueError(
            f"vocab_size {config.vocab_size} is not divisible by tensor-parallel degree {tp}"
        )
    block_plan = {
        "attn.q_proj": ColwiseParallel(),
        "attn.k_proj": ColwiseParallel(),
        "attn.v_proj": ColwiseParallel(),
        "attn.out_proj": RowwiseParallel(),
        "mlp.fc_in": ColwiseParallel(),
        "mlp.fc_out": RowwiseParallel(),
    }
    for block in model.blocks:
        parallelize_module(block, tp_mesh, block_plan)
    if vocab_parallel:
        head = _output_head(model)
        # Row-parallel embedding shards the table by vocabulary rows (Shard(0)); the head's
        # column-parallel weight is Shard(0) of the same [vocab, d] matrix, so one sharded
        # parameter can serve both. Logits are gathered (Replicate) for the model's own loss.
        parallelize_module(model.wte, tp_mesh, RowwiseParallel(input_layouts=Replicate()))
        parallelize_module(head, tp_mesh, ColwiseParallel(output_layouts=Replicate()))
        # parallelize_module made the head a new Parameter: tie it back, or the optimizer
        # would update two copies of one matrix.
        head.weight = model.wte.weight
    return model


def apply_compile(model: nn.Module, per_block: bool) -> nn.Module:
    """torch.compile in place (state-dict names unchanged). Per block under FSDP2 / TP, where
    graph breaks at every block's hooks are expected; the whole model otherwise."""
    if per_block:
        for block in model.blocks:
            block.compile()
    else:
        model.compile()
    return model


def parallelize(
    model: nn.Module,
    mesh: DeviceMesh | None,
    strategy: str,
    device: torch.device,
    param_dtype: torch.dtype | None = None,
    compile_model: bool = False,
) -> nn.Module:
    """Apply ``strategy`` ("ddp", "fsdp", "tp") and optionally compile. Returns the module to
    call in training (the DDP wrapper, or ``model`` itself, changed in place)."""
    if mesh is None or mesh.size() == 1:
        if compile_model:
            apply_compile(model, per_block=False)
        return model
    dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
    if strategy == "tp":
        apply_tensor_parallel(model, tp_mesh)
        if compile_model:
            apply_compile(model, per_block=True)
        if dp_mesh.size() > 1:
            apply_fsdp(model, dp_mesh, param_dtype=param_dtype)
        return model
    if strategy == "fsdp":
        if compile_model:
            apply_compile(model, per_block=True)
        return apply_fsdp(model, dp_mesh, param_dtype=param_dtype)
    if strategy == "ddp":
        if compile_model:
            apply_compile(model, per_block=False)
        return apply_ddp(model, dp_mesh, device)
    raise ValueError(f"unknown parallel strategy {strategy!r}")
