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


def find_root(parent: dict, x):
    """x's root in the union-find forest `parent` (x becomes its own root when new), halving the
    path on the way so later look-ups are short."""
    parent.setdefault(x, x)
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x
