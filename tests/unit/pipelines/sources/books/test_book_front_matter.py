"""Front matter of real Project Gutenberg books (shared/corpora/books): what is cut, that the
text then begins at the first chapter's prose, and that no body text is lost; the classes the
corpus books do not show (dotted contents, imprints, lists of illustrations, e-text notes, page
markers, captioned illustrations) inserted into a real book as Gutenberg files print them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.document import INPUT_META, PARTS_REMOVED, Document, ReadTask
from pipelines.sources.books.book_front_matter import is_prose, strip_front_matter
from pipelines.sources.books.book_text import paragraphs
from pipelines.sources.books.books import strip_gutenberg
from tests.conftest import REPO

BOOKS = REPO.parent / "shared" / "corpora" / "books"
DEMO_BOOKS = REPO / "demo" / "corpus" / "books"

# book -> (the start of its first kept paragraph, what was cut)
EXPECTED = {
    "11-0.txt": ("CHAPTER I.\nDown the Rabbit-Hole\n\n\nAlice was beginning",
                 "title_page 1, contents 1, illustrations 1"),
    "1952-0.txt": ("It is very seldom that mere ordinary people like John and myself",
                   "title_page 1"),
    # Melville's Etymology and Extracts come before chapter 1, and are the book.
    "2701-0.txt": ("  ETYMOLOGY.\n\n\n  (Supplied by a Late Consumptive Usher",
                   "title_page 1, contents 1"),
    # No chapters: the tale opens on its frame and epigraph, after the title page.
    "41-0.txt": ("FOUND AMONG THE PAPERS OF THE LATE DIEDRICH KNICKERBOCKER.\n\n\n"
                 "        A pleasing land of drowsy head it was,", "title_page 1"),
    # Dickens's own preface is the book; the contents after it are not.
    "46-0.txt": ("PREFACE\n\nI HAVE endeavoured in this Ghostly little book",
                 "title_page 1, contents 1"),
    # Voltaire's own chapter summary opens chapter I; the editor's preface is cut, and so are
    # the two title pages and imprints of the 1829 edition (four title-page blocks between
    # three imprints).
    "Candide-fr.txt": ("CHAPITRE I.\n\nComment Candide fut élevé dans un beau château",
                       "title_page 4, imprint 3, notes 1"),
    "pg1080.txt": ("It is a melancholy object to those, who walk through this great town",
                   "title_page 1, imprint 1"),
    "tinyshakespeare-input.txt": ("First Citizen:\nBefore we proceed any further", ""),
}  # fmt: skip
# The prose the cut may take, by book: an editor's preface (Beuchot's), a title page's subtitle.
APPARATUS_PROSE = {
    "Candide-fr.txt": "_Candide_ parut au plus tard en mars 1759",
    "pg1080.txt": "For preventing the children of poor people in Ireland",
}


def _body(name: str, folder: Path = BOOKS) -> str:
    return strip_gutenberg((folder / name).read_bytes().decode("utf-8-sig"))


def _insert_after_paragraph(body: str, text: str, index: int, insert: str) -> str:
    """``body`` with ``insert`` between paragraphs ``index`` and ``index + 1`` of ``text`` (its
    stripped text), set off on both sides by the gap that separates those two."""
    spans = paragraphs(text)
    start, end, following = spans[index][0], spans[index][1], spans[index + 1][0]
    gap = text[end:following]
    return body.replace(text[start:following], text[start:end] + gap + insert + gap, 1)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_book_begins_at_the_first_chapters_prose_and_keeps_all_after(name: str):
    first, removed = EXPECTED[name]
    body = _body(name)
    front = strip_front_matter(body)
    assert front.text.startswith(first)
    assert front.summary() == removed
    # No sentence of the work is lost: every prose paragraph of the book is kept, unchanged,
    # but for the editor's or title page's prose named in APPARATUS_PROSE, which is cut whole.
    lost = [
        body[start:end]
        for start, end in paragraphs(body)
        if is_prose(body[start:end]) and body[start:end] not in front.text
    ]
    if name in APPARATUS_PROSE:
        assert lost and any(APPARATUS_PROSE[name] in paragraph for paragraph in lost)
        assert all(paragraph in front.removed_text for paragraph in lost)
        lost = [p for p in lost if body.find(p) >= body.find(first[:40])]
    assert lost == []
    assert len(front.text) > 0.9 * len(body)


def test_what_is_cut_is_apparatus_only():
    moby = strip_front_matter(_body("2701-0.txt"))
    assert moby.removed_text.startswith("MOBY-DICK;\n\nor, THE WHALE.")
    assert "CHAPTER 135. The Chase.—Third Day." in moby.removed_text  # the contents
    assert moby.removed_text.rstrip().endswith("\n\nEpilogue")  # ... to its last entry
    # The sections before chapter 1 that the contents name are the book: kept whole.
    assert "The pale Usher" not in moby.removed_text
    assert "While you take in hand to school others" in moby.text
    assert "\n  EXTRACTS. (Supplied by a Sub-Sub-Librarian).\n" in moby.text
    assert "Call me Ishmael" in moby.text
    # Every chapter keeps its heading; only the contents' entries went.
    assert moby.text.count("\nCHAPTER 135. The Chase.—Third Day.\n") == 1
    carol = strip_front_matter(_body("46-0.txt"))
    assert "I HAVE endeavoured" not in carol.removed_text
    assert "Stave   I: Marley's Ghost" in carol.removed_text
    assert "Stave   I" not in carol.text
    assert carol.text.count("STAVE") == 5  # staves I to V keep their headings
    candide = strip_front_matter(_body("Candide-fr.txt"))
    assert "Préface de l'Éditeur" in candide.removed_text
    assert "CHEZ LEFÈVRE, LIBRAIRE," in candide.removed_text
    assert "Il y avait en Vestphalie" in candide.text


def test_demo_books_are_cut_the_same_way():
    for path in sorted(DEMO_BOOKS.glob("*.txt")):
        front = strip_front_matter(_body(path.name, DEMO_BOOKS))
        assert front.summary() == EXPECTED[path.name][1], path.name


# Front matter as other Gutenberg books print it, put into The Legend of Sleepy Hollow after
# its byline: a publisher's title page and imprint, contents with dotted page numbers, a list
# of illustrations and an e-text note.
HELD_OUT_FRONT = (
    "With Illustrations by\n\nARTHUR RACKHAM\n\n"
    "LONDON\nGEORGE ALLEN, 156 CHARING CROSS ROAD\n1906\n\n"
    "CONTENTS\n\n"
    "On Love.....15\nThe Schoolmaster.....27\nThe Haunted Bridge.....41\n\n"
    "LIST OF ILLUSTRATIONS\n\n"
    "The Headless Horseman  _Frontispiece_\nIchabod Crane at the School  12\n\n"
    "E-text Editor's Note\n\n"
    "[This e-text keeps the spelling and punctuation of the 1906 edition; obvious printer's\n"
    "errors have been corrected.]\n\n"
)


def test_held_out_front_matter_classes_are_cut_and_counted():
    body = _body("41-0.txt")
    expected = strip_front_matter(body)
    byline = "by Washington Irving\n\n"
    assert byline in body
    front = strip_front_matter(body.replace(byline, byline + HELD_OUT_FRONT, 1))
    assert front.text == expected.text
    assert front.removed == {
        "title_page": 1, "imprint": 1, "contents": 1, "illustrations": 1, "notes": 1,
    }  # fmt: skip
    assert "GEORGE ALLEN, 156 CHARING CROSS ROAD" in front.removed_text


def test_page_markers_and_illustration_blocks_anywhere_are_cut():
    body = _body("41-0.txt")
    expected = strip_front_matter(body).text
    spans = paragraphs(expected)
    # Page numbers of the printed edition inline and on lines of their own, captioned
    # illustrations between paragraphs, in the middle of the tale.
    marked, inserted = expected, 0
    for i, (start, end) in enumerate(spans[10:40:3]):
        paragraph = expected[start:end]
        sentence_end = paragraph.find(". ")
        if sentence_end > 0:
            number = f" {{{20 + i}}}"
            new = paragraph[: sentence_end + 1] + number + paragraph[sentence_end + 1 :]
            marked = marked.replace(paragraph, new, 1)
            inserted += 1
    gap = expected[spans[50][1] : spans[51][0]]
    illustration = "[Illustration: Ichabod Crane and the\nHeadless Horseman at the bridge]"
    marked = marked.replace(
        expected[spans[50][0] : spans[51][0]],
        expected[spans[50][0] : spans[50][1]] + gap + illustration + gap + "{xii}\n",
        1,
    )
    assert marked != expected
    front = strip_front_matter(marked)
    assert front.text == expected
    assert front.removed["illustrations"] == 1
    assert inserted >= 8 and front.removed["page_markers"] == inserted + 1  # and {xii}
    assert "Headless Horseman at the bridge]" in front.removed_text


def test_books_source_counts_the_cut_in_meta_and_the_read_stage_audits_it_with_its_text():
    from pipelines.sources.transforms import ReadDoFn

    read = ReadDoFn("books", keep_failures=True, progress_dir=None)
    read.setup()
    read.start_bundle()
    task = ReadTask(source="books", path=str(BOOKS / "2701-0.txt"))
    out = list(read.process(task))
    (doc,) = [record for record in out if isinstance(record, Document)]
    assert doc.text.startswith("  ETYMOLOGY.")
    assert doc.meta == {
        "encoding": "utf-8",
        PARTS_REMOVED: "title_page 1, contents 1",
        INPUT_META: task.path,  # the read stage's: the metadata sidecar's input column
    }
    (audit,) = [o.value for o in out if getattr(o, "tag", None) == "failures"]
    assert audit.reason == PARTS_REMOVED and audit.detail == "title_page 1, contents 1"
    assert audit.text.startswith("MOBY-DICK;") and "CHAPTER 135. The Chase" in audit.text
    assert read.counts.drain()["docs_with_parts_removed"] == 1


def test_a_note_after_the_start_takes_only_itself():
    """A book without chapters: an e-text note after its opening paragraph goes, the story
    under it stays."""
    body = _body("1952-0.txt")
    expected = strip_front_matter(body).text
    first_end = paragraphs(expected)[0][1]
    note = "\n\nEditor's Note\n\nThis e-text follows the spelling of the 1892 edition.\n"
    noted = body.replace(expected[:first_end], expected[:first_end] + note, 1)
    front = strip_front_matter(noted)
    assert front.text == expected
    assert front.removed == {"title_page": 1, "notes": 1}


def test_braces_that_are_not_page_markers_stay():
    body = _body("1952-0.txt")
    expected = strip_front_matter(body).text
    tex = "The ratio is x^{2} over \\frac{1}{2} or \\sqrt{2}, and {12}the next page{13} begins"
    front = strip_front_matter(body + "\n\n" + tex)
    assert front.text == (
        expected + "\n\nThe ratio is x^{2} over \\frac{1}{2} or \\sqrt{2}, and the next page begins"
    )
    assert front.removed["page_markers"] == 2


def test_contents_with_page_numbers_but_no_heading_are_cut():
    body = _body("41-0.txt")
    expected = strip_front_matter(body)
    byline = "by Washington Irving\n\n"
    contents = (
        "On Love.....15\nThe Schoolmaster.....27\n\nThe Bridge        41\nThe End        52\n\n"
    )
    front = strip_front_matter(body.replace(byline, byline + contents, 1))
    assert front.text == expected.text
    assert front.removed == {"title_page": 1, "contents": 1}


def test_page_numbered_lines_in_the_text_under_no_heading_stay():
    body = _body("1952-0.txt")
    expected = strip_front_matter(body).text
    first_end = paragraphs(expected)[0][1]
    table = "\n\nRent for the summer        15\nThe doctor's fees        27\n"
    front = strip_front_matter(body.replace(expected[:first_end], expected[:first_end] + table, 1))
    assert front.text == expected.replace(expected[:first_end], expected[:first_end] + table, 1)


def test_a_text_that_is_all_front_matter_is_kept_whole():
    text = "THE YELLOW WALLPAPER\n\nBy Charlotte Perkins Gilman\n\n1892"
    front = strip_front_matter(text)
    assert front.text == text and front.removed == {}


def test_contents_are_cut_by_structure_without_a_heading():
    """Alice's and Moby-Dick's contents with their "Contents" heading gone: the entries are
    still a contents list, because they reappear later as the chapters' headings; the
    headings stay."""
    for name, heading, entry in (
        ("11-0.txt", "Contents\n\n", " CHAPTER VII.   A Mad Tea-Party\n"),
        ("2701-0.txt", "CONTENTS\n\n", "CHAPTER 42. The Whiteness of the Whale.\n"),
    ):
        body = _body(name)
        expected = strip_front_matter(body)
        front = strip_front_matter(body.replace(heading, "", 1))
        assert front.text == expected.text, name
        assert entry in front.removed_text
        assert front.removed["contents"] == 1


def test_a_contents_run_is_cut_to_its_last_entry():
    """The last entries of a contents list after a line that no entry rule knows ("VOLUME
    II."): the run goes on while its entries name later headings."""
    body = _body("11-0.txt")
    expected = strip_front_matter(body)
    entry = " CHAPTER X.     The Lobster Quadrille\n"
    front = strip_front_matter(body.replace(entry, "\nVOLUME II.\n\n" + entry, 1))
    assert front.text == expected.text
    assert "CHAPTER XII.   Alice’s Evidence" in front.removed_text


def test_illustration_credit_lines_are_cut():
    body = _body("41-0.txt")
    expected = strip_front_matter(body).text
    plate = "[Illustration: The Headless Horseman]\n\n    [_Copyright 1894 by George Allen._]"
    front = strip_front_matter(_insert_after_paragraph(body, expected, 30, plate))
    assert front.text == expected
    assert front.removed["illustrations"] == 2
    assert "[_Copyright 1894 by George Allen._]" in front.removed_text


def test_upper_case_and_bracketed_page_markers_are_cut():
    body = _body("1952-0.txt")
    expected = strip_front_matter(body).text
    texts = [expected[a:b] for a, b in paragraphs(expected)]
    first = next(text for text in texts[3:] if ". " in text)
    second = texts[30]
    cut = first.find(". ") + 1
    marked = body.replace(first, first[:cut] + " {XII}" + first[cut:], 1)
    marked = marked.replace(second, "[Pg 13]\n" + second, 1)
    front = strip_front_matter(marked)
    assert front.text == expected
    assert front.removed["page_markers"] == 2


def test_contents_entries_with_page_numbers_after_one_space_are_found():
    """Alice's contents as a printed book sets them, a page number after each title, and no
    "Contents" heading: the entries still name the chapters' headings."""
    body = _body("11-0.txt")
    expected = strip_front_matter(body)
    start = body.index(" CHAPTER I.     Down the Rabbit-Hole")
    end = body.index(" CHAPTER XII.   Alice’s Evidence") + len(" CHAPTER XII.   Alice’s Evidence")
    lines = body[start:end].split("\n")
    numbered = "\n".join(f"{line.split('   ')[-1].strip()} {9 * i + 1}" for i, line in enumerate(lines))
    front = strip_front_matter(body.replace("Contents\n\n", "", 1).replace(body[start:end], numbered, 1))
    assert front.text == expected.text
    assert "Down the Rabbit-Hole 1\n" in front.removed_text


def test_a_caption_with_its_credit_inside_its_brackets_is_cut_whole():
    """Gutenberg's illustrated editions nest the plate's credit in the caption:
    "[Illustration:\\n\\n“He came down to see the place”\\n\\n[_Copyright 1894 by George
    Allen._]]". The whole block goes, in the middle of the tale."""
    body = _body("41-0.txt")
    expected = strip_front_matter(body).text
    plate = (
        "                      [Illustration:\n\n           “He came down to see the place”\n\n"
        "           [_Copyright 1894 by George Allen._]]"
    )
    front = strip_front_matter(_insert_after_paragraph(body, expected, 40, plate))
    assert front.text == expected
    assert front.removed["illustrations"] == 1
    assert "“He came down to see the place”" in front.removed_text
