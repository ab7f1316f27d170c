"""The in-process tests of what tests/integration/test_data_blend.py covers (that file holds the
tests that start a process or run a Beam pipeline, and says what they cover)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers.data_blend import WEIGHTS, greedy_reference
from tests.shard_fixtures import make_gpt_shards
from train.data import BlendedDataset, blending_indices, build_gpt_datasets, parse_data_spec
from train.data import blend as blend_module


def test_segments_whose_warmup_missed_are_rerun_exactly(monkeypatch):
    """No warm-up at all: many segments start from a wrong guess and must be repaired."""
    weights = list(np.random.RandomState(1).random_sample(6))
    reruns = []
    real_loop = blend_module.greedy_blend_loop

    def counting_loop(w, start, stop, counts, out):
        reruns.append(start)
        return real_loop(w, start, stop, counts, out)

    monkeypatch.setattr(blend_module, "WARMUP_STEPS", 0)
    monkeypatch.setattr(blend_module, "greedy_blend_loop", counting_loop)
    dataset_index, _ = blending_indices(weights, 30_000)
    assert reruns, "expected at least one segment to need an exact re-run"
    assert np.array_equal(dataset_index, greedy_reference(weights, 30_000)[0])


@pytest.mark.parametrize("weights", WEIGHTS)
def test_every_prefix_holds_each_share_within_one_sample(weights):
    size = 100_000
    dataset_index, _ = blending_indices(weights, size)
    w = np.asarray(weights, dtype=np.float64) / np.sum(weights)
    n = np.arange(1, size + 1)
    target = np.maximum(n - 1, 1)  # what the rule aims at when it picks the n-th sample
    for d in range(w.size):
        drawn = np.cumsum(dataset_index == d)
        assert np.abs(drawn - w[d] * target).max() <= 1.0


def test_bad_weights():
    with pytest.raises(ValueError, match="positive"):
        blending_indices([0.5, 0], 10)
    with pytest.raises(ValueError, match="at least one"):
        blending_indices([], 10)


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("blend")
    return make_gpt_shards(root, 120, name="moby"), make_gpt_shards(
        root, 120, name="carol", book="46-0.txt"
    )


def test_blended_gpt_datasets_take_their_share_of_each_set(two_sets, tmp_path):
    moby, carol = two_sets
    wanted = 1000
    blended = build_gpt_datasets(
        parse_data_spec(["0.25", moby, "0.75", carol]),
        seq_len=32,
        split="100,0,0",
        seed=9,
        num_samples={"train": wanted},
        cache_dir=str(tmp_path),
    )["train"]
    assert isinstance(blended, BlendedDataset) and len(blended) == wanted
    for part, weight in zip(blended.datasets, (0.25, 0.75)):
        assert len(part) >= math.ceil(wanted * weight * 1.005)
    counts = np.bincount(blended.dataset_index, minlength=2)
    assert abs(counts[0] - 250) <= 1 and abs(counts[1] - 750) <= 1
    for i in (0, 1, 2, 3, 500, 999):
        d, k = int(blended.dataset_index[i]), int(blended.dataset_sample_index[i])
        assert np.array_equal(blended[i]["input_ids"], blended.datasets[d][k]["input_ids"])
    with pytest.raises(IndexError):
        blended[wanted]


def test_a_dataset_too_small_for_its_share_is_an_error(two_sets, tmp_path):
    moby, carol = two_sets
    parts = [
        build_gpt_datasets(
            [(1.0, path)],
            seq_len=32,
            split="1",
            seed=1,
            num_samples={"train": count},
            cache_dir=str(tmp_path),
        )["train"]
        for path, count in ((moby, 10), (carol, 10))
    ]
    small = len(parts[0])
    with pytest.raises(ValueError, match="needs .* from dataset 0"):
        BlendedDataset(parts, [0.5, 0.5], 2 * small + 10)
