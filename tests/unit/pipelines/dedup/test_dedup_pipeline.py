"""The in-process tests of what tests/integration/test_dedup_pipeline.py covers (that file holds the
tests that start a process or run a Beam pipeline, and says what they cover)."""

from __future__ import annotations

import collections

import pytest
from apache_beam import pvalue

from pipelines.dedup import DedupConfig, shingles, verify
from pipelines.document import Document
from tests.helpers.dedup_corpus import (
    PlantedCorpus,
    edit_words,
    paragraphs_of_book,
    planted_corpus,
)


@pytest.fixture(scope="module")
def corpus() -> PlantedCorpus:
    return planted_corpus()


def test_planted_copies_have_the_similarities_they_were_made_with(corpus):
    by_id = {d.id: d for d in corpus.docs}

    def similarity(a: str, b: str) -> float:
        return shingles.jaccard(
            shingles.shingle_set(by_id[a].text), shingles.shingle_set(by_id[b].text)
        )

    assert similarity("books:moby:003", "books:moby:003-edited") > 0.85
    assert similarity("books:alice:002", "books:alice:002-shuffled") > 0.9
    assert similarity("wikipedia:enwiki:2", "webtext:wiki-copy") > 0.95
    assert 0.3 < similarity("books:moby:020", "books:moby:020-rewritten") < 0.7
    # the chain's far ends are further apart than either step
    assert similarity("books:moby:010", "books:moby:010-copy2") < similarity(
        "books:moby:010", "books:moby:010-copy1"
    )


def test_a_hot_bucket_centre_sends_its_shingle_set_once():
    # A hot bucket chained to its smallest member: 30 edges (centre, leaf). The centre receives
    # every leaf's set; its own set is built and sent once, not once per edge.
    paragraphs = paragraphs_of_book("2701-0.txt")[:31]
    docs = [Document(f"books:hot:{i:02d}", "books", p) for i, p in enumerate(paragraphs)]
    nodes = [(0, d.id) for d in docs]
    edges = [(nodes[0], leaf) for leaf in nodes[1:]]
    roles, _ = verify.bucket_roles(_role_values(edges))  # the bucket's table
    fn = verify.PairShinglesFn(DedupConfig(batch_docs=8), "unused")
    fn.start_bundle()
    out = [o for d in docs for o in fn.pair_sets(d, roles)]
    out += [o.value for o in fn.finish_bundle() if not isinstance(o, pvalue.TaggedOutput)]
    sent = [o for o in out if isinstance(o, tuple)]
    assert len(sent) == 1 + 30  # the centre's own set, and one set per edge
    senders = [node[1] for _, (_, (node, _)) in sent]
    assert collections.Counter(senders) == collections.Counter(d.id for d in docs)
    assert {key for key, _ in sent} == {docs[0].id}  # everything goes to the centre
    assert [tag for _, (tag, _) in sent].count("own") == 1


def _role_values(edges):
    """The values RolesFn sends a verification group for these edges (one bucket)."""
    fn = verify.RolesFn(1)
    fn.start_bundle()
    sent = [
        r for e in edges for r in fn.process((e, None)) if not isinstance(r, pvalue.TaggedOutput)
    ]
    assert {bucket for bucket, _ in sent} == {0}
    return [value for _, value in sent]


def test_the_roles_table_holds_each_role_of_a_document_once():
    # A hot bucket's centre receives from 30 leaves and a chain a < b < c: b receives from c and
    # sends to a; an edge repeated sends its roles twice.
    nodes = [(0, f"books:hot:{i:02d}") for i in range(31)]
    a, b, c = (1, "webtext:a"), (1, "webtext:b"), (1, "webtext:c")
    edges = [(nodes[0], leaf) for leaf in nodes[1:]] + [(a, b), (b, c), (a, b)]
    values = _role_values(edges)
    table, names = verify.bucket_roles([*values, ("stash", "b1.stash"), ("stash", "a0.stash")])
    assert names == ["a0.stash", "b1.stash"]
    assert table[nodes[0][1]] == (verify.RECEIVES,)
    assert all(table[leaf[1]] == (nodes[0],) for leaf in nodes[1:])
    assert table[a[1]] == (verify.RECEIVES,)
    assert table[b[1]] == (verify.RECEIVES, a) and table[c[1]] == (b,)
    assert len(table) == 31 + 3


def test_verification_pairs_each_receiver_with_its_senders_never_with_itself():
    """Issue 27 (mutation survivor): a receiver's own set in its verify group must not be taken
    for a sender's. A real paragraph receives from two edited copies of itself and from three
    other paragraphs; only the copies are similar, each pair is emitted once with its exact
    Jaccard, and no document is paired with itself."""
    paragraphs = paragraphs_of_book("2701-0.txt")
    centre = next(p for p in paragraphs if len(p.split()) > 200)
    others = [p for p in paragraphs if p != centre][:3]
    texts = [centre, edit_words(centre, 0.01, 1), edit_words(centre, 0.02, 2), *others]
    docs = [Document(f"books:v:{i}", "books", t) for i, t in enumerate(texts)]
    nodes = [(0, d.id) for d in docs]
    roles, _ = verify.bucket_roles(_role_values([(nodes[0], leaf) for leaf in nodes[1:]]))
    pair_fn = verify.PairShinglesFn(DedupConfig(batch_docs=8), "unused")
    pair_fn.start_bundle()
    sent = [o for d in docs for o in pair_fn.pair_sets(d, roles)]
    sent += [o.value for o in pair_fn.finish_bundle() if not isinstance(o, pvalue.TaggedOutput)]
    values = [value for _, value in sent if isinstance(value, tuple)]
    fn = verify.VerifyFn(0.7)
    fn.start_bundle()
    out = list(fn.process((docs[0].id, values)))
    edges = [o.value for o in out if isinstance(o, pvalue.TaggedOutput) and o.tag == "edges"]
    matches = [o for o in out if not isinstance(o, pvalue.TaggedOutput)]
    assert edges == [(nodes[0], nodes[1]), (nodes[0], nodes[2])]
    sets = [shingles.shingle_set(t) for t in texts]
    expected = [shingles.jaccard(sets[i], sets[0]) for i in (1, 2)]
    assert all(j >= 0.7 for j in expected)
    assert matches == [
        (docs[0].id, (expected[0], docs[1].id)),
        (docs[1].id, (expected[0], docs[0].id)),
        (docs[0].id, (expected[1], docs[2].id)),
        (docs[2].id, (expected[1], docs[0].id)),
    ]
    assert all(a != b for a, (_, b) in matches)
