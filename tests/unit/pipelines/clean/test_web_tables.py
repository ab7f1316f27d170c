"""Articles with tables of numbers under the web preset, on real pages of ../shared/corpora/web:
Gopher's alpha-word rule judges an article by its prose, so a standings table or an infobox
does not drop the article it stands in; a page that is a table (or a list of links) with too
little prose to be a page of its own is still dropped."""

from __future__ import annotations

import gzip
import json

import pytest

from pipelines.clean import EXTRACTOR_META, CleanConfig, clean_document, filters
from pipelines.document import Document, Reject
from pipelines.sources import source_traits
from pipelines.sources.web import htmltext, webtext
from tests.conftest import CORPORA

WEB_CORPORA = CORPORA / "web"
AEB_DEV = WEB_CORPORA / "aeb-dev"
WEB = CleanConfig.for_source(source_traits("webtext"), language="any")
# autoracing.com.br's NASCAR standings: 40 rows of positions and points under 85 words of prose.
STANDINGS = "11ea381ad92b"
# The Browns' defensive snap counts: tables of players, snaps and stats between paragraphs.
SNAP_COUNTS = "6a72de37e8f9"


def _extracted(prefix: str) -> str:
    """Our extraction (the webtext source's default, trafilatura) of an aeb-dev page."""
    (path,) = (AEB_DEV / "html").glob(f"{prefix}*.html.gz")
    return htmltext.html_to_text(gzip.decompress(path.read_bytes()))


def _page(text: str) -> Document:
    return Document("webtext:page", "webtext", text, meta={EXTRACTOR_META: "trafilatura"})


def _rows_and_prose(text: str) -> tuple[list[str], list[str]]:
    lines = text.split("\n")
    return [x for x in lines if filters.is_table_row(x)], [
        x for x in lines if not filters.is_table_row(x)
    ]


def test_a_standings_article_whose_table_is_numbers_reaches_the_shards():
    """The article as the benchmark's people checked it is its three sentences, the standings
    table and its notes; all of it is the page's main text (alpha words 0.22 over all words,
    which dropped it; its 85 words of prose alone: 0.88)."""
    text = _extracted(STANDINGS)
    rows, prose = _rows_and_prose(text)
    assert len(rows) == 41 and 50 <= len(" ".join(prose).split()) < 100
    kept = clean_document(_page(text), WEB)
    assert isinstance(kept, Document), kept
    truth = json.loads((AEB_DEV / "ground-truth.subset.json").read_text(encoding="utf-8"))
    (article,) = [e["articleBody"] for k, e in truth.items() if k.startswith(STANDINGS)]
    for driver in ("Kyle Busch", "Casey Mears", "Ricky Stenhouse Jr."):
        assert driver in article and driver in kept.text
    assert "Coloque nos seus favoritos" in kept.text


def test_a_wikipedia_article_with_an_infobox_from_a_crawl_is_kept():
    """Common Crawl's capture of an.wikipedia.org/wiki/Escopete (web/warc/whirlwind.warc.gz), as
    the webtext source reads it: an infobox and a table of mayors' terms, whose "|" cell marks
    and years made a third of its words, around 145 words of article."""
    (task,) = webtext.plan(str(WEB_CORPORA / "warc" / "whirlwind.warc.gz"), {})
    (page,) = [
        d for d in webtext.read(task)
        if isinstance(d, Document) and d.meta.get(EXTRACTOR_META) == "trafilatura"
    ]  # fmt: skip
    words = filters.word_table(page.text)
    assert words.alpha_word_count / words.word_count < 0.7
    kept = clean_document(page, WEB)
    assert isinstance(kept, Document), kept
    assert "Escopete ye un municipio d'a provincia de Guadalachara" in kept.text


def test_the_prose_around_a_table_must_be_a_page_of_its_own():
    """The standings table under the first words of the same page's prose: with 49 words the
    page is a table with a caption and is measured over all its words; with 50 (the web
    preset's least words for a page), by its prose."""
    rows, prose = _rows_and_prose(_extracted(STANDINGS))
    words = " ".join(prose).split()
    short, enough = (
        filters.word_table(" ".join(words[:n]) + "\n" + "\n".join(rows)) for n in (49, 50)
    )
    assert short.prose_word_count == 49 and enough.prose_word_count == 50
    assert short.alpha_word_fraction == pytest.approx(short.alpha_word_count / short.word_count)
    assert short.alpha_word_fraction < 0.7 < enough.alpha_word_fraction
    assert enough.alpha_word_fraction == enough.prose_alpha_word_count / 50


@pytest.mark.parametrize("prefix", [STANDINGS, SNAP_COUNTS])
def test_a_page_of_tables_under_a_heading_is_still_dropped(prefix):
    """A real page's tables with its first line over them and no more prose (a table page, the
    junk the alpha-word rule is for): dropped, as before."""
    text = _extracted(prefix)
    rows, prose = _rows_and_prose(text)
    dropped = clean_document(_page(prose[0] + "\n" + "\n".join(rows)), WEB)
    assert isinstance(dropped, Reject)
    assert dropped.reason in ("gopher_alpha_words", "gopher_mean_word_length")
    if prefix == SNAP_COUNTS:  # words of 3-10 letters: the alpha-word rule is what drops it
        assert dropped.reason == "gopher_alpha_words", dropped


def test_a_list_of_links_in_a_table_is_still_dropped():
    """100 Reddit submission URLs of web/urls (a link list), bare and as table rows."""
    urls = (WEB_CORPORA / "urls" / "RS_v2_2005-12.urls.txt").read_text("utf-8").split()[:100]
    for page in ("\n".join(urls), "\n".join(f"| {n} | {url} |" for n, url in enumerate(urls))):
        dropped = clean_document(_page(page), WEB)
        assert isinstance(dropped, Reject) and dropped.reason == "gopher_mean_word_length"
