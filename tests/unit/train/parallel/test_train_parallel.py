"""train.parallel pieces in one process: activation checkpointing from outside.

(Multi-process equivalences — TP+SP, FSDP+AC, LAMB under FSDP/TP — are in
test_train_distributed.py; FSDP2 gradient accumulation in test_train_parallel_ranks.py.)
"""

from __future__ import annotations

import pytest
import torch

from train.models.presets import build_model
from train.parallel import apply_activation_checkpointing
from train.parallel.activation_checkpoint import modules_to_checkpoint


def _run(kind: str, mode: str, every: int = 0):
    torch.manual_seed(0)
    model = build_model(f"{kind}-tiny", vocab_size=256)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.1
    apply_activation_checkpointing(model, mode, every)
    torch.manual_seed(1)
    ids = torch.randint(0, 256, (2, 32))
    if kind == "gpt":
        forward = lambda: model(ids, ids)[1]  # noqa: E731
    else:
        labels = torch.where(torch.rand(2, 32) < 0.2, ids, -100)
        types, mask = torch.zeros_like(ids), torch.ones_like(ids)
        forward = lambda: model(ids, types, mask, labels, torch.tensor([0, 1])).loss  # noqa: E731
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return loss.detach(), grads, sum(storages.values())


@pytest.mark.parametrize("kind", ["gpt", "bert"])
def test_activation_checkpointing_gives_the_same_losses_and_gradients(kind):
    """With dropout on: the recomputation draws the same masks (RNG state preserved)."""
    loss, grads, kept = _run(kind, "none")
    for mode, every in (("full", 0), ("selective", 0), ("selective", 2)):
        other_loss, other_grads, other_kept = _run(kind, mode, every)
        assert torch.equal(other_loss, loss), mode
        for name, grad in grads.items():
            torch.testing.assert_close(other_grads[name], grad, rtol=0, atol=1e-6, msg=name)
        # activations really were dropped (what autograd keeps shrinks)
        assert other_kept < kept, (mode, every, other_kept, kept)
    assert _run(kind, "full")[2] < _run(kind, "selective")[2]


def test_which_modules_are_checkpointed():
    model = build_model("gpt-tiny", vocab_size=256)
    blocks = list(model.blocks)
    assert modules_to_checkpoint(model, "none") == []
    assert modules_to_checkpoint(model, "full") == blocks
    assert modules_to_checkpoint(model, "selective") == [b.attn for b in blocks]
    assert modules_to_checkpoint(model, "selective", every=2) == blocks[1::2]
    names = [n for n, _ in model.named_parameters()]
    apply_activation_checkpointing(model, "full")
    assert [n for n, _ in model.named_parameters()] == names  # state dict names unchanged
