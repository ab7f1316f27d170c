"""Deduplication at scale as Beam stages: exact, URL and MinHash-LSH near-duplicates, plus
13-gram decontamination against evaluation sets.

    from pipelines.dedup import DedupConfig, Deduplicate
    result = docs | Deduplicate(DedupConfig(threshold=0.8), work_dir="out/_work/dedup")
    kept, rejects, clusters = result.main, result["rejects"], result["clusters"]

`python -m pipelines.dedup --input 'clean/*.parquet' --output deduped/` runs it on its own.
"""

from __future__ import annotations

import importlib

# The names above, imported when first asked for: `python -m pipelines.dedup` imports this
# package before its __main__ can put the stop signals' handlers in place, and the transforms
# import Beam (seconds).
_EXPORTS = {
    "ClusterMember": "pipelines.dedup.transforms",
    "ComponentsNotConverged": "pipelines.dedup.components",
    "DedupConfig": "pipelines.dedup.config",
    "DedupOptions": "pipelines.dedup.config",
    "Deduplicate": "pipelines.dedup.transforms",
    "REASONS": "pipelines.dedup.transforms",
    "REMOVAL_COUNTERS": "pipelines.dedup.transforms",
    "add_dedup_arguments": "pipelines.dedup.config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
