"""What `dataset_format/indexed.py` means, at its edges, on real GPT-2 ids of the shared books:
the bytes a writer puts on disk, every index and span a reader takes or refuses, the message of
each fault (a reader of the message acts on its numbers), and the names a writer leaves while
it works. Written from the mutants its older tests let live (bench/mutate.py)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

from common.output_dir import base_name
from dataset_format.indexed import (
    HEADER,
    MAGIC,
    FormatError,
    IndexedDataset,
    IndexedDatasetWriter,
    bin_path,
    dtype_for_vocab,
    idx_path,
    merge_indexed,
    shard_info,
)
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
EOD = 50256


@pytest.fixture(scope="module")
def documents(gpt2_tokenizer) -> list[np.ndarray]:
    """Twelve paragraphs of A Modest Proposal as GPT-2 ids, EOD appended."""
    text = (CORPORA / "books" / "pg1080.txt").read_text(encoding="utf-8-sig")
    paragraphs = [p.strip() for p in text.split("\n\n") if len(p.strip()) > 200][:12]
    assert len(paragraphs) == 12
    return [np.array(e.ids + [EOD]) for e in gpt2_tokenizer.encode_batch(paragraphs)]


def _write(prefix: Path, docs, dtype=np.uint16) -> IndexedDataset:
    with IndexedDatasetWriter(str(prefix), dtype) as writer:
        for doc in docs:
            writer.add_document(doc)
    return IndexedDataset(str(prefix))


def test_the_index_bytes_are_megatrons_layout(tmp_path, documents):
    """Header, int32 lengths, int64 byte pointers, int64 document index, nothing else; the
    .bin the ids in order. Two documents of 2 and 1 sequences."""
    a, b = documents[0], documents[1]
    ds = _write(tmp_path / "p", [[a[:5], a[5:]], [b]])
    idx = Path(idx_path(ds.prefix)).read_bytes()
    assert idx[:HEADER.size] == HEADER.pack(MAGIC, 1, 8, 3, 3)
    body = idx[HEADER.size:]
    lengths = np.frombuffer(body[:12], "<i4").tolist()
    pointers = np.frombuffer(body[12:36], "<i8").tolist()
    assert lengths == [5, len(a) - 5, len(b)]
    assert pointers == [0, 10, 2 * len(a)]
    assert np.frombuffer(body[36:], "<i8").tolist() == [0, 2, 3]
    assert len(body) == 36 + 24
    tokens = np.fromfile(bin_path(ds.prefix), "<u2")
    assert tokens.tolist() == np.concatenate([a, b]).tolist()
    # int32 ids: pointers count 4 bytes a token
    wide = _write(tmp_path / "w", [[a[:5], a[5:]], [b]], np.int32)
    assert wide.sequence_pointers.tolist() == [0, 20, 4 * len(a)]
    assert wide.sequence_offsets().tolist() == [0, 5, len(a), len(a) + len(b)]


def test_one_document_of_one_sequence(tmp_path, documents):
    ds = _write(tmp_path / "one", [[documents[2]]])
    assert ds.sequence_pointers.tolist() == [0]
    assert (ds.num_documents, ds.num_sequences, ds.num_tokens) == (1, 1, len(documents[2]))
    assert ds.document(0).tolist() == documents[2].tolist()
    ds.verify(vocab_size=EOD + 1)


def test_an_empty_pair_opens_verifies_and_refuses_every_index(tmp_path):
    ds = _write(tmp_path / "empty", [])
    assert (ds.num_documents, ds.num_sequences, ds.num_tokens, len(ds)) == (0, 0, 0, 0)
    ds.verify(vocab_size=1)
    assert ds.document_lengths().tolist() == []
    assert ds.tokens(0, 0).tolist() == []
    for call in (lambda: ds.document(0), lambda: ds.sequence(0), lambda: ds.tokens(0, 1)):
        with pytest.raises(IndexError):
            call()


def test_empty_documents_between_real_ones(tmp_path, documents):
    ds = _write(tmp_path / "gaps", [[documents[0]], [], [documents[1]], []])
    assert ds.num_documents == 4 and ds.num_sequences == 2
    assert ds.document_lengths().tolist() == [len(documents[0]), 0, len(documents[1]), 0]
    assert ds.document(1).tolist() == [] and ds.document_sequences(3) == []
    assert ds.document(2).tolist() == documents[1].tolist()
    ds.verify()


def test_every_index_in_range_reads_and_one_past_each_end_is_refused(tmp_path, documents):
    docs = documents[:5]
    ds = _write(tmp_path / "p", [[d[:3], d[3:]] for d in docs])
    for i in range(-5, 5):
        assert ds.document(i).tolist() == docs[i].tolist()
        assert [s.tolist() for s in ds.document_sequences(i)] == [docs[i][:3].tolist(),
                                                                  docs[i][3:].tolist()]
    assert ds[0].tolist() == docs[0][:3].tolist() and ds[-1].tolist() == docs[-1][3:].tolist()
    for bad in (5, -6):
        with pytest.raises(IndexError, match=rf": document {bad} out of range \[-5, 5\)$"):
            ds.document(bad)
        with pytest.raises(IndexError, match=rf": document {bad} out of range \[-5, 5\)$"):
            ds.document_sequences(bad)
    for bad in (10, -11):
        with pytest.raises(IndexError, match=rf": sequence {bad} out of range \[-10, 10\)$"):
            ds.sequence(bad)


def test_token_spans_up_to_the_end_and_not_past_it(tmp_path, documents):
    ds = _write(tmp_path / "p", [[d] for d in documents[:3]])
    everything = np.concatenate(documents[:3]).tolist()
    n = len(everything)
    assert ds.tokens(0, n).tolist() == everything
    assert ds.tokens(n - 4, 4).tolist() == everything[-4:]
    assert ds.tokens(n, 0).tolist() == []
    for start, length in ((n - 3, 4), (-1, 1), (0, -1), (n + 1, 0)):
        with pytest.raises(IndexError, match=rf"token span \[{start}, {start + length}\) "
                                             rf"outside \[0, {n}\)$"):
            ds.tokens(start, length)


def test_the_vocabulary_check_names_the_first_id_outside_it(tmp_path, documents):
    """Ids are checked in chunks: the first id outside is named with its document and global
    position, whichever chunk it lies in; an id equal to the size is outside, one below is in."""
    docs = [documents[0][:-1], documents[1], documents[2]]  # EOD ends documents 1 and 2
    ds = _write(tmp_path / "p", [[d] for d in docs])
    first_eod = len(docs[0]) + len(docs[1]) - 1
    with pytest.raises(FormatError, match=rf"token id {EOD} \(document 1, token {first_eod}\) "
                                          rf"is outside the vocabulary of {EOD}$"):
        ds.verify(vocab_size=EOD)
    ds.verify(vocab_size=EOD + 1)
    biggest = int(np.concatenate(docs[:1]).max())
    with pytest.raises(FormatError, match=r"\(document 0, token \d+\)"):
        ds.check_token_ids(biggest)
    signed = _write(tmp_path / "s", [[np.array([5, 7])], [np.array([-3, 4])]], np.int32)
    with pytest.raises(FormatError, match=r"token id -3 \(document 1, token 2\)"):
        signed.check_token_ids(100)


def test_fault_messages_carry_the_numbers_found(tmp_path, documents):
    ds = _write(tmp_path / "p", [[d] for d in documents[:4]])
    total = ds.num_tokens
    sequences = ds.num_sequences
    prefix = ds.prefix
    del ds
    idx = Path(idx_path(prefix))
    original = idx.read_bytes()
    doc_index_at = HEADER.size + 12 * sequences
    last = doc_index_at + 8 * sequences
    idx.write_bytes(original[:last] + struct.pack("<q", 3))  # index ends at 3 of 4
    with pytest.raises(FormatError, match=r"document index must run from 0 to 4, got 0\.\.3$"):
        IndexedDataset(prefix)
    idx.write_bytes(original[:doc_index_at] + struct.pack("<q", 1) + original[doc_index_at + 8:])
    with pytest.raises(FormatError, match=r"document index must run from 0 to 4, got 1\.\.4$"):
        IndexedDataset(prefix)
    length_at = HEADER.size + 4 * 2  # sequence 2's length: one token more than the data holds
    idx.write_bytes(original[:length_at] + struct.pack("<i", total) + original[length_at + 4:])
    pointer = int(IndexedDataset(prefix).sequence_pointers[2])
    with pytest.raises(FormatError, match=rf"sequence 2 points to byte {pointer} with {total} "
                                          rf"tokens, outside the {2 * total} bytes of the data"):
        IndexedDataset(prefix).sequence(2)
    with pytest.raises(FormatError, match=r"sequence 3 points to byte \d+, expected \d+"):
        IndexedDataset(prefix).verify()
    idx.write_bytes(original)
    with open(bin_path(prefix), "ab") as f:
        f.write(b"\0\0")
    with pytest.raises(FormatError, match=rf"{2 * total + 2} bytes, longer than the "
                                          rf"{2 * total} the index describes$"):
        IndexedDataset(prefix)


def test_a_pointer_that_is_negative_or_odd_is_refused_by_sequence(tmp_path, documents):
    ds = _write(tmp_path / "p", [[d] for d in documents[:3]])
    prefix = ds.prefix
    del ds
    idx = Path(idx_path(prefix))
    original = idx.read_bytes()
    pointer_at = HEADER.size + 4 * 3 + 8 * 1  # sequence 1's pointer
    for bad in (-2, 1):
        idx.write_bytes(original[:pointer_at] + struct.pack("<q", bad) + original[pointer_at + 8:])
        with pytest.raises(FormatError, match=rf"sequence 1 points to byte {bad} with"):
            IndexedDataset(prefix).sequence(1)
    idx.write_bytes(original)
    assert IndexedDataset(prefix).sequence(0).tolist() == documents[0].tolist()


def test_a_writer_refuses_ids_its_dtype_cannot_hold_at_both_ends(tmp_path):
    with IndexedDatasetWriter(str(tmp_path / "u"), np.uint16) as writer:
        writer.add_document([np.array([0, 65535])])
        for bad in ([-1, 5], [3, 65536]):
            with pytest.raises(ValueError, match=rf"token ids \[{min(bad)}, {max(bad)}\] do not "
                                                 r"fit uint16"):
                writer.add_document([np.array(bad)])
    assert IndexedDataset(str(tmp_path / "u")).document(0).tolist() == [0, 65535]
    with IndexedDatasetWriter(str(tmp_path / "i"), np.int8) as writer:
        writer.add_document([np.array([-128, 127])])
        with pytest.raises(ValueError, match=r"\[-129, 0\] do not fit int8"):
            writer.add_document([np.array([-129, 0])])


def test_dtype_codes_and_the_uint16_limit(tmp_path):
    """The dtype code in the header is Megatron's for each integer dtype."""
    for dtype, code in ((np.uint8, 1), (np.int8, 2), (np.int16, 3), (np.int32, 4), (np.int64, 5),
                        (np.uint16, 8)):  # fmt: skip
        ds = _write(tmp_path / f"d{code}", [[np.array([1, 2])]], dtype)
        assert Path(idx_path(ds.prefix)).read_bytes()[17] == code
        assert ds.dtype == np.dtype(dtype)
    assert dtype_for_vocab(1) == np.uint16 and dtype_for_vocab(65499) == np.uint16
    assert dtype_for_vocab(65500) == np.int32
    with pytest.raises(ValueError, match="vocabulary size must be positive, got 0"):
        dtype_for_vocab(0)


def test_the_longest_sequence_the_index_holds_is_2_31_minus_1(tmp_path):
    """The .idx stores lengths as int32: a longer sequence is refused before anything is
    written; one of exactly 2**31-1 tokens passes that rule (and here fails the next one, the
    tokens given, without writing 4 GiB)."""
    with IndexedDatasetWriter(str(tmp_path / "p"), np.uint16) as writer:
        with pytest.raises(ValueError, match=r"a sequence longer than 2\*\*31-1 tokens"):
            writer.add_documents(np.zeros(0, np.uint16), [2**31])
        with pytest.raises(ValueError, match=r"lengths sum to 2147483647, but 0 tokens"):
            writer.add_documents(np.zeros(0, np.uint16), [2**31 - 1])
        writer.add_documents(np.array([7, 8, 9], np.uint16), [2, 1])
        assert (writer.documents, writer.tokens) == (2, 3)
    ds = IndexedDataset(str(tmp_path / "p"))
    assert [ds.document(i).tolist() for i in range(2)] == [[7, 8], [9]]


def test_a_writers_files_while_it_works_are_counted_as_its_pair(tmp_path, documents):
    """Until finalize, a writer's files have temporary names that the output folder's rule
    counts as the pair's own (so a killed run's leftovers are not foreign files); discard
    removes them, finalize renames them."""
    writer = IndexedDatasetWriter(str(tmp_path / "shard"), np.uint16)
    writer.add_document([documents[0]])
    names = sorted(os.listdir(tmp_path))
    assert [base_name(n) for n in names] == ["shard.bin"] and names != ["shard.bin"]
    writer.discard()
    assert os.listdir(tmp_path) == []
    with pytest.raises(RuntimeError, match="already finalized or discarded"):
        writer.add_document([documents[0]])
    writer = IndexedDatasetWriter(str(tmp_path / "shard"), np.uint16)
    writer.add_document([documents[0]])
    info = writer.finalize()
    assert sorted(os.listdir(tmp_path)) == ["shard.bin", "shard.idx"]
    assert info == shard_info(str(tmp_path / "shard"))
    with pytest.raises(RuntimeError, match="already finalized or discarded"):
        writer.finalize()


def test_a_failing_block_leaves_no_file(tmp_path, documents):
    with pytest.raises(KeyError):
        with IndexedDatasetWriter(str(tmp_path / "p"), np.uint16) as writer:
            writer.add_document([documents[0]])
            raise KeyError("stop")
    assert os.listdir(tmp_path) == []


def test_merging_keeps_order_and_refuses_mixed_dtypes(tmp_path, documents):
    a = _write(tmp_path / "a", [[d] for d in documents[:3]])
    b = _write(tmp_path / "b", [[documents[3][:4], documents[3][4:]], [documents[4]]])
    info = merge_indexed([a.prefix, b.prefix], str(tmp_path / "m"))
    merged = IndexedDataset(str(tmp_path / "m"))
    assert [merged.document(i).tolist() for i in range(5)] == [d.tolist() for d in documents[:5]]
    assert merged.document_index.tolist() == [0, 1, 2, 3, 5, 6]
    assert (info.documents, info.sequences, info.tokens) == (5, 6, a.num_tokens + b.num_tokens)
    merged.verify(vocab_size=EOD + 1)
    wide = _write(tmp_path / "w", [[documents[0]]], np.int32)
    with pytest.raises(ValueError, match="cannot merge pairs of different dtypes"):
        merge_indexed([a.prefix, wide.prefix], str(tmp_path / "x"))
    with pytest.raises(ValueError, match="needs at least one input"):
        merge_indexed([], str(tmp_path / "y"))
    assert not any(n.startswith(("x", "y")) for n in os.listdir(tmp_path))
