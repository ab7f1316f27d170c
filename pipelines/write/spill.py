"""Step 1 of writing a shard set: each tokenized document to its bucket's spill file.

Fused with tokenizing, so token arrays never cross a shuffle: every bundle appends its
documents to one spill file per bucket (`bucket_of`) under `OUTPUT/_work/spill/` and emits only
`(bucket, spill name)` when it commits. A retried or abandoned bundle leaves files nobody refers
to, deleted when the set is finished.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
from collections.abc import Iterator

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows

from pipelines.document import PROVENANCE_FIELDS, TokenizedDocument, bucket_of
from pipelines.write.output import SPILL_DIR, WORK_DIR, OutputDir

# Default bucket count: one bucket per this many input bytes (compressed, as listed), at least 1.
# It fixes how many workers write shards in parallel; it never depends on bundles.
BYTES_PER_BUCKET = 256 << 20
MAX_DEFAULT_BUCKETS = 512


def default_num_buckets(input_bytes: int) -> int:
    return max(1, min(MAX_DEFAULT_BUCKETS, -(-input_bytes // BYTES_PER_BUCKET)))


# One spill file per bundle and bucket, one object on a remote store, written straight under its
# final name: the name is unique to the bundle attempt and is handed on only once the file is
# complete, so nothing ever reads a half-written one (no temporary name, no rename, which on GCS
# is a copy and a delete). Layout: the token ids, then int32 sequence lengths, then int32
# sequence counts per document, then a JSON footer (ids, text bytes, each document's provenance
# for the metadata sidecar, dtype, counts), then its length (u64) and the magic.
SPILL_MAGIC = b"SPILL001"
SPILL_SUFFIX = ".spill"
_FOOTER_TAIL = struct.Struct("<Q8s")


class SpillWriter:
    """Streams one bundle's documents of one bucket to a local spill file."""

    def __init__(self, path: str, dtype: str):
        self.path = path
        self.dtype = np.dtype(dtype)
        self._high = np.iinfo(self.dtype).max
        self._file = open(path, "wb")
        self.ids: list[str] = []
        self.text_bytes: list[int] = []
        self.provenance: list[list] = []
        self.sequence_lengths: list[int] = []
        self.sequence_counts: list[int] = []
        self.tokens = 0

    def add(self, doc: TokenizedDocument) -> None:
        for sequence in doc.sequences:
            ids = np.asarray(sequence)
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) > self._high):
                raise ValueError(f"{doc.id}: token ids do not fit {self.dtype}")
            self._file.write(ids.astype(self.dtype, copy=False).tobytes())
            self.sequence_lengths.append(len(ids))
            self.tokens += len(ids)
        self.sequence_counts.append(len(doc.sequences))
        self.ids.append(doc.id)
        self.text_bytes.append(int(doc.text_bytes))
        self.provenance.append(doc.provenance.values())

    def close(self) -> None:
        footer = json.dumps(
            {
                "dtype": str(self.dtype),
                "tokens": self.tokens,
                "sequences": len(self.sequence_lengths),
                "ids": self.ids,
                "text_bytes": self.text_bytes,
                "provenance_fields": PROVENANCE_FIELDS,
                "provenance": self.provenance,  # lists, not dicts: a bucket's merge holds them
            }
        ).encode("utf-8")
        self._file.write(np.asarray(self.sequence_lengths, np.int32).tobytes())
        self._file.write(np.asarray(self.sequence_counts, np.int32).tobytes())
        self._file.write(footer)
        self._file.write(_FOOTER_TAIL.pack(len(footer), SPILL_MAGIC))
        self._file.close()

    def discard(self) -> None:
        self._file.close()
        if os.path.exists(self.path):
            os.remove(self.path)


class SpillFile:
    """A spill file read back: documents by index, in the order written. A document's tokens
    are read when asked for (one pread each), not memory-mapped: a bucket's merge reads its
    documents in id order, all over its spills, and a mapping's fault-around (64 KB a fault)
    made every page of the bucket resident in each merging worker (~115 MB per 256 MB of
    input; unmapping every 2,048 documents still left ~80 MB)."""

    def __init__(self, path: str):
        self._file = open(path, "rb")
        try:
            self._read_layout(path)
        except BaseException:
            self._file.close()
            raise

    def _read_layout(self, path: str) -> None:
        f = self._file
        size = os.fstat(f.fileno()).st_size
        if size < _FOOTER_TAIL.size:
            raise RuntimeError(f"{path}: not a spill file (too short)")
        f.seek(size - _FOOTER_TAIL.size)
        footer_bytes, magic = _FOOTER_TAIL.unpack(f.read(_FOOTER_TAIL.size))
        if magic != SPILL_MAGIC or footer_bytes > size - _FOOTER_TAIL.size:
            raise RuntimeError(f"{path}: not a spill file (bad footer)")
        f.seek(size - _FOOTER_TAIL.size - footer_bytes)
        footer = json.loads(f.read(footer_bytes))
        self.ids: list[str] = footer["ids"]
        self.text_bytes: list[int] = footer["text_bytes"]
        self._provenance_fields: list[str] = footer["provenance_fields"]
        self._provenance: list[list] = footer["provenance"]
        self._dtype = np.dtype(footer["dtype"])
        tokens, sequences, documents = footer["tokens"], footer["sequences"], len(self.ids)
        end = tokens * self._dtype.itemsize
        body = end + 4 * (sequences + documents)
        if body + footer_bytes + _FOOTER_TAIL.size != size:
            raise RuntimeError(f"{path}: {size} bytes, but its footer describes {body} + footer")
        f.seek(end)
        tables = np.frombuffer(f.read(body - end), np.int32)
        lengths, counts = tables[:sequences], tables[sequences:]
        self._sequence_offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        self._document_index = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        if self._sequence_offsets[-1] != tokens or self._document_index[-1] != sequences:
            raise RuntimeError(f"{path}: its lengths do not add up to its token count")

    def close(self) -> None:
        self._file.close()

    @property
    def num_documents(self) -> int:
        return len(self.ids)

    def document_lengths(self) -> np.ndarray:
        return np.diff(self._sequence_offsets[self._document_index])

    def provenance(self, i: int) -> dict:
        """Document i's Provenance fields by name (its metadata-sidecar row, less id and
        tokens)."""
        return dict(zip(self._provenance_fields, self._provenance[i]))

    def document_sequences(self, i: int) -> list[np.ndarray]:
        first, last = int(self._document_index[i]), int(self._document_index[i + 1])
        bounds = self._sequence_offsets[first : last + 1]  # this document's sequences only
        start, count = int(bounds[0]), int(bounds[-1] - bounds[0])
        size = self._dtype.itemsize
        data = os.pread(self._file.fileno(), count * size, start * size)
        if len(data) != count * size:
            raise RuntimeError(f"{self._file.name}: cut short while it was read")
        tokens = np.frombuffer(data, self._dtype)
        bounds = (bounds - start).tolist()
        return [tokens[bounds[j] : bounds[j + 1]] for j in range(last - first)]


def spill_name(bucket: int, attempt: str) -> str:
    return f"b{bucket:05d}-{attempt}{SPILL_SUFFIX}"


class SpillDoFn(beam.DoFn):
    """Appends each bundle's documents to one spill file per bucket; emits (bucket, spill name)."""

    def __init__(self, output: str, num_buckets: int, dtype: str):
        self.output = output
        self.num_buckets = num_buckets
        self.dtype = dtype

    def setup(self) -> None:
        self.spill_dir = OutputDir(self.output).child(WORK_DIR).child(SPILL_DIR)
        # Remote output: files are built on local disk and uploaded when the bundle ends.
        self.local_dir = self.spill_dir.staging("spill-")

    def start_bundle(self) -> None:
        self.attempt = uuid.uuid4().hex[:16]  # unique per bundle attempt: retries never collide
        self.writers: dict[int, SpillWriter] = {}

    def process(self, doc: TokenizedDocument) -> None:
        bucket = bucket_of(doc.id, self.num_buckets)
        writer = self.writers.get(bucket)
        if writer is None:
            path = os.path.join(self.local_dir, spill_name(bucket, self.attempt))
            writer = self.writers[bucket] = SpillWriter(path, self.dtype)
        writer.add(doc)

    def finish_bundle(self) -> Iterator:
        for bucket in sorted(self.writers):
            writer = self.writers[bucket]
            writer.close()
            yield GlobalWindows.windowed_value((bucket, self.spill_dir.publish(writer.path)))
        self.writers = {}

    def teardown(self) -> None:
        for writer in getattr(self, "writers", {}).values():
            writer.discard()
        if hasattr(self, "local_dir"):
            self.spill_dir.unstage(self.local_dir)
