"""What `tools/dump` reports of a shard set, as plain data; computed from the indexes alone."""

from __future__ import annotations

import numpy as np

from dataset_format.shardset import ShardSet

PERCENTILES = (0, 10, 50, 90, 99, 100)


def summarize(ss: ShardSet) -> dict:
    """Counts, dtype, tokenizer and length percentiles; reads `.idx` files only, never `.bin`."""
    lengths = ss.document_lengths()
    manifest = ss.manifest
    tokenizer = manifest.tokenizer.to_json() if manifest and manifest.tokenizer else None
    return {
        "path": ss.path,
        "shards": len(ss.shards),
        "documents": ss.num_documents,
        "sequences": ss.num_sequences,
        "tokens": ss.num_tokens,
        "dtype": str(ss.dtype),
        "sequence_unit": manifest.sequence_unit if manifest else None,
        "tokenizer": tokenizer,
        "document_length_percentiles": percentiles(lengths),
        "mean_document_length": float(lengths.mean()) if lengths.size else 0.0,
        "metadata_sidecars": sum(s.meta is not None for s in manifest.shards) if manifest else 0,
        "source": manifest.source if manifest else {},
        "pipeline": manifest.pipeline if manifest else {},
        "shard_list": [
            {
                "name": s.prefix.rsplit("/", 1)[-1],
                "documents": s.num_documents,
                "sequences": s.num_sequences,
                "tokens": s.num_tokens,
            }
            for s in ss.shards
        ],
    }


def percentiles(lengths: np.ndarray) -> dict[str, int]:
    if not lengths.size:
        return {f"p{p}": 0 for p in PERCENTILES}
    values = np.percentile(lengths, PERCENTILES, method="nearest")
    return {f"p{p}": int(v) for p, v in zip(PERCENTILES, values)}


def length_histogram(lengths: np.ndarray, bins: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Counts of documents per length bin [edges[k], edges[k+1]); log-spaced bins, since
    lengths span decades, over the lengths that occur (shortest to longest), not from 1."""
    if not lengths.size:
        return np.array([0, 1]), np.array([0])
    low, high = max(int(lengths.min()), 1), int(lengths.max())
    edges = np.unique(np.geomspace(low, high + 1, bins + 1).astype(np.int64))
    edges[-1] = high + 1  # a float edge a hair under it would leave the longest out
    edges = np.concatenate([[0], edges]) if int(lengths.min()) == 0 else edges
    counts, edges = np.histogram(lengths, bins=edges)
    return edges, counts


def render_histogram(edges: np.ndarray, counts: np.ndarray, width: int = 50) -> str:
    """One row a bin; a run of empty bins between occupied ones is one row (a few long books
    in a set of short pages would otherwise print a screen of zeros)."""
    top = max(int(counts.max()), 1) if counts.size else 1
    rows: list[tuple[int, int, int]] = []
    for low, high, count in zip(edges[:-1].tolist(), edges[1:].tolist(), counts.tolist()):
        if count == 0 and rows and rows[-1][2] == 0:
            rows[-1] = (rows[-1][0], high, 0)
        else:
            rows.append((low, high, count))
    return "\n".join(
        f"{low:>9}-{high - 1:<9} {count:>9} {'#' * int(round(width * count / top))}".rstrip()
        for low, high, count in rows
    )
