"""Closing sections per language and tables/lists kept as lines: on the real Greek and English
dump samples and on pages built here as ukwiki, bgwiki and jawiki write them."""

from __future__ import annotations

import re

import pytest

from pipelines.sources.wikipedia import wiki_blocks, wiki_sections
from pipelines.sources.wikipedia import wikimarkup as wm
from tests.helpers.wikipedia_dumps import GREEK, dump_articles


@pytest.fixture(scope="module")
def elwiki() -> dict[str, str]:
    return dump_articles("elwiki-pages-articles-head933.xml.bz2")


# --- closing sections ------------------------------------------------------------------------


def test_the_table_covers_the_largest_wikipedias_and_says_where_each_comes_from():
    assert len(wiki_sections.LARGEST_WIKIPEDIAS) == 30
    missing = set(wiki_sections.LARGEST_WIKIPEDIAS) - set(wiki_sections.CLOSING_SECTIONS)
    assert not missing
    assert set(wiki_sections.SOURCES) == set(wiki_sections.CLOSING_SECTIONS)
    for language, names in wiki_sections.CLOSING_SECTIONS.items():
        assert names and all(name == name.strip() and name for name in names), language


# The closing sections of issue 19's held-out articles, as those wikis write them.
@pytest.mark.parametrize(
    ("language", "closing", "removed"),
    [
        ("uk", "== Див. також ==\n* [[Дніпро]]\n== Джерела та література ==\n"
               "* Шевчук В. Історія. — К., 2004.\n== Посилання ==\n* [http://x.ua сайт]",
         ("Див. також", "Джерела та література", "Посилання")),
        ("bg", "== Вижте също ==\n* [[София]]\n== Източници ==\n<references />\n"
               "== Външни препратки ==\n* [http://x.bg сайт]",
         ("Вижте също", "Източници", "Външни препратки")),
        ("ja", "== 脚注 ==\n{{Reflist}}\n== 関連文献 ==\n* 山田太郎『東京史』2001年。\n"
               "== 外部リンク ==\n* [http://x.jp 公式]",
         ("脚注", "関連文献", "外部リンク")),
        ("ceb", "== Tan-awa usab ==\n* [[Sugbo]]\n== Ang mga gi basihan ==\n{{reflist}}",
         ("Tan-awa usab", "Ang mga gi basihan")),
        ("tt", "== Искәрмәләр ==\n{{искәрмәләр}}\n== Сылтамалар ==\n* [http://x.ru сайт]",
         ("Искәрмәләр", "Сылтамалар")),
    ],
)  # fmt: skip
def test_closing_sections_of_other_languages_are_cut_and_counted(language, closing, removed):
    assert language in wiki_sections.CLOSING_SECTIONS
    article = f"'''Назва''' — текст статті.\n== Історія ==\nРаннє.\n{closing}\n"
    converted = wm.convert_wikitext(article)
    assert converted.text == "Назва — текст статті.\n\nІсторія\n\nРаннє."
    assert converted.removed_sections == removed


def test_greek_dump_closing_sections_counted(elwiki: dict[str, str]):
    """Every top-level closing section of the real elwiki sample is cut and named; none is
    left as a heading line."""
    removed: dict[str, int] = {}
    closing = wiki_sections.closing_section_names()
    for title, wikitext in elwiki.items():
        converted = wm.convert_wikitext(wikitext, GREEK)
        for heading in converted.removed_sections:
            removed[heading] = removed.get(heading, 0) + 1
        headings_left = [b for b in converted.text.split("\n\n") if b.casefold() in closing]
        assert not headings_left, title
    assert len(elwiki) == 524
    # 624 by title; 98 more by structure: trailing "Δικτυακοί τόποι" (websites), "Σχετικά
    # Άρθρα" (related articles), "Βιβλιογραφικές Παραπομπές" (references), sections with no
    # text; a trailing list of works ("Συγγραφικό έργο": titles and years), of twin towns,
    # of a day's holidays, of famous people with what they did stays (tests/unit/pipelines/sources/wikipedia/test_wiki_lists.py).
    assert sum(removed.values()) == 722
    assert removed["Δικτυακοί τόποι"] == 2 and removed["Σχετικά Άρθρα"] == 1
    assert removed["Βιβλιογραφικές Παραπομπές"] == 1 and "Συγγραφικό έργο" not in removed
    assert removed["Εξωτερικοί σύνδεσμοι"] == 288 and removed["Παραπομπές"] == 153
    # Headings the table learnt from this dump (they were left in before).
    assert removed["Σημειώσεις και παραπομπές"] == 5 and removed["Παραπομπές και σημειώσεις"] == 5
    france = wm.convert_wikitext(elwiki["Γαλλία"], GREEK)
    assert france.removed_sections == ("Σημειώσεις και παραπομπές", "Εξωτερικοί σύνδεσμοι")


# Armenian, which CLOSING_SECTIONS does not list: "See also", "External links", "References".
ARMENIAN = {
    "See also": "Տես նաև", "External links": "Արտաքին հղումներ",
    "References": "Ծանոթագրություններ", "Notes": "Նշումներ",
}  # fmt: skip


def test_closing_sections_are_cut_by_structure_in_a_language_no_title_list_holds():
    """The real enwiki sample's articles with their closing headings written in Armenian: the
    sections of references, link lists and citations are cut all the same, and what is kept
    is the text the English titles give."""
    assert "hy" not in wiki_sections.CLOSING_SECTIONS
    articles = dump_articles("enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    renamed = same = left = 0
    for title, wikitext in articles.items():
        english = wm.convert_wikitext(wikitext)
        armenian_text = wikitext
        for name, armenian in ARMENIAN.items():
            armenian_text = re.sub(
                rf"^==\s*{name}\s*==\s*$", f"== {armenian} ==", armenian_text, flags=re.M
            )
        if armenian_text == wikitext:
            continue
        renamed += 1
        armenian_out = wm.convert_wikitext(armenian_text).text
        same += armenian_out == english.text
        left += len(set(ARMENIAN.values()) & set(armenian_out.split("\n")))
        assert armenian_out.startswith(english.text), title  # never more cut than in English
    # Before: 0 of the 104 the same, 210 Armenian closing headings left.
    assert renamed == 104 and same >= 88 and left <= 22


def test_a_list_of_links_in_the_middle_and_lists_of_events_stay(elwiki: dict[str, str]):
    """Only trailing sections are decided by structure, and a day's births and deaths (a year
    and a name an item) are events, not links: kept."""
    day = wm.convert_wikitext(elwiki["25 Μαρτίου"], GREEK)
    assert "Θάνατοι" in day.text.split("\n\n") and "Θάνατοι" not in day.removed_sections
    article = (
        "Lead sentence of the article.\n== Members ==\n* [[Ann]]\n* [[Bob]]\n"
        "== History ==\nIt began in a garage.\n== Related ==\n* [[Garage rock]]\n"
    )
    converted = wm.convert_wikitext(article)
    assert converted.removed_sections == ("Related",)
    assert "Members\n\nAnn\nBob" in converted.text


# --- lists and tables --------------------------------------------------------------------------

# A ukwiki list article and a table-only article, as they are written (markup of "Список ..."
# pages: a lead sentence in a template, then only a sortable table or a list in columns).
UK_TABLE_ONLY = """{{Infobox
| назва = Річки
}}
{| class="wikitable sortable"
|+ Найдовші річки України
! № !! Назва !! Довжина, км
|-
| 1 || [[Дніпро]] || style="text-align:right" | 2201
|-
| 2 || [[Дністер]]<ref>ЕСУ</ref> || 1362
|-
| 3 || [[Південний Буг]] || 806
|}

== Примітки ==
{{reflist}}

[[Категорія:Річки України]]
"""
UK_LIST_ONLY = """{{Колонки|3}}
* [[Київ]]
* [[Харків]]
** [[Холодна Гора]]
# [[Одеса]]
{{Колонки-кінець}}
== Див. також ==
* [[Міста України]]
"""


def test_a_table_only_article_keeps_its_rows():
    assert wm.wikitext_to_text(UK_TABLE_ONLY) == (
        "Найдовші річки України\n№ | Назва | Довжина, км\n1 | Дніпро | 2201\n2 | Дністер | 1362\n"
        "3 | Південний Буг | 806"
    )


def test_a_list_only_article_keeps_its_items():
    converted = wm.convert_wikitext(UK_LIST_ONLY)
    assert converted.text == "Київ\nХарків\nХолодна Гора\nОдеса"
    assert converted.removed_sections == ("Див. також",)


def test_table_cells_over_lines_headers_and_empty_rows():
    table = (
        '{| class="wikitable"\n|-\n! scope="col" | Рік\n! Подія\n|-\n| 1991\n| Незалежність\n'
        "проголошено.\n|-\n|\n|-\n| colspan=2 | 2004<br />Помаранчева революція\n|}"
    )
    mark = wiki_blocks.ROW_MARK
    assert wiki_blocks.render_table(table).split("\n")[0] == f"{mark}Рік | Подія"
    assert wm.wikitext_to_text(table) == (
        "Рік | Подія\n1991 | Незалежність проголошено.\n2004 Помаранчева революція"
    )


def test_english_output_only_gains_table_lines(monkeypatch):
    """On the real enwiki sample, every article's text with tables kept holds every line of its
    text with tables dropped (what it was before), in order: tables only add lines."""
    articles = dump_articles("enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    with_tables = {title: wm.wikitext_to_text(text) for title, text in articles.items()}
    monkeypatch.setattr(wiki_blocks, "render_table", lambda markup: "")
    gained = 0
    for title, text in articles.items():
        before = wm.wikitext_to_text(text).split("\n")
        after = iter(with_tables[title].split("\n"))
        assert all(any(line == kept for kept in after) for line in before), title
        gained += with_tables[title] != "\n".join(before)
    assert len(articles) == 106 and gained == 31


def test_list_templates_keep_their_items():
    page = (
        "Міста:\n{{Columns-list|colwidth=20em|\n* [[Київ]]\n* [[Львів]] {{lang|uk|місто}}\n}}\n"
        "{{columns-list|3|\n# перше\n# друге}}\n{{ubl|[[Одеса]]|Харків}}\n"
        "{{Infobox|field=\n* hidden}}"
    )
    assert (
        wm.wikitext_to_text(page) == "Міста:\n\nКиїв\nЛьвів місто\n\nперше\nдруге\n\nОдеса\nХарків"
    )


def test_nested_list_templates_stay_linear():
    nested = "{{flatlist|\n* a " * 20_000 + "}}" * 20_000
    # Each list template copies what it holds; one holding lists 3 deep is dropped whole, which
    # keeps the copying linear. What is left is items, nothing else.
    text = wm.wikitext_to_text(nested)
    assert set(text.split()) <= {"a"}
    assert wm.wikitext_to_text("{{flatlist|\n* a {{flatlist|\n* b}}}}") == "a\nb"


# Attribute names MediaWiki tables use, as they leak when a cell's attributes are kept as text.
TABLE_ATTRIBUTE = re.compile(
    r"\b(?:style|colspan|rowspan|data-sort-value|align|valign|class|width|height|bgcolor|scope)"
    r"\s*="
)


@pytest.mark.parametrize("dump", [
    "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
    "elwiki-pages-articles-head933.xml.bz2",
])  # fmt: skip
def test_no_table_attribute_reaches_the_text_of_a_real_dump(dump):
    """Malformed attributes (`style="background:#03f;" color: black;"|`), attributes before an
    empty cell (`bgcolor="pink" | |`) and attribute-only cells (`colspan="2" ||`) in the real
    English and Greek samples: none reaches the text."""
    texts = [wm.wikitext_to_text(text) for text in dump_articles(dump).values()]
    leaks = [m.group() for text in texts for m in TABLE_ATTRIBUTE.finditer(text)]
    assert leaks == []
    assert sum("\n" in text for text in texts) > 50  # rows and paragraphs are still there


def test_a_table_of_numbers_is_dropped_and_a_table_of_text_is_kept():
    """Alabama's racial-composition table (percentages by census year) is data, not prose;
    the Ukrainian rivers table reads as a list of names and stays."""
    articles = dump_articles("enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    alabama = wm.wikitext_to_text(articles["Alabama"])
    assert "Racial composition" in articles["Alabama"]
    assert "Black | 25.3% | 26.0% | 26.2%" not in alabama
    assert "Alabama is nicknamed the Yellowhammer State" in alabama
    assert "1 | Дніпро | 2201" in wm.wikitext_to_text(UK_TABLE_ONLY)
