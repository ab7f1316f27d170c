"""Writing a shard set from many workers: deterministic, bounded shards, idempotent under retries.

How documents reach shards (the names and the order are the contract):

1. Spill (fused with tokenizing, so token arrays never cross a shuffle): every tokenized
   document goes to bucket `xxh64(id) % num_buckets`. Each bundle appends its documents to one
   spill file per bucket (tokens, lengths and ids in one object) under `OUTPUT/_work/spill/`,
   with a name unique to the bundle attempt, and emits only `(bucket, spill name)` when it
   commits. A retried or abandoned bundle leaves files nobody refers to, deleted at the end.
2. Group the tiny spill names by bucket (GroupByKey): one element per bucket, so writing runs
   on as many workers as there are buckets, whatever the bundles were.
3. Merge each bucket: its documents sorted by id, cut into consecutive shards of at most
   `shard_tokens` tokens (a single longer document gets a shard to itself), named
   `shard-<bucket:05d>-<part:05d>`. Same input, same shards, same names: a retried merge
   rewrites identical files, each written under a temporary name and renamed into place.
4. Finish (one element: the shard records, which are tiny): sort shards by name, write
   `stats.json`, copy the tokenizer, and write `manifest.json` last. A run killed at any point
   before that leaves no manifest, so nothing reads its output as a finished set. Then each
   bucket's spill files are deleted, one bucket per element (spread over workers).

Before any of it the launcher claims OUTPUT (`claim_output`): a lock for the run, and the
ownership marker that says which files of the directory a run may replace.

Global document order: shards by name (bucket, then part), documents by id within a bucket.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import resource
import shutil
import socket
import struct
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
    INDEX_CACHE_DIR,
    MANIFEST_NAME,
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

    def put_file(self, local_path: str, name: str, *, atomic: bool = True) -> None:
        """Copy a local file in as `name`, atomically (through a temporary name) unless the
        caller's protocol already keeps readers off a half-written file."""
        final = self.path(name)
        tmp = self._tmp(name) if atomic else final
        if self.is_local:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            shutil.copyfile(local_path, tmp)
            if atomic:
                os.replace(tmp, final)
        elif self.backend == "beam":
            from apache_beam.io.filesystem import CompressionTypes
            from apache_beam.io.filesystems import FileSystems

            with (
                open(local_path, "rb") as src,
                FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as dst,
            ):
                shutil.copyfileobj(src, dst, 16 << 20)
            if atomic:
                FileSystems.rename([tmp], [final])
        else:
            self.fs.put_file(local_path, tmp)
            if atomic:
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

    def list_links(self) -> list[str]:
        """Names of the symbolic links directly in this directory (object stores have none)."""
        if not self.is_local or not os.path.isdir(self.url):
            return []
        return sorted(e.name for e in os.scandir(self.url) if e.is_symlink())

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

            # One batched call: GCS and S3 delete up to 100-1000 objects per request.
            FileSystems.delete([p for p in paths if FileSystems.exists(p)])
        else:
            found = [p for p in paths if self.fs.exists(p)]
            if found:
                self.fs.rm(found)  # one call: fsspec stores batch or parallelise it

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


# -- what OUTPUT holds that is ours, and who is writing it -------------------------------------
# OUTPUT/.shardsmith-output.json says the directory is ours. A run writes it when it claims a
# new or empty directory; the finishing step rewrites it with the list of the set's files. Only
# what it names is ever deleted or replaced, and a directory without it is used only if empty.
MARKER_NAME = ".shardsmith-output.json"
# Object stores have no advisory locks: an object naming the run that holds OUTPUT stands in.
LOCK_NAME = ".shardsmith-lock"
_TMP_SUFFIX = re.compile(r"\.tmp-[0-9a-f]{12}$")
# What an unfinished run may have written, by exact name (never a loose glob).
_RUN_FILE = re.compile(r"^(manifest\.json|stats\.json|tokenizer\.json|shard-\d{5}-\d{5}\.(bin|idx))$")
_REJECTS_FILE = re.compile(r"^rejects-\d{5}\.jsonl$")
_STORAGE_ERRORS = {
    errno.ENOSPC: "no space left on {where}",
    errno.EDQUOT: "no space left on {where} (disk quota exceeded)",
    errno.EROFS: "{where} is not writable (read-only file system)",
    errno.EACCES: "{where} is not writable (permission denied)",
    errno.EPERM: "{where} is not writable (operation not permitted)",
}
_ERRNO_IN_TEXT = re.compile(r"\[Errno (\d+)\] [^:\n]*(?:: '([^'\n]*)')?")


class OutputError(Exception):
    """OUTPUT cannot be used as asked; the message is one line for the user."""


def describe_storage_error(error: BaseException, output: str) -> str | None:
    """One line for a failure caused by storage (disk full, read-only, no permission), else None.

    Beam re-raises a worker's exception as a RuntimeError carrying only its text, so besides
    the exception chain the text is searched for an `[Errno N]`.
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _STORAGE_ERRORS:
            return _storage_line(error.errno, error.filename, output)
        match = _ERRNO_IN_TEXT.search(str(error))
        if match and int(match.group(1)) in _STORAGE_ERRORS:
            return _storage_line(int(match.group(1)), match.group(2), output)
        error = error.__cause__ or error.__context__
    return None


def _storage_line(code: int, filename, output: str) -> str:
    output = normalize_output(output)
    path = str(filename) if filename else None
    inside = path is None or path == output or path.startswith(output.rstrip("/") + "/")
    where = output if inside else f"{path} (outside OUTPUT: the temporary directory?)"
    return _STORAGE_ERRORS[code].format(where=where)


def _base_name(name: str) -> str:
    """The final name of a file written under a temporary name."""
    return _TMP_SUFFIX.sub("", name)


def _is_ours(marker: dict, name: str) -> bool:
    """Whether the marker lets a run replace `name` (a path relative to OUTPUT)."""
    base = _base_name(name)
    if marker.get("state") == "finished":
        return base in set(marker.get("files") or ())
    directory, _, file = base.rpartition("/")
    if directory == REJECTS_DIR:
        return bool(_REJECTS_FILE.match(file))
    return not directory and bool(_RUN_FILE.match(file))


def _read_marker(out: OutputDir) -> dict | None:
    if out.size(MARKER_NAME) is None:
        return None
    try:
        marker = json.loads(out.read_bytes(MARKER_NAME))
    except ValueError:
        marker = None
    if not isinstance(marker, dict) or marker.get("written_by") != "shardsmith":
        raise OutputError(f"{out.path(MARKER_NAME)} is not a marker this tool wrote; not touching {out.url}")
    return marker


def write_marker(out: OutputDir, run_id: str, files: Sequence[str] | None = None) -> None:
    """Mark OUTPUT as ours: being written by `run_id`, or (with `files`) holding a finished set."""
    marker = {"written_by": "shardsmith", "run_id": run_id, "state": "running"}
    if files is not None:
        marker.update(state="finished", files=sorted(files))
    _write_json(out, MARKER_NAME, marker)


def try_lock_directory(path: str) -> int | None:
    """An exclusive flock(2) on a directory: the open descriptor (closing it unlocks), or None
    when another process holds it. The kernel drops it when its holder dies, even by SIGKILL."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


class OutputLock:
    """Held by the launcher while a run writes OUTPUT, so a second run refuses instead of wiping
    the first one's work. Local: flock(2) on the directory itself, released by the kernel when
    the process ends however it ends. Remote: a lock object holding the run id, created only
    when absent and read back; object stores give no atomic create-if-absent here, so two runs
    started within the same second can both pass, and a killed launcher leaves the object
    behind (the error names it, to delete by hand)."""

    def __init__(self, out: OutputDir, run_id: str):
        self.out = out
        self.run_id = run_id
        self._fd: int | None = None

    def acquire(self) -> None:
        if self.out.is_local:
            fd = try_lock_directory(self.out.url)
            if fd is None:
                holder = _marker_run(self.out)
                raise OutputError(
                    f"{self.out.url} is being written by another run{holder} (it holds the "
                    "lock); wait for it to end or choose another --output"
                ) from None
            self._fd = fd
            return
        if self.out.size(LOCK_NAME) is not None:
            raise OutputError(self._held_by_other())
        record = {"run_id": self.run_id, "host": socket.gethostname(), "pid": os.getpid(),
                  "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
        self.out.write_bytes(LOCK_NAME, json.dumps(record).encode("utf-8"))
        time.sleep(_LOCK_SETTLE_S)  # let a racing writer's object land before reading back
        if self._holder().get("run_id") != self.run_id:
            raise OutputError(self._held_by_other())
        self._fd = -1

    def _holder(self) -> dict:
        try:
            return json.loads(self.out.read_bytes(LOCK_NAME))
        except (OSError, ValueError):
            return {}

    def _held_by_other(self) -> str:
        holder = self._holder()
        return (
            f"{self.out.url} is being written by another run ({holder.get('run_id', '?')} on "
            f"{holder.get('host', '?')}, pid {holder.get('pid', '?')}, since "
            f"{holder.get('since', '?')}); wait for it to end, or if it is gone delete "
            f"{self.out.path(LOCK_NAME)}"
        )

    def release(self) -> None:
        if self._fd is None:
            return
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor drops the flock
        elif self._holder().get("run_id") == self.run_id:
            self.out.delete([LOCK_NAME])
        self._fd = None


_LOCK_SETTLE_S = 1.0


def _marker_run(out: OutputDir) -> str:
    try:
        marker = _read_marker(out)
    except (OutputError, OSError):
        return ""
    return f" (run {marker['run_id']})" if marker and marker.get("run_id") else ""


def check_free_space(out: OutputDir, needed_bytes: int) -> None:
    """Refuse a local OUTPUT that cannot hold `needed_bytes` (remote stores are not asked)."""
    if not out.is_local or needed_bytes <= 0:
        return
    free = shutil.disk_usage(out.url).free
    if free < needed_bytes:
        raise OutputError(
            f"no space left on {out.url}: {free / 1e9:,.2f} GB free, the run needs at least "
            f"{needed_bytes / 1e9:,.2f} GB (spill and shards together take about the input's size)"
        )


@dataclasses.dataclass
class OutputClaim:
    """OUTPUT made ready for one run, and the lock the run holds on it until `release()`."""

    out: OutputDir
    run_id: str
    lock: OutputLock

    def release(self) -> None:
        self.lock.release()


def claim_output(
    url: str, *, run_id: str | None = None, overwrite: bool = False, needed_bytes: int = 0
) -> OutputClaim:
    """Lock `url` for a run and clear what a previous run of ours left there.

    Refused (OutputError, nothing touched): a directory that is locked by another run, holds
    links or anything our marker does not name, or holds a finished set (unless `overwrite`:
    then that set is deleted here, when the new run starts).
    """
    out = OutputDir(url)
    run_id = run_id or uuid.uuid4().hex[:12]
    try:
        if out.is_local and os.path.lexists(out.url) and not os.path.isdir(out.url):
            raise OutputError(f"{out.url} exists and is not a directory")
        out.makedirs()
        if out.is_local and not os.access(out.url, os.W_OK | os.X_OK):
            raise OSError(errno.EACCES, "not writable", out.url)
        lock = OutputLock(out, run_id)
        lock.acquire()
    except OSError as e:
        raise OutputError(describe_storage_error(e, out.url) or f"{out.url}: {e}") from None
    try:
        check_free_space(out, needed_bytes)
        _clear_previous_run(out, run_id, overwrite)
    except OSError as e:
        lock.release()
        raise OutputError(describe_storage_error(e, out.url) or f"{out.url}: {e}") from None
    except BaseException:
        lock.release()
        raise
    return OutputClaim(out, run_id, lock)


def _clear_previous_run(out: OutputDir, run_id: str, overwrite: bool) -> None:
    rejects = out.child(REJECTS_DIR)
    links = out.list_links() + [f"{REJECTS_DIR}/{n}" for n in rejects.list_links()]
    if links:
        raise OutputError(
            f"{out.url} holds symbolic links ({', '.join(links[:5])}); a run never writes "
            "through a link: remove them or choose another --output"
        )
    marker = _read_marker(out)
    files = [n for n in out.list_files() if n not in (MARKER_NAME, LOCK_NAME)]
    dirs = out.list_dirs()
    if marker is None:
        if files or dirs:
            found = files + [f"{d}/" for d in dirs]
            raise OutputError(
                f"{out.url} is not empty and was not written by this tool (no {MARKER_NAME}; "
                f"it holds {', '.join(found[:5])}{', ...' if len(found) > 5 else ''}): choose an "
                "empty or new directory"
            )
    else:
        reject_files = [f"{REJECTS_DIR}/{n}" for n in rejects.list_files()]
        foreign = [n for n in files + reject_files if not _is_ours(marker, n)]
        # INDEX_CACHE_DIR: what the trainer derived from the set; it goes with the set
        foreign += [f"{d}/" for d in dirs if d not in (WORK_DIR, REJECTS_DIR, INDEX_CACHE_DIR)]
        foreign += [f"{REJECTS_DIR}/{d}/" for d in rejects.list_dirs()]
        if foreign:
            raise OutputError(
                f"{out.url} holds files its previous run did not write ({', '.join(foreign[:5])}"
                f"{', ...' if len(foreign) > 5 else ''}): move them away or choose another --output"
            )
        if MANIFEST_NAME in files and not overwrite:
            raise OutputError(
                f"{out.url} holds a finished shard set; pass --overwrite to replace it (it is "
                "deleted when the new run starts) or choose another --output"
            )
    write_marker(out, run_id)  # first: a cleanup cut short still leaves a directory we own
    if MANIFEST_NAME in files:  # the old set must never look finished while it is taken apart
        out.delete([MANIFEST_NAME])
    out.delete(n for n in files if n != MANIFEST_NAME)
    out.child(WORK_DIR).delete_tree()
    rejects.delete_tree()
    out.child(INDEX_CACHE_DIR).delete_tree()
    out.child(WORK_DIR).child(SPILL_DIR).makedirs()



# -- step 1: spill ---------------------------------------------------------------------------
# One spill file per bundle and bucket, one object on a remote store, written straight under its
# final name: the name is unique to the bundle attempt and is handed on only once the file is
# complete, so nothing ever reads a half-written one (no temporary name, no rename, which on GCS
# is a copy and a delete). Layout: the token ids, then int32 sequence lengths, then int32
# sequence counts per document, then a JSON footer (ids, text bytes, dtype, counts), then its
# length (u64) and the magic.
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

    def close(self) -> None:
        footer = json.dumps(
            {
                "dtype": str(self.dtype),
                "tokens": self.tokens,
                "sequences": len(self.sequence_lengths),
                "ids": self.ids,
                "text_bytes": self.text_bytes,
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
    """A spill file read back (memory-mapped): documents by index, in the order written."""

    def __init__(self, path: str):
        size = os.path.getsize(path)
        with open(path, "rb") as f:
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
        dtype = np.dtype(footer["dtype"])
        tokens, sequences, documents = footer["tokens"], footer["sequences"], len(self.ids)
        body = tokens * dtype.itemsize + 4 * (sequences + documents)
        if body + footer_bytes + _FOOTER_TAIL.size != size:
            raise RuntimeError(f"{path}: {size} bytes, but its footer describes {body} + footer")
        data = np.memmap(path, np.uint8, mode="r", shape=(body,)) if body else np.zeros(0, np.uint8)
        end = tokens * dtype.itemsize
        self._tokens = data[:end].view(dtype)
        lengths = data[end : end + 4 * sequences].view(np.int32)
        counts = data[end + 4 * sequences : body].view(np.int32)
        self._sequence_offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        self._document_index = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        if self._sequence_offsets[-1] != tokens or self._document_index[-1] != sequences:
            raise RuntimeError(f"{path}: its lengths do not add up to its token count")

    @property
    def num_documents(self) -> int:
        return len(self.ids)

    def document_lengths(self) -> np.ndarray:
        return np.diff(self._sequence_offsets[self._document_index])

    def document_sequences(self, i: int) -> list[np.ndarray]:
        first, last = int(self._document_index[i]), int(self._document_index[i + 1])
        offsets = self._sequence_offsets
        return [self._tokens[offsets[j] : offsets[j + 1]] for j in range(first, last)]


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
        self.local_dir = (
            self.spill_dir.url if self.spill_dir.is_local else tempfile.mkdtemp(prefix="spill-")
        )
        os.makedirs(self.local_dir, exist_ok=True)

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
            name = os.path.basename(writer.path)
            if not self.spill_dir.is_local:
                self.spill_dir.put_file(writer.path, name, atomic=False)
                os.remove(writer.path)
            yield GlobalWindows.windowed_value((bucket, name))
        self.writers = {}

    def teardown(self) -> None:
        for writer in getattr(self, "writers", {}).values():
            writer.discard()
        if hasattr(self, "local_dir") and not self.spill_dir.is_local:
            shutil.rmtree(self.local_dir, ignore_errors=True)


# -- step 3: merge a bucket into shards ------------------------------------------------------
def _raise_open_files_limit() -> None:
    """A bucket's merge keeps every spill file of the bucket memory-mapped; with thousands of
    bundles the default soft limit of 1024 descriptors runs out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def _load_spills(spill_dir: OutputDir, names: Sequence[str], local_dir: str) -> list[SpillFile]:
    spills = []
    for name in names:
        if spill_dir.is_local:
            path = spill_dir.path(name)
        else:
            path = os.path.join(local_dir, name)
            spill_dir.get_file(name, path)
        spills.append(SpillFile(path))
    return spills


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
            LOG.warning(
                "document id %r occurs %d times; ordering them by content", run[0][0], len(run)
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
        order = _document_order(spills)
        doc_lengths = [spill.document_lengths() for spill in spills]
        lengths = [int(doc_lengths[s][j]) for s, j in order]
        for part, (start, end) in enumerate(split_into_parts(lengths, shard_tokens)):
            name = shard_name(bucket, part)
            prefix = output.path(name) if output.is_local else os.path.join(local_dir, name)
            writer = IndexedDatasetWriter(prefix, dtype)
            text_bytes = 0
            try:
                for s, j in order[start:end]:
                    writer.add_document(spills[s].document_sequences(j))
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
        yield pvalue.TaggedOutput("spills", (bucket, list(names)))


class WriteShards(beam.PTransform):
    """PCollection[TokenizedDocument] -> {"shards": ShardInfo per shard, "counts": dicts,
    "spills": (bucket, spill names) for DeleteSpillsDoFn once the set is finished}."""

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
            ).with_outputs("counts", "spills", main="shards")
        )
        return {"shards": merged.shards, "counts": merged.counts, "spills": merged.spills}


class DeleteSpillsDoFn(beam.DoFn):
    """(bucket, spill names) -> those files deleted, once the set is finished. One element per
    bucket, so the deleting is spread over workers like the merging was (not left to the one
    finishing worker)."""

    def __init__(self, output: str):
        self.output = output

    def process(self, element: tuple[int, list[str]], finished) -> Iterator[int]:
        _, names = element
        OutputDir(self.output).child(WORK_DIR).child(SPILL_DIR).delete(names)
        yield len(names)


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
        _write_failed_stats(out, stats, e)
        raise
    if stats["written"] == 0:
        LOG.warning("every document was dropped or failed: the shard set is empty (see stats.json)")
    # stats.json says "ok" only once the manifest is written: until then it says "finishing",
    # and any error on the way turns it into "failed" (as far as the disk still allows).
    try:
        tokenizer_info = _tokenizer_info(out, tokenizer_ref)
        for shard in shards:
            for ext, expected in ((".bin", shard.bin_bytes), (".idx", shard.idx_bytes)):
                if out.size(shard.name + ext) != expected:
                    raise RuntimeError(
                        f"{out.path(shard.name + ext)}: missing or not {expected} bytes"
                    )
        out.delete(n for n in out.list_files() if _TMP_SUFFIX.search(n))
        _write_json(out, STATS_NAME, {**stats, "status": "finishing"})
        manifest = Manifest(
            dtype=spec.dtype,
            sequence_unit=spec.sequence_unit,
            shards=shards,
            tokenizer=tokenizer_info,
            source=spec.source,
            pipeline=spec.pipeline,
        )
        set_files = [MANIFEST_NAME, STATS_NAME, TOKENIZER_NAME]
        set_files += [s.name + ext for s in shards for ext in (".bin", ".idx")]
        set_files += [f"{REJECTS_DIR}/{n}" for n in out.child(REJECTS_DIR).list_files()]
        write_marker(out, str(spec.run.get("run_id", "")), set_files)
        _write_json(out, MANIFEST_NAME, manifest.to_json())  # marks the set finished
        try:
            _write_json(out, STATS_NAME, stats)
        except Exception:
            out.delete([MANIFEST_NAME])  # a finished set with a stats.json that says otherwise
            raise
    except Exception as e:
        _write_failed_stats(out, stats, e)
        raise
    return stats


def _write_failed_stats(out: OutputDir, stats: dict, error: Exception) -> None:
    stats["status"] = "failed"
    stats["error"] = str(error)
    try:
        _write_json(out, STATS_NAME, stats)
    except OSError as e:
        LOG.error("%s: could not record the failure in stats.json: %s", out.url, e)


class FinishShardSetDoFn(beam.DoFn):
    """The single last step; its input is the (tiny) list of every ShardInfo."""

    def __init__(self, spec: ShardSetSpec, tokenizer_ref):
        self.spec = spec
        self.tokenizer_ref = tokenizer_ref

    def process(self, shards: list[ShardInfo], counts: dict, rejects_written: int) -> Iterator:
        yield finish_shard_set(self.spec, self.tokenizer_ref, shards, counts, rejects_written)
