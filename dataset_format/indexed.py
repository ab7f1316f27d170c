"""One Megatron-compatible indexed dataset: a `.bin` of token ids and its `.idx` index.

The byte layout is Megatron-LM's `MMIDIDX` (so our shards load in Megatron-LM and NeMo unchanged,
and theirs load here); all integers little-endian, no padding:

    .idx  magic     9 bytes   b"MMIDIDX\\x00\\x00"
          version   uint64    1
          dtype     uint8     code of the token dtype (see DTYPE_CODES)
          S         uint64    number of sequences
          D1        uint64    number of document-index entries (= documents + 1)
          lengths   int32[S]  tokens in each sequence
          pointers  int64[S]  byte offset of each sequence in .bin
          doc_index int64[D1] document d spans sequences [doc_index[d], doc_index[d+1]); starts at 0
    .bin  the token ids of all sequences, concatenated, nothing else

A sequence is one sentence when sentences are split (BERT) or a whole document (GPT).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import struct
from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from common.storage import remove_quietly, replace, tmp_name
from dataset_format.files import FormatError, file_sha256, require_set_file

if TYPE_CHECKING:
    from dataset_format.sidecar import SidecarInfo

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequences, document-index entries
DTYPE_CODES: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
CODE_OF_DTYPE = {dtype: code for code, dtype in DTYPE_CODES.items()}
# MMIDIDX also has float codes (Megatron indexes float arrays with the same format); a token set's
# ids are integers, and a float set would pass every length check and break only on use.
TOKEN_DTYPE_CODES = {code: d for code, d in DTYPE_CODES.items() if d.kind in "iu"}
# Megatron picks uint16 below this vocabulary size; above it ids need int32.
UINT16_VOCAB_LIMIT = 65500
_COPY_CHUNK = 16 << 20
_ID_CHECK_CHUNK = 1 << 22  # tokens per pass of the vocabulary check


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """The token dtype Megatron uses for a vocabulary of this size."""
    if vocab_size <= 0:
        raise ValueError(f"vocabulary size must be positive, got {vocab_size}")
    return np.dtype(np.uint16) if vocab_size < UINT16_VOCAB_LIMIT else np.dtype(np.int32)


def bin_path(prefix: str) -> str:
    return prefix + ".bin"


def idx_path(prefix: str) -> str:
    return prefix + ".idx"


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """What the manifest records of one finished pair: counts, sizes and checksums.

    Read back only through `manifest.shard_from_json`, which type-checks every field.
    """

    name: str
    documents: int
    sequences: int
    tokens: int
    bin_bytes: int
    idx_bytes: int
    bin_sha256: str
    idx_sha256: str
    meta: SidecarInfo | None = None  # the shard's per-document metadata file, where written

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        if self.meta is None:
            del data["meta"]  # a set without sidecars keeps the manifest it always had
        return data


def _header_bytes(dtype: np.dtype, sequences: int, documents: int) -> bytes:
    return HEADER.pack(MAGIC, VERSION, CODE_OF_DTYPE[dtype], sequences, documents + 1)


class IndexedDatasetWriter:
    """Streams documents into `prefix.bin`/`prefix.idx`.

    Tokens go to disk as they come (only the per-sequence lengths are kept, 4 bytes each);
    both files are written under temporary names and renamed only by `finalize()`, `.bin` first,
    so a crash never leaves a pair that looks whole: at worst a `.bin` without its `.idx`,
    which the reader reports as a missing pair. Temporary names are unique per writer, so two
    attempts at the same shard (a retried Beam bundle) never write into each other's files.
    """

    def __init__(self, prefix: str, dtype: np.dtype | type | str):
        self.prefix = prefix
        self.dtype = np.dtype(dtype)
        if self.dtype not in CODE_OF_DTYPE:
            raise ValueError(f"{prefix}: dtype {self.dtype} has no MMIDIDX code")
        if self.dtype.kind not in "iu":
            raise ValueError(f"{prefix}: dtype {self.dtype} is not an integer dtype for token ids")
        self._limits = (np.iinfo(self.dtype).min, np.iinfo(self.dtype).max)
        directory = os.path.dirname(os.path.abspath(prefix))
        os.makedirs(directory, exist_ok=True)
        # the output folder's temporary names: a killed writer's files are counted as the pair's
        self._bin_tmp = tmp_name(bin_path(prefix))
        self._idx_tmp = tmp_name(idx_path(prefix))
        self._bin: BinaryIO | None = open(self._bin_tmp, "wb")
        self._bin_hash = hashlib.sha256()
        self._sequence_lengths = array("i")
        self._document_index = array("q", [0])
        self._tokens = 0

    # -- writing ---------------------------------------------------------------------------
    def _write_tokens(self, ids: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(ids)).cast("B")
        self._bin.write(data)
        self._bin_hash.update(data)

    def _as_tokens(self, sequence: Sequence[int] | np.ndarray) -> np.ndarray:
        ids = np.asarray(sequence)
        if ids.ndim != 1:
            raise ValueError(f"{self.prefix}: a sequence must be 1-D, got shape {ids.shape}")
        if ids.dtype == self.dtype:
            return ids
        if ids.size and self._limits is not None:
            low, high = int(ids.min()), int(ids.max())
            if low < self._limits[0] or high > self._limits[1]:
                raise ValueError(
                    f"{self.prefix}: token ids [{low}, {high}] do not fit {self.dtype}; "
                    "the vocabulary needs a wider dtype (see dtype_for_vocab)"
                )
        return ids.astype(self.dtype)

    def add_document(self, sequences: Iterable[Sequence[int] | np.ndarray]) -> None:
        """Append one document made of one or more sequences (an empty list = empty document)."""
        if self._bin is None:
            raise RuntimeError(f"{self.prefix}: writer already finalized or discarded")
        for sequence in sequences:
            ids = self._as_tokens(sequence)
            self._write_tokens(ids)
            self._sequence_lengths.append(int(ids.size))
            self._tokens += int(ids.size)
        self._document_index.append(len(self._sequence_lengths))

    def add_documents(self, tokens: np.ndarray, document_lengths: np.ndarray) -> None:
        """Append many one-sequence documents at once: `tokens` is their concatenation.

        The bulk path for converters and benchmarks: no Python work per document.
        """
        if self._bin is None:
            raise RuntimeError(f"{self.prefix}: writer already finalized or discarded")
        document_lengths = np.asarray(document_lengths, dtype=np.int64)
        if document_lengths.size and document_lengths.max() > np.iinfo(np.int32).max:
            raise ValueError(f"{self.prefix}: a sequence longer than 2**31-1 tokens")
        if int(document_lengths.sum()) != len(tokens):
            raise ValueError(
                f"{self.prefix}: document lengths sum to {int(document_lengths.sum())}, "
                f"but {len(tokens)} tokens were given"
            )
        self._write_tokens(self._as_tokens(tokens))
        base = len(self._sequence_lengths)
        self._sequence_lengths.frombytes(document_lengths.astype(np.int32).tobytes())
        self._document_index.frombytes(
            (np.arange(1, document_lengths.size + 1, dtype=np.int64) + base).tobytes()
        )
        self._tokens += len(tokens)

    def append_dataset(self, source: IndexedDataset) -> None:
        """Append every document of an existing pair without decoding it (merge, convert)."""
        if source.dtype != self.dtype:
            raise ValueError(
                f"cannot append {source.prefix} ({source.dtype}) to {self.prefix} ({self.dtype})"
            )
        with open(bin_path(source.prefix), "rb") as src:
            while chunk := src.read(_COPY_CHUNK):
                self._bin.write(chunk)
                self._bin_hash.update(chunk)
        base = len(self._sequence_lengths)
        self._sequence_lengths.frombytes(np.asarray(source.sequence_lengths, np.int32).tobytes())
        self._document_index.frombytes(
            (np.asarray(source.document_index[1:], dtype=np.int64) + base).tobytes()
        )
        self._tokens += source.num_tokens

    # -- finishing -------------------------------------------------------------------------
    @property
    def documents(self) -> int:
        return len(self._document_index) - 1

    @property
    def tokens(self) -> int:
        return self._tokens

    def finalize(self) -> ShardInfo:
        """Write the index, make both files durable, rename them into place; returns their record."""
        if self._bin is None:
            raise RuntimeError(f"{self.prefix}: writer already finalized or discarded")
        self._bin.flush()
        os.fsync(self._bin.fileno())
        self._bin.close()
        self._bin = None
        lengths = np.frombuffer(self._sequence_lengths, dtype=np.int32)
        pointers = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=pointers[1:])
        document_index = np.frombuffer(self._document_index, dtype=np.int64)
        idx_hash = hashlib.sha256()
        with open(self._idx_tmp, "wb") as idx:
            for part in (
                _header_bytes(self.dtype, len(lengths), self.documents),
                lengths.tobytes(),
                pointers.tobytes(),
                document_index.tobytes(),
            ):
                idx.write(part)
                idx_hash.update(part)
            idx.flush()
            os.fsync(idx.fileno())
        bin_bytes = os.path.getsize(self._bin_tmp)
        idx_bytes = os.path.getsize(self._idx_tmp)
        replace(self._bin_tmp, bin_path(self.prefix))
        replace(self._idx_tmp, idx_path(self.prefix))
        return ShardInfo(
            name=os.path.basename(self.prefix),
            documents=self.documents,
            sequences=len(lengths),
            tokens=self._tokens,
            bin_bytes=bin_bytes,
            idx_bytes=idx_bytes,
            bin_sha256=self._bin_hash.hexdigest(),
            idx_sha256=idx_hash.hexdigest(),
        )

    def discard(self) -> None:
        """Drop everything written so far; no file of this writer remains."""
        if self._bin is not None:
            self._bin.close()
            self._bin = None
        for path in (self._bin_tmp, self._idx_tmp):
            remove_quietly(path)

    def __enter__(self) -> IndexedDatasetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and self._bin is not None:
            self.finalize()
        else:
            self.discard()


class IndexedDataset:
    """Read-only, memory-mapped view of one `.bin`/`.idx` pair.

    Opening reads no token: the header is parsed, sizes are checked against it, both files are
    memory-mapped, and the document index (8 bytes a document, a small fraction of the index
    and far less of the data) is checked to rise from 0 to the sequence count in one vectorised
    pass, since every document lookup trusts it. The sequence pointers are checked where they
    are first turned into offsets (`sequence_offsets`); `verify()` does every O(n) check.
    """

    def __init__(self, prefix: str):
        self.prefix = prefix
        index_file, data_file = idx_path(prefix), bin_path(prefix)
        sizes = {}
        for path, other in ((index_file, data_file), (data_file, index_file)):
            if not os.path.exists(path):
                missing = "missing pair: " if os.path.exists(other) else ""
                raise FormatError(f"{path}: {missing}file not found")
            sizes[path] = require_set_file(path, "shard file").st_size
        idx_size = sizes[index_file]
        if idx_size < HEADER.size:
            raise FormatError(
                f"{index_file}: {idx_size} bytes is shorter than the {HEADER.size}-byte header"
            )
        with open(index_file, "rb") as f:
            magic, version, code, sequences, doc_entries = HEADER.unpack(f.read(HEADER.size))
        if magic != MAGIC:
            raise FormatError(f"{index_file}: wrong magic {magic!r}, expected {MAGIC!r} (MMIDIDX)")
        if version != VERSION:
            raise FormatError(f"{index_file}: unknown index version {version}, expected {VERSION}")
        if code not in DTYPE_CODES:
            raise FormatError(f"{index_file}: unknown dtype code {code}")
        if code not in TOKEN_DTYPE_CODES:
            raise FormatError(
                f"{index_file}: dtype {DTYPE_CODES[code]} is not an integer dtype: not token ids"
            )
        if doc_entries < 1:
            raise FormatError(f"{index_file}: document index must have at least one entry")
        self.dtype = DTYPE_CODES[code]
        expected = HEADER.size + sequences * 12 + doc_entries * 8
        if idx_size != expected:
            raise FormatError(
                f"{index_file}: {idx_size} bytes, but a header of {sequences} sequences and "
                f"{doc_entries - 1} documents needs {expected}"
            )
        self.num_sequences = int(sequences)
        self.num_documents = int(doc_entries) - 1
        index = np.memmap(index_file, dtype=np.uint8, mode="r")
        offset = HEADER.size
        self.sequence_lengths = index[offset : offset + 4 * sequences].view(np.int32)
        offset += 4 * sequences
        self.sequence_pointers = index[offset : offset + 8 * sequences].view(np.int64)
        offset += 8 * sequences
        self.document_index = index[offset:].view(np.int64)

        bin_size = sizes[data_file]
        itemsize = self.dtype.itemsize
        if bin_size % itemsize:
            raise FormatError(f"{data_file}: {bin_size} bytes is not a multiple of {itemsize}")
        if self.document_index[0] != 0 or self.document_index[-1] != sequences:
            raise FormatError(
                f"{index_file}: document index must run from 0 to {sequences}, got "
                f"{int(self.document_index[0])}..{int(self.document_index[-1])}"
            )
        _check_rising(self.document_index, index_file)
        if sequences:
            last_end = int(self.sequence_pointers[-1]) + int(self.sequence_lengths[-1]) * itemsize
            if last_end > bin_size:
                raise FormatError(
                    f"{data_file}: truncated: the index points to byte {last_end}, "
                    f"the file has {bin_size}"
                )
            if last_end < bin_size:
                raise FormatError(
                    f"{data_file}: {bin_size} bytes, longer than the {last_end} the index describes"
                )
        elif bin_size:
            raise FormatError(f"{data_file}: {bin_size} bytes but the index has no sequences")
        self.num_tokens = bin_size // itemsize
        self._tokens = (
            np.memmap(data_file, dtype=self.dtype, mode="r")
            if bin_size
            else np.empty(0, dtype=self.dtype)
        )
        self._sequence_offsets: np.ndarray | None = None
        self._document_offsets: np.ndarray | None = None

    # -- access ----------------------------------------------------------------------------
    def sequence_offsets(self) -> np.ndarray:
        """Token offset of each sequence start, plus the total at the end (int64[S + 1])."""
        if self._sequence_offsets is None:
            self._check_pointers()
            offsets = np.empty(self.num_sequences + 1, dtype=np.int64)
            offsets[:-1] = self.sequence_pointers // self.dtype.itemsize
            offsets[-1] = self.num_tokens
            self._sequence_offsets = offsets
        return self._sequence_offsets

    def _check_pointers(self) -> None:
        """Lengths are >= 0 and each sequence starts where the one before ends (one pass)."""
        where = idx_path(self.prefix)
        lengths = np.asarray(self.sequence_lengths)
        if lengths.size and lengths.min() < 0:
            raise FormatError(f"{where}: negative sequence length at {int(np.argmin(lengths))}")
        if self.num_sequences:
            expected = np.zeros(self.num_sequences, dtype=np.int64)
            np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=expected[1:])
            bad = np.flatnonzero(np.asarray(self.sequence_pointers) != expected)
            if bad.size:
                j = int(bad[0])
                raise FormatError(
                    f"{where}: sequence {j} points to byte {int(self.sequence_pointers[j])}, "
                    f"expected {int(expected[j])} (sequences must be contiguous)"
                )

    def document_offsets(self) -> np.ndarray:
        """Token offset of each document start, plus the total at the end (int64[D + 1]).

        Computed on first use (one vectorised pass over the index), not at open, so that
        opening stays O(1); random document access then costs one slice, like a bare memmap.
        """
        if self._document_offsets is None:
            self._document_offsets = self.sequence_offsets()[self.document_index]
        return self._document_offsets

    def document_lengths(self) -> np.ndarray:
        """Tokens in each document (int64[D])."""
        return np.diff(self.document_offsets())

    def _check(self, i: int, count: int, what: str) -> int:
        """`i` as an index in [0, count) (a negative one counts from the end); IndexError
        naming the index asked for otherwise."""
        asked = int(i)
        i = asked + count if asked < 0 else asked
        if not 0 <= i < count:
            raise IndexError(f"{self.prefix}: {what} {asked} out of range [-{count}, {count})")
        return i

    def sequence(self, j: int) -> np.ndarray:
        """Sequence j's tokens. Its own pointer and length are checked here (O(1)), so one
        sequence can be read without the O(n) pass of :meth:`sequence_offsets`."""
        j = self._check(j, self.num_sequences, "sequence")
        pointer, length = int(self.sequence_pointers[j]), int(self.sequence_lengths[j])
        itemsize = self.dtype.itemsize
        if (
            pointer < 0
            or length < 0
            or pointer % itemsize
            or pointer // itemsize + length > (self.num_tokens)
        ):
            raise FormatError(
                f"{idx_path(self.prefix)}: sequence {j} points to byte {pointer} with {length} "
                f"tokens, outside the {self.num_tokens * itemsize} bytes of the data file"
            )
        return self._tokens[pointer // itemsize : pointer // itemsize + length]

    def document(self, i: int) -> np.ndarray:
        """All tokens of document i, as one view (sequences of a document are contiguous)."""
        if not 0 <= i < self.num_documents:
            i = self._check(i, self.num_documents, "document")
        offsets = self._document_offsets
        if offsets is None:
            offsets = self.document_offsets()
        return self._tokens[offsets[i] : offsets[i + 1]]

    def document_sequences(self, i: int) -> list[np.ndarray]:
        i = self._check(i, self.num_documents, "document")
        first, last = int(self.document_index[i]), int(self.document_index[i + 1])
        return [self.sequence(j) for j in range(first, last)]

    def tokens(self, start: int, length: int) -> np.ndarray:
        """`length` tokens from global token offset `start`, across document boundaries."""
        if start < 0 or length < 0 or start + length > self.num_tokens:
            raise IndexError(
                f"{self.prefix}: token span [{start}, {start + length}) outside [0, {self.num_tokens})"
            )
        return self._tokens[start : start + length]

    def __len__(self) -> int:
        return self.num_sequences

    def __getitem__(self, j: int) -> np.ndarray:
        return self.sequence(j)

    # -- checking --------------------------------------------------------------------------
    def verify(self, vocab_size: int | None = None) -> None:
        """Every invariant of the pair, O(n); raises FormatError naming the first fault.

        With `vocab_size`, also reads every token: each id must lie in [0, vocab_size).
        """
        self._check_pointers()
        _check_rising(self.document_index, idx_path(self.prefix))
        if vocab_size is not None:
            self.check_token_ids(vocab_size)

    def check_token_ids(self, vocab_size: int) -> None:
        """FormatError naming the first token id outside [0, vocab_size), in chunks of the data."""
        for start in range(0, self.num_tokens, _ID_CHECK_CHUNK):
            chunk = self._tokens[start : start + _ID_CHECK_CHUNK]
            if int(chunk.max()) < vocab_size and int(chunk.min()) >= 0:
                continue
            position = start + int(np.flatnonzero((chunk < 0) | (chunk >= vocab_size))[0])
            document = int(np.searchsorted(self.document_offsets(), position, side="right")) - 1
            raise FormatError(
                f"{bin_path(self.prefix)}: token id {self._tokens[position]} (document "
                f"{document}, token {position}) is outside the vocabulary of {vocab_size}"
            )


def _check_rising(document_index: np.ndarray, where: str) -> None:
    steps = np.diff(np.asarray(document_index))
    if steps.size and steps.min() < 0:
        raise FormatError(f"{where}: document index decreases at document {int(np.argmin(steps))}")


def merge_indexed(prefixes: Sequence[str], out_prefix: str) -> ShardInfo:
    """Concatenate several pairs into one without re-tokenizing (like Megatron's merge_datasets).

    Documents keep their order: all of the first input, then all of the second, and so on.
    """
    if not prefixes:
        raise ValueError("merge_indexed needs at least one input")
    inputs = [IndexedDataset(p) for p in prefixes]
    dtypes = {ds.dtype for ds in inputs}
    if len(dtypes) != 1:
        raise ValueError(f"cannot merge pairs of different dtypes: {sorted(map(str, dtypes))}")
    writer = IndexedDatasetWriter(out_prefix, inputs[0].dtype)
    try:
        for ds in inputs:
            writer.append_dataset(ds)
        return writer.finalize()
    except BaseException:
        writer.discard()
        raise


def shard_info(prefix: str) -> ShardInfo:
    """The ShardInfo of a finished pair on disk (reads both files once for the checksums)."""
    ds = IndexedDataset(prefix)
    return ShardInfo(
        name=os.path.basename(prefix),
        documents=ds.num_documents,
        sequences=ds.num_sequences,
        tokens=ds.num_tokens,
        bin_bytes=os.path.getsize(bin_path(prefix)),
        idx_bytes=os.path.getsize(idx_path(prefix)),
        bin_sha256=file_sha256(bin_path(prefix)),
        idx_sha256=file_sha256(idx_path(prefix)),
    )
