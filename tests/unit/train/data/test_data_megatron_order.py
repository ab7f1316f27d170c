"""Sample order equal to megatron-core's: document index, shuffle index, blending, split.

The references below are transcriptions of megatron-core's algorithms written for this test
(megatron/core/datasets: gpt_dataset.py `_build_document_index`, `_build_shuffle_index` and the
separate-final-epoch rule of `_build_document_sample_shuffle_indices`; helpers.cpp
`build_blending_indices`; blended_megatron_dataset_builder.py's per-dataset sizes and
blended_megatron_dataset_config.py's split book-ends). Document lengths are those of a real
book's paragraphs (Moby-Dick, /work/shared/corpora via tests/shard_fixtures).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from train.data.blend import BlendedDataset, blending_indices, samples_per_dataset
from train.data.indices import build_gpt_indices, build_sample_index
from train.data.spec import split_documents

# -- reference transcriptions ------------------------------------------------------------------


def mcore_document_index(documents, num_epochs, state, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        index = np.mgrid[0:num_epochs, 0 : len(documents)][1]
        index[:] = documents
        index = index.reshape(-1).astype(np.int32)
        state.shuffle(index)
        return index
    first = mcore_document_index(documents, num_epochs - 1, state, False)
    last = mcore_document_index(documents, 1, state, False)
    return np.concatenate((first, last))


def mcore_shuffle_index(num_samples, total_size, state):
    dtype = np.uint32 if total_size < (np.iinfo(np.uint32).max - 1) else np.int64
    first = np.arange(0, num_samples, 1, dtype=dtype)
    state.shuffle(first)
    if num_samples == total_size:
        return first
    last = np.arange(num_samples, total_size, 1, dtype=dtype)
    state.shuffle(last)
    return np.concatenate((first, last))


def mcore_gpt_indices(lengths, first_document, seq_len, seed, num_samples):
    """Returns the three arrays and whether the final epoch was separated."""
    documents = np.arange(first_document, first_document + len(lengths))
    tokens_per_epoch = int(np.sum(lengths))
    num_epochs, tokens = 1, tokens_per_epoch
    while tokens < num_samples * seq_len + 1:
        num_epochs += 1
        tokens += tokens_per_epoch
    separate = False
    if num_epochs > 1:
        sans_final = ((num_epochs - 1) * tokens_per_epoch - 1) // seq_len
        from_final = num_samples - sans_final
        per_epoch = (tokens_per_epoch - 1) // seq_len
        separate = from_final < int(0.80 * per_epoch)
    state = np.random.RandomState(seed)
    document_index = mcore_document_index(documents, num_epochs, state, separate)
    ordered = np.asarray(lengths)[document_index - first_document]
    sample_index = build_sample_index(ordered, seq_len)  # helpers.cpp rows (tested elsewhere)
    total = sample_index.shape[0] - 1
    shuffle_index = mcore_shuffle_index(sans_final if separate else total, total, state)
    return document_index, sample_index, shuffle_index, num_epochs, separate


def mcore_blending_indices(weights, size):
    counts = [0] * len(weights)
    dataset_index = np.zeros(size, dtype=np.int16)
    dataset_sample_index = np.zeros(size, dtype=np.int64)
    for i in range(size):
        step = max(float(i), 1.0)
        best, best_error = 0, weights[0] * step - counts[0]
        for d in range(1, len(weights)):
            error = weights[d] * step - counts[d]
            if error > best_error:
                best, best_error = d, error
        dataset_index[i] = best
        dataset_sample_index[i] = counts[best]
        counts[best] += 1
    return dataset_index, dataset_sample_index


def mcore_split_ranges(num_documents, split):
    parts = [float(x) for x in split.split(",")]
    parts += [0.0] * (3 - len(parts))
    weights = (np.array(parts, dtype=np.float64) / np.sum(parts)).tolist()
    ends = [0]
    for w in weights:
        ends.append(ends[-1] + w)
    return [(int(round(lo * float(num_documents))), int(round(hi * float(num_documents))))
            for lo, hi in zip(ends[:-1], ends[1:])]  # fmt: skip


# -- the cases ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paragraph_lengths():
    from tests.shard_fixtures import gpt_documents

    return np.array([d.size for d in gpt_documents(120)], dtype=np.int64)


@pytest.mark.parametrize(
    "epochs_wanted, separate",
    [(0.5, False), (1.5, True), (1.95, False), (3.3, True), (3.9, False)],
)
def test_gpt_indices_equal_megatron_core(paragraph_lengths, epochs_wanted, separate):
    """1 epoch; 2 epochs with the last one separated and not; 4 epochs both ways."""
    seq_len, seed, first_document = 64, 1234, 7
    per_epoch = (int(paragraph_lengths.sum()) - 1) // seq_len
    num_samples = int(epochs_wanted * per_epoch)
    expected = mcore_gpt_indices(paragraph_lengths, first_document, seq_len, seed, num_samples)
    assert expected[3] == math.ceil(epochs_wanted) and expected[4] == separate
    ours = build_gpt_indices(paragraph_lengths, first_document, seq_len=seq_len, seed=seed,
                             num_samples=num_samples)  # fmt: skip
    np.testing.assert_array_equal(ours["document_index"], expected[0])
    np.testing.assert_array_equal(ours["sample_index"], expected[1])
    np.testing.assert_array_equal(ours["shuffle_index"], expected[2])


@pytest.mark.parametrize(
    "weights, size",
    [([0.3, 0.7], 500), ([1, 2, 3], 20_000), ([0.5, 0.25, 0.125, 0.125], 9000), ([1.0], 10)],
)
def test_blending_equals_megatron_core(weights, size):
    """The segmented numpy blend (sizes above 8192 take it) against the plain C++ rule."""
    normalized = (np.asarray(weights, dtype=np.float64) / np.sum(weights)).tolist()
    expected = mcore_blending_indices(normalized, size)
    ours = blending_indices(weights, size)
    np.testing.assert_array_equal(ours[0], expected[0])
    np.testing.assert_array_equal(ours[1], expected[1])


def test_per_dataset_sizes_equal_megatron_core():
    weights = [0.3, 0.7]
    for target in (1, 7, 100, 12345):
        expected = [int(math.ceil(math.ceil(target * w) * 1.005)) for w in weights]
        assert samples_per_dataset(weights, target) == expected


@pytest.mark.parametrize("num_documents", [1, 3, 7, 10, 99, 1000, 1612])
@pytest.mark.parametrize("split", ["969,30,1", "98,2,0", "1,1,1", "80,10,10", "100,0,0", "2,1"])
def test_split_equals_megatron_core(num_documents, split):
    ranges = split_documents(num_documents, split)
    expected = mcore_split_ranges(num_documents, split)
    assert [ranges[name] for name in ("train", "valid", "test")] == expected


def test_blend_indices_are_cached(tmp_path):
    """Built once into the cache directory, memory-mapped by every later dataset."""
    parts = [list(range(400)), list(range(400))]
    first = BlendedDataset(parts, [0.3, 0.7], 500, cache_directory=str(tmp_path))
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and all(f.startswith("blend-") for f in files)
    again = BlendedDataset(parts, [0.3, 0.7], 500, cache_directory=str(tmp_path))
    assert isinstance(again.dataset_index, np.ndarray) and not again.dataset_index.flags.writeable
    np.testing.assert_array_equal(again.dataset_index, first.dataset_index)
    np.testing.assert_array_equal(again.dataset_index, blending_indices([0.3, 0.7], 500)[0])
