"""The keep-one steps' group keys (a record's URL, its text fingerprint), and the exact step's
shuffle in batches: one element per key partition a batch of records touches, not one per
document.

Most documents share their text with no other, and one element per document would pay the
runner's per-element cost of a shuffle (encoded in the worker, decoded and buffered by the local
runner's launcher, sent to a worker again) for every document. Instead, the step that makes or
keeps the records sends each batch's (key, record) pairs grouped by PARTITIONS key partitions
(the top bits of a 128-bit hash of the key), and the grouping step finds the keys that occur
more than once in its partition from the hashes alone (16 bytes a record, held in one array: a
group holds 1 / PARTITIONS of the records' hashes, as an LSH band partition holds its band
hashes), then streams the partition twice more: once for the smallest node of each repeated
key, once to decide. A record whose key occurs once goes on as it came; of a repeated key,
every record of the smallest node goes on and the others are removed: the decisions of one
group per key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import xxhash

PARTITION_BITS = 4
PARTITIONS = 1 << PARTITION_BITS

Keyed = tuple[bytes, tuple]  # (key, record)


def url_key(record: tuple) -> tuple[str, tuple] | None:
    """The key carries the scope and URL key, so the grouped record goes without the URL; None
    for a record without a URL."""
    if record[3]:
        return f"{record[1]}\x00{record[3]}", record[:3] + ("",) + record[4:]
    return None


def fingerprint_key(record: tuple) -> tuple[bytes, tuple]:
    """The key carries the scope and fingerprint, so the grouped record goes without the latter."""
    key = record[1].encode("utf-8", "surrogatepass") + b"\x00" + record[2]
    return key, (record[0], record[1], b"", "", record[4])


def key_digest(key: bytes) -> bytes:
    """A stable 128-bit hash of a group key (the same on every machine)."""
    return xxhash.xxh3_128_digest(key)


def keyed_batches(keyed: Iterable[Keyed]) -> Iterator[tuple[bytes, tuple[Keyed, ...]]]:
    """(partition key, the (key, record) pairs in that partition) for every partition that
    `keyed` touches, in partition order."""
    by_partition: dict[int, list[Keyed]] = {}
    for pair in keyed:
        by_partition.setdefault(key_digest(pair[0])[0] >> (8 - PARTITION_BITS), []).append(pair)
    for partition, pairs in sorted(by_partition.items()):
        yield bytes((partition,)), tuple(pairs)


def repeated_digests(batches: Iterable[tuple[Keyed, ...]]) -> set[bytes]:
    """The digests of the keys that occur more than once in a partition's batches."""
    digests = bytearray()
    for batch in batches:
        for key, _ in batch:
            digests += key_digest(key)
    if not digests:
        return set()
    unique, counts = np.unique(np.frombuffer(digests, dtype="V16"), return_counts=True)
    return {value.tobytes() for value in unique[counts > 1]}


def smallest_of_repeated(batches: Iterable[tuple[Keyed, ...]]) -> dict[bytes, tuple]:
    """key -> the smallest node (a record's first field) among its records, for the keys whose
    digest occurs more than once in the partition (a key alone with a colliding digest maps to
    its own node); the keys not in it occur once."""
    repeated = repeated_digests(batches)
    smallest: dict[bytes, tuple] = {}
    if repeated:
        for batch in batches:
            for key, record in batch:
                if key_digest(key) in repeated:
                    node = smallest.get(key)
                    if node is None or record[0] < node:
                        smallest[key] = record[0]
    return smallest
