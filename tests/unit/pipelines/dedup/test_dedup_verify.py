"""Exact-Jaccard verification of candidate pairs (pipelines/dedup/verify.py) on real paragraphs:
its steps one by one, and `verified` as a small Beam pipeline of its own (a few seconds, so that
bench/mutate.py can run it once per mutant)."""

from __future__ import annotations

import pytest

from pipelines.dedup import DedupConfig
from pipelines.dedup.shingles import pack_set, shingle_set
from pipelines.dedup.verify import (
    RECEIVES,
    PairShinglesFn,
    RolesFn,
    VerifyFn,
    bucket_roles,
    own_shingles,
)
from pipelines.document import bucket_of
from tests.helpers.dedup_verify import node, planted_documents, similarity


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
        for out in fn.process(((node(u), node(v)), None))
        if not hasattr(out, "tag")
    ]
    assert all(bucket == bucket_of(doc_id, 4) for bucket, (_, (doc_id, _)) in sent)
    table, names = bucket_roles([value for _, value in sent] + [("stash", "n.stash")])
    assert table == {
        "books:a": (RECEIVES,),
        "books:a-near": (RECEIVES, node("books:a")),
        "books:b": (node("books:a"), node("books:a-near")),
    }
    assert names == ["n.stash"]


def test_own_shingles_is_the_receivers_own_set_wherever_it_comes():
    values = [
        ("in", (node("books:b"), b"theirs")),
        ("own", (node("books:a"), b"mine")),
        ("in", (node("books:c"), b"other")),
    ]
    assert own_shingles(values, "books:a") == (node("books:a"), b"mine")
    with pytest.raises(AssertionError, match="'books:a' is in a candidate pair but has no"):
        own_shingles(values[:1], "books:a")


def test_pair_shingles_sends_each_set_where_the_roles_say():
    docs = planted_documents()
    roles = {
        "books:a": (RECEIVES,),
        "books:a-near": (RECEIVES, node("books:a")),
        "books:b": (node("books:a"), node("books:a-near")),
        "books:c": (),
    }
    fn = PairShinglesFn(DedupConfig(), "unused")
    fn.start_bundle()
    sent = [out for doc in docs.values() for out in fn.pair_sets(doc, roles)]
    sent += [out.value for out in fn.finish_bundle() if not hasattr(out, "tag")]
    packed = {i: pack_set(shingle_set(d.text)) for i, d in docs.items()}
    assert sorted(sent) == sorted(
        [
            ("books:a", ("own", (node("books:a"), packed["books:a"]))),
            ("books:a-near", ("own", (node("books:a-near"), packed["books:a-near"]))),
            ("books:a", ("in", (node("books:a-near"), packed["books:a-near"]))),
            ("books:a", ("in", (node("books:b"), packed["books:b"]))),
            ("books:a-near", ("in", (node("books:b"), packed["books:b"]))),
        ]
    )


def test_verify_keeps_the_senders_at_or_above_the_threshold():
    docs = planted_documents()
    near = similarity(docs, "books:a", "books:a-near")
    far = similarity(docs, "books:a", "books:a-far")
    assert far < 0.8 <= near < 1
    packed = {i: pack_set(shingle_set(d.text)) for i, d in docs.items()}
    group = [("in", (node(i), packed[i])) for i in ("books:a-near", "books:a-far", "books:b")]
    group.insert(1, ("own", (node("books:a"), packed["books:a"])))
    for threshold in (near, 0.8):  # a pair exactly at the threshold is kept
        fn = VerifyFn(threshold)
        fn.start_bundle()
        out = list(fn.process(("books:a", group)))
        assert [o.value for o in out if getattr(o, "tag", None) == "edges"] == [
            (node("books:a"), node("books:a-near"))
        ]
        assert [o for o in out if not hasattr(o, "tag")] == [
            ("books:a", (near, "books:a-near")),
            ("books:a-near", (near, "books:a")),
        ]
    fn = VerifyFn(far)
    fn.start_bundle()
    assert len([o for o in fn.process(("books:a", group)) if hasattr(o, "tag")]) == 2
