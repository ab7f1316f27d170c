"""Step 3 of writing a shard set: one bucket's spill files merged into its shards.

The bucket's documents are sorted by id and cut into consecutive shards of at most
`shard_tokens` tokens (a single longer document gets a shard to itself), named
`shard-<bucket:05d>-<part:05d>`, each with its metadata sidecar
(`shard-<bucket:05d>-<part:05d>.meta.parquet`: one row a document, written here by the same
worker, so provenance never funnels through one worker either). Same input, same shards, same
names: a retried merge rewrites identical files, each written under a temporary name and
renamed into place.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import tempfile
from collections.abc import Iterable, Iterator, Sequence

from apache_beam import pvalue

from dataset_format import IndexedDatasetWriter, ShardInfo
from dataset_format.sidecar import SidecarWriter, sidecar_name
from pipelines.output import SPILL_DIR, WORK_DIR, OutputDir
from pipelines.reason_log import ReasonLog
from pipelines.stage import CountingDoFn
from pipelines.write.spill import SpillFile

LOG = logging.getLogger(__name__)
# A corpus read twice repeats every id: a line for each would flood the log.
_DUPLICATES = ReasonLog(LOG)

SHARD_PREFIX = "shard-"
# A shard of 2^27 tokens is 256 MiB of uint16 ids: big enough that a set of a few hundred GB
# has a manageable number of files, small enough to copy and checksum quickly.
DEFAULT_SHARD_TOKENS = 1 << 27


def shard_name(bucket: int, part: int) -> str:
    return f"{SHARD_PREFIX}{bucket:05d}-{part:05d}"


def split_into_parts(lengths: Sequence[int], shard_tokens: int) -> list[tuple[int, int]]:
    """Cut consecutive documents into [start, end) runs of at most `shard_tokens` tokens each.

    A document longer than `shard_tokens` is never split (documents stay whole): it becomes a
    part of its own.
    """
    if shard_tokens <= 0:
        raise ValueError(f"shard_tokens must be positive, got {shard_tokens}")
    parts: list[tuple[int, int]] = []
    start, tokens = 0, 0
    for i, n in enumerate(lengths):
        if i > start and tokens + int(n) > shard_tokens:
            parts.append((start, i))
            start, tokens = i, 0
        tokens += int(n)
    if start < len(lengths):
        parts.append((start, len(lengths)))
    return parts


def _raise_open_files_limit() -> None:
    """A bucket's merge keeps every spill file of the bucket open; with thousands of bundles
    the default soft limit of 1024 descriptors runs out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def _load_spills(spill_dir: OutputDir, names: Sequence[str], local_dir: str) -> list[SpillFile]:
    spills = []
    try:
        for name in names:
            if spill_dir.is_local:
                path = spill_dir.path(name)
            else:
                path = os.path.join(local_dir, name)
                spill_dir.get_file(name, path)
            spills.append(SpillFile(path))
    except BaseException:
        _close(spills)
        raise
    return spills


def _close(spills: Iterable[SpillFile]) -> None:
    for spill in spills:
        spill.close()


def _document_order(spills: Sequence[SpillFile]) -> list[tuple[int, int]]:
    """(spill, document) pairs in id order. Ids are unique by contract; if a source breaks
    that, equal ids are ordered by their tokens so the output stays deterministic."""
    order = sorted(
        ((spill.ids[j], s, j) for s, spill in enumerate(spills) for j in range(len(spill.ids))),
        key=lambda t: t[0],
    )
    result: list[tuple[int, int]] = []
    i = 0
    while i < len(order):
        k = i + 1
        while k < len(order) and order[k][0] == order[i][0]:
            k += 1
        run = order[i:k]
        if len(run) > 1:
            _DUPLICATES.warning(
                "duplicate_id", "document id %r occurs %d times; ordering them by content",
                run[0][0], len(run),
            )

            def content(t):
                seqs = spills[t[1]].document_sequences(t[2])
                return (tuple(len(q) for q in seqs), b"".join(q.tobytes() for q in seqs))

            run = sorted(run, key=content)
        result.extend((s, j) for _, s, j in run)
        i = k
    return result


def write_bucket(
    bucket: int,
    spill_names: Iterable[str],
    output: OutputDir,
    shard_tokens: int,
    dtype: str,
) -> Iterator[tuple[ShardInfo, int]]:
    """Write one bucket's shards; yields (ShardInfo, UTF-8 text bytes of its documents)."""
    spill_dir = output.child(WORK_DIR).child(SPILL_DIR)
    with tempfile.TemporaryDirectory(prefix=f"bucket{bucket:05d}-") as local_dir:
        spills = _load_spills(spill_dir, sorted(spill_names), local_dir)
        try:
            yield from _write_parts(bucket, spills, output, shard_tokens, dtype, local_dir)
        finally:
            _close(spills)


def _write_parts(bucket: int, spills: list[SpillFile], output: OutputDir, shard_tokens: int,
                 dtype: str, local_dir: str) -> Iterator[tuple[ShardInfo, int]]:
    """The bucket's documents in id order, cut into shards of about shard_tokens."""
    order = _document_order(spills)
    doc_lengths = [spill.document_lengths() for spill in spills]
    lengths = [int(doc_lengths[s][j]) for s, j in order]
    for part, (start, end) in enumerate(split_into_parts(lengths, shard_tokens)):
        name = shard_name(bucket, part)
        prefix = output.path(name) if output.is_local else os.path.join(local_dir, name)
        writer = IndexedDatasetWriter(prefix, dtype)
        sidecar = SidecarWriter(sidecar_name(prefix))
        text_bytes = 0
        try:
            for (s, j), tokens in zip(order[start:end], lengths[start:end]):
                writer.add_document(spills[s].document_sequences(j))
                sidecar.add({"id": spills[s].ids[j], **spills[s].provenance(j),
                             "tokens": tokens})
                text_bytes += spills[s].text_bytes[j]
            meta = sidecar.finalize()
            info = dataclasses.replace(writer.finalize(), meta=meta)
        except BaseException:
            writer.discard()
            sidecar.discard()
            raise
        if not output.is_local:
            # the sidecar, then .bin before .idx, like the local writer: a pair is whole
            # only once both are.
            for ext in (meta.file.removeprefix(name), ".bin", ".idx"):
                output.put_file(prefix + ext, name + ext)
                os.remove(prefix + ext)
        yield info, text_bytes


class MergeBucketDoFn(CountingDoFn):
    """(bucket, spill names) -> that bucket's ShardInfos, and the counts of what they hold."""

    STAGE = "write"  # merging the bucket's spills into its shards

    def __init__(self, output: str, shard_tokens: int, dtype: str, progress_dir: str | None):
        self.output = output
        self.shard_tokens = shard_tokens
        self.dtype = dtype
        self.progress_dir = progress_dir

    def setup(self) -> None:
        super().setup()
        _raise_open_files_limit()
        self.out = OutputDir(self.output)

    def process(self, element: tuple[int, Iterable[str]]) -> Iterator:
        bucket, names = element
        for info, text_bytes in self.clock.items(write_bucket(
            bucket, list(names), self.out, self.shard_tokens, self.dtype
        )):
            self.stat_update("shards_written")
            self.stat_update("docs_written", info.documents)
            self.stat_update("sequences_written", info.sequences)
            self.stat_update("tokens_written", info.tokens)
            self.stat_update("bytes_written", text_bytes)
            yield info
        yield pvalue.TaggedOutput("spills", (bucket, list(names)))
