"""Data specs, Megatron's document splits, and tokenizer agreement across real shard sets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import CORPORA
from tests.shard_fixtures import make_bert_shards, make_gpt_shards
from train.data import (
    check_tokenizers,
    parse_data_spec,
    resolve_tokenizer,
    split_documents,
    tokenizer_info_from_file,
)


def test_single_path_gets_weight_one():
    assert parse_data_spec(["shards/"]) == [(1.0, "shards/")]


def test_weights_are_normalised_and_order_kept():
    assert parse_data_spec(["3", "wiki/", "7", "web/"]) == [(0.3, "wiki/"), (0.7, "web/")]
    assert parse_data_spec(["0.3", "a", "0.7", "b"]) == [(0.3, "a"), (0.7, "b")]


@pytest.mark.parametrize(
    "tokens, message",
    [
        ([], "empty"),
        (["0.5"], "weight without a path"),
        (["0.3", "wiki/", "web/"], "even number"),
        (["wiki/", "web/"], "expected a weight before 'web/'"),
        (["0", "wiki/", "1", "web/"], "must be positive"),
        (["-1", "wiki/", "2", "web/"], "must be positive"),
        (["nan", "wiki/", "2", "web/"], "must be positive"),
        (["0.5", "0.5", "1", "web/"], "expected a path after '0.5'"),
    ],
)
def test_bad_specs_are_rejected_clearly(tokens, message):
    with pytest.raises(ValueError, match=message):
        parse_data_spec(tokens)


@pytest.mark.parametrize(
    "n, split, expected",
    [
        # Values worked out by hand from megatron-core's book-ends: round(cumulative share * n).
        (1000, "969,30,1", [(0, 969), (969, 999), (999, 1000)]),
        (10, "969,30,1", [(0, 10), (10, 10), (10, 10)]),
        (100, "98,2,0", [(0, 98), (98, 100), (100, 100)]),
        (100, "1", [(0, 100), (100, 100), (100, 100)]),
        (10, "8/1/1", [(0, 8), (8, 9), (9, 10)]),
        # book-ends 7/3 and 14/3 round to 2 and 5 (the old per-part rounding gave (0, 3) first)
        (7, "1,1,1", [(0, 2), (2, 5), (5, 7)]),
        (0, "969,30,1", [(0, 0), (0, 0), (0, 0)]),
    ],
)
def test_split_documents_matches_megatron(n, split, expected):
    ranges = split_documents(n, split)
    assert [ranges["train"], ranges["valid"], ranges["test"]] == expected


@given(
    st.integers(0, 10**7),
    st.lists(st.integers(0, 1000), min_size=1, max_size=3).filter(lambda p: sum(p) > 0),
)
def test_split_ranges_tile_the_documents(n, parts):
    ranges = split_documents(n, ",".join(map(str, parts)))
    bounds = [ranges["train"], ranges["valid"], ranges["test"]]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert all(start <= end for start, end in bounds)


@pytest.mark.parametrize(
    "split, message",
    [("a,b", "numbers"), ("1,1,1,1", "at most 3"), ("1,-1", "non-negative"), ("0,0", "zero")],
)
def test_bad_splits_are_rejected(split, message):
    with pytest.raises(ValueError, match=message):
        split_documents(100, split)


def test_sets_sharing_a_tokenizer_pass(tmp_path):
    moby = make_gpt_shards(tmp_path, 40, name="moby")
    carol = make_gpt_shards(tmp_path, 40, name="carol", book="46-0.txt")
    info = check_tokenizers(parse_data_spec(["1", moby, "1", carol]))
    assert info.kind == "byte-level-bpe" and info.vocab_size == 50257
    assert info.special_ids["eod"] == 50256


def test_mismatched_tokenizers_name_both_sets(tmp_path):
    gpt = make_gpt_shards(tmp_path, 40)
    bert = make_bert_shards(tmp_path, 40)
    with pytest.raises(ValueError) as raised:
        check_tokenizers(parse_data_spec(["1", gpt, "1", bert]))
    assert gpt in str(raised.value) and bert in str(raised.value)
    assert "vocab_size" in str(raised.value)


def test_bare_prefixes_cannot_be_checked_and_are_skipped(tmp_path):
    gpt = make_gpt_shards(tmp_path, 40)
    bare = gpt + "/shard-00000"
    assert check_tokenizers([(1.0, bare)]) is None
    assert check_tokenizers([(0.5, bare), (0.5, gpt)]).vocab_size == 50257


def test_missing_set_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="neither a shard-set directory nor"):
        check_tokenizers([(1.0, str(tmp_path / "nothing"))])


# -- --tokenizer / --vocab-size for data that records no tokenizer (bare Megatron pairs) ---------


def test_bare_pair_needs_a_tokenizer_flag(tmp_path):
    bare = make_gpt_shards(tmp_path, 40) + "/shard-00000"
    with pytest.raises(ValueError, match="pass --tokenizer FILE or --vocab-size N"):
        resolve_tokenizer([(1.0, bare)])
    size_only = resolve_tokenizer([(1.0, bare)], vocab_size=50257)
    assert (size_only.vocab_size, size_only.special_ids) == (50257, {})


@pytest.mark.parametrize(
    "name, kind, vocab_size, special_ids",
    [
        ("gpt2/vocab.json", "byte_level_bpe", 50257, {"eod": 50256}),
        ("gpt2/encoder.json", "byte_level_bpe", 50257, {"eod": 50256}),
        (
            "bert-base-uncased/vocab.txt",
            "wordpiece",
            30522,
            {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103},
        ),
    ],
)
def test_tokenizer_files_megatron_users_have(name, kind, vocab_size, special_ids):
    info = tokenizer_info_from_file(str(CORPORA / "vocab" / name))
    assert (info.kind, info.vocab_size, info.special_ids) == (kind, vocab_size, special_ids)
    assert info.file is None and len(info.sha256) == 64


def test_tokenizers_json_is_described_as_the_pipeline_records_it(tmp_path, gpt2_tokenizer):
    path = tmp_path / "tokenizer.json"
    gpt2_tokenizer.save(str(path))
    info = tokenizer_info_from_file(str(path))
    assert (info.kind, info.vocab_size, info.special_ids) == (
        "byte_level_bpe",
        50257,
        {"eod": 50256},
    )
    bare = make_gpt_shards(tmp_path, 40) + "/shard-00000"
    assert resolve_tokenizer([(1.0, bare)], tokenizer_file=str(path)) == info


def test_flag_that_contradicts_the_recorded_tokenizer(tmp_path):
    gpt = make_gpt_shards(tmp_path, 40)
    with pytest.raises(ValueError, match=r"contradicts .* \(vocab_size 30522 vs 50257\)"):
        resolve_tokenizer(
            [(1.0, gpt)], tokenizer_file=str(CORPORA / "vocab" / "bert-base-uncased" / "vocab.txt")
        )
    with pytest.raises(ValueError, match="--vocab-size 100 contradicts"):
        resolve_tokenizer([(1.0, gpt)], vocab_size=100)
    # Agreeing flags are fine; the set's own record is what is used.
    agreed = resolve_tokenizer([(1.0, gpt)], vocab_size=50257)
    assert agreed.kind == "byte-level-bpe" and agreed.special_ids == {"eod": 50256}


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xfe\x00", "not UTF-8"),
        (b'{"model": {"vocab": 3}}', r"the model has no vocabulary \(model.vocab\)"),
        (b'{"a": "b"}', "token 'a' has id b: an id is an int in"),
        (b"", "no vocabulary of token ids"),
    ],
)
def test_unreadable_tokenizer_file(tmp_path, content, message):
    path = tmp_path / "tok"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"--tokenizer {path}: {message}"):
        tokenizer_info_from_file(str(path))
    with pytest.raises(ValueError, match="(?i)no such file"):
        tokenizer_info_from_file(str(tmp_path / "missing.json"))
