"""Run under torchrun: the peak resident memory a checkpoint save and a resume add on each rank.

    torchrun --nproc_per_node 2 tests/dcp_memory_probe.py RUN_DIR RESULT_JSON

Builds a GPT big in parameters and small in activations (d=512, 6 layers, vocab 512: 19M
parameters, 151 MB of AdamW moments in fp32), shards it with FSDP2 over the ranks, takes one
optimizer step, then saves with :func:`train.checkpoint.save_checkpoint`; a freshly built
model and optimizer then resume from it. Around each, the kernel's peak-RSS counter (VmHWM)
is reset (``/proc/self/clear_refs``), so the figure is the peak of that operation alone.
Rank 0 writes ``{"save": [bytes per rank], "load": [...], "optimizer_state": bytes}`` where
the byte counts are peak RSS minus the RSS before the operation.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from train import checkpoint as ckpt  # noqa: E402
from train.models.gpt import GPT, GPTConfig  # noqa: E402
from train.optim import build_optimizer  # noqa: E402
from train.parallel import apply_fsdp  # noqa: E402

CONFIG = GPTConfig(vocab_size=512, n_layer=6, n_head=8, n_embd=512, block_size=16)


def status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_of(operation) -> int:
    """Bytes by which this process's resident memory peaked above its level before."""
    dist.barrier()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    before = status_kib("VmRSS")
    operation()
    return (status_kib("VmHWM") - before) * 1024


def trained(mesh):
    torch.manual_seed(0)
    model = apply_fsdp(GPT(CONFIG), mesh)
    optimizer = build_optimizer(model, "adamw", 1e-3, 0.1, (0.9, 0.95), 1e-8)
    ids = torch.randint(0, CONFIG.vocab_size, (1, 8))
    model(ids, ids)[1].backward()
    optimizer.step()
    optimizer.zero_grad()
    return model, optimizer


def main() -> None:
    run_dir, result_path = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model, optimizer = trained(mesh)
    state = {"step": 1, "consumed_samples": 1, "config": {"seed": 0}}
    save_peak = peak_of(
        lambda: ckpt.save_checkpoint(run_dir, 1, model, optimizer, state, keep=1).commit()
    )
    fresh, fresh_optimizer = trained(mesh)
    path = ckpt.latest_checkpoint(run_dir)
    load_peak = peak_of(lambda: ckpt.load_checkpoint(path, fresh, fresh_optimizer))
    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a.to_local(), b.to_local())
    moments = 2 * 4 * sum(p.numel() for p in model.parameters())
    peaks = [None] * dist.get_world_size()
    dist.all_gather_object(peaks, (save_peak, load_peak))
    if dist.get_rank() == 0:
        with open(result_path, "w") as f:
            json.dump(
                {
                    "save": [s for s, _ in peaks],
                    "load": [load for _, load in peaks],
                    "optimizer_state": moments,
                },
                f,
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
