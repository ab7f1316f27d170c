"""Deduplication at scale as Beam stages: exact, URL and MinHash-LSH near-duplicates, plus
13-gram decontamination against evaluation sets.

    from pipelines.dedup import DedupConfig, Deduplicate
    result = docs | Deduplicate(DedupConfig(threshold=0.8), work_dir="out/_work/dedup")
    kept, rejects, clusters = result.main, result["rejects"], result["clusters"]

`python -m pipelines.dedup --input 'clean/*.parquet' --output deduped/` runs it on its own.
"""

from __future__ import annotations

from pipelines.dedup.components import ComponentsNotConverged
from pipelines.dedup.config import DedupConfig, add_dedup_arguments
from pipelines.dedup.transforms import REASONS, REMOVAL_COUNTERS, ClusterMember, Deduplicate

__all__ = [
    "ClusterMember",
    "ComponentsNotConverged",
    "DedupConfig",
    "Deduplicate",
    "REASONS",
    "REMOVAL_COUNTERS",
    "add_dedup_arguments",
]
