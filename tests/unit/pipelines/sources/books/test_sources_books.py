"""Books source on the real Project Gutenberg / BooksCorpus-style files in shared/corpora/books
(each with a different layout, see PROVENANCE.md), and on bad inputs built from their bytes."""

from __future__ import annotations

import gzip
import io
import lzma
import tarfile
import zlib
from pathlib import Path

import pytest

from pipelines.document import Document, Failure, ReadTask
from pipelines.sources.books import books
from pipelines.sources.books.book_annotations import strip_annotations
from pipelines.sources.books.book_apparatus import strip_apparatus
from pipelines.sources.books.book_back_matter import strip_back_matter
from pipelines.sources.books.book_editorial import strip_editorial
from pipelines.sources.books.book_front_matter import strip_front_matter
from pipelines.sources.books.books import gutenberg_title, strip_gutenberg
from tests.conftest import REPO

BOOKS = REPO.parent / "shared" / "corpora" / "books"

# (first words of the book's own text, its last words, its Gutenberg title)
EXPECTED = {
    "11-0.txt": ("[Illustration]\n\n\n\n\nAlice’s Adventures in Wonderland", "summer\ndays.\n\nTHE END",
                 ""),
    "1952-0.txt": ("THE YELLOW WALLPAPER\n\nBy Charlotte Perkins Gilman",
                   "I had to creep over him every time!", "The Yellow Wallpaper"),
    "2701-0.txt": ("MOBY-DICK;\n\nor, THE WHALE.", "only found another orphan.", ""),
    "41-0.txt": ("THE LEGEND OF SLEEPY HOLLOW", "myself.”  D. K.\n\nTHE END.",
                 "The Legend of Sleepy Hollow"),
    "46-0.txt": ("A CHRISTMAS CAROL\n\nIN PROSE", "God bless Us, Every One!",
                 "A Christmas Carol A Ghost Story of Christmas"),
    "Candide-fr.txt": ("                                OEUVRES\n\n", "FIN DE CANDIDE.", "Candide"),
    "pg1080.txt": ("A MODEST PROPOSAL\n\nFor preventing", "and my wife past\nchild-bearing.",
                   "A Modest Proposal For preventing the children of poor people in Ireland, from"
                   " being a burden on their parents or country, and for making them beneficial"
                   " to the publick - 1729"),
    "tinyshakespeare-input.txt": ("First Citizen:\nBefore we proceed", "Whiles thou art waking.",
                                  ""),
}
# Phrases of the Project Gutenberg header, footer and license that must all be gone.
LICENSE_PHRASES = (
    "Project Gutenberg License", "Project Gutenberg-tm", "PROJECT GUTENBERG EBOOK",
    "Project Gutenberg EBook", "This eBook is for the use of anyone", "www.gutenberg",
    "START OF TH", "END OF TH", "FULL LICENSE", "Produced by", "Etext of",
)


def _text(name: str) -> str:
    return (BOOKS / name).read_bytes().decode("utf-8-sig")


def _book(name: str) -> str:
    """The text the books source gives for a corpus book: without Gutenberg's boilerplate and
    without the book's apparatus (front and back matter, editors' notes)."""
    front = strip_back_matter(strip_front_matter(strip_gutenberg(_text(name))))
    front = strip_annotations(strip_apparatus(front, gutenberg_title(_text(name))))
    return strip_editorial(front).text


def test_every_corpus_book_has_an_expectation() -> None:
    assert sorted(p.name for p in BOOKS.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_strip_gutenberg_keeps_exactly_the_book(name: str) -> None:
    start, end, title = EXPECTED[name]
    raw = _text(name)
    body = strip_gutenberg(raw)
    assert body.startswith(start)
    assert body.endswith(end)
    assert "\r" not in body
    for phrase in LICENSE_PHRASES:
        assert phrase not in body, phrase
    assert gutenberg_title(raw) == title
    has_markers = "START OF TH" in raw
    if has_markers:
        assert len(body) < len(raw.replace("\r\n", "\n"))
    else:  # a bare text is kept whole
        assert body == raw.replace("\r\n", "\n").strip("\n")


def test_moby_dick_loses_its_transcribers_note() -> None:
    # "Original Transcriber’s Notes:" (on the etexts this one was made from) sits between the
    # table of contents and ETYMOLOGY: not Melville's text.
    body = strip_gutenberg(_text("2701-0.txt"))
    assert "Transcriber" not in body and "Project Gutenberg" not in body
    assert "CHAPTER 135. The Chase.—Third Day.\n\nEpilogue\n\n\n\n\n  ETYMOLOGY.\n" in body
    assert body.endswith(EXPECTED["2701-0.txt"][1])


# The Yellow Wallpaper (1952-0.txt) with its header rewritten: the real header's START line
# replaced by the ones below, so the stripped text must be the real book's.
YELLOW_START = "*** START OF THIS PROJECT GUTENBERG EBOOK THE YELLOW WALLPAPER ***\n"
# The current layout's header, as Project Gutenberg writes it (Jekyll and Hyde, eBook #43),
# then the START marker wrapped as a long title wraps it.
NEW_HEADER = (
    "The Project Gutenberg eBook of The Strange Case of Dr. Jekyll and Mr. Hyde\n\n"
    "This ebook is for the use of anyone anywhere in the United States and\n"
    "most other parts of the world at no cost and with almost no restrictions\n"
    "whatsoever. You may copy it, give it away or re-use it under the terms\n"
    "of the Project Gutenberg License included with this ebook or online\n"
    "at www.gutenberg.org.\n\n"
    "Title: The Strange Case of Dr. Jekyll and Mr. Hyde\n\n"
    "Author: Robert Louis Stevenson\n\n"
    "Release date: October 31, 1992 [eBook #43]\n"
    "                Most recently updated: January 23, 2023\n\n"
    "Language: English\n\n"
    "Credits: David Widger\n\n\n"
)


@pytest.mark.parametrize("start_marker", [
    "*** START OF THE PROJECT GUTENBERG EBOOK\nTHE STRANGE CASE OF DR. JEKYLL AND MR. HYDE ***\n",
    "*** START OF THE PROJECT GUTENBERG EBOOK THE STRANGE CASE OF DR.\nJEKYLL AND MR. HYDE ***\n",
    "*** START OF THE PROJECT GUTENBERG EBOOK THE STRANGE\nCASE OF DR. JEKYLL AND\n"
    "MR. HYDE ***\n",
    "*** START OF THIS PROJECT GUTENBERG EBOOK\nTHE YELLOW WALLPAPER ***\n",  # old wording
])
def test_start_marker_wrapped_over_lines(start_marker: str) -> None:
    raw = _text("1952-0.txt").replace("\r\n", "\n")
    expected = strip_gutenberg(raw)
    header, rest = raw.split(YELLOW_START)
    for rebuilt in (header + start_marker + rest, NEW_HEADER + start_marker + rest):
        body = strip_gutenberg(rebuilt)
        assert body == expected
        assert body.startswith("THE YELLOW WALLPAPER\n\nBy Charlotte Perkins Gilman")
    assert gutenberg_title(NEW_HEADER + start_marker + rest) == (
        "The Strange Case of Dr. Jekyll and Mr. Hyde")


def test_old_layout_small_print_variants_and_notes() -> None:
    # A Modest Proposal (pg1080.txt) under the 1990s-2000s headers: the license first, closed by
    # an "*END*THE SMALL PRINT" line (or "*END THE SMALL PRINT"), then credits and notes.
    body = strip_gutenberg(_text("pg1080.txt"))
    for end_line in ("*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*",
                     "*END THE SMALL PRINT! FOR PUBLIC DOMAIN EBOOKS*Ver.02/11/02*END*"):
        old = ("The Project Gutenberg EBook of A Modest Proposal, by Jonathan Swift\n\n"
               "**Welcome To The World of Free Plain Vanilla Electronic Texts**\n\n"
               "**START**THE SMALL PRINT!**FOR PUBLIC DOMAIN EBOOKS**START**\n"
               "Why is this \"Small Print!\" statement here? You know: lawyers.\n"
               f"{end_line}\n\n"
               "This etext was prepared by Sue Asscher\n<asschers@aia.net.au>\n\n\n"
               "Transcriber's Note: Obvious typographical errors have been corrected;\n"
               "the original spelling of the 1729 edition is kept.\n\n\n"
               f"{body}\n\n\nEnd of the Project Gutenberg EBook of A Modest Proposal\n")
        assert strip_gutenberg(old) == body


def test_producer_and_transcriber_notes_before_the_text_are_removed() -> None:
    raw = _text("pg1080.txt").replace("\r\n", "\n")
    expected = strip_gutenberg(raw)
    credit = "Produced by An Anonymous Volunteer\n"
    notes = (
        "\n\n[Transcriber’s Note:\n\nThis e-text follows the Dublin printing of 1729.\n\n"
        "Page 7: the word “publick” is as printed.]\n\n"
        "TRANSCRIBER'S NOTES\n\nItalics are shown as _underscores_. Footnotes have been moved\n"
        "to the end of the paragraph that refers to them.\n\n"
        "Producer's note: the scans were kindly provided by the Internet Archive.\n"
    )
    assert credit in raw
    with_notes = raw.replace(credit, credit + notes, 1)
    assert strip_gutenberg(with_notes) == expected
    # After the title, too (the notes come before the text, not before the title).
    title = "A MODEST PROPOSAL\n\n"
    with_notes = raw.replace(title, title + notes.strip("\n") + "\n\n", 1)
    assert strip_gutenberg(with_notes) == expected


def test_strip_gutenberg_old_small_print_layout() -> None:
    # 1990s layout: license first, closed by the *END*THE SMALL PRINT line, then the book
    body = strip_gutenberg(_text("pg1080.txt"))
    old = ("The Project Gutenberg Etext of A Modest Proposal\n\n"
           "**The Project Gutenberg Etext**\n*****SMALL PRINT!*****\nLegal text here.\n"
           "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n\n"
           "This etext was prepared by a volunteer.\n\n\n"
           f"{body}\n\n\nEnd of The Project Gutenberg Etext of A Modest Proposal\n")
    assert strip_gutenberg(old) == body


def test_strip_gutenberg_does_not_take_a_late_marker_for_a_header() -> None:
    text = _text("11-0.txt") + "\n\n*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*END*\nlegal\n"
    assert strip_gutenberg(text).startswith("[Illustration]")


def test_read_directory_of_books() -> None:
    tasks = books.plan(str(BOOKS), {})
    docs = [item for task in tasks for item in books.read(task)]
    assert all(isinstance(doc, Document) for doc in docs)
    assert [doc.id for doc in docs] == [f"books:{name}" for name in sorted(EXPECTED)]
    for doc in docs:
        name = doc.id.split(":", 1)[1]
        assert doc.source == "books"
        assert doc.text == _book(name)
        assert doc.title == EXPECTED[name][2]
        assert not doc.text.startswith("\ufeff") and "\r" not in doc.text
        assert doc.meta["encoding"] == "utf-8"


def _read(path: Path, **options: str) -> list[Document | Failure]:
    return list(books.read(ReadTask(source="books", path=str(path), options=options)))


def _books_tar(path: Path, mode: str, names: list[str]) -> None:
    options = {"preset": 1} if mode.endswith("xz") else {}
    with tarfile.open(path, mode, **options) as archive:
        for name in names:
            archive.add(BOOKS / name, arcname=f"books1/epubtxt/{name}")


@pytest.mark.parametrize("mode,suffix", [("w", ".tar"), ("w:gz", ".tar.gz"),
                                         ("w:xz", ".tar.xz"), ("w:bz2", ".tar.bz2")])
def test_tar_of_books(tmp_path: Path, mode: str, suffix: str) -> None:
    names = ["1952-0.txt", "41-0.txt", "pg1080.txt"]
    path = tmp_path / f"books1{suffix}"
    _books_tar(path, mode, names)
    docs = [item for task in books.plan(str(path), {}) for item in books.read(task)]
    assert [doc.id for doc in docs] == [f"books:books1{suffix}/books1/epubtxt/{n}" for n in names]
    assert [doc.text for doc in docs] == [_book(n) for n in names]
    assert docs[1].title == "The Legend of Sleepy Hollow"


def test_truncated_tar_xz_gives_books_before_the_cut_and_one_failure(tmp_path: Path) -> None:
    names = ["1952-0.txt", "41-0.txt", "pg1080.txt", "46-0.txt", "Candide-fr.txt"]
    whole = tmp_path / "whole.tar.xz"
    _books_tar(whole, "w:xz", names)
    cut = tmp_path / "cut.tar.xz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size * 3 // 4])
    out = _read(cut)
    docs, failures = out[:-1], out[-1:]
    assert 1 <= len(docs) < len(names)
    assert [d.text for d in docs] == [_book(n) for n in names[: len(docs)]]
    assert [f.reason for f in failures] == ["truncated_input"]
    assert failures[0].location == str(cut)


def test_truncated_gzip_book_is_one_failure(tmp_path: Path) -> None:
    data = gzip.compress((BOOKS / "46-0.txt").read_bytes())
    path = tmp_path / "46-0.txt.gz"
    path.write_bytes(data[: len(data) // 2])
    out = _read(path)
    assert [(type(x), x.reason) for x in out] == [(Failure, "truncated_input")]
    assert "gzip data ends before its end-of-stream marker" in out[0].detail


def test_compressed_single_book(tmp_path: Path) -> None:
    path = tmp_path / "2701-0.txt.xz"
    path.write_bytes(lzma.compress((BOOKS / "2701-0.txt").read_bytes(), preset=1))
    (doc,) = _read(path)
    assert doc.id == "books:2701-0.txt.xz"
    assert doc.text == _book("2701-0.txt")


def test_unsafe_and_non_text_members_are_counted(tmp_path: Path) -> None:
    text = (BOOKS / "1952-0.txt").read_bytes()
    path = tmp_path / "mixed.tar"
    with tarfile.open(path, "w") as archive:
        for name in ("../evil.txt", "/etc/evil.txt", "ok/1952-0.txt", "ok/cover.jpg"):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text))
        link = tarfile.TarInfo("ok/link.txt")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    out = _read(path)
    assert [doc.id for doc in out if isinstance(doc, Document)] == ["books:mixed.tar/ok/1952-0.txt"]
    assert [(f.location, f.reason) for f in out if isinstance(f, Failure)] == [
        (f"{path}:../evil.txt", "unsafe_tar_member"),
        (f"{path}:/etc/evil.txt", "unsafe_tar_member"),
        (f"{path}:ok/cover.jpg", "not_text_member"),
        (f"{path}:ok/link.txt", "unsafe_tar_member"),
    ]
    assert not (tmp_path.parent / "evil.txt").exists()


def test_cp1252_book_is_decoded_and_marked(tmp_path: Path) -> None:
    path = tmp_path / "41-cp1252.txt"
    path.write_bytes(_text("41-0.txt").encode("cp1252"))
    (doc,) = _read(path)
    assert doc.meta["encoding"] == "cp1252"
    assert doc.text == _book("41-0.txt")  # curly quotes intact


def test_invalid_utf8_bytes_become_replacement_characters(tmp_path: Path) -> None:
    raw = (BOOKS / "Candide-fr.txt").read_bytes()
    path = tmp_path / "damaged.txt"
    path.write_bytes(raw[:100_000] + b"\xc3\x28 \xa0\xa1" + raw[100_000:])
    (doc,) = _read(path)
    assert doc.meta["encoding"] == "utf-8+replace"
    assert doc.text.count("\ufffd") == 3
    assert doc.text.endswith("FIN DE CANDIDE.")


def test_binary_file_is_a_failure(tmp_path: Path) -> None:
    path = tmp_path / "not-a-book.txt"
    path.write_bytes(zlib.compress((BOOKS / "2701-0.txt").read_bytes()))
    assert [(f.reason, f.location) for f in _read(path)] == [("binary", str(path))]


def test_empty_file_gives_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blank.txt").write_bytes(b"\xef\xbb\xbf\r\n\r\n")
    assert _read(tmp_path / "empty.txt") == []
    assert _read(tmp_path / "blank.txt") == []


def test_license_only_file_is_a_failure(tmp_path: Path) -> None:
    raw = _text("1952-0.txt")
    path = tmp_path / "license.txt"
    path.write_text(raw[: raw.index("THE YELLOW WALLPAPER\n")] + raw[raw.index("End of Project"):])
    assert [f.reason for f in _read(path)] == ["no_book_text"]


def test_missing_file_is_a_failure_that_loses_the_whole_file(tmp_path: Path) -> None:
    failures = _read(tmp_path / "gone.txt")
    assert [(f.reason, f.lost_from) for f in failures] == [("unreadable_file", 0)]


def test_50_mb_book_reads_and_the_size_limit_applies(tmp_path: Path) -> None:
    text = (BOOKS / "tinyshakespeare-input.txt").read_bytes()
    path = tmp_path / "big.txt"
    path.write_bytes(text * 45)
    (doc,) = _read(path)
    assert len(doc.text) == len(text) * 45 - 1  # only the final newline goes
    (too_large,) = _read(path, max_document_bytes="10MiB")
    assert too_large.reason == "too_large"
    assert "max_document_bytes=10485760" in too_large.detail
