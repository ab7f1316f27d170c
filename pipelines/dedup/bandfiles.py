"""The LSH band partitions staged through files: what crosses the LSH shuffle is a reference.

A band batch (lsh.band_batches: one band partition's hashes and packed nodes, from one batch of
documents) is ~14 x 40 bytes a document. The local runner keeps every GroupByKey's input in the
launcher until the run ends and decodes the largest into a table before it partitions it, so
these were most of what dedup's shuffles held there (63 MB at 1 GB of text). Instead, each
bundle appends its band batches to one file under the run's work area and sends on
(partition key, (file name, offset, hash bytes, node bytes)): ~50 bytes an element, whatever
the batch. The grouping step reads its partition's byte ranges back (`read_chunks`), a file at a
time.

As with the stash files (stash.py), a file is complete when its bundle commits, which is before
any GroupByKey hands its references on; a retried bundle leaves a file nobody names, and the
launcher removes the work area when the run ends.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable

from pipelines.io import open_input
from pipelines.output import OutputDir

Ref = tuple[str, int, int, int]  # file name, offset, hash bytes, node bytes


class BandFileWriter:
    """One bundle's band batches, appended to one file (opened at the first batch)."""

    def __init__(self, work_dir: str) -> None:
        self._dir = OutputDir(work_dir)
        self._file = None

    def write(self, hashes: bytes, nodes: bytes) -> Ref:
        if self._file is None:
            self._dir.makedirs()
            self._local = self._dir.staging("bands-")
            name = f"lsh-{uuid.uuid4().hex[:16]}.bands"  # unique per bundle attempt
            self._name, self._path = name, os.path.join(self._local, name)
            self._file = open(self._path, "wb")
        offset = self._file.tell()
        self._file.write(hashes)
        self._file.write(nodes)
        return self._name, offset, len(hashes), len(nodes)

    def close(self) -> None:
        """Complete the file (on a remote work area: upload it); call when the bundle ends."""
        if self._file is None:
            return
        self._file.close()
        self._file = None
        self._dir.publish(self._path)
        self._dir.unstage(self._local)

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            os.remove(self._path)
            self._dir.unstage(self._local)


def read_chunks(work_dir: str, refs: Iterable[Ref]) -> list[tuple[bytes, bytes]]:
    """The (hashes, packed nodes) of each reference, read a file at a time in offset order."""
    by_file: dict[str, list[Ref]] = {}
    for ref in refs:
        by_file.setdefault(ref[0], []).append(ref)
    directory = OutputDir(work_dir)
    chunks = []
    for name, mine in sorted(by_file.items()):
        with open_input(directory.path(name)) as f:
            for _, offset, hash_bytes, node_bytes in sorted(mine, key=lambda ref: ref[1]):
                f.seek(offset)
                data = f.read(hash_bytes + node_bytes)
                if len(data) < hash_bytes + node_bytes:
                    raise RuntimeError(f"{directory.path(name)}: cut short at byte {offset}")
                chunks.append((data[:hash_bytes], data[hash_bytes:]))
    return chunks
