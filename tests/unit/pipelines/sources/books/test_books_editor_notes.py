"""What an editor added to a shared book, recognised by what it is: footnotes an editor signed
(Candide's "B." and "K." notes) with their reference marks, the heading of a passage an
editor brings in from later editions (Alice), a half-title set again above the first chapter
(The German Fury in Belgium); and the work's own short lines (signatures, datelines, chapter
titles, the author's unsigned notes) stay."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipelines.sources.books.book_front_matter import FrontMatter
from pipelines.sources.books.book_text import paragraphs
from pipelines.sources.books.books import PARTS_REMOVED, PARTS_REMOVED_TEXT, book_document
from tests.conftest import CORPORA

BOOKS = CORPORA / "books"
APPARATUS = CORPORA / "books-apparatus"
# Candide's footnotes: a bracketed label, indented, under the paragraph that refers to it.
_FOOTNOTE = re.compile(r"^[ \t]+\[(\d+|[a-z])\]", re.MULTILINE)


def _document(path: Path, data: bytes | None = None):
    (document,) = book_document(path.read_bytes() if data is None else data, path.name, str(path))
    return document


@pytest.fixture(scope="module")
def candide():
    return _document(BOOKS / "Candide-fr.txt")


def _count(document, kind: str) -> int:
    found = re.search(rf"\b{kind} (\d+)", document.meta.get(PARTS_REMOVED, ""))
    return int(found.group(1)) if found else 0


def test_footnotes_an_editor_signed_go_with_their_reference_marks(candide):
    """Candide's 47 numbered footnotes are Beuchot's ("B."), the Kehl editors' ("K.") or
    Decroix's ("(Note de M. Decroix.)"), as the cut editor's preface says: none is left, nor
    the marks that point at them, and each is counted with its text in the audit. One
    note's first words stay: Beuchot's "[6] Mademoiselle Lecouvreur.--Sur le refus ... B."
    is set as an addition to an unsigned note (see the next test), so only the addition
    goes."""
    numbered = [m for m in _FOOTNOTE.finditer(candide.text) if m.group(1).isdigit()]
    left = [candide.text[m.start() : candide.text.index("\n", m.start())] for m in numbered]
    assert left == ["  [6] Mademoiselle Lecouvreur."]
    assert re.findall(r"\S\[\d+\]", candide.text) == ["e[6]"]
    assert "précepteur Pangloss était l'oracle de la maison" in candide.text
    assert "\nCHAPITRE XXII.\n" in candide.text
    assert _count(candide, "editor_notes") >= 47
    audit = candide.meta[PARTS_REMOVED_TEXT]
    assert "[1] De _pan_, tout, et _glossa_, langue.  B." in audit
    assert "(Note de M. Decroix.)" in audit
    assert "Dans l'édition de 1759, on lit:" in audit  # a variant the editor transcribes


def test_the_authors_unsigned_note_stays_and_only_the_editors_addition_goes(candide):
    """Voltaire's own note ("[a]", unsigned) stays with its mark; Beuchot's addition after its
    dash ("--Cette note de Voltaire est posthume. ... B.") goes."""
    assert "Palestrine[a]." in candide.text
    assert "  [a] Voyez l'extrême discrétion de l'auteur" in candide.text
    assert "délicatesse de conscience!" in candide.text
    assert "Cette note de Voltaire est" not in candide.text
    assert "Cette note de Voltaire est" in candide.meta[PARTS_REMOVED_TEXT]


def test_the_works_short_lines_stay(candide):
    """A signature, a dateline, a chapter title, the last line: the work, signed or short."""
    assert "FIN DE CANDIDE." in candide.text
    assert "Comment Candide fut élevé dans un beau château" in candide.text
    assert "Monsieur mon très cher amant" in candide.text  # a letter, indented like a note
    carol = _document(BOOKS / "46-0.txt")
    assert re.search(r"Servant,\n\s+C\. D\.\nDecember, 1843\.", carol.text)
    sleepy = _document(BOOKS / "41-0.txt")
    assert "believe one-half of it myself.”  D. K." in sleepy.text
    fury = _document(APPARATUS / "60364-0.txt")
    assert re.search(r"\n\s+JOHN BUCHAN\.\n", fury.text)
    assert "\nCHAPTER I\n\nON THE WAY TO LIÈGE\n" in fury.text


def test_a_footnote_is_cut_by_its_signature_not_by_being_a_footnote():
    """The German Fury's translator's note is unsigned and stays; the same note signed with an
    editor's initial, as an annotated edition signs it, goes."""
    from pipelines.sources.books.book_annotations import strip_annotations

    fury = _document(APPARATUS / "60364-0.txt")
    note = next(
        fury.text[a:b] for a, b in paragraphs(fury.text) if fury.text[a:b].startswith("[1] ")
    )
    assert note in fury.text
    page = f"on Netherland[1] territory, as he wrote.\n\n  {note.replace(chr(10), chr(10) + '  ')}"
    assert strip_annotations(FrontMatter(page)).text == page
    signed = strip_annotations(FrontMatter(page + "  K."))
    assert signed.text == "on Netherland territory, as he wrote."
    assert signed.removed == {"editor_notes": 1}
    assert "The translator uses" in signed.removed_text


def test_the_heading_of_a_passage_from_later_editions_goes_and_the_passage_stays():
    """Alice: "[later editions continued as follows" is the editor's; the verses it brings in
    are Carroll's, and stay without the editor's brackets."""
    alice = _document(BOOKS / "11-0.txt")
    assert "later editions continued" not in alice.text
    assert "[later editions continued as follows]" in alice.meta[PARTS_REMOVED_TEXT]
    assert "When the sands are all dry, he is gay as a lark," in alice.text
    assert "His voice has a timid and tremulous sound.\n" in alice.text
    assert "And concluded the banquet—\n" in alice.text
    assert _count(alice, "editor_notes") == 2


def test_a_half_title_above_the_first_chapter_goes():
    """The German Fury sets its title again between the introduction and "CHAPTER I"; a line
    there that is not the book's title (a part heading) is the work and stays."""
    path = APPARATUS / "60364-0.txt"
    fury = _document(path)
    assert "THE GERMAN FURY IN BELGIUM" not in fury.text
    assert "THE GERMAN FURY IN BELGIUM" in fury.meta[PARTS_REMOVED_TEXT]
    assert _count(fury, "title_page") == 2
    data = path.read_bytes()
    half_title = b"\r\n\r\n\r\nTHE GERMAN FURY IN BELGIUM\r\n\r\n\r\nCHAPTER I\r\n"
    assert data.count(half_title) == 1
    part = _document(path, data.replace(half_title, half_title.replace(
        b"THE GERMAN FURY IN BELGIUM", b"PART ONE: THE INVASION")))  # fmt: skip
    assert "\nPART ONE: THE INVASION\n\n\nCHAPTER I\n" in part.text
    assert _count(part, "title_page") == 1


def test_a_bracketed_passage_of_the_work_that_names_a_version_stays():
    """A stage direction set in brackets over lines is the work, whatever words it uses; only
    a bracket that opens on editions ("later editions", "the first edition") is the editor's."""
    from pipelines.sources.books.book_annotations import strip_annotations

    alice = _document(BOOKS / "11-0.txt").text
    direction = "[Enter the King, with a version of the letter\nin his hand, and Lords.]"
    page = alice.replace("THE END", f"{direction}\n\nTHE END")
    assert strip_annotations(FrontMatter(page)).text == page
    first = page.replace(
        direction, direction.replace("Enter the King, with", "In the first edition:")
    )
    assert strip_annotations(FrontMatter(first)).text == page.replace(
        direction, "in his hand, and Lords."
    )
