"""Parallelism applied to a plain model from outside, torchtitan style, cut by the plan its
family declares (:class:`train.models.spec.ParallelPlan`).

The models know nothing about distribution; these functions rewrite them in place (FSDP2,
tensor parallelism) or wrap them (DDP), over a ``DeviceMesh`` with dimensions ("dp", "tp"):

* :func:`apply_ddp`: ``DistributedDataParallel`` over the dp mesh (replicated weights,
  all-reduced gradients);
* :func:`apply_fsdp`: FSDP2 ``fully_shard`` on every block, then on the root (embeddings,
  final norm, head), so parameters are all-gathered one block at a time;
* :func:`apply_tensor_parallel`: Megatron-style tensor parallelism with DTensor
  ``parallelize_module``: the plan's column-parallel Linears (q/k/v and the MLP's input: each
  rank holds n_head / tp heads and 1/tp of the MLP), its row-parallel ones (out_proj and the
  MLP's output, their outputs all-reduced), and a vocab-parallel token embedding whose
  sharded table is also the output head when the family ties them.

With ``--parallel tp`` on more ranks than ``--tp``, the remaining data-parallel dimension is
FSDP2 over the tensor-parallel model (2-D, as torchtitan); DDP does not take DTensor weights.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.experimental import implicit_replication
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)
from torch.nn.parallel import DistributedDataParallel

from train.models.registry import spec_of_model
from train.models.spec import ParallelPlan
from train.parallel.activation_checkpoint import apply_activation_checkpointing
from train.parallel.init import materialize
from train.parallel.rng import fork_attention_rng


def build_mesh(device_type: str, world_size: int, tp: int) -> DeviceMesh:
    """A 2-D ("dp", "tp") mesh; tp ranks are adjacent (within a node, where bandwidth is)."""
    if world_size % tp:
        raise ValueError(f"world size {world_size} is not divisible by --tp {tp}")
    return init_device_mesh(device_type, (world_size // tp, tp), mesh_dim_names=("dp", "tp"))


def apply_ddp(model: nn.Module, dp_mesh: DeviceMesh, device: torch.device) -> nn.Module:
    """Wrap ``model`` in DDP over the dp mesh's process group; returns the wrapper."""
    device_ids = [device.index] if device.type == "cuda" else None
    # No buffer sync before each forward: the models have no buffers that change during
    # training. (torch 2.13 deprecates broadcast_buffers for forward_sync_buffers; buffers are
    # still synced once at init, which is harmless: every rank builds them alike.)
    return DistributedDataParallel(
        model, device_ids=device_ids, process_group=dp_mesh.get_group(),
        forward_sync_buffers=False,
    )  # fmt: skip


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


def apply_tensor_parallel(
    model: nn.Module,
    tp_mesh: DeviceMesh,
    vocab_parallel: bool = True,
    sequence_parallel: bool = False,
    parallel_loss: bool = False,
) -> nn.Module:
    """Megatron tensor parallelism in place over ``tp_mesh``, cut by the model family's
    :class:`~train.models.spec.ParallelPlan`. Returns ``model``.

    Needs the plan's ``divisible`` config fields (the heads) and the MLP width divisible by the
    tp degree, and (with ``vocab_parallel``) the vocabulary too: pad it with
    ``pad_vocab_size(v, tensor_parallel=tp)``. Norms, position tables and row-parallel biases
    stay replicated; their gradients come out identical on every tp rank because the
    activations they see are replicated.
    """
    tp = tp_mesh.size()
    config = model.config
    plan = spec_of_model(model).parallel
    for name in plan.divisible:
        if getattr(config, name) % tp:
            raise ValueError(
                f"{name} {getattr(config, name)} is not divisible by tensor-parallel degree {tp}"
            )
    if vocab_parallel and config.vocab_size % tp:
        raise ValueError(
            f"vocab_size {config.vocab_size} is not divisible by tensor-parallel degree {tp}"
        )
    if sequence_parallel:
        return _apply_sequence_parallel(model, tp_mesh, parallel_loss, plan)
    block_plan = {
        **{name: ColwiseParallel() for name in plan.colwise},
        **{name: RowwiseParallel() for name in plan.rowwise},
    }
    for block in model.blocks:
        parallelize_module(block, tp_mesh, block_plan)
    # each rank's attention dropout acts on its own heads: its own random stream
    fork_attention_rng(model, tp_mesh.get_local_rank(), tp_mesh.device_type)
    if vocab_parallel:
        head = model.get_submodule(plan.head)
        # Row-parallel embedding shards the table by vocabulary rows (Shard(0)); the head's
        # column-parallel weight is Shard(0) of the same [vocab, d] matrix, so one sharded
        # parameter can serve both when they are tied. A causal LM's logits stay sharded by
        # vocabulary with ``parallel_loss`` (see vocab_parallel_loss); else they are gathered.
        embedding = model.get_submodule(plan.embedding)
        parallelize_module(embedding, tp_mesh, RowwiseParallel(input_layouts=Replicate()))
        if parallel_loss and plan.parallel_loss:
            head_plan = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
        else:
            head_plan = ColwiseParallel(output_layouts=Replicate())
        parallelize_module(head, tp_mesh, head_plan)
        if plan.tied(config):
            # parallelize_module made the head a new Parameter: tie it back, or the optimizer
            # would update two copies of one matrix.
            head.weight = embedding.weight
    return model


def _apply_sequence_parallel(
    model: nn.Module, tp_mesh: DeviceMesh, parallel_loss: bool, plan: ParallelPlan
) -> nn.Module:
    """Megatron's sequence parallelism (Korthikanti et al. 2022) on a decoder whose plan has
    one: between the tensor-parallel regions the residual stream is sharded along the
    sequence ([B, T/tp, d] per rank), so norms, dropouts and residual adds run on 1/tp of the
    tokens; the inputs of the sub-layers (attention, MLP) are all-gathered along the sequence
    and their row-parallel outputs reduce-scattered back (the all-reduce of plain TP, split
    in two).

    The token embedding reduce-scatters its vocab-parallel lookup into sequence shards; a
    position table's output is cut to the same shard of positions, so ``wte + wpe`` adds
    matching rows. With ``parallel_loss`` the head's logits stay sharded by vocabulary
    (Shard(-1)) for :func:`vocab_parallel_loss`; else they are gathered.
    """
    if not plan.sequence_parallel:
        name = spec_of_model(model).name
        raise ValueError(f"sequence parallelism is not implemented for the {name} family")
    sequence_shard = Shard(1)
    block_plan = {name: SequenceParallel() for name in plan.norms}
    for name in plan.sublayers:
        # attn(x, cache): the KV cache (generation only) is no tensor input to lay out
        extra = (None,) if name == plan.attention else ()
        block_plan[name] = PrepareModuleInput(
            input_layouts=(sequence_shard, *extra), desired_input_layouts=(Replicate(), *extra),
            use_local_output=True,
        )  # fmt: skip
    block_plan.update({name: ColwiseParallel() for name in plan.colwise})
    block_plan.update(
        {name: RowwiseParallel(output_layouts=sequence_shard) for name in plan.rowwise}
    )
    for block in model.blocks:
        parallelize_module(block, tp_mesh, block_plan)
    root_plan = {
        plan.embedding: RowwiseParallel(input_layouts=Replicate(), output_layouts=sequence_shard),
        plan.final_norm: SequenceParallel(),
        plan.head: ColwiseParallel(
            input_layouts=sequence_shard,
            output_layouts=Shard(-1) if parallel_loss else Replicate(),
            use_local_output=not parallel_loss,
        ),
    }
    if plan.position_table is not None:
        # [T, d] positions: dimension 0 is the sequence
        root_plan[plan.position_table] = PrepareModuleOutput(
            output_layouts=Replicate(), desired_output_layouts=Shard(0), use_local_output=True
        )
    parallelize_module(model, tp_mesh, root_plan)
    if plan.tied(model.config):
        # tie back (see apply_tensor_parallel)
        model.get_submodule(plan.head).weight = model.get_submodule(plan.embedding).weight
    return model


@contextlib.contextmanager
def loss_context(parallel_loss: bool):
    """The context the forward and backward of a vocab-parallel loss must run in: DTensor's
    loss_parallel, and implicit replication of the plain tensors the loss function mixes in
    (targets, masks; their products appear again in backward)."""
    if not parallel_loss:
        yield
        return
    with loss_parallel(), implicit_replication():
        yield


def vocab_parallel_loss(loss_fn, logits: torch.Tensor, *args) -> torch.Tensor:
    """``loss_fn(logits, *args)`` (the model's own loss function) on vocab-sharded logits,
    inside :func:`loss_context`: the log-softmax reduces maxima and sums over the tp ranks, so
    no rank gathers or upcasts the full [tokens, vocab] logits. Returns a plain tensor."""
    loss = loss_fn(logits, *args)
    return loss.to_local() if isinstance(loss, DTensor) else loss


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
    sequence_parallel: bool = False,
    parallel_loss: bool = False,
    activation_checkpointing: str = "none",
    ac_every: int = 0,
    init_seed: int | None = None,
) -> nn.Module:
    """Apply ``strategy`` ("ddp", "fsdp", "tp"), activation checkpointing, and optionally
    compile, in torchtitan's order (TP, AC, compile, FSDP). Returns the module to call in
    training (the DDP wrapper, or ``model`` itself, changed in place).

    With ``init_seed`` the model was built on the meta device: once sharded it is allocated on
    ``device`` and initialised shard by shard (:func:`train.parallel.init.materialize`), before
    DDP, which needs real weights to wrap.
    """

    def allocate() -> None:
        if init_seed is not None:
            materialize(model, device, init_seed)

    if mesh is None or mesh.size() == 1:
        apply_activation_checkpointing(model, activation_checkpointing, ac_every)
        allocate()
        if compile_model:
            apply_compile(model, per_block=False)
        return model
    dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
    if strategy == "tp":
        apply_tensor_parallel(
            model, tp_mesh, sequence_parallel=sequence_parallel, parallel_loss=parallel_loss
        )
        apply_activation_checkpointing(model, activation_checkpointing, ac_every)
        if compile_model:
            apply_compile(model, per_block=True)
        if dp_mesh.size() > 1:
            apply_fsdp(model, dp_mesh, param_dtype=param_dtype)
        allocate()
        return model
    apply_activation_checkpointing(model, activation_checkpointing, ac_every)
    if strategy == "fsdp":
        if compile_model:
            apply_compile(model, per_block=True)
        apply_fsdp(model, dp_mesh, param_dtype=param_dtype)
        allocate()
        return model
    if strategy == "ddp":
        allocate()
        if compile_model:
            apply_compile(model, per_block=False)
        return apply_ddp(model, dp_mesh, device)
    raise ValueError(f"unknown parallel strategy {strategy!r}")
