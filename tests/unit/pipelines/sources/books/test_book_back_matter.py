"""Back matter at the end of real Project Gutenberg books (shared/corpora/books): a
transcriber's correction list and a printer's imprint after the work, as Gutenberg files print
them, appended to a real book; what is cut is counted and audited, and the work's end stays."""

from __future__ import annotations

from pipelines.document import PARTS_REMOVED, PARTS_REMOVED_TEXT, Document
from pipelines.sources.books.book_back_matter import strip_back_matter
from pipelines.sources.books.book_front_matter import strip_front_matter
from pipelines.sources.books.books import book_document, strip_gutenberg
from tests.conftest import REPO

BOOKS = REPO.parent / "shared" / "corpora" / "books"

CORRECTIONS = (
    "\n\nTranscriber's Notes:\n\n"
    "Page 23, \"teh\" changed to \"the\".\n"
    "Page 41, \"Ichabod\" was misspelled \"Ichobod\" in the original; corrected.\n"
    "Page 58, missing period added after \"Van Tassel\".\n\n"
    "Archaic spellings have been retained as printed.\n"
)
IMPRINT = (
    "\n\nCHISWICK PRESS:--CHARLES WHITTINGHAM AND CO.\n"
    "TOOKS COURT, CHANCERY LANE, LONDON.\n"
)


def _book(name: str) -> str:
    return strip_gutenberg((BOOKS / name).read_bytes().decode("utf-8-sig"))


def test_a_transcribers_correction_list_and_a_printers_imprint_at_the_end_are_cut():
    body = _book("41-0.txt")
    assert body.endswith("THE END.")
    expected = strip_front_matter(body)
    back = strip_back_matter(strip_front_matter(body + IMPRINT + CORRECTIONS))
    assert back.text == expected.text  # "THE END." stays, the tale whole
    assert back.removed == {**expected.removed, "transcriber_notes": 1, "imprint": 1}
    assert back.removed_text.startswith(expected.removed_text)
    assert "\"teh\" changed to \"the\"" in back.removed_text
    assert "CHISWICK PRESS" in back.removed_text


def test_the_books_source_cuts_the_back_matter_and_audits_it():
    data = (_book("1952-0.txt") + IMPRINT).encode("utf-8")
    (doc,) = list(book_document(data, "1952.txt", "/books/1952.txt"))
    assert isinstance(doc, Document)
    assert doc.text.endswith("so that I had to creep over him every time!")
    assert doc.meta[PARTS_REMOVED] == "title_page 1, imprint 1"
    assert doc.meta[PARTS_REMOVED_TEXT].endswith("TOOKS COURT, CHANCERY LANE, LONDON.")


def test_the_end_of_a_book_without_back_matter_stays():
    for name in ("11-0.txt", "2701-0.txt", "Candide-fr.txt", "pg1080.txt"):
        front = strip_front_matter(_book(name))
        assert strip_back_matter(front) == front, name


def test_a_note_that_long_is_text_and_stays():
    """A "Transcriber's note" heading with a fifth of the book or more after it is not a
    correction list at the end."""
    body = _book("1952-0.txt")
    half = body.find("\n\n", len(body) * 3 // 5)
    noted = body[:half] + "\n\nTranscriber's note\n" + body[half:]
    front = strip_front_matter(noted)
    assert strip_back_matter(front) == front
