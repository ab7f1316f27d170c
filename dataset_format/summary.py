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
    """Counts of documents per length bin; log-spaced bins, since lengths span decades."""
    if not lengths.size:
        return np.array([0, 1]), np.array([0])
    high = max(int(lengths.max()), 1)
    edges = np.unique(np.geomspace(1, high + 1, bins + 1).astype(np.int64))
    edges = np.concatenate([[0], edges]) if edges[0] > 0 else edges
    counts, edges = np.histogram(lengths, bins=edges)
    return edges, counts


def render_histogram(edges: np.ndarray, counts: np.ndarray, width: int = 50) -> str:
    top = max(int(counts.max()), 1) if counts.size else 1
    rows = []
    for low, high, count in zip(edges[:-1], edges[1:], counts):
        bar = "#" * int(round(width * int(count) / top))
        rows.append(f"{int(low):>9}-{int(high) - 1:<9} {int(count):>9} {bar}")
    return "\n".join(rows)
