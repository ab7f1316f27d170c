"""Measurements shared by tests and benches (bench/ imports this; tests never import bench/)."""

from __future__ import annotations

import tracemalloc


def traced_peak(run) -> int:
    """Peak traced bytes allocated while `run()` executes, above what was live before it."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        run()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def saved_activation_bytes(model, forward) -> int:
    """Bytes of the distinct storages autograd saves for backward while `forward()` runs the
    model once (what is alive at the end of it: the activation peak), `model`'s parameters
    excluded."""
    import torch

    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(storages.values())


def find_root(parent: dict, x):
    """x's root in the union-find forest `parent` (x becomes its own root when new), halving the
    path on the way so later look-ups are short."""
    parent.setdefault(x, x)
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x
