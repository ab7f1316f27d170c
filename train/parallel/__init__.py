"""Data, fully-sharded and tensor parallelism applied to the models from outside."""

from train.parallel.activation_checkpoint import apply_activation_checkpointing
from train.parallel.parallelize import (
    apply_compile,
    apply_ddp,
    apply_fsdp,
    apply_tensor_parallel,
    build_mesh,
    loss_context,
    parallelize,
    vocab_parallel_loss,
)

__all__ = [
    "apply_activation_checkpointing",
    "apply_compile",
    "apply_ddp",
    "apply_fsdp",
    "apply_tensor_parallel",
    "build_mesh",
    "loss_context",
    "parallelize",
    "vocab_parallel_loss",
]
