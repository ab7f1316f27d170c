"""The cleaned text while dedup decides: each bundle's documents in files, by bucket of their id.

Dedup's shuffles move ids, hashes and shingle sets; the text waits in files under the run's work
area, where the two steps that need it read it back, a bucket at a time:

    docs -> StashDoFn: one stash file per bundle and bucket (`bucket_of(id)`), written when the
            bundle commits; emits (bucket, ("stash", file name))
    verification: GroupByKey(bucket) of the stash names and the bucket's roles -> the shingle
                  sets of the documents in a candidate pair, read from the bucket's files
    apply:        GroupByKey(bucket) of the stash names and the bucket's decisions -> each
                  document of the bucket's files kept, or removed with its reason

So no runner holds the text in a shuffle (the local runner keeps every GroupByKey's input in the
launcher's memory until the run ends), and the steps after dedup run on as many workers as there
are buckets. As with the shard writer's spill files, a retried bundle leaves files nobody names,
and the launcher removes the work area when the run ends.

File layout (read forward only, so that a remote store streams it): the magic, then frames, each
`<III` (fields bytes, text bytes, packed bytes), the frame's documents less their texts as a
JSON list of [id, source, url, title, meta, text bytes], then their texts' UTF-8 concatenated
and compressed with zstd (level 1). The texts stand apart, so that apply finds an id read twice
without decompressing anything, and so that writing and reading them is a join and a slice
(escaping them into JSON and back cost twice the compression).
"""

from __future__ import annotations

import functools
import json
import os
import struct
from collections.abc import Container, Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipelines.document import Document, bucket_of
from pipelines.io import open_input
from pipelines.output import WORK_DIR, BundleFiles, OutputDir

STASH_DIR = "dedup"  # under the run's work area (OUTPUT/_work/)
STASH_MAGIC = b"DSTASH01"
_FRAME = struct.Struct("<III")
# A frame closes at this many characters of text or documents: zstd gains little beyond ~64 KB,
# and a bundle holds one open frame per bucket (1,024 buckets: 64 MB at most).
FRAME_CHARS = 64 << 10
FRAME_DOCS = 256
# Buckets: one per this many input bytes, at least MIN_BUCKETS so that the steps after dedup
# (tokenizing, the heaviest) spread evenly over a few workers' worth of groups, at most
# MAX_BUCKETS so that a bundle's files stay few.
BYTES_PER_BUCKET = 64 << 20
MIN_BUCKETS = 16
MAX_BUCKETS = 1024


def stash_dir(output: str) -> str:
    """The stash's folder in a run's OUTPUT (its work area, removed when the run ends)."""
    return OutputDir(output).child(WORK_DIR).child(STASH_DIR).url


def stash_buckets(input_bytes: int) -> int:
    return max(MIN_BUCKETS, min(MAX_BUCKETS, -(-input_bytes // BYTES_PER_BUCKET)))


@functools.cache
def _zstd():
    import pyarrow  # the pipelines' dependency already; its zstd is ~3x cheaper than zlib

    return pyarrow.Codec("zstd", compression_level=1)


def _utf8(value) -> bytes:
    # a lone surrogate that cleaning let through must round-trip, not fail the bundle
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _json(data: bytes) -> list:
    return json.loads(data.decode("utf-8", "surrogatepass"))


class StashWriter:
    """One bundle's documents of one bucket, streamed to a local file a frame at a time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = open(path, "wb")
        self._file.write(STASH_MAGIC)
        self._fields: list[list] = []  # each document less its text
        self._texts: list[bytes] = []
        self._chars = 0

    def add(self, doc: Document) -> None:
        text = doc.text.encode("utf-8", "surrogatepass")
        self._fields.append([doc.id, doc.source, doc.url, doc.title, dict(doc.meta), len(text)])
        self._texts.append(text)
        self._chars += len(doc.text)
        if self._chars >= FRAME_CHARS or len(self._fields) >= FRAME_DOCS:
            self._write_frame()

    def _write_frame(self) -> None:
        if not self._fields:
            return
        header = _utf8(self._fields)
        raw = b"".join(self._texts)
        packed = _zstd().compress(raw, asbytes=True)
        self._file.write(_FRAME.pack(len(header), len(raw), len(packed)))
        self._file.write(header)
        self._file.write(packed)
        self._fields, self._texts, self._chars = [], [], 0

    def close(self) -> None:
        self._write_frame()
        self._file.close()

    def discard(self) -> None:
        self._file.close()
        if os.path.exists(self.path):
            os.remove(self.path)


def _frames(path: str, with_texts: bool) -> Iterator[tuple[list[list], bytes | None]]:
    """(the documents' fields, their texts' UTF-8 bytes or None) of each frame of a stash file."""
    with open_input(path) as f:
        if f.read(len(STASH_MAGIC)) != STASH_MAGIC:
            raise RuntimeError(f"{path}: not a dedup stash file")
        while header := f.read(_FRAME.size):
            if len(header) < _FRAME.size:
                raise RuntimeError(f"{path}: cut short in a frame header")
            fields_bytes, raw_bytes, packed_bytes = _FRAME.unpack(header)
            fields = f.read(fields_bytes)
            packed = f.read(packed_bytes)  # read past, not sought: remote streams go forward
            if len(fields) < fields_bytes or len(packed) < packed_bytes:
                raise RuntimeError(f"{path}: cut short in a frame")
            fields = _json(fields)
            if sum(row[-1] for row in fields) != raw_bytes:
                raise RuntimeError(f"{path}: a frame's texts do not add up to its size")
            if not with_texts:
                yield fields, None
                continue
            raw = _zstd().decompress(packed, decompressed_size=raw_bytes, asbytes=True)
            yield fields, raw


def stash_ids(path: str) -> list[str]:
    """The ids of a stash file's documents, in order, without decompressing their texts."""
    return [row[0] for fields, _ in _frames(path, False) for row in fields]


def stash_documents(path: str, wanted: Container[str] | None = None) -> Iterator[Document]:
    """A stash file's documents (those whose id is in `wanted`, if given), in order, a frame
    (at most ~64 KB of text) at a time."""
    for fields, raw in _frames(path, True):
        start = 0
        for doc_id, source, url, title, meta, size in fields:
            start += size
            if wanted is None or doc_id in wanted:
                text = raw[start - size : start].decode("utf-8", "surrogatepass")
                yield Document(doc_id, source, text, url, title, meta)


def _stash_name(bucket: int, attempt: str) -> str:
    return f"b{bucket:05d}-{attempt}.stash"


class StashDir:
    """The stash files of a run: where StashDoFn writes them and the buckets' steps read them."""

    def __init__(self, url: str) -> None:
        self.dir = OutputDir(url)

    def path(self, name: str) -> str:
        return self.dir.path(name)

    def ids(self, name: str) -> list[str]:
        return stash_ids(self.path(name))

    def documents(self, name: str, wanted: Container[str] | None = None) -> Iterator[Document]:
        return stash_documents(self.path(name), wanted)


class StashDoFn(beam.DoFn):
    """Documents -> one stash file per bundle and bucket; emits (bucket, ("stash", file name))
    for each when the bundle commits, each element counted by `sent` (a ShuffleBytes) once for
    each of the `shuffles` GroupByKeys that take them."""

    def __init__(self, work_dir: str, num_buckets: int, sent=None, shuffles: int = 1) -> None:
        self._work_dir = work_dir
        self._num_buckets = num_buckets
        self._sent = sent
        self._shuffles = shuffles

    def setup(self) -> None:
        folder = OutputDir(self._work_dir)
        folder.makedirs()
        self._files = BundleFiles(folder, "stash-", _stash_name, StashWriter)

    def start_bundle(self) -> None:
        self._files.start()
        if self._sent is not None:
            self._sent.start_bundle()

    def process(self, doc: Document) -> None:
        self._files.writer(bucket_of(doc.id, self._num_buckets)).add(doc)

    def finish_bundle(self):
        for bucket, name in self._files.commit():
            element = (bucket, ("stash", name))
            if self._sent is not None:
                self._sent.add(element, self._shuffles)
            yield GlobalWindows.windowed_value(element)
        if self._sent is not None:
            yield from self._sent.finish_bundle()

    def teardown(self) -> None:
        if hasattr(self, "_files"):
            self._files.discard()
