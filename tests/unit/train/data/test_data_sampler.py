"""Megatron's pretraining sampler (exact resume, rank partition) and collation to tensors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.shard_fixtures import BERT_SPECIAL_IDS, make_bert_shards, make_gpt_shards
from train.data import (
    MaskingConfig,
    PretrainingSampler,
    build_bert_datasets,
    build_gpt_datasets,
    collate,
)


def batches(total, consumed, micro, dp):
    return [list(PretrainingSampler(total, consumed, micro, rank, dp)) for rank in range(dp)]


@pytest.mark.parametrize("micro, dp", [(1, 1), (4, 1), (3, 2), (2, 4)])
def test_ranks_split_each_global_batch_of_consecutive_samples(micro, dp):
    total = 103
    per_rank = batches(total, 0, micro, dp)
    global_batch = micro * dp
    steps = total // global_batch  # the incomplete last global batch is dropped
    for rank in range(dp):
        assert len(per_rank[rank]) == steps == len(PretrainingSampler(total, 0, micro, rank, dp))
    for step in range(steps):
        together = [i for rank in range(dp) for i in per_rank[rank][step]]
        assert together == list(range(step * global_batch, (step + 1) * global_batch))


@pytest.mark.parametrize("micro, dp", [(4, 1), (3, 2), (2, 4)])
@pytest.mark.parametrize("steps_done", [0, 1, 5, 12])
def test_resuming_at_k_samples_continues_the_uninterrupted_run(micro, dp, steps_done):
    total = 200
    consumed = steps_done * micro * dp
    uninterrupted = batches(total, 0, micro, dp)
    resumed = batches(total, consumed, micro, dp)
    for rank in range(dp):
        assert resumed[rank] == uninterrupted[rank][steps_done:]
    assert batches(total, consumed, micro, dp) == resumed  # deterministic


@pytest.mark.parametrize(
    "args, message",
    [
        ((0, 0, 1, 0, 1), "no samples"),
        ((10, 10, 1, 0, 1), "consumed the whole dataset"),
        ((10, -1, 1, 0, 1), "consumed_samples"),
        ((10, 0, 0, 0, 1), "micro_batch_size"),
        ((10, 0, 1, 2, 2), "data_parallel_rank"),
        ((10, 0, 1, 0, 0), "data_parallel_size"),
    ],
)
def test_bad_sampler_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        PretrainingSampler(*args)


def test_collate_gpt_and_bert_samples_into_tensors(tmp_path):
    import torch
    from torch.utils.data import DataLoader

    gpt = build_gpt_datasets(
        [(1.0, make_gpt_shards(tmp_path, 40))],
        seq_len=32,
        split="1",
        seed=1,
        num_samples={"train": 64},
    )["train"]
    sampler = PretrainingSampler(len(gpt), 8, 4, 1, 2)
    loader = DataLoader(gpt, batch_sampler=sampler, collate_fn=collate)
    batch = next(iter(loader))
    assert batch["input_ids"].shape == (4, 32) and batch["input_ids"].dtype == torch.int64
    assert batch["loss_mask"].dtype == torch.float32
    expected = np.stack([gpt[i]["labels"] for i in range(12, 16)])  # rank 1 of step 1
    assert np.array_equal(batch["labels"].numpy(), expected)

    bert = build_bert_datasets(
        [(1.0, make_bert_shards(tmp_path, 60))],
        seq_len=64,
        split="1",
        seed=1,
        num_samples={"train": 8},
        masking=MaskingConfig(),
        special_ids=dict(BERT_SPECIAL_IDS),
        vocab_size=30522,
    )["train"]
    batch = collate([bert[i] for i in range(3)])
    assert batch["nsp_label"].shape == (3,) and batch["mlm_labels"].shape == (3, 64)
    with pytest.raises(ValueError, match="empty"):
        collate([])
