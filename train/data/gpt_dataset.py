"""GPT pretraining samples: windows of seq_len + 1 tokens over a split's shuffled documents.

Megatron-LM's GPTDataset semantics (see `indices.py` for the three index arrays). Samples run
across document boundaries, so documents must end with EOD already (the pipeline's
`--append-eod`, Megatron's too): `check_documents_end_with_eod` refuses a set that records it was
written without, and checks the ends of sampled documents of a set that records nothing.
"""

from __future__ import annotations

import logging

import numpy as np

from dataset_format import FormatError, ShardSet
from train.data.blend import build_split_datasets
from train.data.indices import (
    MappedDataset,
    build_gpt_indices,
    cache_key,
    ensure_index_files,
    index_cache_directory,
    open_index_files,
    shard_set_fingerprint,
)
from train.data.spec import Dataset, DataSource, split_documents

GPT_INDEX_NAMES = ("document_index", "sample_index", "shuffle_index")
# Documents whose last token is checked in a set that does not record --append-eod: spread
# over the set, enough that a set written without EOD cannot pass, few enough to cost nothing.
EOD_CHECK_DOCUMENTS = 1024

logger = logging.getLogger(__name__)


def check_documents_end_with_eod(shard_set: ShardSet, path: str, eod_id: int | None) -> None:
    """ValueError if the set's documents are not separated by EOD (see the module docstring).

    A set that records nothing and whose EOD id is unknown (`--vocab-size` alone) cannot be
    checked: that is logged as a warning and the set is used as written.
    """
    manifest = shard_set.manifest
    if manifest is not None:
        recorded = manifest.pipeline.get("append_eod")
        if recorded is False:
            raise ValueError(
                f"{path}: written without --append-eod (its manifest records append_eod: false), "
                "so nothing marks where one document ends and the next begins in GPT samples; "
                "re-run preprocessing with --append-eod"
            )
        # True: the pipeline appended it; an import (tools/convert) split its stream at EOD.
        if recorded is True or "eod" in manifest.source:
            return
    if eod_id is None:
        logger.warning(
            "%s: records no --append-eod and the tokenizer names no end-of-document id, so "
            "whether its documents end with EOD cannot be checked; GPT samples run across "
            "document boundaries as the data has them",
            path,
        )
        return
    nonempty = np.flatnonzero(shard_set.document_lengths())
    if nonempty.size == 0:
        return
    count = min(EOD_CHECK_DOCUMENTS, nonempty.size)
    for document in nonempty[np.linspace(0, nonempty.size - 1, count).astype(np.int64)]:
        last = int(shard_set.document(int(document))[-1])
        if last != eod_id:
            raise ValueError(
                f"{path}: document {int(document)} ends with token {last}, not the "
                f"end-of-document id {eod_id}, and the set records no --append-eod: GPT samples "
                "would run documents together; re-make it with --append-eod"
            )


class GPTDataset(MappedDataset):
    """dataset[i] -> input_ids, labels (the next tokens), loss_mask; all of length seq_len."""

    _DERIVED = ("shard_set", "document_index", "sample_index", "shuffle_index")

    def __init__(
        self,
        shard_set: ShardSet,
        index_files: dict[str, str],
        *,
        seq_len: int,
        eod_mask_id: int | None = None,
        vocab_size: int | None = None,
        name: str = "",
    ):
        self.seq_len = seq_len
        self.eod_mask_id = eod_mask_id
        self.vocab_size = vocab_size
        self.name = name
        self._attach(shard_set, index_files)

    def _open(self, shard_set: ShardSet | None = None) -> None:
        self.shard_set = shard_set if shard_set is not None else ShardSet(self._location)
        arrays = open_index_files(self._index_files)
        self.document_index = arrays["document_index"]
        self.sample_index = arrays["sample_index"]
        self.shuffle_index = arrays["shuffle_index"]

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
        # Every sample is checked (two reductions over its seq_len + 1 ids): an id past the
        # embedding would crash the step (a CUDA device assert) or, below the padded size,
        # train rows no tokenizer id maps to.
        if self.vocab_size is not None and (
            int(tokens.max()) >= self.vocab_size or int(tokens.min()) < 0
        ):
            self._raise_bad_id(first_position, last_position)
        return tokens.astype(np.int64)

    def _raise_bad_id(self, first_position: int, last_position: int) -> None:
        """FormatError naming the shard file and document that hold an id outside the vocabulary."""
        for position in range(first_position, last_position + 1):
            document = int(self.document_index[position])
            ids = self.shard_set.document(document)
            bad = np.flatnonzero((ids < 0) | (ids >= self.vocab_size))
            if bad.size:
                shard, local = self.shard_set.locate(document)
                raise FormatError(
                    f"{self.shard_set.shards[shard].prefix}.bin: token id {int(ids[bad[0]])} "
                    f"(document {local}) is outside the vocabulary of {self.vocab_size}"
                )

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
    vocab_size: int | None = None,
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
        shard_set,
        files,
        seq_len=seq_len,
        eod_mask_id=eod_mask_id,
        vocab_size=vocab_size,
        name=f"{path}[{split_name}]",
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
    eod_id: int | None = None,
    vocab_size: int | None = None,
) -> dict[str, Dataset]:
    """A dataset per split with samples wanted: one set's GPTDataset, or a blend of several.

    See `build_split_datasets` for how single sets and blends are sized. Each set's documents
    are checked to end with `eod_id` (`check_documents_end_with_eod`); with `vocab_size`,
    every sample's ids are checked to lie below it.
    """
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    checked: set[str] = set()

    def build(shard_set: ShardSet, path: str, split_name: str, count: int) -> GPTDataset:
        if path not in checked:
            check_documents_end_with_eod(shard_set, path, eod_id)
            checked.add(path)
        return build_gpt_split(
            shard_set,
            path,
            split_name=split_name,
            split=split,
            seq_len=seq_len,
            seed=seed,
            num_samples=count,
            cache_dir=cache_dir,
            eod_mask_id=eod_mask_id,
            vocab_size=vocab_size,
        )

    return build_split_datasets(sources, num_samples, build)
