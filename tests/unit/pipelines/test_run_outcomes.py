"""What a run says about the documents it kept: the language a Wikipedia dump is kept in by
default (its own, from <siteinfo>), the threshold in a language drop's detail, and the note of a
filter that drops most of the documents, on the shared Wikipedia dumps and books."""

from __future__ import annotations

import pytest

from pipelines.clean import CleanConfig, clean_document
from pipelines.document import SOURCE_LANGUAGE_META, Document, ReadTask, Reject
from pipelines.sources.wikipedia import wikipedia
from pipelines.sources.wikipedia.wiki_dump import SiteInfo, read_siteinfo
from tests.conftest import CORPORA, GPT2_VOCAB

WIKI = CORPORA / "wikipedia"
GREEK = WIKI / "elwiki-pages-articles-head933.xml.bz2"
SIMPLE = WIKI / "simplewiki-sample.xml.bz2"
GPT2 = str(GPT2_VOCAB)


@pytest.mark.parametrize("site, language", [
    (SiteInfo(dbname="ukwiki"), "uk"),
    (SiteInfo(dbname="elwiki"), "el"),
    (SiteInfo(dbname="simplewiki"), "en"),
    (SiteInfo(dbname="zh_yuewiki"), "yue"),
    (SiteInfo(dbname="be_x_oldwiki"), "be"),
    (SiteInfo(dbname="frwiktionary"), "fr"),
    (SiteInfo(dbname="commonswiki"), ""),
    (SiteInfo(base="https://bg.wikipedia.org/wiki/%D0%9D%D0%B0%D1%87%D0%B0%D0%BB%D0%BD%D0%B0"),
     "bg"),
    (SiteInfo(), ""),
])
def test_a_dumps_language_is_its_wikis(site, language):
    assert wikipedia.dump_language(site) == language


def test_every_shared_dump_names_its_language_whatever_its_compression():
    # The uncompressed dump's siteinfo was read by a bz2-only reader before (None).
    assert read_siteinfo(str(WIKI / "enwiki-articles-partial.xml")).dbname == "enwiki"
    found = {path.name: wikipedia.input_language(str(path)) for path in sorted(WIKI.iterdir())}
    assert found == {
        "elwiki-pages-articles-head933.xml.bz2": "el",
        "enwiki-articles-partial.xml": "en",
        "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2": "en",
        "simplewiki-sample.xml.bz2": "en",
    }


def _greek_articles(count: int) -> list[Document]:
    documents = []
    for record in wikipedia.read(ReadTask("wikipedia", str(GREEK))):
        if isinstance(record, Document):
            documents.append(record)
        if len(documents) == count:
            return documents
    raise AssertionError("the Greek dump holds fewer articles")


def test_a_document_is_held_to_its_dumps_language_unless_one_is_given():
    greek = _greek_articles(20)
    assert {doc.meta[SOURCE_LANGUAGE_META] for doc in greek} == {"el"}
    own = CleanConfig(language_from_source=True)
    kept = [clean_document(doc, own) for doc in greek]
    assert all(isinstance(doc, Document) and doc.meta["language"] == "el" for doc in kept)
    rejected = clean_document(greek[0], CleanConfig())  # --language en
    assert isinstance(rejected, Reject) and rejected.reason == "language"
    assert rejected.detail == "el p=1.000, not en"
    # A wiki whose language the identifier does not know is not dropped for its language...
    nan = Document("x", "wikipedia", greek[0].text, meta={SOURCE_LANGUAGE_META: "nan"})
    assert isinstance(clean_document(nan, own), Document)
    # ... nor one whose dump names none held to anything but the default.
    unnamed = Document("y", "wikipedia", greek[0].text)
    assert clean_document(unnamed, own).detail == "el p=1.000, not en"


def test_a_language_drop_names_the_threshold_it_missed():
    text = (CORPORA / "books" / "Candide-fr.txt").read_text(encoding="utf-8-sig")
    paragraph = next(" ".join(p.split()) for p in text.split("\n\n")
                     if p.strip().startswith("The Project Gutenberg Etext of Candide"))
    rejected = clean_document(Document("candide", "books", paragraph), CleanConfig())
    assert isinstance(rejected, Reject)
    assert rejected.detail == "en p=0.619 < 0.65"


def test_the_first_lines_name_each_dumps_language():
    from pipelines.graph import language_line
    from pipelines.options import PreprocessConfig

    def line(*flags, source="wikipedia", paths=(GREEK, SIMPLE, GREEK)):
        config = PreprocessConfig(source=source, input="-", output="-", tokenizer=GPT2,
                                  **dict(flags))
        return language_line(config, [str(p) for p in paths])

    assert line() == ("language: each input file's own, from its siteinfo: el: 2 file(s), "
                      "en: 1 file(s); --language overrides")
    assert line(paths=(GREEK,)) == (
        "language: el (from the input's own siteinfo; --language overrides)")
    assert line(("language", "fr")) == "language: fr (--language)"
    assert line(source="books") == "language: en (the default; --language sets it)"
    many = line(paths=[SIMPLE] * 10)
    assert many.endswith("en: 8 file(s); 2 more files not opened; --language overrides")
