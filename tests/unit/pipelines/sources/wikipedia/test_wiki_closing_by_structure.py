"""Closing sections cut by structure under titles no table holds (the real English sample's
articles with their closing headings written in Armenian): the section that holds the page's
`<references/>` is the references section whatever note stands beside it, and a "See also"
of bare links with a glossed one or two is a list of links."""

from __future__ import annotations

import re

import pytest

from pipelines.sources.wikipedia import wiki_sections
from pipelines.sources.wikipedia import wikimarkup as wm
from tests.helpers.wikipedia_dumps import GREEK, dump_articles

SEE_ALSO, REFERENCES = "Տես նաև", "Ծանոթագրություններ"


@pytest.fixture(scope="module")
def enwiki() -> dict[str, str]:
    assert "hy" not in wiki_sections.CLOSING_SECTIONS
    return dump_articles("enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")


def _armenian(wikitext: str) -> str:
    wikitext = re.sub(r"^==\s*See also\s*==\s*$", f"== {SEE_ALSO} ==", wikitext, flags=re.M)
    return re.sub(r"^==\s*References\s*==\s*$", f"== {REFERENCES} ==", wikitext, flags=re.M)


def test_the_section_of_the_footnote_list_is_back_matter(enwiki):
    """Transport in Angola's references: a sourcing note and `<references/>`."""
    page = _armenian(enwiki["Transport in Angola"])
    lines = wm.wikitext_to_text(page).split("\n")
    assert REFERENCES not in lines
    assert "This article comes from the CIA World Factbook 2003." not in lines
    assert "Angola plans to build an oil refinery in Lobito in the coming years." in lines
    # The tag is what says so: without it, the note is a short section of prose, kept.
    untagged = wm.wikitext_to_text(page.replace("<references/>", "")).split("\n")
    assert REFERENCES in untagged


@pytest.mark.parametrize(
    ("title", "glossed"),
    [
        ("Arthur Schopenhauer", "Antinatalism, a position advocated by Schopenhauer"),
        ("ASCII", "3568 ASCII, an asteroid named after the character encoding"),
        ("Art", "Outline of the visual arts – guide to the subject of art"),
    ],
)
def test_a_see_also_of_mostly_bare_links_is_cut_with_its_glosses(enwiki, title, glossed):
    text = wm.wikitext_to_text(_armenian(enwiki[title]))
    assert SEE_ALSO not in text.split("\n")
    assert glossed not in text
    assert text == wm.wikitext_to_text(enwiki[title])  # as its English titles give


@pytest.fixture(scope="module")
def elwiki() -> dict[str, str]:
    return dump_articles("elwiki-pages-articles-head933.xml.bz2")


def test_a_see_also_hatnote_over_bare_links_goes_with_its_links(elwiki):
    """2007's events open on `:''Δείτε επίσης:` over twelve links to the months' pages: a
    "See also" inside the section, cut; the events under it stay. Over a list that holds
    content, the label and the list stay."""
    lines = wm.wikitext_to_text(elwiki["2007"], GREEK).split("\n")
    assert "Δείτε επίσης:" not in lines and "Γεγονότα Ιανουαρίου 2007" not in lines
    assert "Γεγονότα" in lines
    assert any(line.startswith("1 Ιανουαρίου - Η Βουλγαρία και η Ρουμανία") for line in lines)
    page = elwiki["2007"].replace(
        "* [[Γεγονότα Μαρτίου 2007]]", "* [[Γεγονότα Μαρτίου 2007]], ο μήνας των εκλογών", 1
    )
    lines = wm.wikitext_to_text(page, GREEK).split("\n")
    assert "Δείτε επίσης:" in lines and "Γεγονότα Ιανουαρίου 2007" in lines
