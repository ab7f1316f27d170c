"""tools/convert: nanoGPT and llm.c token files to and from shard sets, on real GPT-2 ids."""

from __future__ import annotations

import numpy as np
import pytest

from dataset_format import FormatError, IndexedDatasetWriter, ShardSet, write_shard_set_manifest
from dataset_format.interop import (
    export_llmc,
    export_nanogpt,
    import_llmc,
    import_nanogpt,
    read_llmc,
    split_documents_at_eod,
)
from tests.helpers.interop import write_llmc_file
from tests.shard_fixtures import GPT2_EOD, gpt_documents


@pytest.fixture(scope="module")
def documents():
    """Real GPT-2 ids of 200 Moby-Dick paragraphs, each ending with EOT like nanoGPT's prepare."""
    return [doc.astype(np.uint16) for doc in gpt_documents(200)]


def test_nanogpt_round_trip_keeps_documents_and_bytes(documents, tmp_path):
    train_bin = tmp_path / "train.bin"
    np.concatenate(documents).tofile(train_bin)
    manifest = import_nanogpt(
        str(train_bin),
        str(tmp_path / "set"),
        tokenizer_kind="byte-level-bpe",
        vocab_size=50257,
        shard_tokens=10_000,
    )
    shard_set = ShardSet(str(tmp_path / "set"))
    shard_set.verify()
    assert shard_set.num_documents == len(documents) and len(manifest.shards) > 1
    for i in (0, 1, 77, len(documents) - 1):
        assert np.array_equal(shard_set.document(i), documents[i])
    # shards close at the first document boundary past 10,000 tokens
    assert all(s.tokens >= 10_000 for s in manifest.shards[:-1])
    assert all(s.tokens - 10_000 < max(map(len, documents)) for s in manifest.shards[:-1])
    assert manifest.tokenizer.special_ids == {"eod": GPT2_EOD}
    assert manifest.source["format"] == "nanogpt"
    export_nanogpt(str(tmp_path / "set"), str(tmp_path / "again.bin"))
    assert (tmp_path / "again.bin").read_bytes() == train_bin.read_bytes()


def test_llmc_shards_cut_mid_document_come_back_whole(documents, tmp_path):
    # llm.c's fineweb.py layout: EOT *before* each document, files cut at a token count.
    stream = np.concatenate([np.concatenate([[GPT2_EOD], d[:-1]]) for d in documents])
    originals = tmp_path / "llmc"
    originals.mkdir()
    for i, start in enumerate(range(0, stream.size, 7_000)):
        write_llmc_file(originals / f"fineweb_train_{i:06d}.bin", stream[start : start + 7_000])
    import_llmc(str(originals / "fineweb_train_*.bin"), str(tmp_path / "set"))
    shard_set = ShardSet(str(tmp_path / "set"))
    assert shard_set.num_documents == len(documents)
    for i in (0, 3, 40, len(documents) - 1):
        document = shard_set.document(i)
        assert document[0] == GPT2_EOD and np.array_equal(document[1:], documents[i][:-1])
    written = export_llmc(str(tmp_path / "set"), str(tmp_path / "out"), shard_tokens=7_000)
    assert len(written) == len(list(originals.iterdir()))
    for ours, theirs in zip(written, sorted(originals.iterdir())):
        assert open(ours, "rb").read() == theirs.read_bytes()


def test_a_set_of_ours_comes_back_from_llmc_with_its_own_documents(tmp_path):
    """Our sets end each document with EOD (--append-eod), llm.c's start each with one: the
    round trip of 11 real Moby-Dick documents gives 11 documents, not 12 shifted by an EOD."""
    from tests.shard_fixtures import make_gpt_shards

    ours = ShardSet(make_gpt_shards(tmp_path, 11, num_shards=1))
    export_llmc(ours.directory, str(tmp_path / "llmc"), shard_tokens=1_000)
    manifest = import_llmc(str(tmp_path / "llmc"), str(tmp_path / "back"))
    back = ShardSet(str(tmp_path / "back"))
    assert back.num_documents == ours.num_documents == 11
    for i in range(11):
        assert np.array_equal(back.document(i), ours.document(i))
    assert manifest.source["eod_position"] == "end"
    export_nanogpt(ours.directory, str(tmp_path / "nanogpt.bin"))
    import_nanogpt(str(tmp_path / "nanogpt.bin"), str(tmp_path / "nano-back"))
    assert ShardSet(str(tmp_path / "nano-back")).num_documents == 11


def test_llama3_format_for_int32_sets(documents, tmp_path):
    directory = tmp_path / "wide"
    directory.mkdir()
    wide = [d.astype(np.int32) + 70_000 for d in documents[:20]]  # ids past uint16
    writer = IndexedDatasetWriter(str(directory / "shard-00000"), np.int32)
    for doc in wide:
        writer.add_document([doc])
    write_shard_set_manifest(str(directory), [writer.finalize()], dtype="int32",
                             sequence_unit="document")  # fmt: skip
    (path,) = export_llmc(str(directory), str(tmp_path / "out"))
    header = np.fromfile(path, dtype="<i4", count=256)
    assert header[:3].tolist() == [20240801, 7, sum(map(len, wide))]
    assert np.array_equal(read_llmc(path), np.concatenate(wide).astype(np.uint32))
    import_llmc(path, str(tmp_path / "back"), eod=GPT2_EOD + 70_000, eod_position="end")
    back = ShardSet(str(tmp_path / "back"))
    assert back.dtype == np.int32 and back.num_documents == len(wide)
    assert np.array_equal(back.document(5), wide[5])
    with pytest.raises(FormatError, match="do not fit uint16"):
        export_nanogpt(str(directory), str(tmp_path / "narrow.bin"))


@pytest.mark.parametrize("position", ["end", "start"])
def test_splitting_does_not_depend_on_chunk_boundaries(documents, position):
    stream = np.concatenate(documents[:30])
    if position == "start":
        stream = np.concatenate([[GPT2_EOD], stream[:-1]])
    expected = [lengths for _, lengths in split_documents_at_eod([stream], GPT2_EOD, position)]
    expected = np.concatenate(expected)
    assert expected.sum() == stream.size and (expected > 0).all()
    if position == "end":
        assert np.array_equal(expected, [len(d) for d in documents[:30]])
    for chunk in (1, 2, 7, 64, 1000):
        pieces = [stream[i : i + chunk] for i in range(0, stream.size, chunk)]
        batches = list(split_documents_at_eod(pieces, GPT2_EOD, position))
        assert np.array_equal(np.concatenate([b[1] for b in batches]), expected)
        assert np.array_equal(np.concatenate([b[0] for b in batches]), stream)


def test_stream_without_final_eod_keeps_its_last_document(documents):
    stream = np.concatenate(documents[:3])[:-5]  # cut inside the third document
    lengths = np.concatenate([b[1] for b in split_documents_at_eod([stream], GPT2_EOD, "end")])
    assert lengths.tolist() == [len(documents[0]), len(documents[1]), len(documents[2]) - 5]


@pytest.mark.parametrize(
    "header, tokens, message",
    [
        ({"magic": 20240521}, 10, "bad magic 20240521"),
        ({"version": 2}, 10, "version 2, expected 1"),
        ({"count": 11}, 10, "need 1046"),
        ({"count": 0}, 0, "claims 0 tokens"),
        ({"magic": 20240801, "version": 1}, 10, "version 1, expected 7"),
    ],
)
def test_bad_llmc_headers_are_named(documents, tmp_path, header, tokens, message):
    path = tmp_path / "bad.bin"
    write_llmc_file(path, documents[0][:tokens], **header)
    with pytest.raises(FormatError, match=message) as raised:
        read_llmc(str(path))
    assert str(path) in str(raised.value)


def test_short_and_odd_files_are_refused(tmp_path):
    short = tmp_path / "short.bin"
    short.write_bytes(b"\x00" * 100)
    with pytest.raises(FormatError, match="shorter than the 1024-byte"):
        read_llmc(str(short))
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x02\x03")
    with pytest.raises(FormatError, match="whole number of uint16"):
        import_nanogpt(str(odd), str(tmp_path / "set"))


def test_vocabulary_is_checked_and_sets_are_not_overwritten(documents, tmp_path):
    train_bin = tmp_path / "train.bin"
    np.concatenate(documents[:5]).tofile(train_bin)
    with pytest.raises(FormatError, match="outside the vocabulary of 1000"):
        import_nanogpt(
            str(train_bin), str(tmp_path / "s"), eod=999, tokenizer_kind="x", vocab_size=1000
        )
    with pytest.raises(ValueError, match="EOD id 50256 is outside the vocabulary of 1000"):
        import_nanogpt(str(train_bin), str(tmp_path / "s"), tokenizer_kind="x", vocab_size=1000)
    import_nanogpt(str(train_bin), str(tmp_path / "ok"))
    with pytest.raises(FormatError, match="already holds a shard set"):
        import_nanogpt(str(train_bin), str(tmp_path / "ok"))


def test_tokenizer_and_vocab_size_are_one_or_the_other():
    from train.config import parse_args

    with pytest.raises(SystemExit, match="--tokenizer or --vocab-size, not both"):
        parse_args(["--data", "x", "--tokenizer", "t.json", "--vocab-size", "5"])
    with pytest.raises(SystemExit, match="--vocab-size must be positive"):
        parse_args(["--data", "x", "--vocab-size", "0"])
