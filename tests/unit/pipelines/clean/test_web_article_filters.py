"""The web preset's filters on real article pages (../shared/corpora/web/aeb-dev): an article
whose text repeats lines of its own (a Q&A's labels, a deals list's "Buy Now") is not
boilerplate and reaches the shards; a page of repeated blocks still does not."""

from __future__ import annotations

import html
import json

import pytest

from bench.bench_extract import bag_of_words_scores
from pipelines.clean import EXTRACTOR_META, CleanConfig, clean_document
from pipelines.document import Document, Reject
from pipelines.sources import source_traits
from pipelines.sources.web import htmltext
from tests.conftest import REPO

AEB_DEV = REPO.parent / "shared" / "corpora" / "web" / "aeb-dev"
WEB = CleanConfig.for_source(source_traits("webtext"), language="any")


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


def _aside_page(paragraphs: list[str]) -> str:
    """A page whose only <article> is a one-sentence notice and whose body stands in an
    <aside> (a block trafilatura's precision setting discards whole)."""
    notice = (
        "<p>This story was reprinted with permission from the original publisher, which "
        "retains all rights to it; please contact them first.</p>"
    )
    body = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    return (
        f"<html><body><article>{notice}</article><aside class='teaser'>{body}</aside></body></html>"
    )


def test_the_extractor_keeps_the_body_where_the_precision_setting_yields_a_sliver(articles):
    """The real article's 1,861 words in such a page: the precision setting keeps nothing of
    it, the page's text is the recall setting's, the whole article; a page of the notice
    alone stays what it is."""
    article = _article(articles, "cc4aa22b8212")
    paragraphs = [p for p in article.split("\n") if p.strip()]
    text = htmltext.main_text(_aside_page(paragraphs))
    assert all(p in text for p in paragraphs)
    assert bag_of_words_scores(text, article)[2] > 0.97
    assert len(htmltext.main_text(_aside_page([])).split()) < htmltext.SLIVER_WORDS


def test_a_page_with_no_main_text_is_not_counted_as_past_the_time_bound(monkeypatch):
    """trafilatura finds no main text in the notice-only page (its None): that is no text,
    not the CPU bound, which stays uncounted."""
    counted: list[int] = []
    monkeypatch.setattr(
        htmltext, "_TIME_BOUND", type("C", (), {"inc": lambda self: counted.append(1)})()
    )
    assert htmltext.main_text("<html><body><aside><p>Share</p></aside></body></html>") == ""
    assert counted == []
