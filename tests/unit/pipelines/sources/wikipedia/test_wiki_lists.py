"""A list is content unless the section it ends is back matter by structure, and no table cell
attribute reaches the text, in any form MediaWiki accepts: on the real Greek and English dump
samples and on pages built here from their text."""

from __future__ import annotations

import re

import pytest

from pipelines.sources.wikipedia import wiki_back_matter
from pipelines.sources.wikipedia import wikimarkup as wm
from tests.helpers.wikipedia_dumps import GREEK, dump_articles

ENWIKI = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


@pytest.fixture(scope="module")
def elwiki() -> dict[str, str]:
    return dump_articles("elwiki-pages-articles-head933.xml.bz2")


@pytest.fixture(scope="module")
def enwiki() -> dict[str, str]:
    return dump_articles(ENWIKI)


def _blocks(text: str) -> list[str]:
    return text.split("\n\n")


def test_names_with_descriptions_are_kept(elwiki, enwiki):
    """Belgium's famous Belgians ("[[Name]] (Name in French), cartographer"), Nicosia's twin
    towns ("*  [[Town]], [[Country]] (1974)" after a flag template) and Alberta's partners
    ("[[Hokkaido]], Japan (1980)": a name, a description and a year, not a citation) are the
    articles' content: trailing, under titles no table holds, and kept."""
    belgium = wm.convert_wikitext(elwiki["Βέλγιο"], GREEK)
    assert "Διάσημοι Βέλγοι" in _blocks(belgium.text)
    assert "Γεράρδος Μερκάτωρ (Gerardus Mercator), χαρτογράφος" in belgium.text.split("\n")
    nicosia = wm.convert_wikitext(elwiki["Λευκωσία"], GREEK)
    assert "Αδελφοποιημένες πόλεις" not in nicosia.removed_sections
    assert "Σβερίν, Γερμανία (1974)" in nicosia.text.split("\n")
    alberta = wm.convert_wikitext(enwiki["Alberta"])
    assert "Friendship partners" not in alberta.removed_sections
    assert "Hokkaido, Japan (1980)" in alberta.text.split("\n")
    assert not wiki_back_matter._cites("[[Hokkaido]], Japan (1980)")
    assert wiki_back_matter._cites("Левицкий А. Э., Очерки истории. — М.: Наука, 1987.")


def test_a_days_holidays_are_a_list_of_events(elwiki):
    """A day's holidays, each a flag template (gone) and the holiday ("*  - Ημέρα της
    Δημοκρατίας ([[1946]])"), are kept where three or more of them make a list."""
    day = wm.convert_wikitext(elwiki["26 Ιανουαρίου"], GREEK)
    assert "Αργίες και εορτές" in _blocks(day.text)
    assert "- Ημέρα της Αυστραλίας, εθνική γιορτή" in day.text.split("\n")


def test_links_an_article_is_made_of_are_its_content(elwiki, enwiki):
    """A list article's lists of links, a century's events and people, a disambiguation
    page's places: more words of links than the content before them, so content."""
    islands = wm.convert_wikitext(elwiki["Κατάλογος νησιών"], GREEK)
    assert islands.removed_sections == ()
    assert "Νησιά του κόσμου κατά περιοχή" in _blocks(islands.text)
    century = wm.convert_wikitext(elwiki["20ός αιώνας"], GREEK)
    assert "Γεγονότα" in _blocks(century.text) and "Σημαντικά πρόσωπα" in _blocks(century.text)
    assert "Α΄ Παγκόσμιος Πόλεμος" in century.text.split("\n")
    ada = wm.convert_wikitext(enwiki["Ada"])
    assert "Ada, Serbia, town and municipality" in ada.text.split("\n")


def test_navigation_and_citation_lists_are_still_cut(elwiki, enwiki):
    """Bare links beside long prose ("Fields or related disciplines", "Μυθολογικά αρχέτυπα")
    and lists of external links stay back matter."""
    myth = wm.convert_wikitext(elwiki["Μυθολογία"], GREEK)
    assert {"Μυθολογικά αρχέτυπα", "Δικτυακοί τόποι"} <= set(myth.removed_sections)
    farming = wm.convert_wikitext(enwiki["Agricultural science"])
    assert "Fields or related disciplines" in farming.removed_sections
    assert "Agrophysics" not in farming.text.split("\n")


def test_sentences_whose_dates_templates_wrote_are_a_list_of_events(enwiki):
    """A chronology written as list items whose dates a template wrote ("* {{dts|...}}
    sentence"), built from the sentences of a real article, is kept whole."""
    prose = wm.wikitext_to_text(enwiki["Alberta"])
    sentences = [s for s in re.split(r"(?<=\.) |\n", prose) if len(s.split()) > 14 and '"' not in s]
    assert len(sentences) >= 6
    items = "\n".join(f"* {{{{dts|19{i:02d}}}}} {s}" for i, s in enumerate(sentences[:6]))
    article = f"{sentences[0]}\n\n== Хронологія ==\n{items}\n\n[[Category:Alberta]]\n"
    converted = wm.convert_wikitext(article)
    assert converted.removed_sections == ()
    assert converted.text.split("\n\n")[2].split("\n") == sentences[:6]


def _presidents_table(enwiki: dict[str, str]) -> str:
    """The real table of presidents of Congress in "Articles of Confederation"."""
    tables = re.findall(r"\{\|.*?\n\|\}", enwiki["Articles of Confederation"], re.S)
    found = [table for table in tables if "President of Congress" in table]
    assert len(found) == 1
    return found[0]


def test_cell_attributes_in_every_form_mediawiki_accepts_are_gone(enwiki):
    """The real table's cells with `data-*` attributes, quoted and unquoted values, `style=...|`,
    and an empty cell whose text (with its attributes) stands on the next line: the text is
    the table's text, no attribute in it."""
    table = _presidents_table(enwiki)
    expected = wm.wikitext_to_text(table)
    forms = [
        lambda i, cell: f'data-sort-value="{i}"|{cell}',
        lambda i, cell: f"data-sort-value={i} |{cell}",
        lambda i, cell: f"data-order-key='{i}' style=text-align:left|{cell}",
        lambda i, cell: f'\ndata-sort-value="{i}"|{cell}',
    ]
    for form in forms:
        lines = []
        for line in table.split("\n"):
            if line.startswith("| ") and not line.startswith("|-"):
                cells = [form(i, cell.strip()) for i, cell in enumerate(line[1:].split("||"))]
                line = "|" + "\n|".join(cells)
            lines.append(line)
        text = wm.wikitext_to_text("\n".join(lines))
        assert text == expected
        assert "=" not in text


def test_a_cell_of_a_table_a_template_opened_keeps_only_its_text(enwiki):
    """A table's cell after a line of prose, its `{|` held by a template (gone): the cell's
    text joins the prose, its attributes do not."""
    table = _presidents_table(enwiki)
    names = re.findall(r"^\| (\[\[[^\]]+\]\])", table, re.M)
    assert len(names) > 5
    article = "Presidents of Congress under the Articles:\n" + "\n".join(
        f'| data-sort-value="{i}" style="text-align:left"|{name}'
        for i, name in enumerate(names[:1])
    )
    text = wm.wikitext_to_text(article)
    assert text == "Presidents of Congress under the Articles: " + wm.wikitext_to_text(names[0])
