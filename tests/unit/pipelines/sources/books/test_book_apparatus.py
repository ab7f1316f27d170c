"""Apparatus recognised by what it is, wherever it stands, on the shared books: a list of
illustrations whose heading is an illustration block, advertisements at the end, a printer's
colophon, layout marks, drawings made of characters; and the work's own short lines stay."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from pipelines.sources.books import book_apparatus
from pipelines.sources.books.book_front_matter import FrontMatter, is_prose
from pipelines.sources.books.book_text import paragraphs
from pipelines.sources.books.books import (
    PARTS_REMOVED,
    PARTS_REMOVED_TEXT,
    book_document,
    strip_gutenberg,
)
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
APPARATUS = CORPORA / "books-apparatus"


def _document(path: Path):
    (document,) = book_document(path.read_bytes(), path.name, str(path))
    return document


@pytest.fixture(scope="module")
def pride():
    return _document(APPARATUS / "1342-0.txt")


@pytest.fixture(scope="module")
def fury():
    return _document(APPARATUS / "60364-0.txt")


def _list_of_illustrations(path: Path) -> str:
    """The real list of illustrations of the illustrated Pride and Prejudice: its "PAGE" column
    and its entries, "Frontispiece ... iv" to "The End ... 476"."""
    body = strip_gutenberg(path.read_text(encoding="utf-8-sig"))
    start = body.index(" PAGE\n")
    start = body.rindex("\n", 0, start) + 1
    end = body.index("\n", body.index("The End  "))
    return body[start:end]


def test_a_list_of_illustrations_whose_heading_was_an_illustration_goes(pride):
    """Its heading ("[Illustration: List of Illustrations.]") goes with the illustrations, and
    the entries that follow are a list all the same: none is left, and the cut is counted."""
    entries = [line for line in _list_of_illustrations(APPARATUS / "1342-0.txt").split("\n")]
    entries = [line.strip() for line in entries if line.strip() and "PAGE" not in line]
    assert len(entries) > 100
    kept = set(line.strip() for line in pride.text.split("\n"))
    assert [entry for entry in entries if entry in kept] == []
    assert "Frontispiece" not in pride.text
    assert "Frontispiece" in pride.meta[PARTS_REMOVED_TEXT]


def test_the_work_of_pride_and_prejudice_is_whole(pride):
    """Every prose paragraph of the book is kept; the title page's centred lines ("with a
    Preface by / George Saintsbury", "Ruskin House. 156. Charing Cross Road.") are not; the first
    chapter's heading, set in its head-piece illustration, is; the preface's signature too."""
    body = strip_gutenberg((APPARATUS / "1342-0.txt").read_text(encoding="utf-8-sig"))
    plates = [m.span() for m in re.finditer(r"\[Illustration(?:[^\[\]]|\[[^\[\]]*\])*\]", body)]
    assert len(plates) > 150  # captions and the plates' dedication: apparatus, not prose kept
    lost = [
        body[a:b]
        for a, b in paragraphs(body)
        if is_prose(body[a:b]) and not any(s <= a and b <= e for s, e in plates)
    ]
    assert len(lost) > 1700
    assert [paragraph for paragraph in lost if paragraph not in pride.text] == []
    assert pride.text.startswith("PREFACE.\n")
    assert "Saintsbury\n" not in pride.text and "Charing" not in pride.text
    assert "Chapter I.\n\nIt is a truth universally acknowledged" in pride.text
    assert "\n_GEORGE SAINTSBURY._\n" in pride.text
    # A caption whose credit runs over a line break ("[_Copyright 1894 by George\nAllen._]").
    assert "[Illustration" not in pride.text and "Copyright" not in pride.text


def test_layout_marks_go_and_their_lines_stay(pride):
    """ "/* NIND “My dear friend, */" is a letter's salutation in the transcriber's layout
    marks: the marks go, counted, the salutation and the dateline stay."""
    assert "/*" not in pride.text and "*/" not in pride.text
    assert "\n     “My dear friend,\n" in pride.text
    assert "“Hunsford, near Westerham, Kent, _15th October_." in pride.text
    assert "layout_markup 9" in pride.meta[PARTS_REMOVED]


def test_advertisements_and_a_colophon_at_the_end_go(fury):
    """The German Fury in Belgium ends on the author's footnotes, then 120 lines of the
    publisher's advertisements (titles, reviews, "=Cloth, 3s. 6d. net=", HODDER AND STOUGHTON):
    they go, counted and audited; the colophon above the footnotes goes, the footnotes stay."""
    assert fury.text.rstrip().endswith("[2] See note on page 15.")
    assert "HODDER" not in fury.text and "net=" not in fury.text
    assert "Printed in Great Britain" not in fury.text
    assert "advertisements 1" in fury.meta[PARTS_REMOVED]
    assert "=The Gods in the Battle=" in fury.meta[PARTS_REMOVED_TEXT]
    assert re.search(r"\n +JOHN BUCHAN\.\n", fury.text)  # the preface's signature is the work's


def _front(text: str) -> FrontMatter:
    return FrontMatter(text)


def _paragraph_offsets(text: str) -> list[int]:
    return [start for start, _ in paragraphs(text)]


def test_a_list_of_entries_goes_wherever_it_stands_and_a_table_out_of_page_order_stays():
    """The real list of illustrations set in the middle of Alice goes; the same lines out of
    page order (a table of the work: prices, distances) stay."""
    alice = strip_gutenberg((CORPORA / "books" / "11-0.txt").read_text(encoding="utf-8-sig"))
    listed = _list_of_illustrations(APPARATUS / "1342-0.txt")
    middle = _paragraph_offsets(alice)[len(paragraphs(alice)) // 2]
    with_list = alice[:middle] + listed + "\n\n" + alice[middle:]
    cut = book_apparatus.strip_apparatus(_front(with_list))
    assert cut.text == alice
    assert cut.removed == {"illustrations": 1}
    lines = listed.split("\n\n")
    shuffled = lines[:1] + random.Random(7).sample(lines[1:], len(lines) - 1)
    with_table = alice[:middle] + "\n\n".join(shuffled) + "\n\n" + alice[middle:]
    assert book_apparatus.strip_apparatus(_front(with_table)).text == with_table


# An ASCII floor plan as transcribers draw one, its room names the shared book's words.
FLOOR_PLAN = """\
    +----------+---------+
    |          |         |
    |  HALL    | KITCHEN |
    |          |         |
    +---/ /----+---/ /---+
    |                    |
    +--------------------+"""


@pytest.mark.parametrize("book", ["11-0.txt", "2701-0.txt", "46-0.txt", "Candide-fr.txt"])
def test_a_drawing_made_of_characters_goes_and_the_books_stay(book):
    """The shared books hold no drawing, list of entries, colophon or advertisement: their
    text is untouched (Alice's shaped "Mouse's tail" poem and Moby-Dick's rules included); a
    floor plan set between two of their paragraphs goes, counted as a figure."""
    body = strip_gutenberg((CORPORA / "books" / book).read_text(encoding="utf-8-sig"))
    assert book_apparatus.strip_apparatus(_front(body)).text == body
    middle = _paragraph_offsets(body)[len(paragraphs(body)) // 3]
    with_plan = body[:middle] + FLOOR_PLAN + "\n\n" + body[middle:]
    cut = book_apparatus.strip_apparatus(_front(with_plan))
    assert cut.text == body and cut.removed == {"figures": 1}
    assert re.search(r"HALL\s+\| KITCHEN", cut.removed_text)


def test_a_price_in_the_story_near_its_end_is_the_work():
    """Alice with a sentence of the story naming a price ("... 3s. 6d. net ...") among its last
    paragraphs and a publisher's imprint at its very end: the story's end stays (only marks
    set apart, not sentences, make advertisements)."""
    alice = strip_gutenberg((CORPORA / "books" / "11-0.txt").read_text(encoding="utf-8-sig"))
    spans = paragraphs(alice)
    near_end = spans[-4][0]
    sentence = (
        "“The price of it,” said the Hatter, “was half-a-guinea, or 10s. 6d. net, and I\n"
        "never got it back, which is the whole of the story.”\n\n"
    )
    book = alice[:near_end] + sentence + alice[near_end:] + "\n\nLONDON: MACMILLAN AND CO.\n"
    cut = book_apparatus.strip_apparatus(_front(book))
    assert "advertisements" not in cut.removed
    assert sentence.strip() in cut.text and alice[near_end:].strip() in cut.text
