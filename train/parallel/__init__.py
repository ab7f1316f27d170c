"""Data, fully-sharded and tensor parallelism applied to the models from outside."""

from train.parallel.parallelize import (
    apply_compile,
    apply_ddp,
    apply_fsdp,
    apply_tensor_parallel,
    build_mesh,
    parallelize,
)

__all__ = [
    "apply_compile",
    "apply_ddp",
    "apply_fsdp",
    "apply_tensor_parallel",
    "build_mesh",
    "parallelize",
]
