"""Exact-Jaccard verification of candidate pairs (pipelines/dedup/verify.py) on real paragraphs:
its steps one by one, and `verified` as a small Beam pipeline of its own (a few seconds, so that
bench/mutate.py can run it once per mutant)."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipelines.dedup import DedupConfig
from pipelines.dedup.shingles import jaccard, pack_set, shingle_set
from pipelines.dedup.stash import StashDoFn
from pipelines.dedup.verify import (
    RECEIVES,
    PairShinglesFn,
    RolesFn,
    VerifyFn,
    bucket_roles,
    own_shingles,
    verified,
)
from pipelines.document import Document, bucket_of
from tests.shard_fixtures import book_paragraphs


def _documents() -> dict[str, Document]:
    """Moby-Dick paragraphs: a, an edit of a with a few words changed (a near duplicate), a
    second edit of a with half of it rewritten (not one), b, and c, unrelated to either."""
    a, b, c = book_paragraphs()[10], book_paragraphs()[20], book_paragraphs()[30]
    words = a.split()
    near = " ".join("harpoon" if i == len(words) // 2 else w for i, w in enumerate(words))
    far = " ".join(words[: len(words) // 2] + c.split()[: len(words) // 2])
    texts = {"books:a": a, "books:a-near": near, "books:a-far": far, "books:b": b, "books:c": c}
    return {i: Document(id=i, source="books", text=t) for i, t in texts.items()}


def _node(doc_id: str) -> tuple[int, str]:
    return (0, doc_id)  # no source priority: every source ranks 0


def _similarity(docs, x: str, y: str) -> float:
    return jaccard(shingle_set(docs[x].text), shingle_set(docs[y].text))


def test_a_buckets_roles_hold_every_role_once_receiver_first():
    # a receives from b and from a-near, a-near from b (the edge (a, b) sent twice); the roles
    # go to the bucket of the document they are about
    fn = RolesFn(4)
    fn.start_bundle()
    edges = [
        ("books:a", "books:b"),
        ("books:a", "books:a-near"),
        ("books:a-near", "books:b"),
        ("books:a", "books:b"),
    ]
    sent = [
        out
        for u, v in edges
        for out in fn.process(((_node(u), _node(v)), None))
        if not hasattr(out, "tag")
    ]
    assert all(bucket == bucket_of(doc_id, 4) for bucket, (_, (doc_id, _)) in sent)
    table, names = bucket_roles([value for _, value in sent] + [("stash", "n.stash")])
    assert table == {
        "books:a": (RECEIVES,),
        "books:a-near": (RECEIVES, _node("books:a")),
        "books:b": (_node("books:a"), _node("books:a-near")),
    }
    assert names == ["n.stash"]


def test_own_shingles_is_the_receivers_own_set_wherever_it_comes():
    values = [
        ("in", (_node("books:b"), b"theirs")),
        ("own", (_node("books:a"), b"mine")),
        ("in", (_node("books:c"), b"other")),
    ]
    assert own_shingles(values, "books:a") == (_node("books:a"), b"mine")
    with pytest.raises(AssertionError, match="'books:a' is in a candidate pair but has no"):
        own_shingles(values[:1], "books:a")


def test_pair_shingles_sends_each_set_where_the_roles_say():
    docs = _documents()
    roles = {
        "books:a": (RECEIVES,),
        "books:a-near": (RECEIVES, _node("books:a")),
        "books:b": (_node("books:a"), _node("books:a-near")),
        "books:c": (),
    }
    fn = PairShinglesFn(DedupConfig(), "unused")
    fn.start_bundle()
    sent = [out for doc in docs.values() for out in fn.pair_sets(doc, roles)]
    sent += [out.value for out in fn.finish_bundle() if not hasattr(out, "tag")]
    packed = {i: pack_set(shingle_set(d.text)) for i, d in docs.items()}
    assert sorted(sent) == sorted(
        [
            ("books:a", ("own", (_node("books:a"), packed["books:a"]))),
            ("books:a-near", ("own", (_node("books:a-near"), packed["books:a-near"]))),
            ("books:a", ("in", (_node("books:a-near"), packed["books:a-near"]))),
            ("books:a", ("in", (_node("books:b"), packed["books:b"]))),
            ("books:a-near", ("in", (_node("books:b"), packed["books:b"]))),
        ]
    )


def test_verify_keeps_the_senders_at_or_above_the_threshold():
    docs = _documents()
    near = _similarity(docs, "books:a", "books:a-near")
    far = _similarity(docs, "books:a", "books:a-far")
    assert far < 0.8 <= near < 1
    packed = {i: pack_set(shingle_set(d.text)) for i, d in docs.items()}
    group = [("in", (_node(i), packed[i])) for i in ("books:a-near", "books:a-far", "books:b")]
    group.insert(1, ("own", (_node("books:a"), packed["books:a"])))
    for threshold in (near, 0.8):  # a pair exactly at the threshold is kept
        fn = VerifyFn(threshold)
        fn.start_bundle()
        out = list(fn.process(("books:a", group)))
        assert [o.value for o in out if getattr(o, "tag", None) == "edges"] == [
            (_node("books:a"), _node("books:a-near"))
        ]
        assert [o for o in out if not hasattr(o, "tag")] == [
            ("books:a", (near, "books:a-near")),
            ("books:a-near", (near, "books:a")),
        ]
    fn = VerifyFn(far)
    fn.start_bundle()
    assert len([o for o in fn.process(("books:a", group)) if hasattr(o, "tag")]) == 2


def test_verified_pipeline_keeps_the_near_duplicate_pairs(tmp_path):
    docs = _documents()
    near = _similarity(docs, "books:a", "books:a-near")
    near_far = _similarity(docs, "books:a-far", "books:a-near")
    assert near_far < 0.8
    # Candidate edges (u, v), u < v: a receives from two senders, a-far sends to two receivers.
    edges = [
        ("books:a", "books:a-near"),
        ("books:a", "books:a-far"),
        ("books:a", "books:b"),
        ("books:a-far", "books:a-near"),
        ("books:b", "books:c"),
    ]
    with beam.Pipeline() as p:
        distinct = p | "Edges" >> beam.Create([((_node(u), _node(v)), None) for u, v in edges])
        documents = p | "Docs" >> beam.Create(list(docs.values()))
        names = documents | "Stash" >> beam.ParDo(StashDoFn(str(tmp_path), 3))
        counts: list = []
        out = verified(distinct, (names, str(tmp_path), 3), DedupConfig(), counts)
        assert_that(
            out.edges, equal_to([(_node("books:a"), _node("books:a-near"))]), label="Edges kept"
        )
        assert_that(
            out.sent,
            equal_to([("books:a", (near, "books:a-near")), ("books:a-near", (near, "books:a"))]),
            label="Best-match candidates",
        )
