"""What the unit and the integration tests of dedup_sizing share."""

from __future__ import annotations

from tests.conftest import CORPORA


def book_paragraphs(count: int) -> list[str]:
    text = (CORPORA / "books" / "11-0.txt").read_text(encoding="utf-8")
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if len(p.split()) >= 12]
    return paragraphs[:count]
