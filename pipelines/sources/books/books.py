"""Books source (BooksCorpus / Project Gutenberg style): one plain-text book a file.

`--input` is a glob, a file, or a directory (every file under it), of `.txt` books, possibly
compressed (gzip/bz2/xz/zstd, found by magic bytes), or tar archives of them (`.tar`,
`.tar.gz`, ...: every `.txt` member is a book). Each book is one Document:

- id `books:<name>`, the name relative to the input pattern's directory (for a tar member
  `books:<archive name>/<member path>`), so ids do not depend on where the corpus is mounted;
- title from the Project Gutenberg `Title:` header when there is one;
- text with CRLF/CR as LF, the BOM removed, the Project Gutenberg header, footer and
  license stripped by `strip_gutenberg` (a file with no Gutenberg markers is kept whole), and
  the publisher's and transcriber's apparatus (title page, imprint, contents, lists of
  illustrations, editors' notes, `{15}` page markers, `[Illustration]` blocks and credit
  lines: `book_front_matter.strip_front_matter`; a transcriber's correction list and a
  printer's imprint at the end: `book_back_matter.strip_back_matter`; lists of entries in
  page order, advertisements at the end, colophons, drawings made of characters and layout
  marks wherever they stand, a half-title above the first chapter:
  `book_apparatus.strip_apparatus`;
  footnotes an editor signed and headings of passages from other editions:
  `book_annotations.strip_annotations`; notes on the making of the e-text in the front and
  editors' bibliographies: `book_editorial.strip_editorial`) cut, so the text is the work,
  a preface or letters before its first chapter included;
- `meta["parts_removed"]` counting what that cut, by kind ("title_page 1, contents 1"), and
  `meta["parts_removed_text"]` holding it, which the read stage takes off the document and
  writes to the rejects audit (--keep-rejects).

Option `max_document_bytes` (default 256 MiB) caps one book's decompressed size. An uncompressed
tar bigger than `task_bytes` (default 64MiB) is read as ranges of whole members by several
workers (sources/ranges.py); a compressed tar is one stream, and a `.txt` file one book, so
each of those is one task.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

from pipelines.document import PARTS_REMOVED, PARTS_REMOVED_TEXT, Document, Failure, ReadTask
from pipelines.sources.books.book_annotations import strip_annotations
from pipelines.sources.books.book_apparatus import strip_apparatus
from pipelines.sources.books.book_back_matter import TRANSCRIBER_NOTE, strip_back_matter
from pipelines.sources.books.book_editorial import strip_editorial
from pipelines.sources.books.book_front_matter import strip_front_matter
from pipelines.sources.books.book_text import paragraphs
from pipelines.sources.compression import open_decompressed
from pipelines.sources.file_source import FileSource, task_name
from pipelines.sources.input_errors import (
    ArchiveError,
    BinaryContentError,
    InputError,
    failure,
    failure_from,
)
from pipelines.sources.ranges import split_tar_file, tar_range_stream
from pipelines.sources.reading import decode_text, read_bounded, to_lf
from pipelines.sources.sizes import max_document_bytes
from pipelines.sources.tar_members import ArchiveMember, is_tar, iter_tar_members
from pipelines.sources.traits import DocumentBound, InputFormat, SourceTraits, leading_text

NAME = "books"
# Curated text, one book a file: a plain file's text is the book's own characters.
def _looks_like_books(head: bytes) -> bool:
    """A tar of books, or plain text: no NUL byte, and not markup or JSON."""
    return is_tar(head) or (b"\0" not in head and not leading_text(head).startswith((b"<", b"{")))


TRAITS = SourceTraits(
    documents=DocumentBound.ONE_PER_PLAIN_FILE,
    input_format=InputFormat("plain-text books", _looks_like_books),
)

# Where the book starts: the line after the last of these in the header. "*END*THE SMALL
# PRINT!" closes the license block that 1990s files put before the text.
_HEADER_END = re.compile(
    r"\*\*\*\s*START\s+OF\s+(?:THE|THIS)\s+PROJECT\s+GUTENBERG"
    r"|\*\s*END\W*THE\s+SMALL\s+PRINT",
    re.IGNORECASE,
)
# A long title wraps the START marker over lines ("*** START OF THE PROJECT GUTENBERG EBOOK\n
# THE STRANGE CASE OF DR. JEKYLL AND MR. HYDE ***"): the marker runs on to the line that closes
# it with asterisks, at most this many lines on.
_MARKER_CLOSE = re.compile(r"\*\*\*\s*$")
_MARKER_CONTINUATION_LINES = 3
# Where the book ends: the first of these after the start. "End of [the] Project Gutenberg
# [EBook|Etext] of X" precedes the END marker in most files; the license block follows it.
_FOOTER_START = re.compile(
    r"\*\*\*\s*END\s+OF\s+(?:THE|THIS)\s+PROJECT\s+GUTENBERG"
    r"|^\s*End\s+of\s+(?:the\s+|this\s+)?Project\s+Gutenberg"
    r"|\*\*\*\s*START:\s*FULL\s+LICENSE"
    r"|^\W*START\W*THE\s+SMALL\s+PRINT",
    re.IGNORECASE,
)
# Paragraphs between the START marker and the book that are Project Gutenberg's, not the
# author's: the "Produced by" credit, "The Project Gutenberg Etext of X" banners, "***" rules.
_CREDIT = re.compile(
    r"^\s*(?:produced\s+by|prepared\s+by|e-?text\s+(?:was\s+)?prepared\s+by|transcribed\s+by"
    r"|scanned\s+by|digiti[sz]ed\s+by|proofread\s+by"
    r"|this\s+e-?(?:text|book)\s+was\s+(?:produced|prepared|created|made))",
    re.IGNORECASE,
)
# What a paragraph that continues a credit talks about (thanks to the library that lent the
# scans, OCR notes): checked so that a real first chapter after a credit is never dropped.
_CREDIT_CONTINUATION = re.compile(
    r"e-?text|e-?book|transcri|proofread|\bOCR\b|\bwww\b|https?://|scann|gutenberg|thank|remerci",
    re.IGNORECASE,
)
# What a paragraph that continues a note talks about (besides the credit words).
_NOTE_CONTINUATION = re.compile(
    r"typo|spelling|punctuation|hyphenat|italic|inconsisten|\bcorrected\b|\berrors?\b"
    r"|footnote|underscore|original\s+(?:text|book|edition|printing)",
    re.IGNORECASE,
)
# Credits and notes are removed this far into the book's text: past a title page and a long
# table of contents (Moby-Dick's transcriber's note follows 135 chapter titles), well before
# the text of a chapter that might quote such a phrase.
_FRONT_NOTES_LINES = 500
_GUTENBERG = re.compile(r"project\s+gutenberg|gutenberg\.(?:org|net)", re.IGNORECASE)
_RULE = re.compile(r"^[\s*]*$")  # a paragraph of asterisks only
_TITLE = re.compile(r"Title:[ \t]*(.*)")


# Every marker line names one of these words, in one of these cases; only such lines are
# matched against the regexes, so a 50 MB book costs a few str.find calls, not a regex per line
# (and not a lower() copy of the whole text).
_MARKER_WORDS = tuple(
    variant
    for word in ("gutenberg", "small print", "full license")
    for variant in (word, word.upper(), word.title())
)


def _marker_lines(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the lines that mention a marker word, in text order."""
    lines = set()
    for word in _MARKER_WORDS:
        position = text.find(word)
        while position >= 0:
            line_start = text.rfind("\n", 0, position) + 1
            line_end = text.find("\n", position)
            line_end = len(text) if line_end < 0 else line_end
            lines.add((line_start, line_end))
            position = text.find(word, line_end)
    return sorted(lines)


def split_gutenberg(text: str) -> tuple[str, str]:
    """(Project Gutenberg header, the book's own text); the header is '' for a file without
    Gutenberg markers. See strip_gutenberg."""
    text = to_lf(text)
    markers = _marker_lines(text)
    # A header marker in the second half of a file is not a header (1990s files sometimes
    # carry the "*END*THE SMALL PRINT" block after the book).
    headers = [(a, b) for a, b in markers if a < len(text) // 2 and _HEADER_END.search(text, a, b)]
    headers = [(a, _marker_end(text, a, b)) for a, b in headers]
    search_from = headers[0][1] if headers else 0
    end = next((a for a, b in markers if a >= search_from and _FOOTER_START.search(text[a:b])),
               len(text))
    start = max((b for a, b in headers if b <= end), default=0)
    if not headers:
        return "", _without_trailing_blank_lines(_BLANK_LINES_AT_START.sub("", text, count=1))
    body = _without_front_matter(text[start:end])
    body = _BLANK_LINES_AT_START.sub("", body, count=1)
    return text[:start], _without_trailing_blank_lines(body)


def _marker_end(text: str, line_start: int, line_end: int) -> int:
    """The end of the header marker on the line text[line_start:line_end]: that line's end, or
    for a START marker wrapped over lines, the end of the line that closes it with "***"."""
    line = text[line_start:line_end]
    if not line.lstrip().startswith("***") or _MARKER_CLOSE.search(line):
        return line_end
    end = line_end
    for _ in range(_MARKER_CONTINUATION_LINES):
        if end >= len(text):
            break
        next_end = text.find("\n", end + 1)
        next_end = len(text) if next_end < 0 else next_end
        continuation = text[end + 1 : next_end]
        if not continuation.strip():
            break  # a blank line: the marker was not wrapped after all
        if _MARKER_CLOSE.search(continuation):
            return next_end
        end = next_end
    return line_end


_BLANK_LINES_AT_START = re.compile(r"\A(?:[^\S\n]*\n)+")


def _without_trailing_blank_lines(body: str) -> str:
    """`body` without its trailing lines of only white space or asterisks (a "***" rule)."""
    end = len(body)
    while end > 0:
        line_start = body.rfind("\n", 0, end) + 1
        if body[line_start:end].strip(" \t\r\f\v*"):
            break
        end = max(line_start - 1, 0)
    return body[:end]


def _without_front_matter(body: str) -> str:
    """`body` without Project Gutenberg's front matter in its first `_FRONT_NOTES_LINES` lines:
    "The Project Gutenberg Etext of X" banners, producers' credits and transcribers' notes
    (a paragraph that opens one: `_GUTENBERG`, `_CREDIT`, `TRANSCRIBER_NOTE`), the paragraphs that
    continue them (a bracketed note runs to its "]"; others while they talk about etexts,
    scans, spelling or errors, or are "***" rules), "***" rules before the text, and the blank
    lines after each."""
    limit = len(body)
    cut = -1
    for _ in range(_FRONT_NOTES_LINES):
        cut = body.find("\n", cut + 1)
        if cut < 0:
            break
    if cut >= 0:
        limit = cut
    removed: list[tuple[int, int]] = []
    in_note = open_bracket = False
    before_text = True
    for start, end in paragraphs(body[:limit]):
        paragraph = body[start:end]
        opens = (
            _CREDIT.match(paragraph)
            or TRANSCRIBER_NOTE.match(paragraph)
            or _GUTENBERG.search(paragraph)
        )
        continues = (in_note or before_text) and _RULE.match(paragraph)
        continues = continues or (in_note and (
            open_bracket
            or _CREDIT_CONTINUATION.search(paragraph)
            or _NOTE_CONTINUATION.search(paragraph)
        ))
        if not (opens or continues):
            in_note = open_bracket = before_text = False
            continue
        if opens:
            open_bracket = paragraph.lstrip().startswith("[")
        if open_bracket and "]" in paragraph:
            open_bracket = False
        in_note = True
        removed.append((start, end))
    if not removed:
        return body
    kept, position = [], 0
    for start, end in removed:
        kept.append(body[position:start])
        position = end
        while position < len(body) and body[position] == "\n":
            position += 1  # the blank lines after the note go with it
    kept.append(body[position:])
    return "".join(kept)


def strip_gutenberg(text: str) -> str:
    """The book's own text: the Project Gutenberg header (up to the last "*** START OF
    THE/THIS PROJECT GUTENBERG EBOOK" or "*END*THE SMALL PRINT" line, a START marker wrapped
    over lines included), its front-matter credits ("Produced by ...", "The Project Gutenberg
    Etext of ...") and transcribers' and producers' notes before the text (within the first
    `_FRONT_NOTES_LINES` lines), the footer (from "End of
    [the] Project Gutenberg ...", "*** END OF THE/THIS PROJECT GUTENBERG", or the license
    block, whichever comes first) removed, and blank lines at both ends dropped. Line ends
    come back as LF. Text without Gutenberg markers is returned whole."""
    return split_gutenberg(text)[1]


def gutenberg_title(text: str) -> str:
    """The `Title:` field of a Project Gutenberg header (continuation lines joined), or ''."""
    return _title_from_header(split_gutenberg(text)[0])


def _title_from_header(header: str) -> str:
    lines = header.split("\n")
    for i, line in enumerate(lines):
        match = _TITLE.search(line)
        if match:
            parts = [match.group(1).strip()]
            for continuation in lines[i + 1:]:
                if not continuation.strip() or not continuation[0].isspace():
                    break
                parts.append(continuation.strip())
            return " ".join(part for part in parts if part)
    return ""


def book_document(data: bytes, name: str, location: str) -> Iterator[Document | Failure]:
    """The Document for one book file's bytes (nothing for an empty file)."""
    try:
        decoded = decode_text(data)
    except BinaryContentError as error:
        yield failure_from(error, location)
        return
    text = to_lf(decoded.text).lstrip("\ufeff")
    if not text.strip():
        return  # an empty file holds no book: nothing is lost
    header, body = split_gutenberg(text)
    if not body.strip():
        yield failure(location, "no_book_text", "nothing left after removing Gutenberg boilerplate")
        return
    title = _title_from_header(header)
    front = strip_back_matter(strip_front_matter(body))
    front = strip_editorial(strip_annotations(strip_apparatus(front, title)))
    meta = {"encoding": decoded.encoding}
    if front.removed:
        meta[PARTS_REMOVED] = front.summary()
        meta[PARTS_REMOVED_TEXT] = front.removed_text
    yield Document(
        id=f"{NAME}:{name}",
        source=NAME,
        text=front.text,
        title=title,
        meta=meta,
    )


_COMPRESSED_SUFFIX = re.compile(r"\.(?:gz|bz2|xz|zst)$", re.IGNORECASE)


def _is_book_member(name: str) -> bool:
    return _COMPRESSED_SUFFIX.sub("", name).lower().endswith(".txt")


def _member_books(member: ArchiveMember, archive_name: str, location: str,
                  limit: int) -> Iterator[Document | Failure]:
    where = f"{location}:{member.name}"
    if not _is_book_member(member.name):
        yield failure(where, "not_text_member", "tar member is not a .txt book")
        return
    if member.size > limit:
        yield failure(where, "too_large", f"tar member is {member.size} bytes, limit {limit}")
        return
    try:
        opened = open_decompressed(member.stream)
        data = read_bounded(opened.stream, limit, "book")
    except ArchiveError as error:
        if error.location == location:
            raise  # the archive itself broke: read() reports it once
        yield failure_from(error, where)
        return
    except InputError as error:  # this member only (e.g. a corrupt .txt.gz inside the tar)
        yield failure_from(error, where)
        return
    yield from book_document(data, f"{archive_name}/{member.name}", where)


def _read_file(raw: BinaryIO, task: ReadTask) -> Iterator[Document | Failure]:
    name = task_name(task)
    limit = max_document_bytes(task.options)
    opened = open_decompressed(tar_range_stream(raw, task))
    if is_tar(opened.head):
        for item in iter_tar_members(opened.stream, task.path):
            if isinstance(item, Failure):
                yield item
            else:
                yield from _member_books(item, name, task.path, limit)
    else:
        data = read_bounded(opened.stream, limit, "book")
        yield from book_document(data, name, task.path)


_FILES = FileSource(NAME, TRAITS, _read_file)
check_options, plan, read = _FILES.check_options, _FILES.plan, _FILES.read
split = split_tar_file
