"""A Wikipedia dump declares its language (<siteinfo>): an article of an English dump is English
unless the identifier clearly says otherwise. On the real English and Greek dump samples."""

from __future__ import annotations

import pytest

from pipelines.clean import CleanConfig, clean_document
from pipelines.document import SOURCE_LANGUAGE_META, Document, ReadTask, Reject
from pipelines.sources import source_traits
from pipelines.sources.wikipedia import wikipedia
from tests.helpers.wikipedia_dumps import WIKIPEDIA

ENWIKI = WIKIPEDIA / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
ELWIKI = WIKIPEDIA / "elwiki-pages-articles-head933.xml.bz2"


def _documents(path) -> dict[str, Document]:
    records = wikipedia.read(ReadTask("wikipedia", str(path)))
    return {r.title: r for r in records if isinstance(r, Document)}


@pytest.fixture(scope="module")
def enwiki() -> dict[str, Document]:
    return _documents(ENWIKI)


def test_an_english_dumps_name_list_is_english_at_the_defaults(enwiki):
    """The English dump's "List of anthropologists" (290 lines of names) scores low for every
    language (py3langid: pcm p=0.355); its dump says English, so it is kept as English, with
    no identifier score, at the defaults and with --language en; every other article keeps
    its identified label."""
    names = enwiki["List of anthropologists"]
    assert names.meta[SOURCE_LANGUAGE_META] == "en"
    for config in (CleanConfig.for_run(source_traits("wikipedia"), None), CleanConfig.for_run(source_traits("wikipedia"), "en")):
        kept = clean_document(names, config)
        assert isinstance(kept, Document), kept
        assert kept.meta["language"] == "en" and "language_score" not in kept.meta
        assert "Franz Boas" in kept.text.split("\n")
    # Without the dump's word, the names are not identified as English.
    undeclared = Document(names.id, names.source, names.text)
    dropped = clean_document(undeclared, CleanConfig.for_run(source_traits("wikipedia"), "en"))
    assert isinstance(dropped, Reject) and dropped.reason == "language"
    assert dropped.detail.endswith(", not en")
    # Ordinary articles: the identifier's label and score, as always.
    anarchism = clean_document(enwiki["Anarchism"], CleanConfig.for_run(source_traits("wikipedia"), None))
    assert anarchism.meta["language"] == "en"
    assert float(anarchism.meta["language_score"]) >= 0.65


def test_text_that_clearly_is_another_language_is_still_dropped(enwiki):
    """The declared language is evidence, not a verdict: Greek prose (p=1.000) said to be from
    an English dump is dropped; and an English dump's article kept with --language en is
    dropped with --language el, whatever the identifier's doubt."""
    greek = next(d for d in _documents(ELWIKI).values() if len(d.text) > 5000)
    claimed = Document(greek.id, greek.source, greek.text, meta={SOURCE_LANGUAGE_META: "en"})
    dropped = clean_document(claimed, CleanConfig.for_run(source_traits("wikipedia"), None))
    assert isinstance(dropped, Reject) and dropped.detail == "el p=1.000, not en"
    listed = enwiki["List of anthropologists"]
    names = clean_document(listed, CleanConfig.for_run(source_traits("wikipedia"), "el"))
    assert isinstance(names, Reject) and names.detail.startswith("en declared, ")
    assert names.detail.endswith(", not el")
