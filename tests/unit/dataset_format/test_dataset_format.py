"""The shard format: round trips, Megatron byte layout, shard sets, and every kind of bad file."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
import uuid
from pathlib import Path

import fsspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataset_format import (
    FormatError,
    IndexedDataset,
    IndexedDatasetWriter,
    Manifest,
    ShardSet,
    TokenizerInfo,
    dtype_for_vocab,
    merge_indexed,
    shard_info,
    write_shard_set_manifest,
)
from tests.conftest import CORPORA


@pytest.fixture(scope="module")
def book_documents(gpt2_tokenizer):
    """Real token ids: paragraphs of Alice in Wonderland, one document each, EOD appended."""
    text = (CORPORA / "books" / "11-0.txt").read_text(encoding="utf-8")
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()][:300]
    ids = [np.array(e.ids + [50256]) for e in gpt2_tokenizer.encode_batch(paragraphs)]
    return paragraphs, ids


def write_pair(prefix, documents, dtype=np.uint16):
    with IndexedDatasetWriter(str(prefix), dtype) as writer:
        for doc in documents:
            writer.add_document(doc)
    return str(prefix)


def test_token_ids_are_checked_against_the_vocabulary_at_its_boundary(tmp_path, book_documents):
    """Issue 27 (mutation survivors): the vocabulary check of real GPT-2 ids. The largest id
    (EOD, 50256) is inside a vocabulary of 50257 and outside one of 50256, which names the first
    document holding it; the writer refuses an id one past its dtype, and takes the last one."""
    _, ids = book_documents
    prefix = write_pair(tmp_path / "alice", [[doc] for doc in ids])
    dataset = IndexedDataset(prefix)
    dataset.verify(vocab_size=50257)
    with pytest.raises(FormatError) as caught:
        dataset.verify(vocab_size=50256)
    position = len(ids[0]) - 1  # the first EOD: the last token of the first document
    assert f"token id 50256 (document 0, token {position}) is outside the vocabulary of 50256" \
        in str(caught.value)
    signed = write_pair(tmp_path / "signed", [[np.array([5, -1, 7])]], np.int32)
    with pytest.raises(FormatError, match="token id -1"):
        IndexedDataset(signed).verify(vocab_size=50257)
    write_pair(tmp_path / "edge", [[np.array([0, 65535])]])  # the last uint16 id fits
    with pytest.raises(ValueError, match=r"token ids \[0, 65536\] do not fit uint16"):
        write_pair(tmp_path / "past", [[np.array([0, 65536])]])


def read_megatron_pair(prefix: str):
    """An independent reader written from the MMIDIDX byte layout alone (not from our code)."""
    with open(prefix + ".idx", "rb") as f:
        raw = f.read()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    version, code, n_seq, n_doc = struct.unpack_from("<QBQQ", raw, 9)
    assert version == 1
    dtype = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 6: "<f8", 7: "<f4", 8: "<u2"}[code]
    pos = 9 + 8 + 1 + 8 + 8
    lengths = struct.unpack_from(f"<{n_seq}i", raw, pos)
    pos += 4 * n_seq
    pointers = struct.unpack_from(f"<{n_seq}q", raw, pos)
    pos += 8 * n_seq
    doc_idx = struct.unpack_from(f"<{n_doc}q", raw, pos)
    assert pos + 8 * n_doc == len(raw)
    data = open(prefix + ".bin", "rb").read()
    itemsize = np.dtype(dtype).itemsize
    sequences = [
        np.frombuffer(data[p : p + n * itemsize], dtype=dtype) for p, n in zip(pointers, lengths)
    ]
    return [sequences[doc_idx[d] : doc_idx[d + 1]] for d in range(n_doc - 1)]


# -- round trips -------------------------------------------------------------------------------


def test_real_text_round_trip_and_independent_reader(tmp_path, book_documents, gpt2_tokenizer):
    paragraphs, ids = book_documents
    prefix = write_pair(tmp_path / "alice", [[d] for d in ids])
    ds = IndexedDataset(prefix)
    assert ds.dtype == np.uint16
    assert (ds.num_documents, ds.num_sequences) == (len(ids), len(ids))
    assert ds.num_tokens == sum(len(d) for d in ids)
    for i in (0, 17, len(ids) - 1):
        np.testing.assert_array_equal(ds.document(i), ids[i])
        assert gpt2_tokenizer.decode(ds.document(i)[:-1].tolist()) == paragraphs[i]
    independent = read_megatron_pair(prefix)
    assert len(independent) == len(ids)
    for mine, theirs in zip(ids, independent):
        np.testing.assert_array_equal(theirs[0], mine)


def test_sentences_and_token_spans(tmp_path, book_documents):
    _, ids = book_documents
    documents = [[d[: len(d) // 2], d[len(d) // 2 :]] for d in ids[:50]]
    ds = IndexedDataset(write_pair(tmp_path / "s", documents))
    assert ds.num_sequences == 100
    flat = np.concatenate([np.concatenate(d) for d in documents])
    np.testing.assert_array_equal(ds.tokens(0, ds.num_tokens), flat)
    np.testing.assert_array_equal(ds.tokens(13, 200), flat[13:213])
    offsets = ds.document_offsets()
    for i in (0, 7, 49):
        parts = ds.document_sequences(i)
        assert len(parts) == 2
        np.testing.assert_array_equal(np.concatenate(parts), ds.document(i))
        np.testing.assert_array_equal(
            ds.tokens(int(offsets[i]), len(ds.document(i))), ds.document(i)
        )
    np.testing.assert_array_equal(ds.document_lengths(), [sum(map(len, d)) for d in documents])
    assert not ds.document(3).flags.owndata  # zero-copy view of the memory map


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.lists(st.integers(0, 2**31 - 1), max_size=12), max_size=4), max_size=20),
    st.sampled_from([np.uint16, np.int32, np.int64]),
)
def test_round_trip_property(tmp_path_factory, documents, dtype):
    limit = np.iinfo(dtype).max
    documents = [[[t % limit for t in seq] for seq in doc] for doc in documents]
    prefix = str(tmp_path_factory.mktemp("prop") / "p")
    write_pair(prefix, documents, dtype)
    ds = IndexedDataset(prefix)
    ds.verify()
    assert ds.num_documents == len(documents)
    for i, doc in enumerate(documents):
        got = ds.document_sequences(i)
        assert [s.tolist() for s in got] == doc
    independent = read_megatron_pair(prefix)
    assert [[s.tolist() for s in doc] for doc in independent] == documents


def test_empty_pair(tmp_path):
    ds = IndexedDataset(write_pair(tmp_path / "e", []))
    assert (ds.num_documents, ds.num_sequences, ds.num_tokens) == (0, 0, 0)
    ds.verify()


def test_dtype_for_vocab():
    assert dtype_for_vocab(50257) == np.uint16
    assert dtype_for_vocab(65499) == np.uint16
    assert dtype_for_vocab(65500) == np.int32
    assert dtype_for_vocab(1) == np.uint16  # the smallest vocabulary is one token
    for bad in (0, -5):
        with pytest.raises(ValueError, match=f"must be positive, got {bad}"):
            dtype_for_vocab(bad)


def test_ids_that_do_not_fit_are_refused(tmp_path):
    writer = IndexedDatasetWriter(str(tmp_path / "x"), np.uint16)
    with pytest.raises(ValueError, match="do not fit uint16"):
        writer.add_document([[1, 70000]])
    writer.discard()
    assert os.listdir(tmp_path) == []


def test_a_pairs_record_cannot_be_changed_after_it_is_written(tmp_path, book_documents):
    _, ids = book_documents
    with IndexedDatasetWriter(str(tmp_path / "r"), np.uint16) as writer:
        writer.add_document([ids[0]])
    info = shard_info(str(tmp_path / "r"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.tokens = 0
    assert info.tokens == len(ids[0]) and info == shard_info(str(tmp_path / "r"))


# -- crash safety ------------------------------------------------------------------------------


def test_writer_never_leaves_a_pair_that_looks_whole(tmp_path, book_documents):
    _, ids = book_documents
    with pytest.raises(RuntimeError):
        with IndexedDatasetWriter(str(tmp_path / "crash"), np.uint16) as writer:
            writer.add_document([ids[0]])
            raise RuntimeError("worker died")
    assert os.listdir(tmp_path) == []
    writer = IndexedDatasetWriter(str(tmp_path / "half"), np.uint16)
    writer.add_document([ids[0]])
    # Mid-write, only temporary names exist; a reader finds no pair.
    assert all(".tmp-" in name for name in os.listdir(tmp_path))
    with pytest.raises(FormatError, match="not found"):
        IndexedDataset(str(tmp_path / "half"))
    writer.finalize()
    assert sorted(os.listdir(tmp_path)) == ["half.bin", "half.idx"]


# -- shard sets --------------------------------------------------------------------------------


def make_set(directory: Path, documents, shards=3, tokenizer_file=None):
    directory.mkdir(parents=True, exist_ok=True)
    infos = []
    per = -(-len(documents) // shards)
    for k in range(shards):
        prefix = write_pair(
            directory / f"shard-{k:05d}", [[d] for d in documents[k * per : (k + 1) * per]]
        )
        infos.append(shard_info(prefix))
    tokenizer = TokenizerInfo(
        file="tokenizer.json", kind="byte-level-bpe", vocab_size=50257, special_ids={"eod": 50256}
    )
    return write_shard_set_manifest(
        str(directory),
        infos,
        dtype="uint16",
        sequence_unit="document",
        tokenizer=tokenizer if tokenizer_file else None,
        tokenizer_file=tokenizer_file,
        source={"name": "books", "input": "11-0.txt"},
        pipeline={"append_eod": True},
    )


@pytest.fixture
def tokenizer_json(tmp_path, gpt2_tokenizer):
    path = tmp_path / "gpt2-tokenizer.json"
    gpt2_tokenizer.save(str(path))
    return str(path)


def test_shard_set_global_numbering(tmp_path, book_documents, tokenizer_json):
    _, ids = book_documents
    manifest = make_set(tmp_path / "set", ids, shards=4, tokenizer_file=tokenizer_json)
    ss = ShardSet(str(tmp_path / "set"))
    ss.verify()
    assert ss.num_documents == len(ids) == manifest.documents
    assert ss.num_tokens == sum(map(len, ids))
    for i in (0, 74, 75, 76, len(ids) - 1):
        np.testing.assert_array_equal(ss.document(i), ids[i])
    np.testing.assert_array_equal(ss.document_lengths(), [len(d) for d in ids])
    assert ss.locate(76) == (1, 1)
    assert ss.tokenizer_path and os.path.exists(ss.tokenizer_path)
    assert Manifest.read(str(tmp_path / "set")).tokenizer.special_ids == {"eod": 50256}
    with pytest.raises(IndexError):
        ss.document(len(ids))


def test_bare_megatron_prefix_opens_as_a_set(tmp_path, book_documents):
    _, ids = book_documents
    prefix = write_pair(tmp_path / "megatron_text_document", [[d] for d in ids[:10]])
    ss = ShardSet(prefix)
    assert ss.manifest is None and ss.num_documents == 10
    ss.verify()


def test_remote_set_is_fetched_verified_and_cached(tmp_path, book_documents, tokenizer_json):
    _, ids = book_documents
    make_set(tmp_path / "set", ids[:40], shards=2, tokenizer_file=tokenizer_json)
    fs = fsspec.filesystem("memory")
    for name in os.listdir(tmp_path / "set"):
        fs.put_file(str(tmp_path / "set" / name), f"/remote-set/{name}")
    cache = tmp_path / "cache"
    ss = ShardSet("memory:///remote-set", cache_dir=str(cache))
    ss.verify()
    np.testing.assert_array_equal(ss.document(39), ids[39])
    # A corrupted remote shard is refused before it is ever memory-mapped.
    with fs.open("/remote-set/shard-00001.bin", "rb") as f:
        data = bytearray(f.read())
    data[10] ^= 0xFF
    fs.pipe_file("/other/shard-00001.bin", bytes(data))
    for name in os.listdir(tmp_path / "set"):
        if name != "shard-00001.bin":
            fs.put_file(str(tmp_path / "set" / name), f"/other/{name}")
    with pytest.raises(FormatError, match="checksum mismatch"):
        ShardSet("memory:///other", cache_dir=str(cache))


def test_merge_keeps_documents_in_order(tmp_path, book_documents):
    _, ids = book_documents
    a = write_pair(tmp_path / "a", [[d] for d in ids[:30]])
    b = write_pair(tmp_path / "b", [[d[:5], d[5:]] for d in ids[30:60]])
    info = merge_indexed([a, b], str(tmp_path / "merged"))
    merged = IndexedDataset(str(tmp_path / "merged"))
    merged.verify()
    assert (info.documents, info.sequences) == (60, 90)
    # the record the merge returns is the one the files on disk give, token count included
    assert info == shard_info(str(tmp_path / "merged"))
    assert info.tokens == sum(len(d) for d in ids[:60])
    for i in range(60):
        np.testing.assert_array_equal(merged.document(i), ids[i])
    assert len(merged.document_sequences(45)) == 2


# -- bad files ---------------------------------------------------------------------------------


@pytest.fixture
def real_pair(tmp_path, book_documents):
    _, ids = book_documents
    return write_pair(tmp_path / "p", [[d[:7], d[7:]] for d in ids[:40]])


def rewrite(path, mutate):
    data = bytearray(open(path, "rb").read())
    data = mutate(data)
    with open(path, "wb") as f:
        f.write(data)


def assert_fault_named(prefix, suffix, mutate, message):
    """Opening the pair after `mutate` rewrote its `suffix` file fails with `message`, naming
    that file."""
    rewrite(prefix + suffix, mutate)
    with pytest.raises(FormatError, match=message) as err:
        IndexedDataset(prefix)
    assert os.path.basename(prefix) + suffix in str(err.value)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: b"MMIDIDY\x00\x00" + d[9:], "wrong magic"),
        (lambda d: d[:9] + struct.pack("<Q", 2) + d[17:], "unknown index version 2"),
        (lambda d: d[:17] + bytes([9]) + d[18:], "unknown dtype code 9"),
        (lambda d: d[:-8], "needs"),
        (lambda d: d + b"\x00" * 8, "needs"),
        (lambda d: d[:40], "needs"),
        (lambda d: d[:10], "shorter than the 34-byte header"),
        (lambda d: d[:33], "33 bytes is shorter than the 34-byte header"),
        # the header whole, nothing after it: the header is read and names what it needs
        # (the pair: 40 documents of 2 sequences; 34 + 80 * 12 + 41 * 8 bytes)
        (lambda d: d[:34], "34 bytes, but a header of 80 sequences and 40 documents needs 1322"),
        (lambda d: d[:18] + struct.pack("<Q", 10**6) + d[26:], "needs"),
    ],
)
def test_corrupt_index_is_named(real_pair, mutate, message):
    assert_fault_named(real_pair, ".idx", mutate, message)


def test_pointer_past_end_of_bin(real_pair):
    ds = IndexedDataset(real_pair)
    pointer_pos = 34 + 4 * ds.num_sequences + 8 * (ds.num_sequences - 1)
    del ds
    rewrite(
        real_pair + ".idx",
        lambda d: d[:pointer_pos] + struct.pack("<q", 10**9) + d[pointer_pos + 8 :],
    )
    with pytest.raises(FormatError, match="truncated"):
        IndexedDataset(real_pair)


def test_noncontiguous_pointer_found_by_verify(real_pair):
    ds = IndexedDataset(real_pair)
    pos = 34 + 4 * ds.num_sequences + 8 * 3
    del ds
    rewrite(real_pair + ".idx", lambda d: d[:pos] + struct.pack("<q", 2) + d[pos + 8 :])
    with pytest.raises(FormatError, match="sequence 3 points to byte 2"):
        IndexedDataset(real_pair).verify()
    # Reading documents turns pointers into offsets, and that checks them too.
    with pytest.raises(FormatError, match="sequence 3 points to byte 2"):
        IndexedDataset(real_pair).document(1)


def test_one_sequence_with_a_pointer_out_of_range_is_refused(real_pair):
    """sequence(j) alone (tools/dump --seq) checks its own pointer: no silent empty slice."""
    ds = IndexedDataset(real_pair)
    pos = 34 + 4 * ds.num_sequences + 8 * 3
    del ds
    rewrite(real_pair + ".idx", lambda d: d[:pos] + struct.pack("<q", 10**9) + d[pos + 8 :])
    ds = IndexedDataset(real_pair)
    assert len(ds.sequence(2)) > 0  # the others still read
    with pytest.raises(FormatError, match="sequence 3 points to byte 1000000000 with"):
        ds.sequence(3)


@pytest.mark.parametrize("code, dtype", [(7, "<f4"), (6, "<f8")])
def test_a_float_pair_is_not_a_token_set(tmp_path, book_documents, code, dtype):
    _, ids = book_documents
    write_megatron_pair(str(tmp_path / "floats"), [[d] for d in ids[:5]], code, dtype)
    with pytest.raises(FormatError, match=r"floats.idx: dtype float\d+ is not an integer dtype"):
        IndexedDataset(str(tmp_path / "floats"))
    with pytest.raises(FormatError, match="not an integer dtype"):
        ShardSet(str(tmp_path / "floats"))
    with pytest.raises(ValueError, match="not an integer dtype for token ids"):
        IndexedDatasetWriter(str(tmp_path / "w"), np.float32)


@pytest.mark.timeout(30)
def test_a_fifo_or_device_as_half_of_a_pair_is_refused_without_a_hang(real_pair):
    os.remove(real_pair + ".bin")
    os.mkfifo(real_pair + ".bin")
    with pytest.raises(FormatError, match=r"p.bin is a FIFO, not a regular file"):
        IndexedDataset(real_pair)
    os.remove(real_pair + ".bin")
    os.symlink("/dev/zero", real_pair + ".bin")
    with pytest.raises(FormatError, match=r"p.bin is a character device"):
        IndexedDataset(real_pair)


def test_decreasing_document_index_refused_at_open(tmp_path, book_documents):
    _, ids = book_documents
    prefix = write_pair(tmp_path / "p", [[d] for d in ids[:10]])
    at = 34 + 12 * 10 + 8 * 4  # document_index[4]
    rewrite(prefix + ".idx", lambda d: d[:at] + struct.pack("<q", 9) + d[at + 8 :])
    with pytest.raises(FormatError, match=r"p.idx: document index decreases at document 4"):
        IndexedDataset(prefix)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d[:-2], "truncated"),
        (lambda d: d[:-1], "not a multiple of 2"),
        (lambda d: d + b"\x00\x00", "longer than"),
    ],
)
def test_bin_size_faults(real_pair, mutate, message):
    assert_fault_named(real_pair, ".bin", mutate, message)


def test_missing_half_of_a_pair(real_pair):
    os.remove(real_pair + ".idx")
    with pytest.raises(FormatError, match="missing pair"):
        IndexedDataset(real_pair)


def test_flipped_byte_caught_by_checksum(tmp_path, book_documents):
    _, ids = book_documents
    make_set(tmp_path / "set", ids[:40], shards=2)
    ShardSet(str(tmp_path / "set")).verify()
    rewrite(str(tmp_path / "set" / "shard-00001.bin"), lambda d: d[:5] + bytes([d[5] ^ 1]) + d[6:])
    ss = ShardSet(str(tmp_path / "set"))  # sizes still agree: only the checksum can tell
    ss.verify(checksums=False)
    with pytest.raises(FormatError, match="shard-00001.bin: checksum mismatch"):
        ss.verify()


def test_manifest_faults(tmp_path, book_documents):
    _, ids = book_documents
    make_set(tmp_path / "set", ids[:40], shards=2)
    path = tmp_path / "set" / "manifest.json"
    data = json.loads(path.read_text())
    data["shards"][0]["documents"] += 1
    path.write_text(json.dumps(data))
    with pytest.raises(FormatError, match="manifest lists 21 documents, the shard has 20"):
        ShardSet(str(tmp_path / "set"))
    path.write_text("{not json")
    with pytest.raises(FormatError, match="not valid JSON"):
        ShardSet(str(tmp_path / "set"))
    path.unlink()
    with pytest.raises(FormatError, match="no manifest"):
        ShardSet(str(tmp_path / "set"))
    os.remove(tmp_path / "set" / "shard-00000.idx")
    infos = [shard_info(str(tmp_path / "set" / "shard-00001"))]
    infos.insert(0, dataclasses.replace(infos[0], name="shard-00000"))
    with pytest.raises(FormatError, match="shard-00000.bin: missing or not"):
        write_shard_set_manifest(
            str(tmp_path / "set"), infos, dtype="uint16", sequence_unit="document"
        )


def test_token_spans_across_shards(tmp_path, book_documents):
    _, ids = book_documents
    make_set(tmp_path / "set", ids[:90], shards=3)
    ss = ShardSet(str(tmp_path / "set"))
    flat = np.concatenate(ids[:90])
    boundary = ss.shards[0].num_tokens
    for start, length in ((0, 10), (boundary - 5, 10), (boundary - 1, ss.shards[1].num_tokens + 2)):
        np.testing.assert_array_equal(ss.tokens(start, length), flat[start : start + length])
    assert not ss.tokens(3, 100).flags.owndata  # inside one shard: a view
    with pytest.raises(IndexError):
        ss.tokens(len(flat) - 1, 2)


def test_bulk_add_documents_equals_one_by_one(tmp_path, book_documents):
    _, ids = book_documents
    one = write_pair(tmp_path / "one", [[d] for d in ids[:50]])
    with IndexedDatasetWriter(str(tmp_path / "bulk"), np.uint16) as writer:
        writer.add_documents(np.concatenate(ids[:25]), [len(d) for d in ids[:25]])
        writer.add_document([ids[25]])
        writer.add_documents(np.concatenate(ids[26:50]), [len(d) for d in ids[26:50]])
    for ext in (".bin", ".idx"):
        assert open(one + ext, "rb").read() == open(str(tmp_path / "bulk") + ext, "rb").read()
    writer = IndexedDatasetWriter(str(tmp_path / "bad"), np.uint16)
    with pytest.raises(ValueError, match="sum to 3"):
        writer.add_documents(np.arange(5), [1, 2])
    writer.discard()


def write_megatron_pair(prefix: str, documents, code=8, dtype="<u2"):
    """An independent writer from the MMIDIDX byte layout alone: what Megatron-LM writes."""
    sequences = [np.asarray(s, dtype=dtype) for doc in documents for s in doc]
    lengths = [len(s) for s in sequences]
    pointers, position = [], 0
    for n in lengths:
        pointers.append(position)
        position += n * np.dtype(dtype).itemsize
    doc_idx = [0]
    for doc in documents:
        doc_idx.append(doc_idx[-1] + len(doc))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(lengths), len(doc_idx)))
        f.write(struct.pack(f"<{len(lengths)}i", *lengths))
        f.write(struct.pack(f"<{len(pointers)}q", *pointers))
        f.write(struct.pack(f"<{len(doc_idx)}q", *doc_idx))
    with open(prefix + ".bin", "wb") as f:
        for s in sequences:
            f.write(s.tobytes())


@pytest.mark.parametrize("code, dtype", [(8, "<u2"), (4, "<i4")])
def test_reads_a_pair_written_by_an_independent_writer(tmp_path, book_documents, code, dtype):
    _, ids = book_documents
    documents = [[d[:3], d[3:]] for d in ids[:60]]
    write_megatron_pair(str(tmp_path / "theirs"), documents, code, dtype)
    ss = ShardSet(str(tmp_path / "theirs"))
    ss.verify()
    assert ss.dtype == np.dtype(dtype)
    for i in (0, 30, 59):
        np.testing.assert_array_equal(ss.document(i), ids[i])
        assert [len(s) for s in ss.document_sequences(i)] == [3, len(ids[i]) - 3]


# -- hostile manifests (built here from a real set by editing its manifest.json) --------------


def edit_manifest(directory: Path, edit) -> None:
    path = directory / "manifest.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def set_shard_name(index, name):
    def edit(data):
        data["shards"][index]["name"] = name

    return edit


def set_tokenizer_file(name):
    def edit(data):
        data["tokenizer"]["file"] = name

    return edit


def set_sidecar(index, name, rows=10):
    """Give shard `index` a metadata sidecar entry (the pipeline's `meta`) naming `name`."""

    def edit(data):
        data["shards"][index]["meta"] = {"file": name, "rows": rows, "bytes": 1, "sha256": "0" * 64}

    return edit


def upload(fs, directory: Path, remote: str) -> None:
    for name in os.listdir(directory):
        fs.put_file(str(directory / name), f"{remote}/{name}")


def hostile_tokenizer(data, escaped, digest, size):
    data["tokenizer"].update(file="../../escaped.json", sha256=digest)


def hostile_shard(name):
    def edit(data, escaped, digest, size):
        data["shards"][0].update(
            name=name(escaped), bin_sha256=digest, idx_sha256=digest, bin_bytes=size, idx_bytes=size
        )

    return edit


@pytest.mark.parametrize(
    "edit",
    [
        hostile_tokenizer,
        hostile_shard(lambda escaped: "../../escaped"),
        hostile_shard(str),  # an absolute name
    ],
    ids=["tokenizer-dotdot", "shard-dotdot", "shard-absolute"],
)
def test_remote_manifest_cannot_write_outside_the_cache(
    tmp_path, book_documents, tokenizer_json, edit
):
    _, ids = book_documents
    make_set(tmp_path / "set", ids[:20], shards=2, tokenizer_file=tokenizer_json)
    escaped = tmp_path / "escaped"
    fs = fsspec.filesystem("memory")
    remote = f"/hostile-{uuid.uuid4().hex}"
    upload(fs, tmp_path / "set", remote)
    # The attacker serves its bytes under whatever names the manifest points at, and gives
    # their true sizes and checksums, so only the names can stop them.
    payload = b"attacker bytes"
    digest = hashlib.sha256(payload).hexdigest()
    for name in ("escaped.json", "escaped.bin", "escaped.idx"):
        fs.pipe_file(f"{remote}/../../{name}", payload)
        fs.pipe_file(f"{remote}/{escaped.parent}/{name}", payload)
    with fs.open(f"{remote}/manifest.json", "rb") as f:
        data = json.loads(f.read())
    edit(data, escaped, digest, len(payload))
    fs.pipe_file(f"{remote}/manifest.json", json.dumps(data).encode())
    cache = tmp_path / "cache" / "a" / "b"
    with pytest.raises(FormatError, match="not a plain file name inside the shard set"):
        ShardSet(f"memory://{remote}", cache_dir=str(cache))
    written = [p for p in tmp_path.rglob("*") if "escaped" in p.name]
    assert written == [], written
    assert not any(cache.rglob("*.bin"))  # refused before any fetch


@pytest.mark.parametrize(
    "edit, message",
    [
        (set_shard_name(0, "../other/shard-00000"), "not a plain file name"),
        (set_tokenizer_file("/etc/hostname"), "not a plain file name"),
        (set_tokenizer_file("C:tokenizer.json"), "not a plain file name"),
        (set_shard_name(1, "./shard-00000"), "not a plain file name"),
        (set_shard_name(1, "shard-00000"), "names the same file"),
        (set_shard_name(1, "SHARD-00000"), "names the same file"),
        (set_tokenizer_file("shard-00000.bin"), "names the same file"),
        (set_tokenizer_file("manifest.json"), "names the same file"),
        (set_shard_name(0, "shard\n00000"), "not a plain file name"),
        (set_shard_name(0, ""), "non-empty file name"),
        (set_sidecar(0, "../other/shard-00000.meta.parquet"), "not a plain file name"),
        (set_sidecar(1, "shard-00000.idx"), "names the same file"),
        (set_sidecar(1, "MANIFEST.json"), "names the same file"),
    ],
)
def test_local_manifest_names_only_plain_files_of_its_set(
    tmp_path, book_documents, tokenizer_json, edit, message
):
    _, ids = book_documents
    # A real second set next to this one: "../other/shard-00000" would open (and verify) fine.
    make_set(tmp_path / "other", ids[20:40], shards=2)
    make_set(tmp_path / "set", ids[:20], shards=2, tokenizer_file=tokenizer_json)
    edit_manifest(tmp_path / "set", edit)
    with pytest.raises(FormatError, match=message) as err:
        ShardSet(str(tmp_path / "set"))
    assert str(tmp_path / "set" / "manifest.json") in str(err.value)
    assert "\n" not in str(err.value).replace("shard\n00000", "")


def test_symlink_out_of_the_set_is_refused(tmp_path, book_documents, tokenizer_json):
    _, ids = book_documents
    make_set(tmp_path / "set", ids[:20], shards=2, tokenizer_file=tokenizer_json)
    outside = tmp_path / "outside.json"
    outside.write_text((tmp_path / "set" / "tokenizer.json").read_text())
    (tmp_path / "set" / "tokenizer.json").unlink()
    (tmp_path / "set" / "tokenizer.json").symlink_to(outside)
    with pytest.raises(FormatError, match="outside the shard set"):
        ShardSet(str(tmp_path / "set"))


def test_remote_file_larger_than_its_record_is_not_fetched(tmp_path, book_documents):
    _, ids = book_documents
    make_set(tmp_path / "set", ids[:20], shards=2)
    fs = fsspec.filesystem("memory")
    upload(fs, tmp_path / "set", "/padded")
    with fs.open("/padded/shard-00001.bin", "rb") as f:
        data = f.read()
    fs.pipe_file("/padded/shard-00001.bin", data + b"\x00" * 4096)
    with pytest.raises(FormatError, match="4096 bytes|the manifest says"):
        ShardSet("memory:///padded", cache_dir=str(tmp_path / "cache"))
    assert not list((tmp_path / "cache").rglob("shard-00001.bin*"))


def test_remote_tokenizer_without_size_or_hash_is_fetched_under_a_cap(
    tmp_path, book_documents, tokenizer_json, monkeypatch
):
    """The manifest records no tokenizer size, and its sha256 is optional: the copy stops at
    the cap (made small here) instead of taking whatever the remote store serves."""
    from dataset_format import shardset

    _, ids = book_documents
    make_set(tmp_path / "set", ids[:20], shards=2, tokenizer_file=tokenizer_json)
    edit_manifest(tmp_path / "set", lambda d: d["tokenizer"].update(sha256=""))
    fs = fsspec.filesystem("memory")
    upload(fs, tmp_path / "set", "/big-tokenizer")
    size = os.path.getsize(tokenizer_json)
    monkeypatch.setattr(shardset, "TOKENIZER_CAP", size - 1)
    with pytest.raises(FormatError, match=r"tokenizer.json: larger than its cap of \d"):
        ShardSet("memory:///big-tokenizer", cache_dir=str(tmp_path / "cache"))
    assert not list((tmp_path / "cache").rglob("tokenizer.json*"))
    monkeypatch.setattr(shardset, "TOKENIZER_CAP", size)
    ss = ShardSet("memory:///big-tokenizer", cache_dir=str(tmp_path / "cache"))
    assert os.path.getsize(ss.tokenizer_path) == size


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"[1, 2, 3]", "a JSON list, not an object"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON nested 100000 deep"),
        (b'{"format_version": ' + b"9" * 5000 + b"}", "an integer of 5000 digits"),
    ],
)
def test_manifest_that_is_not_an_object(tmp_path, book_documents, raw, message):
    _, ids = book_documents
    make_set(tmp_path / "set", ids[:20], shards=2)
    (tmp_path / "set" / "manifest.json").write_bytes(raw)
    with pytest.raises(FormatError, match=message) as err:
        ShardSet(str(tmp_path / "set"))
    assert str(tmp_path / "set" / "manifest.json") in str(err.value)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["shards"][0].update(documents="20"), "'documents' must be int, got str"),
        (lambda d: d["shards"][0].update(tokens=-1), r"'tokens' must be in \[0, "),
        (lambda d: d["shards"][0].update(tokens=1 << 64), r"'tokens' must be in \[0, 9223"),
        (lambda d: d["shards"][0].update(documents=True), "'documents' must be int, got bool"),
        (lambda d: d["shards"][0].update(bin_sha256=7), "'bin_sha256' must be str"),
        (lambda d: d["shards"][0].update(idx_sha256="../x"), "not a sha256 hex digest"),
        (lambda d: d["shards"][0].pop("bin_bytes"), "missing 'bin_bytes'"),
        (lambda d: d.update(shards={"a": 1}), "'shards' must be list, got dict"),
        (lambda d: d.update(shards=[3]), "a shard entry is int"),
        (lambda d: d.update(dtype="float16"), "dtype 'float16' has no MMIDIDX code"),
        (lambda d: d.update(dtype=["uint16"]), "'dtype' must be str"),
        (lambda d: d.update(sequence_unit="word"), "sequence_unit must be one of"),
        (lambda d: d.update(source=[]), "'source' must be dict"),
        (lambda d: d.update(format_version=True), "unknown manifest format_version True"),
        (lambda d: d.update(tokenizer=[]), "'tokenizer' must be dict or NoneType"),
        (lambda d: d["tokenizer"].update(vocab_size="50257"), "'vocab_size' must be int"),
        (lambda d: d["tokenizer"].update(vocab_size=0), r"'vocab_size' must be in \[1, "),
        (lambda d: d["tokenizer"].update(vocab_size=10**30), "got an integer of 31 digits"),
        (lambda d: d.update(dtype="float32"), "dtype 'float32' has no MMIDIDX code for token"),
        (lambda d: d["tokenizer"].update(special_ids={"eod": "x"}), "special id 'eod'"),
        (lambda d: d["tokenizer"].update(file=5), "'file' must be str or NoneType"),
        (lambda d: d["shards"][0].update(meta=[]), "shard 'shard-00000': malformed manifest: 'meta' must be dict"),
        (set_sidecar(0, "a.parquet", rows="10"), "meta: malformed manifest: 'rows' must be int, got str"),
        (set_sidecar(0, "a.parquet", rows=-1), r"meta: malformed manifest: 'rows' must be in \[0, "),
        (lambda d: set_sidecar(0, "a.parquet")(d) or d["shards"][0]["meta"].pop("sha256"),
         "meta: malformed manifest: missing 'sha256'"),
    ],
)
def test_manifest_fields_of_the_wrong_type(tmp_path, book_documents, tokenizer_json, edit, message):
    _, ids = book_documents
    make_set(tmp_path / "set", ids[:20], shards=2, tokenizer_file=tokenizer_json)
    edit_manifest(tmp_path / "set", edit)
    with pytest.raises(FormatError, match=message):
        ShardSet(str(tmp_path / "set"))


def test_writer_refuses_a_tokenizer_name_outside_the_set(tmp_path, book_documents, tokenizer_json):
    _, ids = book_documents
    prefix = write_pair(tmp_path / "set" / "shard-00000", [[d] for d in ids[:5]])
    tokenizer = TokenizerInfo(file="../stray.json", kind="byte-level-bpe", vocab_size=50257)
    with pytest.raises(FormatError, match="not a plain file name"):
        write_shard_set_manifest(
            str(tmp_path / "set"),
            [shard_info(prefix)],
            dtype="uint16",
            sequence_unit="document",
            tokenizer=tokenizer,
            tokenizer_file=tokenizer_json,
        )
    assert not (tmp_path / "stray.json").exists()


# -- issue 27: mutation survivors of dataset_format/indexed.py ----------------------------------

# Megatron-LM's MMIDIDX dtype codes of integer arrays (its `DType` enum).
MEGATRON_INTEGER_CODES = [(1, "u1"), (2, "i1"), (3, "<i2"), (4, "<i4"), (5, "<i8"), (8, "<u2")]


@pytest.mark.parametrize("code, dtype", MEGATRON_INTEGER_CODES)
def test_every_integer_dtype_code_is_megatrons(tmp_path, book_documents, code, dtype):
    """Pairs of every integer dtype round-trip with Megatron's code in both directions: ours
    carry the code Megatron writes, and theirs open as the dtype it means."""
    _, ids = book_documents
    limit = np.iinfo(np.dtype(dtype)).max
    documents = [[d % limit] for d in ids[:20]]
    ours = write_pair(tmp_path / "ours", documents, np.dtype(dtype))
    assert open(ours + ".idx", "rb").read()[17] == code
    write_megatron_pair(str(tmp_path / "theirs"), documents, code, dtype)
    theirs = IndexedDataset(str(tmp_path / "theirs"))
    assert theirs.dtype == np.dtype(dtype)
    for i in (0, 19):
        np.testing.assert_array_equal(theirs.document(i), documents[i][0])


def test_a_pair_of_two_sequences(tmp_path, book_documents):
    """The second pointer of a pair of exactly two sequences is the first one's byte length."""
    _, ids = book_documents
    prefix = write_pair(tmp_path / "two", [[ids[0]], [ids[1]]])
    ds = IndexedDataset(prefix)
    ds.verify()
    assert ds.sequence_pointers.tolist() == [0, 2 * len(ids[0])]
    assert [doc[0].tolist() for doc in read_megatron_pair(prefix)] == [ids[0].tolist(),
                                                                     ids[1].tolist()]


def test_bulk_add_of_no_documents_changes_nothing(tmp_path, book_documents):
    _, ids = book_documents
    one = write_pair(tmp_path / "one", [[d] for d in ids[:3]])
    with IndexedDatasetWriter(str(tmp_path / "bulk"), np.uint16) as writer:
        writer.add_documents(np.zeros(0, np.uint16), np.zeros(0, np.int64))
        writer.add_documents(np.concatenate(ids[:3]), [len(d) for d in ids[:3]])
        writer.add_documents(np.zeros(0, np.uint16), [])
    for ext in (".bin", ".idx"):
        assert open(one + ext, "rb").read() == open(str(tmp_path / "bulk") + ext, "rb").read()


def test_empty_documents_and_sequences_read_as_empty(tmp_path, book_documents):
    _, ids = book_documents
    prefix = write_pair(tmp_path / "gaps", [[ids[0]], [], [ids[1][:0], ids[1]], []])
    ds = IndexedDataset(prefix)
    ds.verify(vocab_size=50257)
    assert ds.num_documents == 4 and ds.document_lengths().tolist() == [
        len(ids[0]), 0, len(ids[1]), 0]
    assert [len(s) for s in ds.document_sequences(2)] == [0, len(ids[1])]
    np.testing.assert_array_equal(ds.document(2), ids[1])
    assert len(ds.document(3)) == 0


def test_negative_and_out_of_range_document_numbers(real_pair, book_documents):
    _, ids = book_documents
    ds = IndexedDataset(real_pair)
    np.testing.assert_array_equal(ds.document(-1), ids[39])
    np.testing.assert_array_equal(ds.document(-40), ids[0])
    np.testing.assert_array_equal(ds.sequence(0), ids[0][:7])
    np.testing.assert_array_equal(ds[-1], ids[39][7:])
    for i in (40, -41):  # the message names the number asked for, not its shifted index
        with pytest.raises(IndexError, match=rf"document {i} out of range \[-40, 40\)"):
            ds.document(i)
    with pytest.raises(IndexError, match=r"token span \[5, 4\) outside"):
        ds.tokens(5, -1)
    np.testing.assert_array_equal(ds.tokens(0, 3), ids[0][:3])


def test_token_id_zero_is_inside_every_vocabulary(tmp_path, book_documents, gpt2_tokenizer):
    """GPT-2's id 0 is "!", a real token of the book: the smallest id passes the check."""
    _, ids = book_documents
    assert gpt2_tokenizer.decode([0]) == "!"
    with_zero = [d for d in ids if 0 in d.tolist()]
    assert with_zero
    prefix = write_pair(tmp_path / "bang", [[d] for d in with_zero])
    IndexedDataset(prefix).verify(vocab_size=50257)
    IndexedDataset(write_pair(tmp_path / "edge", [[np.array([0, 65535])]])).verify(65536)


@pytest.mark.parametrize("entry, value, got", [(0, 1, "got 1..80"), (-1, 79, "got 0..79")])
def test_document_index_must_start_at_zero_and_end_at_the_sequence_count(
        real_pair, entry, value, got):
    """Either end alone wrong is refused at open, and the message shows both ends as read."""
    at = 34 + 12 * 80 + 8 * (entry % 41)  # 80 sequences, 41 document-index entries
    rewrite(real_pair + ".idx", lambda d: d[:at] + struct.pack("<q", value) + d[at + 8:])
    with pytest.raises(FormatError, match=rf"p.idx: document index must run from 0 to 80, {got}$"):
        IndexedDataset(real_pair)


def test_bulk_writer_counts_its_tokens(tmp_path, book_documents):
    _, ids = book_documents
    with IndexedDatasetWriter(str(tmp_path / "bulk"), np.uint16) as writer:
        writer.add_documents(np.concatenate(ids[:25]), [len(d) for d in ids[:25]])
        writer.add_document([ids[25]])
        assert writer.tokens == sum(len(d) for d in ids[:26])
        info = writer.finalize()
    assert info.tokens == IndexedDataset(str(tmp_path / "bulk")).num_tokens


def test_empty_token_spans_at_either_end(real_pair):
    ds = IndexedDataset(real_pair)
    assert len(ds.tokens(0, 0)) == 0 and len(ds.tokens(ds.num_tokens, 0)) == 0
    with pytest.raises(IndexError, match=rf"token span \[{ds.num_tokens}, {ds.num_tokens + 1}\)"):
        ds.tokens(ds.num_tokens, 1)


def test_the_first_id_outside_the_vocabulary_is_named_not_a_small_one(tmp_path, book_documents):
    """Id 0 ("!") before the first EOD in the same check: the EOD is named, not the "!"."""
    _, ids = book_documents
    bang = next(d for d in ids if 0 in d.tolist())
    prefix = write_pair(tmp_path / "p", [[bang[:-1]], [ids[0]]])  # the "!" document, EOD cut
    position = len(bang) - 1 + len(ids[0]) - 1
    with pytest.raises(FormatError, match=rf"token id 50256 \(document 1, token {position}\)"):
        IndexedDataset(prefix).verify(vocab_size=50256)


def test_a_sequence_pointer_outside_the_data_names_the_data_size(real_pair):
    ds = IndexedDataset(real_pair)
    size = os.path.getsize(real_pair + ".bin")
    pos = 34 + 4 * ds.num_sequences + 8 * 3
    del ds
    rewrite(real_pair + ".idx", lambda d: d[:pos] + struct.pack("<q", 10**9) + d[pos + 8:])
    with pytest.raises(FormatError, match=rf"outside the {size} bytes of the data file"):
        IndexedDataset(real_pair).sequence(3)


def test_document_metadata_is_found_across_shards_and_row_groups(
    tmp_path, book_documents, monkeypatch
):
    """Each shard of Alice's paragraphs gets a sidecar written in row groups of 7 rows: every
    document's row comes back by its global number, and the set verifies."""
    import pyarrow.parquet as pq

    from dataset_format import sidecar

    monkeypatch.setattr(sidecar, "ROW_GROUP_ROWS", 7)
    paragraphs, ids = book_documents
    paragraphs, ids = paragraphs[:60], ids[:60]
    directory = tmp_path / "set"
    directory.mkdir()
    rows = [
        {"id": f"books:11-0.txt#{i}", "input": str(CORPORA / "books" / "11-0.txt"), "url": "",
         "title": paragraph[:40], "language": "en", "language_score": 0.5, "tokens": len(doc)}
        for i, (paragraph, doc) in enumerate(zip(paragraphs, ids))
    ]
    infos = []
    for k, (start, end) in enumerate(((0, 25), (25, 60))):
        prefix = write_pair(directory / f"shard-{k:05d}", [[d] for d in ids[start:end]])
        writer = sidecar.SidecarWriter(sidecar.sidecar_name(prefix))
        for row in rows[start:end]:
            writer.add(row)
        infos.append(dataclasses.replace(shard_info(prefix), meta=writer.finalize()))
    write_shard_set_manifest(str(directory), infos, dtype="uint16", sequence_unit="document")
    assert pq.ParquetFile(directory / "shard-00001.meta.parquet").metadata.num_row_groups == 5
    ss = ShardSet(str(directory))
    ss.verify()
    assert [ss.document_metadata(i) for i in range(60)] == rows
    assert ss.document_metadata(-1) == rows[-1]


def test_the_very_first_token_is_checked_against_the_vocabulary(tmp_path, book_documents):
    """A pair that opens with an EOD (a document of the EOD alone): token 0 is named."""
    _, ids = book_documents
    prefix = write_pair(tmp_path / "p", [[ids[0][-1:]], [ids[1]]])
    with pytest.raises(FormatError, match=r"token id 50256 \(document 0, token 0\)"):
        IndexedDataset(prefix).verify(vocab_size=50256)


def test_one_sequence_whose_length_runs_past_the_data_is_refused(real_pair):
    """sequence(j) alone checks its length too: sequence 3 of 80 claiming 10**6 tokens (its
    pointer in range) is refused, not cut short at the end of the data."""
    ds = IndexedDataset(real_pair)
    pointer = int(ds.sequence_pointers[3])
    pos = 34 + 4 * 3
    del ds
    rewrite(real_pair + ".idx", lambda d: d[:pos] + struct.pack("<i", 10**6) + d[pos + 4 :])
    ds = IndexedDataset(real_pair)
    with pytest.raises(FormatError, match=f"sequence 3 points to byte {pointer} with 1000000 tokens"):
        ds.sequence(3)


def test_merging_one_pair_copies_it(real_pair, tmp_path):
    info = merge_indexed([real_pair], str(tmp_path / "copy"))
    assert info == shard_info(str(tmp_path / "copy"))
    assert (info.bin_sha256, info.documents) == (shard_info(real_pair).bin_sha256, 40)
