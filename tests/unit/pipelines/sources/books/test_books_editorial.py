"""What a transcriber or an editor wrote about the edition, set into a shared book where such
notes stand in other books: notes on the making of the e-text in the front (after the contents
page, in four languages) and an editor's bibliography (before the first chapter, at the end)
go, counted; the work's preface, signature, dateline and chapter headings stay."""

from __future__ import annotations

import re

import pytest

from pipelines.sources.books.books import PARTS_REMOVED, PARTS_REMOVED_TEXT, book_document
from tests.conftest import CORPORA

CAROL = CORPORA / "books" / "46-0.txt"

MAKING_NOTES = [
    "Transcribed from the 1843 Chapman and Hall edition by David Price, with thanks to the"
    " British Library.",
    "This eBook was transcribed from the 1843 Chapman and Hall edition.",
    "Spelling has been kept as in the original, and obvious printer's errors have been corrected.",
    "Texte numérisé à partir de l'édition de 1843 par la Bibliothèque nationale de France.",
    "Dieser Text wurde nach der Ausgabe von 1843 transkribiert.",
    "Texto digitalizado por voluntarios a partir de la edición de 1843.",
]
BIBLIOGRAPHY = [
    "BIBLIOGRAPHY",
    "Dickens, Charles. A Christmas Carol. London: Chapman and Hall, 1843.",
    "Forster, John. The Life of Charles Dickens. London: Chapman and Hall, 1872-74. 3 vols.",
]


def _carol(insert: dict[str, list[str]]) -> object:
    """A Christmas Carol with paragraphs set in before the given places of its text."""
    text = CAROL.read_bytes().decode("utf-8-sig")
    for before, lines in insert.items():
        at = text.index(before)
        text = text[:at] + "".join(f"{line}\r\n\r\n" for line in lines) + "\r\n" + text[at:]
    (document,) = book_document(text.encode("utf-8"), CAROL.name, str(CAROL))
    return document


def _count(document, kind: str) -> int:
    found = re.search(rf"\b{kind} (\d+)", document.meta.get(PARTS_REMOVED, ""))
    return int(found.group(1)) if found else 0


def _assert_the_work_stays(document) -> None:
    assert document.text.startswith("PREFACE\n\nI HAVE endeavoured in this Ghostly little book")
    assert re.search(r"Servant,\n\s+C\. D\.\nDecember, 1843\.\n\n+STAVE I:  MARLEY'S GHOST\n",
                     document.text)  # fmt: skip
    assert "MARLEY was dead: to begin with." in document.text
    assert document.text.rstrip().endswith("God bless Us, Every One!")


def test_notes_on_the_making_of_the_etext_go_after_the_contents_too():
    plain = _carol({})
    noted = _carol({"PREFACE": MAKING_NOTES})
    for note in MAKING_NOTES:
        assert note not in noted.text
        assert note in noted.meta[PARTS_REMOVED_TEXT]
    assert _count(noted, "transcriber_notes") == 1
    assert noted.text == plain.text
    _assert_the_work_stays(noted)


@pytest.mark.parametrize("before", ["STAVE I:  MARLEY'S GHOST\r\n\r\nMARLEY", "End of the Project"])
def test_an_editors_bibliography_goes_where_it_stands(before):
    plain = _carol({})
    listed = _carol({before: BIBLIOGRAPHY})
    assert "Forster, John" not in listed.text and "BIBLIOGRAPHY" not in listed.text
    assert "Forster, John" in listed.meta[PARTS_REMOVED_TEXT]
    assert _count(listed, "bibliography") == 1
    assert listed.text == plain.text
    _assert_the_work_stays(listed)


def test_a_bibliography_heading_over_the_works_prose_keeps_the_prose():
    """A heading alone does not make a bibliography: the list under it must name works."""
    headed = _carol({"MARLEY was dead": ["BIBLIOGRAPHY"]})
    assert "MARLEY was dead: to begin with." in headed.text
    assert _count(headed, "bibliography") == 0


def test_a_paragraph_of_the_work_about_an_edition_stays():
    """Moby-Dick's Extracts, in its front, speak of books and editions; Frankenstein-style
    prefaces of how a text was found: only a paragraph that opens on the making of the e-text
    is a note."""
    moby = CORPORA / "books" / "2701-0.txt"
    (document,) = book_document(moby.read_bytes(), moby.name, str(moby))
    assert "transcriber_notes" not in document.meta.get(PARTS_REMOVED, "")
    assert "EXTRACTS. (Supplied by a Sub-Sub-Librarian)." in document.text
    assert "It will be seen that this mere painstaking burrower" in document.text
