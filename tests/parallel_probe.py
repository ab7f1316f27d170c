"""Run under torchrun (gloo, CPU): checks of train.parallel that need several ranks.

    torchrun --nproc_per_node 2 tests/parallel_probe.py CHECK RESULT_JSON

CHECK is one of:

* ``fsdp-accumulation``: a GPT under FSDP2 runs two micro-batches the way the training loop
  does (``train.loop.no_sync``); after the first one's backward, every parameter's gradient
  must already be a sharded DTensor (reduce-scattered), not held back unsharded;
* ``meta-init``: a GPT built on the meta device, sharded (FSDP2 over dp=2, or TP over tp=2),
  materialised and initialised shard by shard (train.parallel.init) must equal, gathered, the
  eagerly built model initialised with the same seed, each rank holding only its pieces.

Rank 0 writes a JSON object with the findings.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from train.loop import no_sync  # noqa: E402
from train.models.gpt import GPT, GPTConfig  # noqa: E402
from train.parallel import apply_fsdp  # noqa: E402

CONFIG = GPTConfig(vocab_size=256, n_layer=2, n_head=2, n_embd=64, block_size=32)


def fsdp_accumulation() -> dict:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    model = apply_fsdp(GPT(CONFIG), mesh)
    ids = torch.randint(0, CONFIG.vocab_size, (2, 16))
    with no_sync(model, sync=False):
        model(ids, ids)[1].backward()
    first = {}
    for name, param in model.named_parameters():
        grad = param.grad
        first[name] = (
            grad is not None
            and isinstance(grad, DTensor)
            and grad.to_local().numel() < param.numel()
        )
    return {"sharded_after_first_micro_batch": first}


def meta_init() -> dict:
    from train.parallel import apply_tensor_parallel
    from train.parallel.init import materialize

    torch.manual_seed(5)
    eager = GPT(CONFIG)  # the constructor's own draws, then the seeded init
    torch.manual_seed(7)
    eager.init_weights()
    expected = {name: p.detach() for name, p in eager.named_parameters()}
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    layouts = {
        "fsdp": lambda m: apply_fsdp(m, mesh),
        "tp": lambda m: apply_tensor_parallel(m, mesh),
    }
    found = {}
    for layout, shard in layouts.items():
        with torch.device("meta"):
            model = GPT(CONFIG)
        shard(model)
        materialize(model, torch.device("cpu"), seed=7)
        equal = {}
        for name, param in model.named_parameters():
            full = param.full_tensor() if isinstance(param, DTensor) else param
            local = param.to_local() if isinstance(param, DTensor) else param
            sharded = isinstance(param, DTensor) and any(p.is_shard() for p in param.placements)
            # a sharded parameter holds only its piece on this rank
            equal[name] = bool(torch.equal(full.detach(), expected[name])) and (
                not sharded or local.numel() < param.numel()
            )
        found[layout] = equal
        found[layout + "/tied"] = model.lm_head.weight is model.wte.weight
    return found


def main() -> None:
    check, result_path = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    result = {"fsdp-accumulation": fsdp_accumulation, "meta-init": meta_init}[check]()
    if dist.get_rank() == 0:
        with open(result_path, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    from train.runtime import leave_finished_rank

    leave_finished_rank()  # as train/pretrain.py does under torchrun
