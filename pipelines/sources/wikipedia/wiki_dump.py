"""MediaWiki XML export dumps -> their `<siteinfo>` and `<page>`s, as records (`parse_pages`).

The wikipedia source (wikipedia.py) turns the pages into documents and plans the tasks; this
module reads the bytes of one task (a whole dump, or a byte range of a multistream bz2 dump
holding whole streams) and parses them.

Parsing streams through expat (at most a few MB in memory besides one page), namespace-agnostic
(export schema 0.10, 0.11, ...), with DTDs and entity declarations refused: a document that
declares entities is a Failure, never expanded. A page that does not parse (a control
character, a bad tag, an undefined entity) is one Failure and the parse goes on at the next
`<page>` with a fresh parser; only input that ends early or is corrupt stops a task, with one
Failure saying from where its input is lost (Failure.lost_from). A page whose fields exceed
`max_document_bytes` stops being collected at the cap and is Failure(too_large); a page whose
`<text>` (or title, id) holds child elements is Failure(bad_page).
"""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Iterator
from typing import BinaryIO
from xml.parsers import expat

from pipelines.document import Failure, ReadTask
from pipelines.io import open_input
from pipelines.sources import compression, input_errors, sizes
from pipelines.sources.wikipedia import wikimarkup

_READ_BYTES = 1 << 20  # compressed bytes per read() call on the input file
_MAX_OUT = 1 << 20  # decompressed bytes handed to the XML parser at a time
BZ2_STREAM_MAGIC = re.compile(rb"BZh[1-9]1AY&SY")


# --- records -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SiteInfo:
    """What `<siteinfo>` says about the wiki a dump comes from."""

    dbname: str = ""
    base: str = ""  # URL of the main page, e.g. https://en.wikipedia.org/wiki/Main_Page
    namespaces: tuple[tuple[int, str], ...] = ()  # (key, localized name); "" for ns 0

    def namespace_name(self, key: int) -> str:
        return next((name for k, name in self.namespaces if k == key), "")


@dataclasses.dataclass(frozen=True)
class WikiPage:
    """One `<page>` as the dump has it (the last revision's text, raw wikitext)."""

    title: str
    ns: int
    page_id: str
    revision_id: str
    text: str
    is_redirect: bool  # a <redirect> element was present
    site: SiteInfo


# --- reading bytes -----------------------------------------------------------------------------


class _InputError(Exception):
    """The bytes of the input end early or are corrupt (carries the Failure reason, and where
    the task's input counts as lost from: Failure.lost_from)."""

    def __init__(self, reason: str, detail: str, lost_from: int = 0) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.lost_from = lost_from


def _raw_chunks(raw: BinaryIO, start: int, end: int) -> Iterator[bytes]:
    if start:
        raw.seek(start)
    remaining = end - start if end >= 0 else -1
    while remaining:
        data = raw.read(_READ_BYTES if remaining < 0 else min(_READ_BYTES, remaining))
        if not data:
            return
        if remaining > 0:
            remaining -= len(data)
        yield data


class _RangeReader(io.RawIOBase):
    """The raw bytes of `raw` from `start` to `end` (-1: to the end of the file), as a stream."""

    def __init__(self, raw: BinaryIO, start: int, end: int) -> None:
        super().__init__()
        self._chunks = _raw_chunks(raw, start, end)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:
        while not self._pending:
            data = next(self._chunks, b"")
            if not data:
                return 0
            self._pending = memoryview(data)
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count


def _decompressed(raw: BinaryIO, start: int, end: int, label: str) -> Iterator[bytes]:
    """The input's bytes from `start` to `end`, decompressed per their magic bytes (gzip, bz2,
    xz, zstd, else taken as they are), _MAX_OUT at a time. A range after byte 0 must start a bz2
    stream (only multistream bz2 dumps are split)."""
    try:
        opened = compression.open_decompressed(_RangeReader(raw, start, end))
    except input_errors.InputError as error:
        raise _InputError(error.reason, f"{label}: {error.detail}",
                          input_errors.lost_from(error)) from None
    if not opened.head:
        raise _InputError("unreadable_file", f"{label}: no bytes to read")
    if start and opened.compression != "bz2":
        raise _InputError("unreadable_file", f"{label}: byte {start} is not a bz2 stream start")
    return _read_chunks(opened.stream, label)


def _read_chunks(stream: BinaryIO, label: str) -> Iterator[bytes]:
    try:
        while data := stream.read(_MAX_OUT):
            yield data
    except input_errors.InputError as error:
        raise _InputError(error.reason, f"{label}: {error.detail}",
                          input_errors.lost_from(error)) from None


# --- parsing XML -------------------------------------------------------------------------------


class _ForbiddenDTD(Exception):
    pass


class _NotMediaWiki(Exception):
    pass


class _SiteInfoDone(Exception):
    pass


_PAGE_FIELDS = frozenset({"title", "ns", "id"})
_REVISION_FIELDS = frozenset({"id", "text"})
_SITE_FIELDS = frozenset({"dbname", "base"})


class _DumpHandler:
    """expat callbacks that collect `<siteinfo>` and each `<page>` (names without prefixes)."""

    def __init__(
        self,
        site: SiteInfo | None,
        stop_after_siteinfo: bool,
        max_page_bytes: int = sizes.DEFAULT_MAX_DOCUMENT_BYTES,
    ) -> None:
        self.site = site
        self.stop_after_siteinfo = stop_after_siteinfo
        self.max_page_bytes = max_page_bytes
        self.stack: list[str] = []
        self.capture: list[str] | None = None
        self.captured_bytes = 0  # of the current page's fields, checked against max_page_bytes
        self.pages: list[WikiPage | Failure] = []  # finished since the last drain
        self.page_count = 0
        self.site_fields: dict[str, str] = {}
        self.namespaces: list[tuple[int, str]] = []
        self.namespace_key = 0
        self._reset_page()

    def restart(self) -> None:
        """Forget the page being parsed: a fresh parser goes on at the next <page>."""
        self.stack = []
        self.capture = None
        self._reset_page()

    def _reset_page(self) -> None:
        self.page: dict[str, str] = {}
        self.revision: dict[str, str] = {}
        self.redirect = False
        self.captured_bytes = 0
        # (reason, detail) when the page cannot become a document: it is a Failure, counted.
        self.problem: tuple[str, str] | None = None

    def install(self, parser: expat.XMLParserType) -> None:
        parser.StartElementHandler = self.start
        parser.EndElementHandler = self.end
        parser.CharacterDataHandler = self.characters
        parser.StartDoctypeDeclHandler = self.forbid
        parser.EntityDeclHandler = self.forbid
        parser.buffer_text = True
        parser.buffer_size = 1 << 16

    def forbid(self, *args: object) -> None:
        raise _ForbiddenDTD

    def characters(self, data: str) -> None:
        if self.capture is None:
            return
        self.captured_bytes += len(data.encode("utf-8"))
        if self.captured_bytes > self.max_page_bytes:
            # Stop collecting at once: a page that decompresses to gigabytes is never held.
            self.capture = None
            self.problem = (
                "too_large",
                f"<{self.stack[-1]}> is larger than {sizes.MAX_DOCUMENT_BYTES_OPTION}="
                f"{self.max_page_bytes} bytes",
            )
            return
        self.capture.append(data)

    def start(self, name: str, attrs: dict[str, str]) -> None:
        local = name.rpartition(":")[2]
        stack = self.stack
        parent = stack[-1] if stack else ""
        stack.append(local)
        if self.capture is not None:
            # The export schema's fields hold text only; what would the child's text mean?
            self.capture = None
            self.problem = ("bad_page", f"<{parent}> holds a child element <{local}>")
            return
        if parent == "page":
            if local in _PAGE_FIELDS and local not in self.page:
                self.capture = []
            elif local == "redirect":
                self.redirect = True
            elif local == "revision":
                self.revision = {}
        elif parent == "revision":
            if local in _REVISION_FIELDS:
                self.capture = []
        elif local == "page" and len(stack) == 2:
            if self.stop_after_siteinfo:  # a dump without <siteinfo>
                raise _SiteInfoDone
            self._reset_page()
        elif parent == "siteinfo":
            if local in _SITE_FIELDS:
                self.capture = []
        elif parent == "namespaces" and local == "namespace":
            self.capture = []
            key = attrs.get("key", "")
            self.namespace_key = int(key) if key.lstrip("-").isdigit() else 0
        elif len(stack) == 1 and local != "mediawiki":
            raise _NotMediaWiki(local)

    def end(self, name: str) -> None:
        stack = self.stack
        local = stack.pop()
        parent = stack[-1] if stack else ""
        if self.capture is not None:
            value = "".join(self.capture)
            self.capture = None
            if parent == "page":
                self.page[local] = value
            elif parent == "revision":
                self.revision[local] = value
            elif parent == "siteinfo":
                self.site_fields[local] = value.strip()
            elif parent == "namespaces":
                self.namespaces.append((self.namespace_key, value.strip()))
        if local == "page" and len(stack) == 1:
            self._finish_page()
        elif local == "siteinfo":
            self.site = SiteInfo(
                dbname=self.site_fields.get("dbname", ""),
                base=self.site_fields.get("base", ""),
                namespaces=tuple(self.namespaces),
            )
            if self.stop_after_siteinfo:
                raise _SiteInfoDone

    def current_site(self) -> SiteInfo:
        if self.site is None:
            self.site = SiteInfo()
        return self.site

    def _finish_page(self) -> None:
        self.page_count += 1
        site = self.current_site()
        title = self.page.get("title", "").strip()
        page_id = self.page.get("id", "").strip()
        if self.problem:
            reason, detail = self.problem
            self.pages.append(
                Failure(location=f"page {title!r} (id {page_id!r})", reason=reason, detail=detail)
            )
            return
        if not page_id.isdigit():
            self.pages.append(
                Failure(
                    location=f"page {title!r}",
                    reason="bad_page",
                    detail=f"page id {page_id!r} is not a number",
                )
            )
            return
        ns_text = self.page.get("ns", "").strip()
        self.pages.append(
            WikiPage(
                title=title,
                ns=int(ns_text) if ns_text.lstrip("-").isdigit() else _namespace_of(title, site),
                page_id=page_id,
                revision_id=self.revision.get("id", "").strip(),
                text=self.revision.get("text", ""),
                is_redirect=self.redirect,
                site=site,
            )
        )


def _namespace_of(title: str, site: SiteInfo) -> int:
    """A page's namespace from its title prefix (export schemas before 0.6 have no <ns>)."""
    prefix, colon, _ = title.partition(":")
    if not colon:
        return 0
    prefix = wikimarkup.normalize_namespace_name(prefix)
    for key, name in site.namespaces:
        if name and wikimarkup.normalize_namespace_name(name) == prefix:
            return key
    return 0


def _location(task: ReadTask) -> str:
    if task.start == 0 and task.end < 0:
        return task.path
    return f"{task.path}@{task.start}-{task.end if task.end >= 0 else 'end'}"


def read_siteinfo(path: str) -> SiteInfo | None:
    """The <siteinfo> at the start of a dump, in any compression (a range task of a multistream
    dump needs it for ids and namespace names; the launcher for the dump's language). Parsing
    stops at its end, a few KB in. None when the file cannot be read or holds none."""
    handler = _DumpHandler(None, stop_after_siteinfo=True)
    parser = expat.ParserCreate()
    handler.install(parser)
    try:
        with open_input(path) as raw:
            for chunk in _decompressed(raw, 0, -1, path):
                parser.Parse(chunk, False)
    except _SiteInfoDone:
        return handler.site
    except (OSError, EOFError, expat.ExpatError, _ForbiddenDTD, _NotMediaWiki, _InputError):
        return None
    return handler.site


def _invalid_utf8_at(recent: list[tuple[int, bytes]], index: int) -> bool:
    for base, chunk in recent:
        if base <= index < base + len(chunk):
            window = chunk[index - base : index - base + 4]
            try:
                window.decode("utf-8")
            except UnicodeDecodeError as error:
                return error.start == 0
            return False
    return False


def _stream_start_from(raw: BinaryIO, position: int) -> int:
    """The offset of the first bz2 stream header at or after `position`, -1 if none. A
    multistream dump's streams are each ~100 pages, so this reads ~100 kB. The 80-bit header
    turns up inside compressed data by chance about as often as a hash collides; were it to,
    the decompressor would fail there (a counted Failure), not yield wrong text."""
    resume_at = raw.tell()
    raw.seek(position)
    carry = b""
    data_start = position
    try:
        while data := raw.read(_READ_BYTES):
            window = carry + data
            match = BZ2_STREAM_MAGIC.search(window)
            if match:
                return data_start - len(carry) + match.start()
            carry = window[-9:]
            data_start += len(data)
        return -1
    finally:
        raw.seek(resume_at)


# expat's complaints when the input stops inside the document
_END_OF_INPUT_ERRORS = frozenset(
    expat.errors.codes[message]
    for message in (
        expat.errors.XML_ERROR_NO_ELEMENTS,
        expat.errors.XML_ERROR_UNCLOSED_TOKEN,
        expat.errors.XML_ERROR_PARTIAL_CHAR,
    )
)


_PAGE_TAG = re.compile(rb"<page[\s>]")
_MEDIAWIKI_PREFIX = b"<mediawiki>"


def _next_page(data: bytes, chunks: Iterator[bytes]) -> tuple[bytes | None, int]:
    """`data` and the chunks after it from the next `<page>` tag on (None when no page follows),
    and the number of lines passed over on the way (the rest of a page that would not parse).
    In a dump a literal "<page" is only ever that tag: text has its "<" escaped."""
    carry, lines = b"", 0
    while True:
        window = carry + data
        match = _PAGE_TAG.search(window)
        if match:
            return window[match.start() :], lines + window.count(b"\n", 0, match.start())
        lines += window.count(b"\n", 0, max(len(window) - 5, 0))
        carry = window[-5:]  # a "<page" cut in two by the chunk boundary
        data = next(chunks, None)
        if data is None:
            return None, lines


def _bytes_from(recent: list[tuple[int, bytes]], index: int) -> bytes:
    """The bytes fed to the parser from `index` on, of the last two chunks fed."""
    joined_start = recent[0][0]
    joined = b"".join(chunk for _, chunk in recent)
    return joined[max(index - joined_start, 0) :]


class _PageParser:
    """An expat parser over a dump's bytes that, when a page does not parse, skips to the next
    `<page>` and goes on with a fresh parser (a control character or a bad byte costs its page,
    not the rest of the file)."""

    def __init__(self, handler: _DumpHandler, in_root: bool) -> None:
        self.handler = handler
        self.line_base = 1  # the dump's line number of the parser's first line
        self._start(in_root)

    def _start(self, in_root: bool) -> None:
        self.parser = expat.ParserCreate()
        self.parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        self.handler.install(self.parser)
        self.fed = 0
        self.recent: list[tuple[int, bytes]] = []  # the last two chunks fed
        if in_root:  # pages without their <mediawiki> root: a range task, or after a skip
            self.parser.Parse(_MEDIAWIKI_PREFIX, False)
            self.fed = len(_MEDIAWIKI_PREFIX)

    def feed(self, chunk: bytes, chunks: Iterator[bytes], location: str) -> Iterator[Failure]:
        """Parse `chunk`; for each page that does not parse, a Failure, and the parse goes on
        at the next page (read from `chunks` as far as needed)."""
        pending: bytes | None = chunk
        while pending:
            self.recent = [*self.recent[-1:], (self.fed, pending)]
            try:
                self.parser.Parse(pending, False)
            except expat.ExpatError as error:
                yield self.failure(error, location, "the page is skipped")
                # From the byte after the fault, so that a fault at a <page> tag moves on; and
                # past the first byte held, so that a fault placed before the chunks held (a
                # token longer than a chunk) cannot send the parse back to where it started.
                resume = max(self.parser.ErrorByteIndex, self.recent[0][0]) + 1
                rest = _bytes_from(self.recent, resume)
                line = self.line_base + error.lineno - 1
                pending, skipped_lines = _next_page(rest, chunks)
                self.handler.restart()
                self._start(in_root=True)
                self.line_base = line + skipped_lines
                continue
            self.fed += len(pending)
            pending = None

    def finish(self, closing: bytes) -> None:
        """The end of the input (`closing` closes a range task's root)."""
        self.parser.Parse(closing, True)

    def end_failure(self, error: expat.ExpatError, location: str) -> Failure:
        """The Failure of a parse error at the end of the input: the file stops inside the
        document (a cut file, its missing rest counted lost: Failure.lost_from) or ends badly."""
        if self.handler.stack and error.code in _END_OF_INPUT_ERRORS:
            return dataclasses.replace(
                self.failure(error, location, "the file ends there", "truncated_input"),
                lost_from=0,
            )
        return self.failure(error, location, "nothing follows")

    def failure(self, error: expat.ExpatError, location: str, outcome: str,
                reason: str = "") -> Failure:
        line = self.line_base + error.lineno - 1
        if _invalid_utf8_at(self.recent, self.parser.ErrorByteIndex):
            reason = "invalid_utf8"
        elif not reason:
            reason = "malformed_xml"
        message = expat.errors.messages[error.code]
        return Failure(
            f"{location}:{line}:{error.offset}",
            reason,
            f"{message} at line {line}, column {error.offset}; {outcome} "
            f"({self.handler.page_count} pages read before it)",
        )


def parse_pages(task: ReadTask) -> Iterator[WikiPage | Failure]:
    """Every `<page>` of the task's file or byte range, in file order. A page that does not
    parse is a Failure and the parse goes on at the next `<page>`; input that turns out
    truncated or corrupt part-way ends the task with one Failure (pages before it are kept)."""
    location = _location(task)
    is_range = task.start > 0 or task.end >= 0
    site = read_siteinfo(task.path) if task.start > 0 else None
    handler = _DumpHandler(
        site, stop_after_siteinfo=False, max_page_bytes=sizes.max_document_bytes(task.options)
    )
    # a middle piece of a multistream dump holds <page>s without their root
    pages = _PageParser(handler, in_root=task.start > 0)

    def drain() -> Iterator[WikiPage | Failure]:
        finished = handler.pages
        handler.pages = []
        for page in finished:
            if isinstance(page, Failure):
                yield dataclasses.replace(page, location=f"{location}: {page.location}")
            else:
                yield page

    try:
        raw = open_input(task.path)
    except OSError as error:
        yield Failure(location, "unreadable_file", f"cannot open: {error}", lost_from=0)
        return
    try:
        with raw:
            start, end = task.start, task.end
            if is_range:
                start = _stream_start_from(raw, start) if start else 0
                end = _stream_start_from(raw, end) if end >= 0 else -1
                if start < 0 or 0 <= end <= start:
                    return  # no stream starts in this range: an earlier task reads it whole
            chunks = _decompressed(raw, start, end, location)
            for number, chunk in enumerate(chunks):
                if number == 0 and not chunk.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
                    raise _InputError(
                        "unreadable_file",
                        f"{location}: neither XML nor gzip/bz2/xz/zstd: {chunk[:8]!r}...",
                    )
                for skipped in pages.feed(chunk, chunks, location):
                    yield from drain()
                    yield skipped
                yield from drain()
            if is_range and len(handler.stack) > 1:
                yield Failure(
                    location,
                    "truncated_input",
                    "byte range ends inside a <page>: the index offsets do not fall on the "
                    "dump's stream boundaries",
                )
                return
            pages.finish(closing=b"</mediawiki>" if is_range and handler.stack else b"")
            yield from drain()
    except _InputError as error:
        yield from drain()
        yield Failure(location, error.reason, f"{error.detail}; {handler.page_count} pages read",
                      lost_from=error.lost_from)
    except _ForbiddenDTD:
        yield from drain()
        yield Failure(
            location,
            "forbidden_dtd",
            f"DTD or entity declaration at line {pages.parser.CurrentLineNumber}: refused "
            "(entity expansion is never done)",
            lost_from=0,
        )
    except _NotMediaWiki as error:
        yield Failure(location, "unreadable_file", f"root element <{error}> is not <mediawiki>",
                      lost_from=0)
    except expat.ExpatError as error:  # at the end of the input: the file stops in a page
        yield from drain()
        yield pages.end_failure(error, location)
