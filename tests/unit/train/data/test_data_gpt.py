"""GPT samples from real GPT-2 shards: Megatron's index semantics, coverage, cache, errors."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

from dataset_format import (
    FormatError,
    IndexedDatasetWriter,
    ShardSet,
    TokenizerInfo,
    write_shard_set_manifest,
)
from tests.shard_fixtures import GPT2_EOD, gpt_documents, make_bert_shards, make_gpt_shards
from train.data import build_gpt_datasets, parse_data_spec
from train.data import gpt_dataset as gpt_module
from train.data import indices as indices_module
from train.data.indices import build_gpt_indices, build_sample_index, num_epochs_needed

SEQ_LEN = 64


@pytest.fixture(scope="module")
def gpt_set(tmp_path_factory):
    return make_gpt_shards(tmp_path_factory.mktemp("gpt"), n_docs=240, num_shards=3)


def megatron_sample_index(lengths_in_order: np.ndarray, seq_len: int) -> np.ndarray:
    """Megatron-LM's C++ build_sample_idx, transcribed loop for loop."""
    total = int(lengths_in_order.sum())
    num_samples = (total - 1) // seq_len
    rows = [(0, 0)]
    position, offset = 0, 0
    for _ in range(num_samples):
        remaining = seq_len + 1
        while remaining != 0:
            length = int(lengths_in_order[position]) - offset
            remaining -= length
            if remaining <= 0:
                offset += remaining + length - 1
                remaining = 0
            else:
                position += 1
                offset = 0
        rows.append((position, offset))
    return np.array(rows)


@pytest.mark.parametrize("seq_len", [1, 7, 64, 1000])
def test_sample_index_equals_megatron_loop_on_real_lengths(gpt_set, seq_len):
    lengths = ShardSet(gpt_set).document_lengths()
    order = np.random.RandomState(3).permutation(lengths.size)
    lengths_in_order = np.concatenate([lengths[order], lengths[order[:50]]])
    ours = build_sample_index(lengths_in_order, seq_len)
    assert np.array_equal(ours, megatron_sample_index(lengths_in_order, seq_len))


def test_sample_index_steps_over_empty_documents():
    lengths = np.array([0, 5, 0, 0, 3, 1, 0, 9, 0])
    assert np.array_equal(build_sample_index(lengths, 3), megatron_sample_index(lengths, 3))


def test_epochs_needed_is_the_smallest_that_suffices():
    for tokens in (1, 2, 63, 64, 65, 1000):
        for wanted in (1, 5, 100):
            epochs = num_epochs_needed(tokens, SEQ_LEN, wanted)
            assert (epochs * tokens - 1) // SEQ_LEN >= wanted
            assert epochs == 1 or ((epochs - 1) * tokens - 1) // SEQ_LEN < wanted


def split_stream(shard_set: ShardSet, document_index: np.ndarray) -> np.ndarray:
    return np.concatenate([shard_set.document(int(d)) for d in document_index]).astype(np.int64)


def gpt_splits(path, cache_dir, *, split="100,0,0", seed=3, num_samples=20, **options) -> dict:
    """build_gpt_datasets on the one set at `path`, SEQ_LEN-token samples; `num_samples` an int
    is the train split's count."""
    if isinstance(num_samples, int):
        num_samples = {"train": num_samples}
    sampling = dict(seq_len=SEQ_LEN, split=split, seed=seed, num_samples=num_samples)
    return build_gpt_datasets(parse_data_spec([path]), cache_dir=cache_dir, **sampling, **options)


def test_samples_tile_the_shuffled_stream_over_epochs(gpt_set, tmp_path):
    shard_set = ShardSet(gpt_set)
    start, end = 0, 216  # split "90,10,0" of 240 documents
    tokens = int(shard_set.document_lengths()[start:end].sum())
    wanted = 2 * tokens // SEQ_LEN + 10  # needs three epochs
    dataset = gpt_splits(gpt_set, str(tmp_path), split="90,10,0", seed=7, num_samples=wanted)
    dataset = dataset["train"]
    document_index = np.asarray(dataset.document_index)
    epochs = document_index.reshape(3, -1)
    # megatron-core: the barely used third epoch is shuffled on its own, the first two together
    documents = np.arange(start, end)
    assert np.array_equal(np.sort(epochs[2]), documents)
    assert np.array_equal(np.sort(epochs[:2].ravel()), np.repeat(documents, 2))
    assert not np.array_equal(np.sort(epochs[0]), documents)  # one pass mixes the two
    stream = split_stream(shard_set, document_index)
    assert len(dataset) >= wanted
    assert len(dataset) == (stream.size - 1) // SEQ_LEN
    for k in range(len(dataset)):
        sample = dataset.sample_tokens(k)
        assert np.array_equal(sample, stream[k * SEQ_LEN : k * SEQ_LEN + SEQ_LEN + 1])
    # every token of every epoch is served, in order, sample k+1 starting on sample k's last
    assert dataset.sample_tokens(1)[0] == dataset.sample_tokens(0)[-1]
    assert np.array_equal(np.sort(np.asarray(dataset.shuffle_index)), np.arange(len(dataset)))


def test_getitem_serves_shuffled_samples_as_inputs_and_next_token_labels(gpt_set, tmp_path):
    dataset = gpt_splits(
        gpt_set, str(tmp_path), split="90,10,0", seed=1, num_samples={"train": 300, "valid": 20}
    )
    train = dataset["train"]
    assert not np.array_equal(np.asarray(train.shuffle_index[:50]), np.arange(50))
    for i in (0, 1, 17, len(train) - 1):
        item = train[i]
        tokens = train.sample_tokens(int(train.shuffle_index[i]))
        assert item["input_ids"].dtype == np.int64 and item["input_ids"].shape == (SEQ_LEN,)
        assert np.array_equal(item["input_ids"], tokens[:-1])
        assert np.array_equal(item["labels"], tokens[1:])
        assert item["loss_mask"].dtype == np.float32 and item["loss_mask"].all()
    valid_documents = set(np.asarray(dataset["valid"].document_index).tolist())
    assert valid_documents == set(range(216, 240))
    with pytest.raises(IndexError):
        train[len(train)]


def test_same_seed_same_samples_other_seed_other_order(gpt_set, tmp_path):
    def build(seed, cache):
        return gpt_splits(gpt_set, str(tmp_path / cache), seed=seed, num_samples=200)["train"]

    first, again, other = build(5, "a"), build(5, "b"), build(6, "c")
    for name in ("document_index", "sample_index", "shuffle_index"):
        assert np.array_equal(getattr(first, name), getattr(again, name))
    assert not np.array_equal(first.document_index, other.document_index)
    assert all(np.array_equal(first[i]["input_ids"], again[i]["input_ids"]) for i in range(50))


def test_indices_are_cached_beside_the_data_and_reused(tmp_path, monkeypatch):
    gpt_set = make_gpt_shards(tmp_path, n_docs=60)
    spec = parse_data_spec([gpt_set])
    options = dict(seq_len=SEQ_LEN, split="100,0,0", seed=3, num_samples={"train": 100})
    first = build_gpt_datasets(spec, **options)["train"]
    cached = sorted(os.listdir(os.path.join(gpt_set, "index-cache")))
    assert len(cached) == 3 and all(name.endswith(".npy") for name in cached)

    def no_rebuild(*args, **kwargs):
        raise AssertionError("index rebuilt although cached")

    monkeypatch.setattr(gpt_module, "build_gpt_indices", no_rebuild)
    again = build_gpt_datasets(spec, **options)["train"]
    assert isinstance(again.sample_index, np.ndarray)
    assert np.array_equal(first.shuffle_index, again.shuffle_index)
    monkeypatch.setattr(gpt_module, "build_gpt_indices", build_gpt_indices)
    build_gpt_datasets(spec, **{**options, "seq_len": SEQ_LEN + 1})  # another key
    assert len(os.listdir(os.path.join(gpt_set, "index-cache"))) == 6


def test_unwritable_data_directory_falls_back_to_the_user_cache(tmp_path, monkeypatch):
    gpt_set = make_gpt_shards(tmp_path, n_docs=40)
    monkeypatch.setenv("SHARDSMITH_CACHE", str(tmp_path / "user-cache"))
    real_access = os.access
    monkeypatch.setattr(
        indices_module.os,
        "access",
        lambda path, mode: False if str(path).startswith(gpt_set) else real_access(path, mode),
    )
    dataset = gpt_splits(gpt_set, None, num_samples=10)["train"]  # no cache_dir given
    assert len(os.listdir(tmp_path / "user-cache" / "index-cache")) == 3
    assert dataset[0]["input_ids"].shape == (SEQ_LEN,)


def test_bare_prefix_and_pickled_dataset(gpt_set, tmp_path):
    prefix = os.path.join(gpt_set, "shard-00001")
    dataset = build_gpt_datasets(
        [(1.0, prefix)],
        seq_len=SEQ_LEN,
        split="100,0,0",
        seed=3,
        num_samples={"train": 50},
        cache_dir=str(tmp_path),
    )["train"]
    data = pickle.dumps(dataset)
    assert len(data) < 4096  # paths only: no copy of the memory maps travels to workers
    restored = pickle.loads(data)
    for i in (0, 9, 49):
        assert np.array_equal(restored[i]["labels"], dataset[i]["labels"])
    stream = np.asarray(ShardSet(prefix).shards[0].tokens(0, ShardSet(prefix).num_tokens))
    first_document = int(dataset.document_index[0])
    start = int(ShardSet(prefix).shards[0].document_offsets()[first_document])
    assert np.array_equal(dataset.sample_tokens(0), stream[start : start + SEQ_LEN + 1])


def test_eod_mask_zeroes_the_loss_after_each_document_end(gpt_set, tmp_path):
    dataset = gpt_splits(gpt_set, str(tmp_path), num_samples=200, eod_mask_id=GPT2_EOD)["train"]
    masked = 0
    for i in range(200):
        item = dataset[i]
        is_eod = item["input_ids"] == GPT2_EOD
        assert np.array_equal(item["loss_mask"] == 0, is_eod)
        masked += int(is_eod.sum())
    assert masked > 50  # ~200 tokens per document: most 64-token samples hold none, many one


def test_empty_split_names_the_split_and_the_set(gpt_set, tmp_path):
    splits = {"train": 10, "valid": 10, "test": 10}
    with pytest.raises(ValueError) as raised:
        gpt_splits(gpt_set, str(tmp_path), split="969,30,1", num_samples=splits)
    assert "test split is empty" in str(raised.value) and gpt_set in str(raised.value)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"num_samples": {"training": 5}}, "unknown split"),
        ({"num_samples": {"train": -1}}, ">= 0"),
        ({"seq_len": 0}, "seq_len must be positive"),
    ],
)
def test_bad_arguments(gpt_set, tmp_path, options, message):
    arguments = dict(seq_len=SEQ_LEN, split="1", seed=1, num_samples={"train": 5})
    with pytest.raises(ValueError, match=message):
        build_gpt_datasets(
            parse_data_spec([gpt_set]), cache_dir=str(tmp_path), **{**arguments, **options}
        )


def test_sentence_level_sets_read_as_whole_documents(tmp_path):
    bert_set = make_bert_shards(tmp_path, n_docs=60)
    dataset = build_gpt_datasets(
        parse_data_spec([bert_set]), seq_len=16, split="1", seed=2, num_samples={"train": 20}
    )["train"]
    shard_set = ShardSet(bert_set)
    stream = split_stream(shard_set, np.asarray(dataset.document_index))
    assert np.array_equal(dataset.sample_tokens(3), stream[48:65])


# -- documents run together, ids past the vocabulary (hostile sets built from the real one) ------


def rewrite_manifest(directory, edit) -> None:
    path = os.path.join(directory, "manifest.json")
    with open(path) as f:
        data = json.load(f)
    edit(data)
    with open(path, "w") as f:
        json.dump(data, f)


def write_gpt_set(directory, documents, pipeline=None) -> str:
    """Two shards of `documents` with a GPT-2 manifest (no tokenizer file) and `pipeline`."""
    directory.mkdir()
    half = len(documents) // 2
    shards = []
    for k, part in enumerate((documents[:half], documents[half:])):
        writer = IndexedDatasetWriter(str(directory / f"shard-{k:05d}"), np.uint16)
        for document in part:
            writer.add_document(document)
        shards.append(writer.finalize())
    write_shard_set_manifest(
        str(directory),
        shards,
        dtype="uint16",
        sequence_unit="document",
        tokenizer=TokenizerInfo(
            file=None, kind="byte-level-bpe", vocab_size=50257, special_ids={"eod": GPT2_EOD}
        ),
        pipeline=pipeline,
    )
    return str(directory)


def gpt_build(path, tmp_path, **options):
    return gpt_splits(path, str(tmp_path / "index"), **options)["train"]


def test_set_recorded_without_append_eod_is_refused(tmp_path):
    # What the pipeline writes without --append-eod: documents without EOD, and
    # pipeline.append_eod false in the manifest (see PreprocessConfig.describe).
    documents = [[doc[:-1]] for doc in gpt_documents(60)]
    directory = write_gpt_set(tmp_path / "no-eod", documents, pipeline={"append_eod": False})
    with pytest.raises(ValueError, match="written without --append-eod") as raised:
        gpt_build(directory, tmp_path, eod_id=GPT2_EOD)
    assert directory in str(raised.value)
    rewrite_manifest(directory, lambda d: d["pipeline"].update(append_eod=True))
    assert len(gpt_build(directory, tmp_path, eod_id=GPT2_EOD)) >= 20  # the record is trusted


def test_unrecorded_set_without_eod_is_refused_by_its_data(tmp_path, caplog):
    documents = [[doc[:-1]] for doc in gpt_documents(60)]
    directory = write_gpt_set(tmp_path / "bare", documents)
    bare = os.path.join(directory, "shard-00000")  # a bare Megatron pair: no record at all
    for path in (directory, bare):
        with pytest.raises(ValueError, match="document 0 ends with token .*not the end-of-doc"):
            gpt_build(path, tmp_path, eod_id=GPT2_EOD)
    # With no EOD id known (--vocab-size alone) nothing can be checked: a warning, not silence.
    with caplog.at_level("WARNING"):
        assert len(gpt_build(bare, tmp_path, eod_id=None)) >= 20
    assert "cannot be checked" in caplog.text and bare in caplog.text
    # The same documents with EOD (Megatron's --append-eod) pass the check.
    with_eod = write_gpt_set(tmp_path / "eod", [[doc] for doc in gpt_documents(60)])
    assert len(gpt_build(os.path.join(with_eod, "shard-00000"), tmp_path, eod_id=GPT2_EOD)) >= 20


def test_token_id_past_the_vocabulary_is_named_when_sampled(tmp_path):
    documents = [[doc.copy()] for doc in gpt_documents(60)]
    documents[41][0][5] = 50300  # past GPT-2's 50,257 ids, still a uint16
    directory = write_gpt_set(tmp_path / "bad-id", documents)
    dataset = gpt_build(directory, tmp_path, vocab_size=50257)
    bad_document = 41 - 30  # the second shard holds documents 30..59
    with pytest.raises(FormatError) as raised:
        for i in range(len(dataset)):
            dataset[i]
    assert str(raised.value) == (
        f"{directory}/shard-00001.bin: token id 50300 (document {bad_document}) is outside "
        "the vocabulary of 50257"
    )
    unchecked = gpt_build(directory, tmp_path)  # no vocab_size: no check (as before)
    assert max(int(unchecked[i]["input_ids"].max()) for i in range(len(unchecked))) == 50300
