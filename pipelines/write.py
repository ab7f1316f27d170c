"""Writing a shard set from many workers: deterministic, bounded shards, idempotent under retries.

How documents reach shards (the names and the order are the contract):

1. Spill (fused with tokenizing, so token arrays never cross a shuffle): every tokenized
   document goes to bucket `xxh64(id) % num_buckets`. Each bundle appends its documents to one
   small `.bin`/`.idx` pair per bucket (plus their ids) under `OUTPUT/_work/spill/`, with a
   name unique to the bundle attempt, and emits only `(bucket, spill name)` when it commits.
   A retried or abandoned bundle leaves files nobody refers to, deleted at the end.
2. Group the tiny spill names by bucket (GroupByKey): one element per bucket, so writing runs
   on as many workers as there are buckets, whatever the bundles were.
3. Merge each bucket: its documents sorted by id, cut into consecutive shards of at most
   `shard_tokens` tokens (a single longer document gets a shard to itself), named
   `shard-<bucket:05d>-<part:05d>`. Same input, same shards, same names: a retried merge
   rewrites identical files, each written under a temporary name and renamed into place.
4. Finish (one element: the shard records, which are tiny): sort shards by name, write
   `stats.json`, copy the tokenizer, and write `manifest.json` last. A run killed at any point
   before that leaves no manifest, so nothing reads its output as a finished set.

Global document order: shards by name (bucket, then part), documents by id within a bucket.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import resource
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
import xxhash
from apache_beam import pvalue
from apache_beam.transforms.window import GlobalWindows

from dataset_format import (
    MANIFEST_NAME,
    IndexedDataset,
    IndexedDatasetWriter,
    Manifest,
    ShardInfo,
    TokenizerInfo,
)
from pipelines import progress as progress_lib
from pipelines.dedup.transforms import ClusterMember
from pipelines.document import Failure, Reject, TokenizedDocument
from pipelines.stats import AccountError, BundleCounts, build_stats, check_stats

LOG = logging.getLogger(__name__)

WORK_DIR = "_work"
SPILL_DIR = "spill"
REJECTS_DIR = "rejects"
STATS_NAME = "stats.json"
TOKENIZER_NAME = "tokenizer.json"
SHARD_PREFIX = "shard-"
# A shard of 2^27 tokens is 256 MiB of uint16 ids: big enough that a set of a few hundred GB
# has a manageable number of files, small enough to copy and checksum quickly.
DEFAULT_SHARD_TOKENS = 1 << 27
# Default bucket count: one bucket per this many input bytes (compressed, as listed), at least 1.
# It fixes how many workers write shards in parallel; it never depends on bundles.
BYTES_PER_BUCKET = 256 << 20
MAX_DEFAULT_BUCKETS = 512
_BEAM_SCHEMES = ("gs://", "s3://", "hdfs://", "azfs://")


def default_num_buckets(input_bytes: int) -> int:
    return max(1, min(MAX_DEFAULT_BUCKETS, -(-input_bytes // BYTES_PER_BUCKET)))


def bucket_of(doc_id: str, num_buckets: int) -> int:
    """The bucket of a document: a stable 64-bit hash of its id (same on every machine)."""
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8")) % num_buckets


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


# -- the output filesystem ------------------------------------------------------------------
def normalize_output(url: str) -> str:
    """Absolute local path, or the URL without a trailing slash."""
    if url.startswith("file://"):
        url = url[len("file://") :]
    if "://" not in url:
        return os.path.abspath(url)
    return url.rstrip("/")


class OutputDir:
    """One output directory on a local disk, a Beam filesystem (gs://, s3://...) or fsspec.

    Every write is atomic: to a temporary name first, then renamed, so a reader (or a retried
    attempt) never sees half a file under a final name.
    """

    def __init__(self, url: str, backend: str | None = None):
        self.url = normalize_output(url)
        if backend is None:
            if "://" not in self.url:
                backend = "local"
            elif self.url.startswith(_BEAM_SCHEMES):
                backend = "beam"
            else:
                backend = "fsspec"
        self.backend = backend
        self._fs = None

    def __getstate__(self):
        return {"url": self.url, "backend": self.backend}

    def __setstate__(self, state):
        self.__init__(state["url"], state["backend"])

    @property
    def is_local(self) -> bool:
        return self.backend == "local"

    def child(self, name: str) -> OutputDir:
        return OutputDir(self.path(name), self.backend)

    def path(self, name: str) -> str:
        return os.path.join(self.url, name) if self.is_local else f"{self.url}/{name}"

    @property
    def fs(self):
        if self._fs is None:
            import fsspec

            self._fs, _ = fsspec.core.url_to_fs(self.url)
        return self._fs

    def _tmp(self, name: str) -> str:
        return self.path(f"{name}.tmp-{uuid.uuid4().hex[:12]}")

    def makedirs(self) -> None:
        if self.is_local:
            os.makedirs(self.url, exist_ok=True)
        elif self.backend == "fsspec":
            self.fs.makedirs(self.url, exist_ok=True)
        # Object stores (the Beam backend) have no directories to make.

    def put_file(self, local_path: str, name: str) -> None:
        """Copy a local file in as `name`, atomically."""
        final, tmp = self.path(name), self._tmp(name)
        if self.is_local:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            shutil.copyfile(local_path, tmp)
            os.replace(tmp, final)
        elif self.backend == "beam":
            from apache_beam.io.filesystem import CompressionTypes
            from apache_beam.io.filesystems import FileSystems

            with (
                open(local_path, "rb") as src,
                FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as dst,
            ):
                shutil.copyfileobj(src, dst, 16 << 20)
            FileSystems.rename([tmp], [final])
        else:
            self.fs.put_file(local_path, tmp)
            self.fs.mv(tmp, final)

    def get_file(self, name: str, local_path: str) -> None:
        if self.is_local:
            shutil.copyfile(self.path(name), local_path)
        elif self.backend == "beam":
            from apache_beam.io.filesystem import CompressionTypes
            from apache_beam.io.filesystems import FileSystems

            with (
                FileSystems.open(
                    self.path(name), compression_type=CompressionTypes.UNCOMPRESSED
                ) as src,
                open(local_path, "wb") as dst,
            ):
                shutil.copyfileobj(src, dst, 16 << 20)
        else:
            self.fs.get_file(self.path(name), local_path)

    def write_bytes(self, name: str, data: bytes) -> None:
        if self.is_local:
            final, tmp = self.path(name), self._tmp(name)
            os.makedirs(os.path.dirname(final), exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
            return
        with tempfile.NamedTemporaryFile(delete=False) as f:
            f.write(data)
        try:
            self.put_file(f.name, name)
        finally:
            os.remove(f.name)

    def read_bytes(self, name: str) -> bytes:
        if self.is_local:
            with open(self.path(name), "rb") as f:
                return f.read()
        if self.backend == "beam":
            from apache_beam.io.filesystem import CompressionTypes
            from apache_beam.io.filesystems import FileSystems

            with FileSystems.open(
                self.path(name), compression_type=CompressionTypes.UNCOMPRESSED
            ) as f:
                return f.read()
        return self.fs.cat_file(self.path(name))

    def size(self, name: str) -> int | None:
        """Bytes in `name`, or None when it does not exist."""
        path = self.path(name)
        if self.is_local:
            return os.path.getsize(path) if os.path.isfile(path) else None
        if self.backend == "beam":
            from apache_beam.io.filesystems import FileSystems

            if not FileSystems.exists(path):
                return None
            return FileSystems.match([path])[0].metadata_list[0].size_in_bytes
        return int(self.fs.size(path)) if self.fs.isfile(path) else None

    def list_files(self) -> list[str]:
        """Names of the files directly in this directory (sorted)."""
        if self.is_local:
            if not os.path.isdir(self.url):
                return []
            return sorted(n for n in os.listdir(self.url) if os.path.isfile(self.path(n)))
        if self.backend == "beam":
            from apache_beam.io.filesystems import FileSystems

            found = FileSystems.match([self.path("*")])[0].metadata_list
            return sorted(m.path.rsplit("/", 1)[-1] for m in found if not m.path.endswith("/"))
        if not self.fs.exists(self.url):
            return []
        entries = self.fs.ls(self.url, detail=True)
        return sorted(
            e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e["type"] == "file"
        )

    def list_dirs(self) -> list[str]:
        """Names of the subdirectories (on an object store: of the prefixes below this one)."""
        if self.is_local:
            if not os.path.isdir(self.url):
                return []
            return sorted(n for n in os.listdir(self.url) if os.path.isdir(self.path(n)))
        if self.backend == "beam":
            from apache_beam.io.filesystems import FileSystems

            found = FileSystems.match([self.path("**")])[0].metadata_list
            prefix = self.url + "/"
            return sorted(
                {m.path[len(prefix) :].split("/")[0] for m in found if "/" in m.path[len(prefix) :]}
            )
        if not self.fs.exists(self.url):
            return []
        entries = self.fs.ls(self.url, detail=True)
        return sorted(
            e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e["type"] == "directory"
        )

    def delete(self, names: Iterable[str]) -> None:
        paths = [self.path(n) for n in names]
        if not paths:
            return
        if self.is_local:
            for path in paths:
                if os.path.exists(path):
                    os.remove(path)
        elif self.backend == "beam":
            from apache_beam.io.filesystems import FileSystems

            FileSystems.delete([p for p in paths if FileSystems.exists(p)])
        else:
            for path in paths:
                if self.fs.exists(path):
                    self.fs.rm(path)

    def delete_tree(self) -> None:
        """Remove this directory and everything in it (nothing to do if it is not there)."""
        if self.is_local:
            shutil.rmtree(self.url, ignore_errors=True)
        elif self.backend == "beam":
            from apache_beam.io.filesystems import FileSystems

            found = FileSystems.match([self.path("**")])[0].metadata_list
            if found:
                FileSystems.delete([m.path for m in found])
        elif self.fs.exists(self.url):
            self.fs.rm(self.url, recursive=True)


def _is_shard_set_file(name: str) -> bool:
    if ".tmp-" in name:
        return True
    if name in (MANIFEST_NAME, STATS_NAME, TOKENIZER_NAME):
        return True
    return name.startswith(SHARD_PREFIX) and name.endswith((".bin", ".idx"))


def prepare_output(url: str) -> OutputDir:
    """Make `url` ready for a run: created if new; a previous run's files removed.

    The old manifest goes first, so a directory being rewritten is never mistaken for a finished
    set; then old shards, temporary files and the work area. A directory holding anything else
    is refused (a mistyped --output must not delete a user's files).
    """
    out = OutputDir(url)
    foreign = [n for n in out.list_files() if not _is_shard_set_file(n)]
    foreign += [f"{d}/" for d in out.list_dirs() if d not in (WORK_DIR, REJECTS_DIR)]
    if foreign:
        raise FileExistsError(
            f"{out.url} holds files that are not part of a shard set ({', '.join(foreign[:5])}); "
            "choose an empty directory or a previous run's output"
        )
    existing = out.list_files()
    if MANIFEST_NAME in existing:
        out.delete([MANIFEST_NAME])
    out.delete(n for n in existing if n != MANIFEST_NAME)
    out.child(WORK_DIR).delete_tree()
    out.child(REJECTS_DIR).delete_tree()
    out.makedirs()
    out.child(WORK_DIR).child(SPILL_DIR).makedirs()
    return out


# -- step 1: spill ---------------------------------------------------------------------------
class SpillDoFn(beam.DoFn):
    """Appends each bundle's documents to one pair per bucket; emits (bucket, spill name)."""

    def __init__(self, output: str, num_buckets: int, dtype: str):
        self.output = output
        self.num_buckets = num_buckets
        self.dtype = dtype

    def setup(self) -> None:
        self.spill_dir = OutputDir(self.output).child(WORK_DIR).child(SPILL_DIR)
        # Remote output: pairs are built on local disk and uploaded when the bundle ends.
        self.local_dir = (
            self.spill_dir.url if self.spill_dir.is_local else tempfile.mkdtemp(prefix="spill-")
        )
        os.makedirs(self.local_dir, exist_ok=True)

    def start_bundle(self) -> None:
        self.attempt = uuid.uuid4().hex[:16]  # unique per bundle attempt: retries never collide
        self.writers: dict[int, IndexedDatasetWriter] = {}
        self.ids: dict[int, list[str]] = {}
        self.text_bytes: dict[int, list[int]] = {}

    def process(self, doc: TokenizedDocument) -> None:
        bucket = bucket_of(doc.id, self.num_buckets)
        writer = self.writers.get(bucket)
        if writer is None:
            prefix = os.path.join(self.local_dir, f"b{bucket:05d}-{self.attempt}")
            writer = self.writers[bucket] = IndexedDatasetWriter(prefix, self.dtype)
            self.ids[bucket], self.text_bytes[bucket] = [], []
        writer.add_document(doc.sequences)
        self.ids[bucket].append(doc.id)
        self.text_bytes[bucket].append(int(doc.text_bytes))

    def finish_bundle(self) -> Iterator:
        for bucket in sorted(self.writers):
            writer = self.writers[bucket]
            writer.finalize()
            name = os.path.basename(writer.prefix)
            sidecar = json.dumps(
                {"ids": self.ids[bucket], "text_bytes": self.text_bytes[bucket]}
            ).encode("utf-8")
            if self.spill_dir.is_local:
                self.spill_dir.write_bytes(name + ".ids.json", sidecar)
            else:
                for ext in (".bin", ".idx"):
                    self.spill_dir.put_file(writer.prefix + ext, name + ext)
                    os.remove(writer.prefix + ext)
                self.spill_dir.write_bytes(name + ".ids.json", sidecar)
            yield GlobalWindows.windowed_value((bucket, name))
        self.writers, self.ids, self.text_bytes = {}, {}, {}

    def teardown(self) -> None:
        for writer in getattr(self, "writers", {}).values():
            writer.discard()


# -- step 3: merge a bucket into shards ------------------------------------------------------
def _raise_open_files_limit() -> None:
    """A bucket's merge keeps every spill pair of the bucket memory-mapped (two descriptors
    each); with thousands of bundles the default soft limit of 1024 runs out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


@dataclasses.dataclass
class _Spill:
    dataset: IndexedDataset
    ids: list[str]
    text_bytes: list[int]


def _load_spills(spill_dir: OutputDir, names: Sequence[str], local_dir: str) -> list[_Spill]:
    spills = []
    for name in names:
        if spill_dir.is_local:
            prefix = os.path.join(spill_dir.url, name)
        else:
            prefix = os.path.join(local_dir, name)
            for ext in (".bin", ".idx"):
                spill_dir.get_file(name + ext, prefix + ext)
        sidecar = json.loads(spill_dir.read_bytes(name + ".ids.json"))
        dataset = IndexedDataset(prefix)
        if dataset.num_documents != len(sidecar["ids"]):
            raise RuntimeError(
                f"{spill_dir.path(name)}: {dataset.num_documents} documents but "
                f"{len(sidecar['ids'])} ids (a spill file was changed during the run)"
            )
        spills.append(_Spill(dataset, sidecar["ids"], sidecar["text_bytes"]))
    return spills


def _document_order(spills: Sequence[_Spill]) -> list[tuple[int, int]]:
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
            LOG.warning(
                "document id %r occurs %d times; ordering them by content", run[0][0], len(run)
            )

            def content(t):
                seqs = spills[t[1]].dataset.document_sequences(t[2])
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
        order = _document_order(spills)
        doc_lengths = [spill.dataset.document_lengths() for spill in spills]
        lengths = [int(doc_lengths[s][j]) for s, j in order]
        for part, (start, end) in enumerate(split_into_parts(lengths, shard_tokens)):
            name = shard_name(bucket, part)
            prefix = output.path(name) if output.is_local else os.path.join(local_dir, name)
            writer = IndexedDatasetWriter(prefix, dtype)
            text_bytes = 0
            try:
                for s, j in order[start:end]:
                    writer.add_document(spills[s].dataset.document_sequences(j))
                    text_bytes += spills[s].text_bytes[j]
                info = writer.finalize()
            except BaseException:
                writer.discard()
                raise
            if not output.is_local:
                # .bin before .idx, like the local writer: a pair is whole only once both are.
                for ext in (".bin", ".idx"):
                    output.put_file(prefix + ext, name + ext)
                    os.remove(prefix + ext)
            yield info, text_bytes


class MergeBucketDoFn(beam.DoFn):
    """(bucket, spill names) -> that bucket's ShardInfos, and the counts of what they hold."""

    def __init__(self, output: str, shard_tokens: int, dtype: str, progress_dir: str | None):
        self.output = output
        self.shard_tokens = shard_tokens
        self.dtype = dtype
        self.progress_dir = progress_dir

    def setup(self) -> None:
        _raise_open_files_limit()
        self.out = OutputDir(self.output)
        self.progress = progress_lib.reporter(self.progress_dir)

    def process(self, element: tuple[int, Iterable[str]]) -> Iterator:
        bucket, names = element
        counts = BundleCounts()
        for info, text_bytes in write_bucket(
            bucket, list(names), self.out, self.shard_tokens, self.dtype
        ):
            counts.inc("shards_written")
            counts.inc("docs_written", info.documents)
            counts.inc("sequences_written", info.sequences)
            counts.inc("tokens_written", info.tokens)
            counts.inc("bytes_written", text_bytes)
            if self.progress:
                self.progress.add(shards=1)
            yield info
        if self.progress:
            self.progress.flush()
        yield pvalue.TaggedOutput("counts", counts.drain())


class WriteShards(beam.PTransform):
    """PCollection[TokenizedDocument] -> {"shards": ShardInfo per shard, "counts": dicts}."""

    def __init__(
        self,
        output: str,
        *,
        num_buckets: int,
        shard_tokens: int,
        dtype: str,
        progress_dir: str | None = None,
    ):
        super().__init__()
        if num_buckets <= 0:
            raise ValueError(f"num_buckets must be positive, got {num_buckets}")
        self.output = normalize_output(output)
        self.num_buckets = num_buckets
        self.shard_tokens = shard_tokens
        self.dtype = str(np.dtype(dtype))
        self.progress_dir = progress_dir

    def expand(self, documents):
        merged = (
            documents
            | "Spill" >> beam.ParDo(SpillDoFn(self.output, self.num_buckets, self.dtype))
            | "GroupByBucket" >> beam.GroupByKey()
            | "Merge"
            >> beam.ParDo(
                MergeBucketDoFn(self.output, self.shard_tokens, self.dtype, self.progress_dir)
            ).with_outputs("counts", main="shards")
        )
        return {"shards": merged.shards, "counts": merged.counts}


# -- rejects (--keep-rejects) ----------------------------------------------------------------
def reject_record(record: Reject | Failure | ClusterMember) -> tuple[str, str]:
    """(sort key, JSON line) of a reject, a failure or a dedup cluster member, for OUTPUT/rejects/."""
    if isinstance(record, ClusterMember):
        key = f"{record.removed_id}#cluster"
        data = {"kind": "cluster", **dataclasses.asdict(record)}
    elif isinstance(record, Failure):
        key = record.location
        data = {
            "kind": "failure",
            "location": record.location,
            "reason": record.reason,
            "detail": record.detail,
        }
    else:
        key = record.doc_id
        data = {
            "kind": "reject",
            "id": record.doc_id,
            "source": record.source,
            "reason": record.reason,
            "detail": record.detail,
            "text": record.text,
        }
    return key, json.dumps(data, ensure_ascii=False)


class _WriteRejectFileDoFn(beam.DoFn):
    def __init__(self, output: str):
        self.output = output

    def process(self, element: tuple[int, Iterable[tuple[str, str]]]) -> Iterator[int]:
        bucket, records = element
        lines = [line for _, line in sorted(records)]
        data = ("\n".join(lines) + "\n").encode("utf-8")
        OutputDir(self.output).child(REJECTS_DIR).write_bytes(f"rejects-{bucket:05d}.jsonl", data)
        yield len(lines)


class WriteRejects(beam.PTransform):
    """Rejects and failures -> OUTPUT/rejects/rejects-<bucket>.jsonl, sorted; -> how many."""

    def __init__(self, output: str, num_files: int):
        super().__init__()
        self.output = normalize_output(output)
        self.num_files = num_files

    def expand(self, records):
        num_files = self.num_files

        def keyed(record):
            key, line = reject_record(record)
            return bucket_of(key, num_files), (key, line)

        return (
            records
            | "Key" >> beam.Map(keyed)
            | "GroupByFile" >> beam.GroupByKey()
            | "WriteFiles" >> beam.ParDo(_WriteRejectFileDoFn(self.output))
            | "Total" >> beam.CombineGlobally(sum)
        )


# -- step 4: finish --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ShardSetSpec:
    """What the finishing step needs besides the shards: the manifest's description of the set
    (deterministic: no times or worker counts, so reruns give the same manifest) and the
    run's own facts, which go to stats.json only."""

    output: str
    dtype: str
    sequence_unit: str
    max_failure_rate: float
    source: dict
    pipeline: dict
    run: dict = dataclasses.field(default_factory=dict)


def _tokenizer_info(out: OutputDir, tokenizer_ref) -> TokenizerInfo:
    """Ship the run's tokenizer as OUTPUT/tokenizer.json (the launcher wrote it there or in
    the work area) and describe it."""
    data = tokenizer_ref.read_json()
    if out.path(TOKENIZER_NAME) != tokenizer_ref.url:
        out.write_bytes(TOKENIZER_NAME, data)
    return TokenizerInfo(
        file=TOKENIZER_NAME,
        kind=tokenizer_ref.kind,
        vocab_size=tokenizer_ref.vocab_size,
        sha256=hashlib.sha256(data).hexdigest(),
        special_ids={k: int(v) for k, v in tokenizer_ref.special_ids.items()},
    )


def _write_json(out: OutputDir, name: str, data: dict) -> None:
    out.write_bytes(name, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def finish_shard_set(
    spec: ShardSetSpec,
    tokenizer_ref,
    shards: Iterable[ShardInfo],
    counts: dict[str, int],
    rejects_written: int = 0,
) -> dict:
    """Write stats.json, check the account, ship the tokenizer, write manifest.json last.

    Raises AccountError (after writing stats.json with the reason) when the account does not
    balance or too many records failed; then no manifest is written.
    """
    out = OutputDir(spec.output)
    shards = sorted(shards, key=lambda s: s.name)
    run = dict(spec.run)
    started = run.pop("started_at", None)
    extra = {
        "status": "ok",
        "source": spec.source,
        "output": out.url,
        "rejects_written": int(rejects_written),
        "run": run,
    }
    if started is not None:
        extra["elapsed_s"] = round(time.time() - float(started), 3)
    stats = build_stats(counts, max_failure_rate=spec.max_failure_rate, extra=extra)
    try:
        check_stats(stats)
        if sum(s.documents for s in shards) != stats["written"]:
            raise AccountError(
                f"the shards hold {sum(s.documents for s in shards)} documents but "
                f"{stats['written']} were counted as written"
            )
    except AccountError as e:
        stats["status"] = "failed"
        stats["error"] = str(e)
        _write_json(out, STATS_NAME, stats)
        raise
    if stats["written"] == 0:
        LOG.warning("every document was dropped or failed: the shard set is empty (see stats.json)")
    tokenizer_info = _tokenizer_info(out, tokenizer_ref)
    for shard in shards:
        for ext, expected in ((".bin", shard.bin_bytes), (".idx", shard.idx_bytes)):
            if out.size(shard.name + ext) != expected:
                raise RuntimeError(f"{out.path(shard.name + ext)}: missing or not {expected} bytes")
    out.child(WORK_DIR).delete_tree()
    out.delete(n for n in out.list_files() if ".tmp-" in n)
    _write_json(out, STATS_NAME, stats)
    manifest = Manifest(
        dtype=spec.dtype,
        sequence_unit=spec.sequence_unit,
        shards=shards,
        tokenizer=tokenizer_info,
        source=spec.source,
        pipeline=spec.pipeline,
    )
    _write_json(out, MANIFEST_NAME, manifest.to_json())  # last: marks the set finished
    return stats


class FinishShardSetDoFn(beam.DoFn):
    """The single last step; its input is the (tiny) list of every ShardInfo."""

    def __init__(self, spec: ShardSetSpec, tokenizer_ref):
        self.spec = spec
        self.tokenizer_ref = tokenizer_ref

    def process(self, shards: list[ShardInfo], counts: dict, rejects_written: int) -> Iterator:
        yield finish_shard_set(self.spec, self.tokenizer_ref, shards, counts, rejects_written)
