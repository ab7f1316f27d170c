"""The text's wait while dedup decides (pipelines/dedup/stash.py): stash files give back every
document as it was, find an id read twice without decompressing, refuse a damaged file in one
line, work through a remote store, and apply keeps one copy of an id read twice. And the LSH
band batches staged through files the same way (pipelines/dedup/bandfiles.py)."""

from __future__ import annotations

import pytest

from pipelines.dedup import lsh
from pipelines.dedup.bandfiles import BandFileWriter, read_chunks
from pipelines.dedup.stash import (
    FRAME_CHARS,
    StashDir,
    StashDoFn,
    stash_buckets,
    stash_documents,
    stash_ids,
)
from pipelines.document import Document, bucket_of
from tests.shard_fixtures import book_paragraphs


def _documents() -> list[Document]:
    """Real paragraphs (enough for several frames), and the awkward ones: non-Latin text with
    metadata, an empty text, a lone surrogate that cleaning let through."""
    docs = [Document(f"books:moby:{i:04d}", "books", p) for i, p in enumerate(book_paragraphs())]
    docs += [
        Document("wiki:1", "wikipedia", "Zürich – 東京\n\nΑθήνα", "https://x", "Zürich",
                 {"lang": "de", "source_language": "el"}),
        Document("web:empty", "webtext", ""),
        Document("web:surrogate", "webtext", "broken \udce9 byte"),
    ]  # fmt: skip
    return docs


def _stash(docs, work_dir: str, buckets: int) -> list[tuple[int, str]]:
    fn = StashDoFn(work_dir, buckets)
    fn.setup()
    fn.start_bundle()
    for doc in docs:
        fn.process(doc)
    return [(out.value[0], out.value[1][1]) for out in fn.finish_bundle()]


def test_stash_files_give_back_every_document_of_their_bucket_in_order(tmp_path):
    docs = _documents()
    assert sum(len(d.text) for d in docs) > 3 * FRAME_CHARS  # frames, not one block
    names = _stash(docs, str(tmp_path), 3)
    assert sorted(bucket for bucket, _ in names) == [0, 1, 2]
    stash = StashDir(str(tmp_path))
    for bucket, name in names:
        mine = [d for d in docs if bucket_of(d.id, 3) == bucket]
        assert list(stash.documents(name)) == mine
        assert stash.ids(name) == [d.id for d in mine]
        wanted = {d.id for d in mine[::3]}
        assert list(stash.documents(name, wanted)) == mine[::3]


def test_a_damaged_stash_file_is_refused_naming_it(tmp_path):
    (_, name), *_ = _stash(_documents(), str(tmp_path), 1)
    path = tmp_path / name
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(RuntimeError, match=f"{name}: cut short in a frame"):
        list(stash_documents(str(path)))
    path.write_bytes(b"PAR1" + data[4:])
    with pytest.raises(RuntimeError, match="not a dedup stash file"):
        stash_ids(str(path))


def test_a_remote_work_dir_takes_the_files_when_the_bundle_ends():
    docs = _documents()[:40]
    names = _stash(docs, "memory://stash-test/work", 2)
    stash = StashDir("memory://stash-test/work")
    back = [d for _, name in names for d in stash.documents(name)]
    assert sorted(back, key=lambda d: d.id) == sorted(docs, key=lambda d: d.id)


def test_buckets_grow_with_the_input_between_their_bounds():
    assert stash_buckets(0) == stash_buckets(8 << 20) == 16
    assert stash_buckets(37 << 30) == 37 * 16
    assert stash_buckets(1 << 50) == 1024


def test_band_files_give_back_each_band_batch_by_its_reference(tmp_path):
    # Real band batches of real paragraphs, written as two bundles write them and read back in
    # another order: each reference gives back its hashes and nodes, and a file cut short is
    # refused naming it.
    from pipelines.dedup.minhash import MinHasher, band_hashes
    from pipelines.dedup.shingles import shingle_batch

    texts = list(book_paragraphs()[:120])
    nodes = [(0, f"books:moby:{i:04d}") for i in range(len(texts))]
    bands = band_hashes(MinHasher(112, 1).signatures(shingle_batch(texts)), 14, 8)
    sent = []
    for half in (slice(0, 60), slice(60, None)):
        writer = BandFileWriter(str(tmp_path))
        for _, chunk in lsh.band_batches("", nodes[half], bands[half]):
            sent.append((writer.write(*chunk), chunk))
        writer.close()
    assert len({ref[0] for ref, _ in sent}) == 2  # a file a bundle
    refs = [ref for ref, _ in reversed(sent)]
    # read_chunks gives them back a file at a time, in offset order: sorted references' order
    chunks = read_chunks(str(tmp_path), refs)
    back = {(ref[0], ref[1]): chunk for ref, chunk in zip(sorted(refs), chunks)}
    assert all(back[(ref[0], ref[1])] == chunk for ref, chunk in sent)
    name = sent[-1][0][0]
    path = tmp_path / name
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(RuntimeError, match=f"{name}: cut short"):
        read_chunks(str(tmp_path), [sent[-1][0]])


def test_band_files_on_a_remote_work_dir():
    writer = BandFileWriter("memory://bands-test/work")
    ref = writer.write(b"\x01" * 16, b"nodes")
    writer.close()
    assert read_chunks("memory://bands-test/work", [ref]) == [(b"\x01" * 16, b"nodes")]
