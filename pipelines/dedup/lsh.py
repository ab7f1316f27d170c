"""LSH buckets and the candidate edges each bucket yields.

Every document goes to one bucket per band (`bands` buckets in all); documents that share any
bucket become candidate pairs. A bucket of n members could yield n(n-1)/2 pairs: fine for the
usual 2-10, ruinous for a "hot" bucket (a template page repeated across a million sites). A
bucket over `max_pairs_members` members is chained to its smallest node instead: n-1 edges,
and the same connected component, because every member is linked to one common node. With
exact-Jaccard verification a chained member is only checked against that node, so a hot
bucket can miss pairs that are similar to each other but not to its smallest member; the
counter `dedup_hot_buckets` says how often that happens.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

import numpy as np

from pipelines.dedup.exact import Node


def bucket_keys(scope: str, band_hashes: np.ndarray) -> list[bytes]:
    """One GroupByKey key per band: scope, band index, band hash (bytes are a deterministic
    key on every runner). `scope` is "" when dedup runs across all sources, else the source."""
    prefix = scope.encode("utf-8") + b"\x00"
    return [
        prefix + bytes((band,)) + int(h).to_bytes(8, "little") for band, h in enumerate(band_hashes)
    ]


def bucket_edges(
    members: Iterable[Node], max_pairs_members: int
) -> tuple[bool, Iterator[tuple[Node, Node]]]:
    """(is_hot, candidate edges (smaller, larger)) of one bucket's members.

    Reads at most max_pairs_members + 1 members into memory; a hot bucket is streamed twice
    (GroupByKey values can be re-iterated), so its size never matters.
    """
    head = list(itertools.islice(iter(members), max_pairs_members + 1))
    if len(head) <= max_pairs_members:
        head.sort()
        return False, ((u, v) for u, v in itertools.combinations(head, 2) if u != v)
    center = min(members)
    return True, ((center, node) for node in members if node != center)
