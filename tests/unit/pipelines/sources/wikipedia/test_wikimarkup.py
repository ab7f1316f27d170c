"""Wikitext -> plain text: each markup rule, real article text, and inputs built to be slow."""

from __future__ import annotations

import bz2
import html
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.sources.wikipedia import wiki_blocks, wiki_sections
from pipelines.sources.wikipedia import wikimarkup as wm
from pipelines.sources.wikipedia.wikimarkup import wikitext_to_text
from tests.conftest import REPO

WIKIPEDIA = REPO.parent / "shared" / "corpora" / "wikipedia"
GREEK = wm.config_for_namespaces(file_names=("Αρχείο", "Μέσο"), category_names=("Κατηγορία",))


def _first_page_wikitext(name: str) -> str:
    """The raw wikitext of the first page of a real dump (text of its first <text> element)."""
    xml = bz2.open(WIKIPEDIA / name).read().decode("utf-8")
    match = re.search(r"<text[^>]*>(.*?)</text>", xml, re.DOTALL)
    assert match
    return html.unescape(match.group(1))


@pytest.fixture(scope="module")
def april() -> str:
    return _first_page_wikitext("simplewiki-sample.xml.bz2")


@pytest.fixture(scope="module")
def elwiki() -> dict[str, str]:
    """Raw wikitext by title, of the pages of the real Greek dump head (see PROVENANCE.md)."""
    xml = bz2.open(WIKIPEDIA / "elwiki-pages-articles-head933.xml.bz2").read().decode("utf-8")
    pages = re.findall(r"<title>(.*?)</title>.*?<text[^>]*>(.*?)</text>", xml, re.DOTALL)
    return {html.unescape(title): html.unescape(text) for title, text in pages}


# --- comments and extension tags ---------------------------------------------------------------


def test_comments_removed_and_unclosed_comment_runs_to_the_end():
    assert wm.strip_comments("a<!-- x\ny -->b<!--c-->d") == "abd"
    assert wm.strip_comments("keep<!-- never closed\nmore") == "keep"


def test_refs_math_gallery_dropped_with_content_other_tags_only_stripped():
    text = (
        'Paris<ref name="a">{{cite web|url=x}}</ref> is big<REF>b</REF><ref name="c" />. '
        "E = <math>mc^2</math>.<references/>\n<gallery>\nFile:a.jpg|cap\n</gallery>"
        '<span style="x">kept</span>'
    )
    assert wikitext_to_text(text) == "Paris is big. E = . kept"


def test_unclosed_ref_drops_only_the_tag():
    assert wm.strip_elements("a<ref>b c") == "ab c"


def test_nowiki_and_pre_content_is_shown_literally():
    assert wikitext_to_text("x <nowiki>[[not a link]] {{nor|this}}</nowiki> y") == (
        "x [[not a link]] {{nor|this}} y"
    )
    assert wikitext_to_text("<pre>''raw''</pre>") == "''raw''"


# --- templates and tables ----------------------------------------------------------------------


def test_nested_templates_and_parameters_removed():
    text = "a{{Infobox|x={{b|{{c}}}}|y=[[L]]}}b {{{1|default}}} c{{d}}"
    assert wm.strip_templates_and_tables(text) == "ab  c"


def test_unclosed_template_stays_as_text():
    assert wm.strip_templates_and_tables("a {{broken b {{ok}} c") == "a {{broken b  c"


def test_tables_become_rows_with_nested_tables_and_templates():
    text = (
        "before\n{| class=x\n|-\n| {{flag|A}} || 1{{efn|note}}\n|-\n|\n{|\n| inner\n|}\n|}\nafter"
    )
    row = wiki_blocks.ROW_MARK
    assert wm.strip_templates_and_tables(text) == f"before\n\n{row}A | 1\n{row}inner\n\nafter"
    assert wikitext_to_text(text) == "before\n\nA | 1\ninner\n\nafter"


def test_table_nested_too_deep_is_dropped_whole():
    nested = "{|\n| a\n" * 4 + "|}\n" * 4
    assert wikitext_to_text("before\n" + nested + "after") == "before\n\nafter"
    assert wikitext_to_text("before\n" + nested[7:-3] + "after") == "before\n\na\na\na\n\nafter"


def test_template_closed_after_a_pipe_at_line_start_is_not_a_table_end():
    text = "{{Infobox\n| name = x\n|}}\nprose"
    assert wm.strip_templates_and_tables(text) == "\nprose"


def test_table_markers_count_only_at_line_start():
    assert wm.strip_templates_and_tables("a {| b |} c") == "a {| b |} c"


@pytest.mark.parametrize(
    ("wikitext", "expected"),
    [
        ("the Greek {{lang|grc|ἀναρχία}} word", "the Greek ἀναρχία word"),
        ("{{lang-fr|mot}}", "mot"),
        ("{{convert|5|km|mi}} away", "5 km away"),
        ("{{convert|5|to|10|km}}", "5 to 10 km"),
        ("{{nowrap|[[Paris|the city]] now}}", "the city now"),
        ("{{as of|2010}}, it", "As of 2010, it"),
        ("a{{nbsp}}b", "a b"),
        ("{{lang|fr|{{nowrap|x y}}}}", "x y"),
        ("{{cite web|title={{lang|fr|x}}}}", ""),
        ("{{lang|fr}}", ""),
    ],
)
def test_prose_templates_render_their_text(wikitext: str, expected: str):
    assert wikitext_to_text(wikitext) == expected


# --- links -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wikitext", "expected"),
    [
        ("[[Asteraceae|Daisy]]", "Daisy"),
        ("30 [[day]]s", "30 days"),
        ("[[File:x.jpg|thumb|180px|[[Spring]] flowers]]text", "text"),
        ("[[Image:x.png]][[media:y.ogg]]text", "text"),
        ("text[[Category:Months]][[category: X|y]]", "text"),
        ("text[[fr:Avril]][[zh-min-nan:Sì-goe̍h]][[simple:April]]", "text"),
        ("[[:Category:Months|month pages]]", "month pages"),
        ("[[:File:x.jpg]]", "File:x.jpg"),
        ("[[Wikipedia:Manual of Style|style guide]]", "style guide"),
        ("[[Star Wars: Episode IV]]", "Star Wars: Episode IV"),
        ("[[Help:Foo (bar)|]]", "Foo"),
        ("[[not\na link]]", "[[not a link]]"),
        ("[[broken link", "[[broken link"),
        ("[http://example.com Example site] and [https://x.org]", "Example site and"),
    ],
)
def test_links(wikitext: str, expected: str):
    assert wikitext_to_text(wikitext) == expected


def test_localized_file_and_category_namespaces_need_the_site_config():
    wikitext = "Η [[Αθήνα]][[Αρχείο:Acropolis.jpg|μικρογραφία|Η Ακρόπολη]].[[Κατηγορία:Πόλεις]]"
    assert wikitext_to_text(wikitext, GREEK) == "Η Αθήνα."
    # Without the names from siteinfo the image caption and category leak into the text.
    assert "Κατηγορία:Πόλεις" in wikitext_to_text(wikitext)
    # "Εικόνα", the old Greek alias of the File namespace, is not in siteinfo but known.
    assert wikitext_to_text("a[[Εικόνα:x.jpg|thumb|b]]", GREEK) == "a"


# --- inline markup, lines, sections ------------------------------------------------------------


def test_emphasis_quotes_removed_and_four_quotes_keep_one_apostrophe():
    assert wm.strip_emphasis("''i'' '''b''' '''''bi''''' l''''x'''") == "i b bi l'x"
    assert wm.strip_emphasis("don't") == "don't"


def test_html_tags_stripped_but_not_text_that_only_looks_like_a_tag():
    assert wm.strip_html_tags('<div class="x">a<br/>b</div><sup>2</sup>') == "a\nb2"
    assert wm.strip_html_tags("if x<y and z>w") == "if x<y and z>w"


def test_magic_words_removed():
    assert wm.strip_magic_words("__TOC__a __NOTOC__b __ΧΩΡΙΣΠΙΝΑΚΑ__ c__init__") == "a b  c__init__"


def test_headings_lists_and_paragraphs():
    text = (
        "First line\nsame paragraph.\n\n== History ==\nEarly.\n* one\n*# two\n: three\n"
        "=== Empty section ===\n=== Later ===\nLate.\n----\n"
    )
    assert wiki_blocks.format_blocks(text).text == (
        "First line same paragraph.\n\nHistory\n\nEarly.\n\none\ntwo\nthree\n\nLater\n\nLate."
    )


def test_closing_sections_dropped_with_their_subsections():
    text = (
        "Intro.\n== Life ==\nBorn.\n== See also ==\n* [[X]]\n== References ==\n{{reflist}}\n"
        "=== Sources ===\nBook.\n== External links ==\n* [http://x.org site]\n"
    )
    assert wikitext_to_text(text) == "Intro.\n\nLife\n\nBorn."
    greek = "Κείμενο.\n== Παραπομπές ==\nπηγή\n== Εξωτερικοί σύνδεσμοι ==\nσύνδεσμος"
    assert wikitext_to_text(greek) == "Κείμενο."


def test_greek_closing_sections_are_cut(elwiki: dict[str, str]):
    """Greek headings that English-only (or a short Greek list) missed: "Βλέπε επίσης",
    "Επιπλέον βιβλιογραφία" in real elwiki articles."""
    nu = wikitext_to_text(elwiki["Νι"], GREEK)
    assert nu.endswith("την συχνότητα ενός κύματος στην φυσική.")
    state = wikitext_to_text(elwiki["Κράτος"], GREEK)
    assert state.endswith("της ταξικής καπιταλιστικής κοινωνίας.")
    for title in ("Νι", "Κράτος", "Καρλ Μαρξ", "Φυσική", "S"):
        blocks = wikitext_to_text(elwiki[title], GREEK).split("\n\n")
        for heading in ("Βλέπε επίσης", "Βλέπε και", "Διαβάστε επίσης", "Επιπλέον βιβλιογραφία",
                        "Προτεινόμενη βιβλιογραφία", "Παραπομπές"):  # fmt: skip
            assert heading not in blocks, (title, heading)


# Closing sections as articles of these wikis write them (built here; typical headings).
@pytest.mark.parametrize(
    ("language", "closing"),
    [
        ("ru", "== См. также ==\n* [[Б]]\n== Примечания ==\n{{примечания}}\n== Ссылки ==\n* x"),
        ("uk", "== Див. також ==\n* [[Б]]\n== Примітки ==\n{{reflist}}\n== Посилання ==\n* x"),
        ("ja", "== 脚注 ==\n{{reflist}}\n== 関連項目 ==\n* [[東京]]\n== 外部リンク ==\n* x"),
        ("zh", "== 参见 ==\n* [[北京]]\n== 参考文献 ==\n{{reflist}}\n== 外部链接 ==\n* x"),
        ("de", "== Siehe auch ==\n* [[B]]\n== Literatur ==\n* Buch\n== Weblinks ==\n* x"),
        ("fr", "== Notes et références ==\n{{Références}}\n== Voir aussi ==\n=== Articles connexes ===\n* y"),
        ("pl", "== Zobacz też ==\n* [[B]]\n== Przypisy ==\n{{Przypisy}}\n== Linki zewnętrzne ==\n* x"),
        ("ar", "== انظر أيضًا ==\n* [[ب]]\n== المراجع ==\n{{مراجع}}\n== وصلات خارجية ==\n* x"),
        ("ko", "== 같이 보기 ==\n* [[서울]]\n== 각주 ==\n{{각주}}\n== 외부 링크 ==\n* x"),
        ("vi", "== Xem thêm ==\n* [[Hà Nội]]\n== Tham khảo ==\n{{tham khảo}}\n== Liên kết ngoài ==\n* x"),
    ],
)  # fmt: skip
def test_closing_sections_of_big_wikis_are_cut(language: str, closing: str):
    assert language in wiki_sections.CLOSING_SECTIONS
    article = f"Intro.\n== History ==\nEarly.\n{closing}\n"
    assert wikitext_to_text(article) == "Intro.\n\nHistory\n\nEarly."


def test_closing_sections_are_cut_only_at_the_top_heading_level():
    # "Literatura" is a culture section in Spanish and a bibliography in Polish/Czech.
    spanish = (
        "Intro.\n== Cultura ==\n=== Literatura ===\nCervantes.\n=== Música ===\nFlamenco.\n"
        "== Véase también ==\n* [[X]]\n== Referencias ==\n{{listaref}}\n"
    )
    assert wikitext_to_text(spanish) == (
        "Intro.\n\nCultura\n\nLiteratura\n\nCervantes.\n\nMúsica\n\nFlamenco."
    )
    last_subsection = "Intro.\n== Cultura ==\n=== Literatura ===\nCervantes.\n== Notas ==\n* n"
    assert wikitext_to_text(last_subsection) == "Intro.\n\nCultura\n\nLiteratura\n\nCervantes."
    # Closing sections followed by one the table does not name (enwiki "American Revolutionary
    # War" ends with "Reference literature" after "See also" ... "Further reading").
    english = (
        "Intro.\n== See also ==\n* [[X]]\n== References and further reading ==\n* r\n"
        "== Reference literature ==\nBooks.\n== External links ==\n* [http://x.org x]"
    )
    assert wikitext_to_text(english) == "Intro.\n\nReference literature\n\nBooks."


def test_a_pipe_line_inside_a_paragraph_keeps_the_sentence(elwiki: dict[str, str]):
    """elwiki "Κύπρος" has `[[Ανώτατο Δικαστήριο Κύπρου\n|Ανώτατο Δικαστήριο της Δημοκρατίας]]`:
    the `|` line was dropped as table debris with the rest of the sentence, leaving `[[`."""
    cyprus = wikitext_to_text(elwiki["Κύπρος"], GREEK)
    assert (
        "ασκείται από το Ανώτατο Δικαστήριο της Δημοκρατίας, τα Κακουργιοδικεία, τα Επαρχιακά "
        "Δικαστήρια" in cyprus
    )
    assert "[[" not in cyprus and "]]" not in cyprus
    # The same with markup that is no link at all: the words stay.
    assert wikitext_to_text("He said\n|that it was fine.") == "He said that it was fine."
    assert wiki_blocks.format_blocks("a [[b\n|c]] d").text == "a [[b c]] d"


def test_media_links_under_any_namespace_name():
    """Localized File aliases that siteinfo does not list (Japanese 画像, Ukrainian
    Зображення, Greek Εικόνα): the media file's extension says it is an image."""
    text = (
        "東京[[画像:Tokyo Tower.jpg|thumb|556px|center|東京タワー]]タワー。"
        "[[Зображення:Coat of arms.svg|міні|250пкс|Герб]]"
        "[[Εικόνα:x.JPG|μικρογραφία|λεζάντα [[Αθήνα]]]]"
    )
    assert wikitext_to_text(text) == "東京タワー。"
    # Article titles with a colon are not media: they keep their text.
    assert wikitext_to_text("[[Star Wars: Episode IV|the film]]") == "the film"


def test_entities_decoded_after_markup_removal():
    text = "a&nbsp;b &amp; c &lt;ref&gt;x&lt;/ref&gt; &#91;&#91;d&#93;&#93;"
    assert wikitext_to_text(text) == "a b & c <ref>x</ref> [[d]]"


def test_table_debris_lines_dropped():
    assert wiki_blocks.format_blocks("prose\n| cell || cell\n! header\nmore").text == "prose more"


# --- a real article ----------------------------------------------------------------------------


def test_real_article_becomes_clean_prose(april: str):
    text = wikitext_to_text(april)
    assert text.startswith(
        "April is the 4th month of the year, and comes between March and May. It is one of "
        "four months to have 30 days."
    )
    for markup in ("{{", "}}", "[[", "]]", "<ref", "'''", "==", "thumb", "Category:"):
        assert markup not in text
    assert "\n\nThe Month\n\nApril comes between March and May" in text
    assert "\n\n\n" not in text
    assert all(line == line.strip() for line in text.split("\n"))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="{}[]|=*#:'<>!-&; \nabx/", max_size=200))
def test_any_markup_soup_gives_tidy_text(soup: str):
    text = wikitext_to_text(soup)
    assert "\n\n\n" not in text
    assert text == text.strip()
    if text:
        assert all(block == block.strip() and block for block in text.split("\n\n"))


# --- cost stays linear on inputs built to make it quadratic ------------------------------------


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("name", "wikitext", "expected"),
    [
        ("deep templates", "a" + "{{x|" * 50_000 + "y" + "}}" * 50_000 + "b", "ab"),
        # Prose templates longer than _MAX_RENDERED_TEMPLATE are dropped: that is the bound.
        ("deep prose templates", "{{nowrap|" * 20_000 + "z" + "}}" * 20_000, ""),
        ("unclosed templates", "{{" * 200_000 + "t", "{{" * 200_000 + "t"),
        ("unclosed tables", "\n{|" * 100_000 + "\nt", "t"),
        ("deep links", "[[a|" * 50_000 + "b" + "]]" * 50_000, None),
        ("unclosed links", "[[" * 200_000 + "t", "[[" * 200_000 + "t"),
        ("unclosed external links", "[http://x.org/ label " * 50_000, None),
        ("unclosed refs", "<ref>" * 100_000 + "t", "t"),
        ("unclosed comments", "t" + "<!--" * 100_000, "t"),
        ("long heading", "== " + " " * 1_000_000 + "x", "== x"),
        ("apostrophes", "'" * 1_000_001, "'"),
    ],
)
def test_pathological_input_finishes(name: str, wikitext: str, expected: str | None):
    text = wikitext_to_text(wikitext)
    if expected is not None:
        assert text == expected, name


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_fifty_megabyte_page(april: str):
    copies = 50_000_000 // len(april.encode("utf-8")) + 1
    big = "\n\n".join([april] * copies)
    assert len(big.encode("utf-8")) >= 50_000_000
    text = wikitext_to_text(big)
    # A sentence of a section that is kept appears once per copy: nothing was lost or merged.
    assert text.count("Poets use April to mean the end of winter.") == copies
    assert "{{" not in text and "[[" not in text and "<ref" not in text
