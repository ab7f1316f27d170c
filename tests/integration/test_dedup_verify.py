"""The tests of tests/unit/pipelines/dedup/test_dedup_verify.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to

from pipelines.dedup import DedupConfig
from pipelines.dedup.stash import StashDoFn
from pipelines.dedup.verify import (
    verified,
)
from tests.helpers.dedup_verify import node, planted_documents, similarity


def test_verified_pipeline_keeps_the_near_duplicate_pairs(tmp_path):
    docs = planted_documents()
    near = similarity(docs, "books:a", "books:a-near")
    near_far = similarity(docs, "books:a-far", "books:a-near")
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
        distinct = p | "Edges" >> beam.Create([((node(u), node(v)), None) for u, v in edges])
        documents = p | "Docs" >> beam.Create(list(docs.values()))
        names = documents | "Stash" >> beam.ParDo(StashDoFn(str(tmp_path), 3))
        counts: list = []
        out = verified(distinct, (names, str(tmp_path), 3), DedupConfig(), counts)
        assert_that(
            out.edges, equal_to([(node("books:a"), node("books:a-near"))]), label="Edges kept"
        )
        assert_that(
            out.sent,
            equal_to([("books:a", (near, "books:a-near")), ("books:a-near", (near, "books:a"))]),
            label="Best-match candidates",
        )
