"""Two apostrophes a page escapes so that MediaWiki shows them (`<nowiki>''</nowiki>βίος`)
are a typewriter quotation mark: the text has one `"`, never the `''` of italic markup. On the
real Greek dump sample."""

from __future__ import annotations

import pytest

from pipelines.sources.wikipedia import wikimarkup as wm
from tests.helpers.wikipedia_dumps import GREEK, dump_articles


@pytest.fixture(scope="module")
def elwiki() -> dict[str, str]:
    return dump_articles("elwiki-pages-articles-head933.xml.bz2")


@pytest.mark.parametrize(
    ("title", "quoted"),
    [
        ("Βιολογία", '"βίος" (= ζωή) + "λογία"'),  # <nowiki>''</nowiki>βίος<nowiki>''</nowiki>
        ("Σέρρες", 'αεροδρόμιο "Μακεδονία" της'),  # <nowiki>''Μακεδονία''</nowiki>
        ("1990", 'των "Μάππετς",'),
    ],
)
def test_escaped_apostrophes_are_a_quotation_mark(elwiki, title, quoted):
    text = wm.wikitext_to_text(elwiki[title], GREEK)
    assert quoted in text
    assert "''" not in text


def test_other_verbatim_text_is_kept_as_written(elwiki):
    """Only a pair of apostrophes is a quotation mark: nowiki'd brackets and a lone apostrophe
    stay as written."""
    page = elwiki["Βιολογία"].replace(
        "<nowiki>''</nowiki>βίος", "<nowiki>[[x]] l'a '''</nowiki>βίος", 1
    )
    assert "[[x]] l'a '''βίος" in wm.wikitext_to_text(page, GREEK)
