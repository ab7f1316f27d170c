"""Real documents whose cleaning a test breaks on purpose: the dump articles of
../shared/corpora and a normalisation that raises on one of them (tests of batched language
identification, in-process and through the clean stage's Beam transform)."""

from __future__ import annotations

import functools

import pipelines.clean as clean
from pipelines.document import Document
from tests.conftest import CORPORA

BROKEN = "broken"


@functools.cache
def dump_articles() -> tuple[Document, ...]:
    """Every article of the shared Wikipedia dumps, as the wikipedia source reads them."""
    from pipelines.sources import get_source

    wikipedia = get_source("wikipedia")
    return tuple(
        record
        for path in sorted((CORPORA / "wikipedia").iterdir())
        for task in wikipedia.plan(str(path), {})
        for record in wikipedia.read(task)
        if isinstance(record, Document)
    )


def failure_docs() -> list[Document]:
    """Real dump articles in four languages' worth of outcomes (kept, language, too short)."""
    return [
        Document(doc.id, "wikipedia", doc.text, meta=dict(doc.meta))
        for doc in dump_articles()[::25]
    ]


def break_one(monkeypatch, docs: list[Document]) -> Document:
    """Make normalisation raise on one document (by its text) and return it."""
    victim = docs[len(docs) // 2]
    real = clean.normalize_text

    def normalize(text):
        if text == victim.text:
            raise ValueError(BROKEN)
        return real(text)

    monkeypatch.setattr(clean, "normalize_text", normalize)
    return victim
