"""`ShardSet`: one view over every pair of a shard-set directory, with global document numbering.

Also opens a bare Megatron prefix (`dir/name` of `name.bin`/`name.idx`, no manifest) as a set of
one, so Megatron and NeMo data load unchanged. A remote set (any fsspec URL: gs://, s3://,
memory://...) is fetched once into a local cache, each file checked against the manifest's
size and sha256 before it is used, then memory-mapped like a local one.

An untrusted set is safe to open: the manifest names only plain files inside the set (see
`manifest.py`), nothing is fetched or written outside the cache entry, and a local set's files
must resolve inside its directory (a symlink out of it is refused).
"""

from __future__ import annotations

import bisect
import hashlib
import os

import numpy as np

from common.safe_io import TOKENIZER_CAP, format_bytes
from common.storage import (
    is_remote,
    local_path,
    remove_quietly,
    replace,
    tmp_name,
    write_atomic,
    write_text_atomic,
)
from dataset_format.files import FormatError, file_sha256, require_set_file
from dataset_format.indexed import IndexedDataset, bin_path, idx_path
from dataset_format.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest
from dataset_format.sidecar import read_row, verify_sidecar

_COPY_BLOCK = 4 << 20


def default_cache_dir() -> str:
    return os.environ.get(
        "SHARDSMITH_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "shardsmith")
    )


def _fetch(fs, url: str, local: str, sha256: str, size: int | None = None) -> None:
    """Copy `url` to `local` unless a verified copy is there; verify before it becomes visible.

    With `size` (the manifest's byte count) a larger remote file is refused before the copy,
    so a hostile set cannot fill the disk with more than its manifest admits. Without one (a
    tokenizer: the manifest records no size) the copy stops at TOKENIZER_CAP; either way at
    most the expected size + 1 bytes are copied, whatever the remote store reports.
    """
    marker = local + ".sha256"
    if os.path.exists(local) and os.path.exists(marker):
        with open(marker) as f:
            if f.read().strip() == sha256:
                return
    if size is not None:
        remote_size = fs.size(url)
        if remote_size is not None and remote_size != size:
            raise FormatError(f"{url}: {remote_size} bytes, the manifest says {size}")
    tmp = tmp_name(local)
    limit = size if size is not None else TOKENIZER_CAP
    try:
        if _copy_capped(fs, url, tmp, limit) > limit:
            if size is not None:
                raise FormatError(f"{url}: more than the {size} bytes the manifest says")
            raise FormatError(f"{url}: larger than its cap of {format_bytes(TOKENIZER_CAP)}")
        actual = file_sha256(tmp)
        if (sha256 and actual != sha256) or (size is not None and os.path.getsize(tmp) != size):
            raise FormatError(f"{url}: checksum mismatch: manifest says {sha256}, fetched {actual}")
        replace(tmp, local)
    finally:
        remove_quietly(tmp)
    write_text_atomic(marker, sha256 or actual, sync=False)


def _copy_capped(fs, url: str, local: str, limit: int) -> int:
    """Copy at most limit + 1 bytes of `url` to `local`; returns the bytes copied."""
    copied = 0
    with fs.open(url, "rb") as src, open(local, "wb") as dst:
        while copied <= limit:
            block = src.read(min(_COPY_BLOCK, limit + 1 - copied))
            if not block:
                break
            dst.write(block)
            copied += len(block)
    return copied


def fetch_shard_set(url: str, cache_dir: str | None = None) -> str:
    """Fetch a remote shard set into the local cache (once) and return the local directory."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url.rstrip("/"))
    with fs.open(f"{root}/{MANIFEST_NAME}", "rb") as f:
        text = f.read(MAX_MANIFEST_BYTES + 1)
    # Parsed (names checked) before anything is written: no name can leave the cache entry.
    manifest = Manifest.loads(text, f"{url}/{MANIFEST_NAME}")
    key = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    local = os.path.join(cache_dir or default_cache_dir(), key)
    os.makedirs(local, exist_ok=True)
    for shard in manifest.shards:
        for ext, digest, size in (
            (".idx", shard.idx_sha256, shard.idx_bytes),
            (".bin", shard.bin_sha256, shard.bin_bytes),
        ):
            name = shard.name + ext
            _fetch(fs, f"{root}/{name}", os.path.join(local, name), digest, size)
        if shard.meta is not None:
            name = shard.meta.file
            _fetch(fs, f"{root}/{name}", os.path.join(local, name), shard.meta.sha256,
                   shard.meta.bytes)
    if manifest.tokenizer and manifest.tokenizer.file:
        name = manifest.tokenizer.file
        _fetch(fs, f"{root}/{name}", os.path.join(local, name), manifest.tokenizer.sha256)
    # last: marks the cached copy complete
    write_atomic(os.path.join(local, MANIFEST_NAME), text, sync=False)
    return local


class ShardSet:
    """All shards of a set as one dataset; document i is numbered across shards in manifest order."""

    def __init__(self, path: str, cache_dir: str | None = None):
        self.path = path
        local = fetch_shard_set(path, cache_dir) if is_remote(path) else local_path(path)
        self.directory = local
        if os.path.isdir(local):
            self.manifest: Manifest | None = Manifest.read(local)
            self._check_inside(local, self.manifest)
            self.shards = [
                IndexedDataset(os.path.join(local, s.name)) for s in self.manifest.shards
            ]
            for info, shard in zip(self.manifest.shards, self.shards):
                self._check_against_manifest(info, shard)
            self.dtype = np.dtype(self.manifest.dtype)
        elif os.path.exists(idx_path(local)) or os.path.exists(bin_path(local)):
            self.manifest = None
            self.shards = [IndexedDataset(local)]
            self.dtype = self.shards[0].dtype
            self.directory = os.path.dirname(local)
        else:
            raise FormatError(f"{path}: neither a shard-set directory nor a .bin/.idx prefix")
        mismatched = [s.prefix for s in self.shards if s.dtype != self.dtype]
        if mismatched:
            raise FormatError(f"{mismatched[0]}: dtype differs from the set's {self.dtype}")
        counts = np.array([s.num_documents for s in self.shards], dtype=np.int64)
        self._first_document = np.concatenate([[0], np.cumsum(counts)])
        sequence_counts = np.array([s.num_sequences for s in self.shards], dtype=np.int64)
        self._first_sequence = np.concatenate([[0], np.cumsum(sequence_counts)])
        self.num_documents = int(self._first_document[-1])
        self._first_document_list = self._first_document.tolist()  # bisect beats numpy here
        token_counts = np.array([s.num_tokens for s in self.shards], dtype=np.int64)
        self._first_token = np.concatenate([[0], np.cumsum(token_counts)]).tolist()
        self.num_sequences = sum(s.num_sequences for s in self.shards)
        self.num_tokens = sum(s.num_tokens for s in self.shards)

    @staticmethod
    def _check_inside(directory: str, manifest: Manifest) -> None:
        """Each file the manifest names resolves inside the set's directory (no symlink out)."""
        root = os.path.realpath(directory)
        names = [s.name + ext for s in manifest.shards for ext in (".bin", ".idx")]
        names += [s.meta.file for s in manifest.shards if s.meta is not None]
        if manifest.tokenizer is not None and manifest.tokenizer.file:
            names.append(manifest.tokenizer.file)
        for name in names:
            path = os.path.join(directory, name)
            if os.path.commonpath([root, os.path.realpath(path)]) != root:
                raise FormatError(
                    f"{path}: resolves to {os.path.realpath(path)}, outside the shard set "
                    f"{directory}; a set's files must lie in its directory"
                )

    @staticmethod
    def _check_against_manifest(info, shard: IndexedDataset) -> None:
        for what, listed, actual in (
            ("documents", info.documents, shard.num_documents),
            ("sequences", info.sequences, shard.num_sequences),
            ("tokens", info.tokens, shard.num_tokens),
            ("idx bytes", info.idx_bytes, os.path.getsize(idx_path(shard.prefix))),
        ):
            if listed != actual:
                raise FormatError(
                    f"{shard.prefix}: manifest lists {listed} {what}, the shard has {actual}"
                )
        if info.meta is not None and info.meta.rows != shard.num_documents:
            raise FormatError(f"{shard.prefix}: manifest lists {info.meta.rows} sidecar rows, "
                              f"the shard has {shard.num_documents} documents")

    @property
    def tokenizer_path(self) -> str | None:
        if self.manifest is None or self.manifest.tokenizer is None:
            return None
        if not self.manifest.tokenizer.file:
            return None
        return os.path.join(self.directory, self.manifest.tokenizer.file)

    def locate(self, i: int) -> tuple[int, int]:
        """(shard index, document number within that shard) of global document i."""
        i = int(i)
        if i < 0:
            i += self.num_documents
        if not 0 <= i < self.num_documents:
            raise IndexError(f"{self.path}: document {i} out of range [0, {self.num_documents})")
        shard = bisect.bisect_right(self._first_document_list, i) - 1
        return shard, i - self._first_document_list[shard]

    def sequence(self, j: int) -> np.ndarray:
        """Global sequence j (numbered across shards like documents)."""
        j = int(j)
        if j < 0:
            j += self.num_sequences
        if not 0 <= j < self.num_sequences:
            raise IndexError(f"{self.path}: sequence {j} out of range [0, {self.num_sequences})")
        shard = int(np.searchsorted(self._first_sequence, j, side="right")) - 1
        return self.shards[shard].sequence(j - int(self._first_sequence[shard]))

    def document(self, i: int) -> np.ndarray:
        if len(self.shards) == 1 and 0 <= i < self.num_documents:
            return self.shards[0].document(i)
        shard, local = self.locate(i)
        return self.shards[shard].document(local)

    def tokens(self, start: int, length: int) -> np.ndarray:
        """`length` tokens from global token offset `start` (numbered across shards in order).

        A view when the span lies in one shard (always, with one shard); a copy when it
        crosses a shard boundary.
        """
        if start < 0 or length < 0 or start + length > self.num_tokens:
            raise IndexError(
                f"{self.path}: token span [{start}, {start + length}) outside "
                f"[0, {self.num_tokens})"
            )
        first = self._first_token
        shard = bisect.bisect_right(first, start) - 1
        local = start - first[shard]
        if local + length <= self.shards[shard].num_tokens:
            return self.shards[shard].tokens(local, length)
        parts, remaining = [], length
        while remaining:
            take = min(remaining, self.shards[shard].num_tokens - local)
            parts.append(self.shards[shard].tokens(local, take))
            remaining -= take
            shard, local = shard + 1, 0
        return np.concatenate(parts)

    def document_metadata(self, i: int) -> dict | None:
        """Document i's row of its shard's metadata sidecar (input, id, URL or title,
        language, tokens); None where the set has no sidecar for that shard."""
        shard, local = self.locate(i)
        info = self.manifest.shards[shard].meta if self.manifest is not None else None
        if info is None:
            return None
        path = os.path.join(self.directory, info.file)
        size = require_set_file(path, "metadata sidecar").st_size
        if size != info.bytes:  # read no more than the manifest admits
            raise FormatError(f"{path}: {size} bytes, manifest says {info.bytes}")
        return read_row(path, local, self.shards[shard].document_lengths())

    def document_sequences(self, i: int) -> list[np.ndarray]:
        shard, local = self.locate(i)
        return self.shards[shard].document_sequences(local)

    def document_lengths(self) -> np.ndarray:
        if not self.shards:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([s.document_lengths() for s in self.shards])

    def sequence_lengths(self) -> np.ndarray:
        if not self.shards:
            return np.zeros(0, dtype=np.int32)
        return np.concatenate([np.asarray(s.sequence_lengths) for s in self.shards])

    def __len__(self) -> int:
        return self.num_documents

    def verify(self, checksums: bool = True) -> None:
        """Every invariant of every shard, and (with a manifest) every checksum and every
        metadata sidecar against its shard's index (rows, their order, token counts); FormatError.

        `checksums` reads all data, so it also checks every token id against the vocabulary
        size the manifest's tokenizer records.
        """
        tokenizer = self.manifest.tokenizer if self.manifest is not None else None
        vocab_size = tokenizer.vocab_size if checksums and tokenizer is not None else None
        for shard in self.shards:
            shard.verify(vocab_size)
        if self.manifest is None:
            return
        manifest_path = os.path.join(self.directory, MANIFEST_NAME)
        for info, shard in zip(self.manifest.shards, self.shards):
            size = os.path.getsize(bin_path(shard.prefix))
            if size != info.bin_bytes:
                raise FormatError(
                    f"{bin_path(shard.prefix)}: {size} bytes, manifest says {info.bin_bytes}"
                )
            if info.meta is not None:
                verify_sidecar(self.directory, info.meta, shard.document_lengths(), checksums)
            if not checksums:
                continue
            for path, listed in (
                (bin_path(shard.prefix), info.bin_sha256),
                (idx_path(shard.prefix), info.idx_sha256),
            ):
                actual = file_sha256(path)
                if actual != listed:
                    raise FormatError(
                        f"{path}: checksum mismatch: {manifest_path} says {listed}, file is {actual}"
                    )
        if checksums and tokenizer is not None and tokenizer.file:
            path = os.path.join(self.directory, tokenizer.file)
            if not os.path.exists(path):
                raise FormatError(f"{path}: tokenizer file named in the manifest is missing")
            if tokenizer.sha256 and file_sha256(path) != tokenizer.sha256:
                raise FormatError(f"{path}: checksum mismatch with {manifest_path}")
