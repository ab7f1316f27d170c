"""Books source (BooksCorpus / Project Gutenberg style): one plain-text book a file.

`--input` is a glob, a file, or a directory (every file under it), of `.txt` books, possibly
compressed (gzip/bz2/xz/zstd, found by magic bytes), or tar archives of them (`.tar`,
`.tar.gz`, ...: every `.txt` member is a book). Each book is one Document:

- id `books:<name>`, the name relative to the input pattern's directory (for a tar member
  `books:<archive name>/<member path>`), so ids do not depend on where the corpus is mounted;
- title from the Project Gutenberg `Title:` header when there is one;
- text with CRLF/CR as LF, the BOM removed, and the Project Gutenberg header, footer and
  license stripped by `strip_gutenberg` (a file with no Gutenberg markers is kept whole).

Option `max_document_bytes` (default 1 GiB) caps one book's decompressed size.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from pipelines.document import Document, Failure, ReadTask
from pipelines.io import open_input
from pipelines.sources.archives import (
    ArchiveError,
    ArchiveMember,
    BinaryContentError,
    InputError,
    decode_text,
    failure,
    failure_from,
    is_tar,
    iter_tar_members,
    max_document_bytes,
    open_decompressed,
    plan_file_tasks,
    read_bounded,
    task_name,
    to_lf,
)

NAME = "books"

# Where the book starts: the line after the last of these in the header. "*END*THE SMALL
# PRINT!" closes the license block that 1990s files put before the text.
_HEADER_END = re.compile(
    r"\*\*\*\s*START\s+OF\s+(?:THE|THIS)\s+PROJECT\s+GUTENBERG"
    r"|\*\s*END\s*\*\s*THE\s+SMALL\s+PRINT",
    re.IGNORECASE,
)
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
_GUTENBERG = re.compile(r"project\s+gutenberg|gutenberg\.(?:org|net)", re.IGNORECASE)
_RULE = re.compile(r"^[\s*]*$")  # a paragraph of asterisks only
# Front matter is only looked for this far into the body, so a long book is never scanned.
_FRONT_MATTER_LINES = 120
_TITLE = re.compile(r"Title:[ \t]*(.*)")


def _gutenberg_bounds(lines: list[str]) -> tuple[int, int, bool]:
    """(first body line, one past the last body line, whether a header marker was found)."""
    # A header marker in the second half of a file is not a header (1990s files sometimes
    # carry the "*END*THE SMALL PRINT" block after the book).
    headers = [i for i, line in enumerate(lines[: len(lines) // 2 + 1]) if _HEADER_END.search(line)]
    search_from = headers[0] + 1 if headers else 0
    end = len(lines)
    for i in range(search_from, len(lines)):
        if _FOOTER_START.search(lines[i]):
            end = i
            break
    start = max((i for i in headers if i < end), default=-1) + 1
    return start, end, bool(headers)


def _paragraphs(lines: list[str], start: int, stop: int) -> Iterator[tuple[int, int]]:
    """(first, one past last) line index of each paragraph in lines[start:stop]."""
    i = start
    while i < stop:
        while i < stop and not lines[i].strip():
            i += 1
        first = i
        while i < stop and lines[i].strip():
            i += 1
        if first < i:
            yield first, i


def _skip_front_matter(lines: list[str], start: int, end: int) -> int:
    """The first line of the author's text after Project Gutenberg's own front matter."""
    in_credit = False
    body = start
    for first, stop in _paragraphs(lines, start, min(end, start + _FRONT_MATTER_LINES)):
        paragraph = "\n".join(lines[first:stop])
        if _CREDIT.match(paragraph):
            in_credit = True
        elif not (
            _GUTENBERG.search(paragraph)
            or _RULE.match(paragraph)
            or (in_credit and _CREDIT_CONTINUATION.search(paragraph))
        ):
            return first
        body = stop
    return body


def strip_gutenberg(text: str) -> str:
    """The book's own text: Project Gutenberg header, front-matter credits, footer and license
    removed, leading and trailing blank lines dropped. Text without Gutenberg markers is
    returned whole (minus the blank lines at its ends). Accepts LF or CRLF line ends."""
    lines = text.splitlines()
    start, end, has_header = _gutenberg_bounds(lines)
    if has_header:
        start = _skip_front_matter(lines, start, end)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and (not lines[end - 1].strip() or _RULE.match(lines[end - 1])):
        end -= 1
    return "\n".join(lines[start:end])


def gutenberg_title(text: str) -> str:
    """The `Title:` field of a Project Gutenberg header (continuation lines joined), or ''."""
    lines = text.splitlines()
    start, _, has_header = _gutenberg_bounds(lines)
    if not has_header:
        return ""
    for i in range(start):
        match = _TITLE.search(lines[i])
        if match:
            parts = [match.group(1).strip()]
            for line in lines[i + 1 : start]:
                if not line.strip() or not line[0].isspace():
                    break
                parts.append(line.strip())
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
    body = strip_gutenberg(text)
    if not body.strip():
        yield failure(location, "no_book_text", "nothing left after removing Gutenberg boilerplate")
        return
    yield Document(
        id=f"{NAME}:{name}",
        source=NAME,
        text=body,
        title=gutenberg_title(text),
        meta={"encoding": decoded.encoding},
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


def plan(pattern: str, options: Mapping[str, str]) -> list[ReadTask]:
    return plan_file_tasks(NAME, pattern, options)


def read(task: ReadTask) -> Iterator[Document | Failure]:
    name = task_name(task)
    limit = max_document_bytes(task.options)
    try:
        with open_input(task.path) as raw:
            opened = open_decompressed(raw)
            if is_tar(opened.head):
                for item in iter_tar_members(opened.stream, task.path):
                    if isinstance(item, Failure):
                        yield item
                    else:
                        yield from _member_books(item, name, task.path, limit)
            else:
                data = read_bounded(opened.stream, limit, "book")
                yield from book_document(data, name, task.path)
    except InputError as error:
        yield failure_from(error, task.path)
    except OSError as error:
        yield failure(task.path, "unreadable_file", str(error))
