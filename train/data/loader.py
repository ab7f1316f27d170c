"""The trainer's data: shard sets -> train/valid/test datasets -> per-rank DataLoaders."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader

from dataset_format import FormatError
from train.config import TrainConfig, fail
from train.models.registry import get_spec
from train.models.spec import CAUSAL_LM, MASKED_LM
from train.runtime import Runtime


@dataclass
class Data:
    train: object
    valid: object | None
    test: object | None
    tokenizer: dict | None  # TokenizerInfo.to_json() of the sets, None if none recorded
    vocab_size: int  # the tokenizer's (unpadded)
    notes: list[str]  # what the run will not do with this data, for the log


def build_data(config: TrainConfig, runtime: Runtime) -> Data:
    from train import data as data_lib

    try:
        sources = data_lib.parse_data_spec(config.data)
        tokenizer = data_lib.resolve_tokenizer(
            sources, tokenizer_file=config.tokenizer, vocab_size=config.vocab_size
        )
    except (ValueError, FormatError, OSError) as e:
        fail(f"--data {' '.join(config.data)}: {e}")
    samples_per_eval = config.eval_iters * config.global_batch
    try:
        split_shares(config.split)
    except ValueError as e:
        fail(f"--{e}")  # "--split '1,x': expected ..."
    evaluated, notes = evaluation_splits(sources, config.split) if samples_per_eval else ((), [])
    num_samples = {
        "train": config.max_steps * config.global_batch,
        **{name: samples_per_eval if name in evaluated else 0 for name in ("valid", "test")},
    }
    # what every split of any batch kind is made from
    common = {"split": config.split, "seed": config.seed, "num_samples": num_samples}
    build = DATASETS[get_spec(config.model).batch]
    try:
        datasets = build(config, sources, tokenizer, common)
    except (ValueError, FormatError, OSError, RuntimeError) as e:
        # RuntimeError: on the ranks that waited while local rank 0 failed to build an index
        fail(f"--data {' '.join(config.data)}: {e}")
    train = datasets.get("train")
    if train is None or len(train) == 0:
        fail(f"--data {' '.join(config.data)}: the train split (--split {config.split}) is empty")
    return Data(
        train=train,
        valid=datasets.get("valid") or None,
        test=datasets.get("test") or None,
        tokenizer=tokenizer.to_json(),
        vocab_size=tokenizer.vocab_size,
        notes=notes,
    )


def causal_lm_datasets(config: TrainConfig, sources: list, tokenizer, common: dict) -> dict:
    """Next-token samples (GPTDataset) of ``config.seq_len`` tokens."""
    from train import data as data_lib

    eod = tokenizer.special_ids.get("eod")
    if config.eod_mask_loss and eod is None:
        fail("--eod-mask-loss: the data's tokenizer records no 'eod' id")
    return data_lib.build_gpt_datasets(
        sources, seq_len=config.seq_len, **common, vocab_size=tokenizer.vocab_size,
        eod_mask_id=eod if config.eod_mask_loss else None, eod_id=eod,
    )  # fmt: skip


def masked_lm_datasets(config: TrainConfig, sources: list, tokenizer, common: dict) -> dict:
    """Masked-LM + next-sentence samples (BertDataset) of up to ``config.seq_len`` tokens."""
    from train import data as data_lib

    masking = data_lib.MaskingConfig(
        mask_prob=config.mask_prob, whole_word=config.whole_word_masking,
        max_predictions_per_seq=config.max_predictions_per_seq,
    )  # fmt: skip
    return data_lib.build_bert_datasets(
        sources, seq_len=config.seq_len, **common, vocab_size=tokenizer.vocab_size,
        masking=masking, special_ids=tokenizer.special_ids,
    )  # fmt: skip


# The datasets of each batch kind a model family declares (train.models.spec.BATCH_KINDS).
DATASETS = {CAUSAL_LM: causal_lm_datasets, MASKED_LM: masked_lm_datasets}

SPLIT_PURPOSE = {"valid": "validation", "test": "test evaluation"}


def evaluation_splits(sources: list, split: str) -> tuple[set[str], list[str]]:
    """The evaluation splits (valid, test) that get documents of every set, and a log note for
    each that --split meant to have but that gets none (a set too small for its share:
    Megatron's split of 969,30,1 leaves a set under ~500 documents no test split).

    A split that some sets of a blend fill and others leave empty cannot be blended with the
    weights given: a one-line error naming --split.
    """
    from dataset_format import ShardSet

    shares = split_shares(split)
    documents = [(path, ShardSet(path).num_documents) for _, path in sources]
    evaluated: set[str] = set()
    notes = []
    for index, name in ((1, "valid"), (2, "test")):
        if shares[index] == 0:  # --split leaves it out: nothing to say
            continue
        empty = [(path, count) for path, count in documents if not split_size(count, split, name)]
        if not empty:
            evaluated.add(name)
        elif len(empty) == len(documents):
            counts = " + ".join(str(count) for _, count in documents)
            notes.append(
                f"no {SPLIT_PURPOSE[name]}: --split {split} gives the {name} split none of the "
                f"{counts} documents"
            )
        else:
            path, count = empty[0]
            larger = share_filling(split, index, [count for _, count in documents])
            suggested = f", e.g. --split {larger}" if larger else ""
            fail(
                f"--split {split}: the {name} split gets none of the {count} documents of "
                f"{path} but documents of the other sets; give it a larger share{suggested} "
                "(or 0)"
            )
    return evaluated, notes


# How far share_filling looks: a split's share up to this many times the shares' sum.
_MAX_SHARE_FACTOR = 100


def share_filling(split: str, index: int, counts: list[int]) -> str | None:
    """--split with the smallest whole share at `index` (valid 1, test 2) that gives that split
    and the train split documents of every set of `counts` documents, the other shares as
    given; None where no share within reach does (a set of a document or two)."""
    from train.data.spec import SPLIT_NAMES, _parse_split

    parts = _parse_split(split) + [0.0] * (len(SPLIT_NAMES) - len(_parse_split(split)))
    for share in range(int(parts[index]) + 1, int(sum(parts) * _MAX_SHARE_FACTOR) + 2):
        candidate = ",".join(f"{p:g}" for p in parts[:index] + [share] + parts[index + 1 :])
        names = (SPLIT_NAMES[0], SPLIT_NAMES[index])
        if all(split_size(count, candidate, n) for count in counts for n in names):
            return candidate
    return None


def split_size(num_documents: int, split: str, name: str) -> int:
    """Documents of a set of ``num_documents`` that --split gives the split ``name``."""
    from train.data.spec import split_documents

    start, end = split_documents(num_documents, split)[name]
    return end - start


def split_shares(split: str) -> list[float]:
    """The train/valid/test shares of a --split string ("969,30,1" or "969/30/1")."""
    from train.data.spec import split_documents

    # A share is non-zero exactly when a huge set would give that split documents.
    ranges = split_documents(10**12, split)
    return [float(end - start) for start, end in ranges.values()]


def make_loader(dataset, total_samples: int, consumed_samples: int, config, runtime) -> DataLoader:
    from train.data import PretrainingSampler, collate

    sampler = PretrainingSampler(
        total_samples=total_samples,
        consumed_samples=consumed_samples,
        micro_batch_size=config.micro_batch,
        data_parallel_rank=runtime.dp_rank,
        data_parallel_size=runtime.dp_size,
    )
    # Its own generator: creating the loader must not draw from the global torch RNG, or a
    # resumed run's dropout stream would differ from an uninterrupted one.
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=collate,
        num_workers=config.num_workers,
        pin_memory=runtime.device.type == "cuda",
        generator=torch.Generator().manual_seed(config.seed),
        persistent_workers=config.num_workers > 0,
    )


def next_batch(batches) -> dict:
    """The next batch; a fault found in the data while reading it is a one-line error."""
    try:
        return next(batches)
    except FormatError as e:
        # From a DataLoader worker the message carries the worker's traceback; its last line
        # is "module.FormatError: <the message>".
        last = str(e).strip().splitlines()[-1]
        fail(last.removeprefix(f"{type(e).__module__}.{type(e).__name__}: "))


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: torch.as_tensor(v).to(device, non_blocking=True) for k, v in batch.items()}
