"""LSH buckets and the candidate edges each bucket yields.

Every document goes to one bucket per band (`bands` buckets in all); documents that share any
bucket become candidate pairs. A bucket of n members could yield n(n-1)/2 pairs: fine for the
usual 2-10, ruinous for a "hot" bucket (a template page repeated across a million sites). A
bucket over `max_pairs_members` members is chained to its smallest node instead: n-1 edges,
and the same connected component, because every member is linked to one common node. With
exact-Jaccard verification a chained member is only checked against that node, so a hot
bucket can miss pairs that are similar to each other but not to its smallest member; the
counter `dedup_hot_buckets` says how often that happens.

What the LSH shuffle groups: not one element per document and band (~15 a document, each
paying the runner's per-element cost on the data plane), but one per band *partition* per
batch of documents (`band_batches`; the batch itself waits in a band file and a reference to it
crosses: bandfiles.py): a band's buckets are split into PARTITIONS by the top bits
of their hash, and a batch sends each (band, partition) it touches one element, the packed
hashes and the nodes that have them. The grouping step (`bucket_members`) sorts a partition's
hashes and yields each bucket's members: a group holds one band partition's entries (an 8-byte
hash and a node each, 1 / PARTITIONS of the documents), not one bucket's.

A batch's nodes are packed in one bytes object (`pack_nodes`), not a list of (rank, id)
tuples: a tuple, an int and a str for each document and band cost ~150 bytes in Python (~400 MB
at 1 GB of text, when these crossed the shuffle and the local runner decoded them in the
launcher) where the packed node costs its id's bytes and eight more. The grouping step decodes
only the nodes that share a bucket.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

import numpy as np

from pipelines.dedup.exact import Node

# Partitions a band's buckets are split into: the LSH step's parallelism is bands x PARTITIONS
# groups (224 by default), and a batch of documents sends at most that many elements.
PARTITION_BITS = 4
PARTITIONS = 1 << PARTITION_BITS


def partition_key(scope: str, band: int, partition: int) -> bytes:
    """The GroupByKey key of one band partition: scope, band index, partition (bytes are a
    deterministic key on every runner). `scope` is "" when dedup runs across all sources, else
    the source."""
    return scope.encode("utf-8", "surrogatepass") + b"\x00" + bytes((band, partition))


_COUNT = np.dtype("<u4")


class _Nodes:
    """Nodes encoded once for packing many subsets of them: ranks, id lengths, UTF-8 ids."""

    def __init__(self, nodes: list[Node]) -> None:
        self.ids = [node[1].encode("utf-8", "surrogatepass") for node in nodes]
        self.ranks = np.array([node[0] for node in nodes], "<i4")
        self.lengths = np.array([len(i) for i in self.ids], _COUNT)

    def pack(self, rows: np.ndarray) -> bytes:
        """pack_nodes of the nodes at `rows`."""
        count = np.array([len(rows)], _COUNT).tobytes()
        ids = b"".join([self.ids[i] for i in rows.tolist()])
        return count + self.ranks[rows].tobytes() + self.lengths[rows].tobytes() + ids


def pack_nodes(nodes: list[Node]) -> bytes:
    """Nodes as one bytes object: their count, ranks (int32), id lengths (uint32), then the ids
    (UTF-8, lone surrogates kept)."""
    return _Nodes(nodes).pack(np.arange(len(nodes)))


class PackedNodes:
    """pack_nodes' bytes read back: node i on demand."""

    def __init__(self, packed: bytes) -> None:
        n = int(np.frombuffer(packed, _COUNT, 1)[0])
        self._ranks = np.frombuffer(packed, "<i4", n, 4)
        lengths = np.frombuffer(packed, _COUNT, n, 4 + 4 * n)
        self._starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]) + 4 + 8 * n
        self._packed = packed

    def __len__(self) -> int:
        return len(self._ranks)

    def __getitem__(self, i: int) -> Node:
        start, end = int(self._starts[i]), int(self._starts[i + 1])
        doc_id = self._packed[start:end].decode("utf-8", "surrogatepass")
        return int(self._ranks[i]), doc_id


def band_batches(
    scope: str, nodes: list[Node], hashes: np.ndarray
) -> Iterator[tuple[bytes, tuple[bytes, bytes]]]:
    """(partition key, (packed uint64 hashes, their nodes packed: pack_nodes)) for every band
    partition that the documents `nodes` (one row of band hashes each in `hashes`, shape
    (len(nodes), bands)) touch."""
    hashes = np.ascontiguousarray(hashes, dtype=np.uint64)
    encoded = _Nodes(nodes)  # each id encoded once, not once per band
    partitions = (hashes >> np.uint64(64 - PARTITION_BITS)).astype(np.uint8)
    for band in range(hashes.shape[1]):
        column, parts = hashes[:, band], partitions[:, band]
        order = np.argsort(parts, kind="stable")
        bounds = np.flatnonzero(np.diff(parts[order])) + 1
        for run in np.split(order, bounds):
            if len(run):
                key = partition_key(scope, band, int(parts[run[0]]))
                yield key, (column[run].tobytes(), encoded.pack(run))


class _Members:
    """One bucket's members, decoded from their packed chunks each time they are iterated (a
    hot bucket is iterated twice, never held decoded)."""

    def __init__(self, packs: list[PackedNodes], first_of_chunk: np.ndarray, rows: np.ndarray):
        self._packs = packs
        self._chunks = np.searchsorted(first_of_chunk, rows, side="right") - 1
        self._rows = rows - first_of_chunk[self._chunks]

    def __iter__(self) -> Iterator[Node]:
        for chunk, row in zip(self._chunks.tolist(), self._rows.tolist()):
            yield self._packs[chunk][row]


def bucket_members(chunks: Iterable[tuple[bytes, bytes]]) -> Iterator[Iterable[Node]]:
    """The members of every bucket of one band partition with two or more members, from the
    partition's (packed hashes, packed nodes) chunks (band_batches): a group holds its hashes
    and packed nodes, and each bucket's members are decoded as they are read."""
    hashes, packs = [], []
    for packed_hashes, packed_nodes in chunks:
        hashes.append(np.frombuffer(packed_hashes, dtype=np.uint64))
        packs.append(PackedNodes(packed_nodes))
    if not packs:
        return
    hashes = np.concatenate(hashes)
    first_of_chunk = np.concatenate([[0], np.cumsum([len(p) for p in packs])])
    order = np.argsort(hashes, kind="stable")
    sorted_hashes = hashes[order]
    starts = np.flatnonzero(np.r_[True, sorted_hashes[1:] != sorted_hashes[:-1]])
    ends = np.r_[starts[1:], len(order)]
    for start, end in zip(starts.tolist(), ends.tolist()):
        if end - start > 1:
            yield _Members(packs, first_of_chunk, order[start:end])


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
