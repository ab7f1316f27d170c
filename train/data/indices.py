"""Megatron-style GPT sample indices, built with numpy alone, and their on-disk cache.

Three arrays describe a GPT split (Megatron-LM's names and meaning):

- document index: the split's document ids repeated for as many epochs as the requested
  samples need, shuffled as megatron-core does: all epochs in one pass, or, when the last epoch
  is used for less than 80% of its samples, all but the last in one pass and the last apart;
- sample index: row k = (position in the document index, token offset in that document) where
  sample k starts; sample k runs to where sample k+1 starts, inclusive, so consecutive samples
  of `seq_len + 1` tokens overlap by one token (the last label of one is the first input of the
  next) and documents are read as one concatenated stream;
- shuffle index: the order samples are served in.

Megatron builds the sample index with a C++ loop; the sample starts are just multiples of
`seq_len` in the concatenated stream, so a cumulative sum of document lengths and one
`searchsorted` give the same rows without it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable

import numpy as np

from common.storage import write_atomic_with
from dataset_format import INDEX_CACHE_DIR, ShardSet, file_sha256
from dataset_format.shardset import default_cache_dir

logger = logging.getLogger(__name__)

# Part of every cache key: bump when the arrays built for the same inputs change.
INDEX_VERSION = 2  # 2: megatron-core's document index (epochs shuffled together)
CACHE_SUBDIR = INDEX_CACHE_DIR
# Megatron's rule: a last epoch that is used for less than this share of its samples is
# shuffled on its own, so its few samples are not spread over the whole run.
SEPARATE_LAST_EPOCH_BELOW = 0.8


def _index_dtype(max_value: int) -> np.dtype:
    return np.dtype(np.int32) if max_value < np.iinfo(np.int32).max else np.dtype(np.int64)


def num_epochs_needed(tokens_per_epoch: int, seq_len: int, num_samples: int) -> int:
    """Fewest passes over the split whose token stream holds `num_samples` samples.

    E epochs hold (E * tokens - 1) // seq_len samples (each needs seq_len + 1 tokens, and
    neighbours share one), so E = ceil((num_samples * seq_len + 1) / tokens).
    """
    if tokens_per_epoch <= 0:
        raise ValueError("the split has no tokens")
    return max(1, -(-(num_samples * seq_len + 1) // tokens_per_epoch))


def build_document_index(
    documents: np.ndarray,
    num_epochs: int,
    rng: np.random.RandomState,
    separate_final_epoch: bool = False,
) -> np.ndarray:
    """`documents` repeated `num_epochs` times and shuffled in one pass (megatron-core's
    `_build_document_index`); with `separate_final_epoch` the first `num_epochs - 1` copies are
    shuffled together, then the last copy on its own, so a barely used last epoch's documents
    are not spread over the whole run. Draws from `rng` exactly as megatron-core does."""
    if separate_final_epoch and num_epochs > 1:
        first = build_document_index(documents, num_epochs - 1, rng)
        return np.concatenate([first, build_document_index(documents, 1, rng)])
    dtype = _index_dtype(int(documents.max()) if documents.size else 0)
    document_index = np.tile(documents.astype(dtype), num_epochs)
    rng.shuffle(document_index)
    return document_index


def build_sample_index(lengths_in_order: np.ndarray, seq_len: int) -> np.ndarray:
    """Start (document-index position, token offset) of every sample, plus the end of the last.

    `lengths_in_order[j]` is the token count of the document at position j of the document
    index. Sample k starts at token k * seq_len of the concatenated stream; its row is the
    document holding that token (the last one, so empty documents are stepped over) and the
    offset inside it: exactly the rows of Megatron's `build_sample_idx`.
    """
    starts = np.zeros(lengths_in_order.size + 1, dtype=np.int64)
    np.cumsum(lengths_in_order, out=starts[1:])
    total_tokens = int(starts[-1])
    num_samples = (total_tokens - 1) // seq_len if total_tokens else 0
    positions = np.arange(num_samples + 1, dtype=np.int64) * seq_len
    document_position = np.searchsorted(starts, positions, side="right") - 1
    document_position[0] = 0  # Megatron's first row is (0, 0) even when that document is empty
    offsets = positions - starts[document_position]
    dtype = _index_dtype(max(lengths_in_order.size, int(offsets.max()) if offsets.size else 0))
    sample_index = np.empty((num_samples + 1, 2), dtype=dtype)
    sample_index[:, 0] = document_position
    sample_index[:, 1] = offsets
    return sample_index


def build_shuffle_index(
    num_samples: int, first_part: int, rng: np.random.RandomState
) -> np.ndarray:
    """A permutation of range(num_samples) that keeps [0, first_part) before the rest."""
    dtype = np.uint32 if num_samples < np.iinfo(np.uint32).max else np.int64
    first = rng.permutation(np.arange(first_part, dtype=dtype))
    last = rng.permutation(np.arange(first_part, num_samples, dtype=dtype))
    return np.concatenate([first, last])


def build_gpt_indices(
    document_lengths: np.ndarray,
    first_document: int,
    *,
    seq_len: int,
    seed: int,
    num_samples: int,
) -> dict[str, np.ndarray]:
    """The three arrays for a split whose documents are `first_document + range(len(lengths))`.

    The sample index covers every sample of the epochs built (at least `num_samples`); with
    more than one epoch, a barely used last epoch is shuffled apart (documents and samples) as
    megatron-core does. Same seed, lengths and request: the same three arrays as
    megatron-core's GPTDataset, so runs can switch between the two sample for sample.
    """
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    if num_samples <= 0:
        raise ValueError(f"num_samples must be positive, got {num_samples}")
    document_lengths = np.asarray(document_lengths, dtype=np.int64)
    tokens_per_epoch = int(document_lengths.sum())
    num_epochs = num_epochs_needed(tokens_per_epoch, seq_len, num_samples)
    rng = np.random.RandomState(seed % 2**32)
    documents = np.arange(first_document, first_document + document_lengths.size, dtype=np.int64)
    separate_final_epoch = False
    if num_epochs > 1:
        before_last = ((num_epochs - 1) * tokens_per_epoch - 1) // seq_len
        per_epoch = (tokens_per_epoch - 1) // seq_len
        separate_final_epoch = num_samples - before_last < int(
            SEPARATE_LAST_EPOCH_BELOW * per_epoch
        )
    document_index = build_document_index(documents, num_epochs, rng, separate_final_epoch)
    lengths_in_order = document_lengths[document_index - first_document]
    sample_index = build_sample_index(lengths_in_order, seq_len)
    total_samples = sample_index.shape[0] - 1
    first_part = before_last if separate_final_epoch else total_samples
    shuffle_index = build_shuffle_index(total_samples, first_part, rng)
    return {
        "document_index": document_index,
        "sample_index": sample_index,
        "shuffle_index": shuffle_index,
    }


# -- cache ---------------------------------------------------------------------------------


def cache_key(description: dict) -> str:
    """sha256 of a JSON description of everything the arrays depend on (stable everywhere)."""
    text = json.dumps({"index_version": INDEX_VERSION, **description}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def shard_set_location(shard_set: ShardSet) -> str:
    """The local path that reopens this set: its directory, or the bare prefix."""
    if shard_set.manifest is not None:
        return shard_set.directory
    return shard_set.shards[0].prefix


class MappedDataset:
    """A dataset over a shard set and its index files that pickles as paths: what `_open`
    derives from them (memory maps, tables; named in `_DERIVED`) is left out and made again
    on unpickling, so DataLoader workers started by spawn get paths, not copies of the maps."""

    _DERIVED: tuple[str, ...] = ()

    def _attach(self, shard_set: ShardSet, index_files: dict[str, str]) -> None:
        self._location = shard_set_location(shard_set)
        self._index_files = dict(index_files)
        self._open(shard_set)

    def _open(self, shard_set: ShardSet | None = None) -> None:
        raise NotImplementedError

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in self._DERIVED}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open()


def shard_set_fingerprint(shard_set: ShardSet) -> dict:
    """What identifies a set's contents for cache keys: its path and its shards' checksums.

    A set's manifest lists the checksums; a bare prefix has none, so its `.idx` (which holds
    every length the indices depend on) is hashed, O(sequences) bytes.
    """
    location = os.path.abspath(shard_set_location(shard_set))
    if shard_set.manifest is not None:
        shards = [[s.name, s.idx_sha256, s.bin_sha256] for s in shard_set.manifest.shards]
        return {"path": location, "shards": shards}
    return {
        "path": location,
        "idx_sha256": file_sha256(location + ".idx"),
        "bin_bytes": os.path.getsize(location + ".bin"),
    }


def index_cache_directory(data_directory: str, cache_dir: str | None) -> str:
    """Where a set's index files go: `cache_dir` if given, else beside the data if writable."""
    if cache_dir is not None:
        os.makedirs(cache_dir, exist_ok=True)
        return cache_dir
    beside = os.path.join(data_directory, CACHE_SUBDIR)
    try:
        os.makedirs(beside, exist_ok=True)
        if os.access(beside, os.W_OK):
            return beside
    except OSError:
        pass
    fallback = os.path.join(default_cache_dir(), CACHE_SUBDIR)
    logger.info("%s is read-only: index cache goes to %s", data_directory, fallback)
    os.makedirs(fallback, exist_ok=True)
    return fallback


def _save_atomic(path: str, array: np.ndarray) -> None:
    write_atomic_with(path, lambda f: np.save(f, array, allow_pickle=False))


def _initialized_distributed():
    """torch.distributed when the caller initialised it, else None; never imports torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def ensure_index_files(
    directory: str,
    stem: str,
    names: tuple[str, ...],
    build: Callable[[], dict[str, np.ndarray]],
) -> dict[str, str]:
    """Paths of `directory/stem.NAME.npy` for each name, building and saving them if missing.

    Under torch.distributed, local rank 0 of each node builds and the others wait on a
    barrier, so a node's ranks never race to build the same files; ranks on nodes sharing a
    file system may both build, harmlessly, since each file is written atomically.
    """
    paths = {name: os.path.join(directory, f"{stem}.{name}.npy") for name in names}
    dist = _initialized_distributed()
    builds_here = dist is None or int(os.environ.get("LOCAL_RANK", dist.get_rank())) == 0
    failure: BaseException | None = None
    if builds_here and not all(os.path.exists(p) for p in paths.values()):
        started = time.perf_counter()
        try:
            arrays = build()
            for name in names:
                _save_atomic(paths[name], arrays[name])
            logger.info(
                "built %s in %.2fs (%s)",
                stem,
                time.perf_counter() - started,
                ", ".join(f"{n}: {len(arrays[n]):,}" for n in names),
            )
        except BaseException as e:  # other ranks are waiting on the barrier below
            failure = e
    if dist is not None:
        dist.barrier()
    if failure is not None:
        raise failure
    missing = [p for p in paths.values() if not os.path.exists(p)]
    if missing:
        raise RuntimeError(
            f"{missing[0]}: index file missing after local rank 0 built it; see that rank's error"
        )
    return paths


def open_index_files(paths: dict[str, str]) -> dict[str, np.ndarray]:
    """Memory-map saved index arrays read-only (never unpickling anything).

    Returned as plain ndarray views of the maps: indexing an np.memmap wraps every result in
    a new memmap object, which costs more than the read itself on the per-sample path.
    """
    return {
        name: np.asarray(np.load(path, mmap_mode="r", allow_pickle=False))
        for name, path in paths.items()
    }
