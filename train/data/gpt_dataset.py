"""GPT pretraining samples: windows of seq_len + 1 tokens over a split's shuffled documents.

Megatron-LM's GPTDataset semantics (see `indices.py` for the three index arrays); the
documents are expected to end with EOD already (the pipeline's `--append-eod`), since samples
run across document boundaries.
"""

from __future__ import annotations

import numpy as np

from dataset_format import ShardSet
from train.data.blend import build_split_datasets
from train.data.indices import (
    build_gpt_indices,
    cache_key,
    ensure_index_files,
    index_cache_directory,
    open_index_files,
    shard_set_fingerprint,
    shard_set_location,
)
from train.data.spec import Dataset, DataSource, split_documents

GPT_INDEX_NAMES = ("document_index", "sample_index", "shuffle_index")


class GPTDataset:
    """dataset[i] -> input_ids, labels (the next tokens), loss_mask; all of length seq_len."""

    def __init__(
        self,
        shard_set: ShardSet,
        index_files: dict[str, str],
        *,
        seq_len: int,
        eod_mask_id: int | None = None,
        name: str = "",
    ):
        self.seq_len = seq_len
        self.eod_mask_id = eod_mask_id
        self.name = name
        self._location = shard_set_location(shard_set)
        self._index_files = dict(index_files)
        self._open(shard_set)

    def _open(self, shard_set: ShardSet | None = None) -> None:
        self.shard_set = shard_set if shard_set is not None else ShardSet(self._location)
        arrays = open_index_files(self._index_files)
        self.document_index = arrays["document_index"]
        self.sample_index = arrays["sample_index"]
        self.shuffle_index = arrays["shuffle_index"]

    # DataLoader workers started by spawn get paths, not copies of memory maps.
    def __getstate__(self) -> dict:
        return {
            "seq_len": self.seq_len,
            "eod_mask_id": self.eod_mask_id,
            "name": self.name,
            "_location": self._location,
            "_index_files": self._index_files,
        }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open()

    def __len__(self) -> int:
        return int(self.shuffle_index.shape[0])

    def sample_tokens(self, k: int) -> np.ndarray:
        """The seq_len + 1 tokens of sample k in index order (before shuffling), as int64."""
        first_position, first_offset = (int(v) for v in self.sample_index[k])
        last_position, last_offset = (int(v) for v in self.sample_index[k + 1])
        document = self.shard_set.document
        order = self.document_index
        if first_position == last_position:
            tokens = document(int(order[first_position]))[first_offset : last_offset + 1]
        else:
            parts = [document(int(order[first_position]))[first_offset:]]
            parts.extend(document(int(order[j])) for j in range(first_position + 1, last_position))
            parts.append(document(int(order[last_position]))[: last_offset + 1])
            tokens = np.concatenate(parts)
        if tokens.size != self.seq_len + 1:
            raise RuntimeError(
                f"{self.name}: sample {k} has {tokens.size} tokens, expected {self.seq_len + 1}; "
                "the index cache does not match the data (delete it to rebuild)"
            )
        return tokens.astype(np.int64)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(f"{self.name}: sample {index} out of range [0, {len(self)})")
        tokens = self.sample_tokens(int(self.shuffle_index[index]))
        input_ids = tokens[:-1]
        loss_mask = np.ones(self.seq_len, dtype=np.float32)
        if self.eod_mask_id is not None:
            # Megatron's --eod-mask-loss: no loss on predicting across a document boundary.
            loss_mask[input_ids == self.eod_mask_id] = 0.0
        return {"input_ids": input_ids, "labels": tokens[1:], "loss_mask": loss_mask}


def split_range(shard_set: ShardSet, path: str, split: str, split_name: str) -> tuple[int, int]:
    """The split's document range, or a clear error naming the set when it is empty."""
    start, end = split_documents(shard_set.num_documents, split)[split_name]
    if end <= start:
        raise ValueError(
            f"{path}: the {split_name} split is empty: --split {split!r} gives it none of the "
            f"set's {shard_set.num_documents} documents; change the split or ask for no "
            f"{split_name} samples"
        )
    return start, end


def build_gpt_split(
    shard_set: ShardSet,
    path: str,
    *,
    split_name: str,
    split: str,
    seq_len: int,
    seed: int,
    num_samples: int,
    cache_dir: str | None,
    eod_mask_id: int | None,
) -> GPTDataset:
    """One set's dataset for one split, its index arrays built once and cached."""
    start, end = split_range(shard_set, path, split, split_name)
    lengths = shard_set.document_lengths()[start:end]
    if int(lengths.sum()) == 0:
        raise ValueError(f"{path}: the {split_name} split (documents {start}..{end}) has no tokens")
    key = cache_key(
        {
            "kind": "gpt",
            "set": shard_set_fingerprint(shard_set),
            "documents": [start, end],
            "seq_len": seq_len,
            "seed": seed,
            "num_samples": num_samples,
        }
    )
    directory = index_cache_directory(shard_set.directory, cache_dir)
    files = ensure_index_files(
        directory,
        f"gpt-{split_name}-{key[:24]}",
        GPT_INDEX_NAMES,
        lambda: build_gpt_indices(
            lengths, start, seq_len=seq_len, seed=seed, num_samples=num_samples
        ),
    )
    return GPTDataset(
        shard_set, files, seq_len=seq_len, eod_mask_id=eod_mask_id, name=f"{path}[{split_name}]"
    )


def build_gpt_datasets(
    sources: list[DataSource],
    *,
    seq_len: int,
    split: str,
    seed: int,
    num_samples: dict[str, int],
    cache_dir: str | None = None,
    eod_mask_id: int | None = None,
) -> dict[str, Dataset]:
    """A dataset per split with samples wanted: one set's GPTDataset, or a blend of several.

    See `build_split_datasets` for how single sets and blends are sized.
    """
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    return build_split_datasets(
        sources,
        num_samples,
        lambda shard_set, path, split_name, count: build_gpt_split(
            shard_set,
            path,
            split_name=split_name,
            split=split,
            seq_len=seq_len,
            seed=seed,
            num_samples=count,
            cache_dir=cache_dir,
            eod_mask_id=eod_mask_id,
        ),
    )
