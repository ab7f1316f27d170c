"""The web preset's filters on real article pages (../shared/corpora/web/aeb-dev): an article
whose text repeats lines of its own (a Q&A's labels, a deals list's "Buy Now") is not
boilerplate and reaches the shards; a page of repeated blocks still does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.clean import EXTRACTOR_META, CleanConfig, clean_document
from pipelines.document import Document, Reject

AEB_DEV = Path(__file__).resolve().parents[1].parent / "shared" / "corpora" / "web" / "aeb-dev"
WEB = CleanConfig.for_source("webtext", language="any")


@pytest.fixture(scope="module")
def articles() -> dict[str, str]:
    """Human-checked article text by page id."""
    truth = json.loads((AEB_DEV / "ground-truth.subset.json").read_text(encoding="utf-8"))
    return {page_id: entry["articleBody"] for page_id, entry in truth.items()}


def _page(text: str) -> Document:
    return Document("webtext:page", "webtext", text, meta={EXTRACTOR_META: "trafilatura"})


def _article(articles: dict[str, str], prefix: str) -> str:
    (text,) = [text for page_id, text in articles.items() if page_id.startswith(prefix)]
    return text


def test_an_article_of_questions_and_answers_is_kept(articles):
    """A real article's paragraphs set as a Q&A, each answer under its label ("Answer:"): the
    labels are a third of the lines (gopher_duplicate_lines 0.317 > 0.3 dropped it), one per
    cent of the characters. The article reaches the shards whole."""
    article = _article(articles, "cc4aa22b8212")  # 1,861 words
    paragraphs = [p for p in article.split("\n") if len(p.split()) > 12][:20]
    assert len(paragraphs) == 20
    qa = "\n".join(f"Question {i}?\nAnswer:\n{p}" for i, p in enumerate(paragraphs))
    kept = clean_document(_page(qa), WEB)
    assert isinstance(kept, Document), kept
    assert all(p in kept.text for p in paragraphs)


def test_a_deals_article_whose_products_repeat_their_buttons_is_kept(articles):
    """BGR's Black Friday deals as the benchmark's people checked them: "Buy Now", "Available
    from Amazon", "BGR may receive a commission" under each product, 30% of its lines."""
    deals = _article(articles, "e7d77f186980")
    assert deals.split("\n").count("Buy Now") == 10
    kept = clean_document(_page(deals), WEB)
    assert isinstance(kept, Document), kept


def test_a_page_of_repeated_blocks_is_still_dropped(articles):
    """The same article's paragraphs repeated as whole blocks (a page that is one block over
    and over): the repeated characters drop it."""
    article = _article(articles, "cc4aa22b8212")
    paragraphs = [p for p in article.split("\n") if len(p.split()) > 12][:5]
    page = "\n".join(paragraphs * 4)
    dropped = clean_document(_page(page), WEB)
    assert isinstance(dropped, Reject)
    assert dropped.reason.startswith("gopher_duplicate")
