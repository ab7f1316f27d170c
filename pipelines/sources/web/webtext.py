"""Web text source: OpenWebText releases, plain-text and JSONL web documents, WARC/WET crawls.

Each input file is recognised by its content (compression by magic bytes, then tar / WARC
headers), and by name only for JSONL and HTML:

- OpenWebText release layout: tar archives whose members are `.xz` files that are themselves
  tar archives of `.txt` documents (`openwebtext.tar.xz` -> `urlsf_subset00-1_data.xz` ->
  `0000000-<hash>.txt`), a tar of `.txt` files, or the inner `.xz` files on their own.
- Plain text: one file is one document (the OpenAI WebText sample layout).
- JSONL (`.jsonl`/`.json`, optionally compressed) with "text" and "url" fields.

An uncompressed tar or JSONL file bigger than `task_bytes` (default 64MiB) is read by several
tasks (sources/ranges.py): a tar as ranges of whole members, JSONL as line-aligned byte ranges.
A compressed file (`openwebtext.tar.xz`, `.jsonl.gz`), a WARC file and a one-document file are
one stream each, read by one task, and the planner logs so; for parallel reading pass many
files (e.g. the inner `.xz` files of the release) as the input.
- HTML files (`.html`, `.htm`, `.html.gz`): main text extracted as for WARC responses.
- WARC (`.warc`, `.warc.gz`): `response`/`resource` records of HTML get their main text
  extracted (chunked transfer encoding and gzip content encoding are undone by warcio first);
  WET `conversion` records are already plain text.
  Records that are not pages are no documents and no failures: they are skipped and counted by
  kind under the Beam counters `pipelines/webtext_skipped_<kind>` (`record_skip_kind`: requests,
  redirects, HTTP errors, style sheets, scripts, images, fonts, robots.txt, revisits, the
  crawler's own metadata and log records, pages without text). A failure is a record that
  cannot be read: binary data declared as HTML, a body over `max_document_bytes`, or a record
  that does not end where its Content-Length says or has a broken header block; reading goes on
  at the next record (warc_framing.py finds it). Only data that ends inside a record stops the
  file.

HTML is decoded and its main text extracted by `htmltext`: option `extractor=trafilatura`
(default) or `extractor=resiliparse` (faster, less precise; bench/results/extract.md).

Document id `webtext:<sha1(key)[:16]>` with key = the URL for a JSONL record that has one, the
URL plus the WARC-Record-ID for a WARC record (one URL is often captured more than once), and
otherwise `<file name>#<position>` (position 0 for a one-document file, the member path in a
tar), or for a JSONL record without a URL `<file name>@<byte offset of its line>` (in the
decompressed data), so that ids do not depend on how a file is split. The URL is kept in
`Document.url`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import re
import urllib.parse
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from apache_beam.metrics import Metrics
from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from pipelines.document import Document, Failure, ReadTask
from pipelines.sources.compression import OpenedStream, open_decompressed
from pipelines.sources.file_source import FileSource, task_name
from pipelines.sources.input_errors import (
    ArchiveError,
    BinaryContentError,
    CorruptInputError,
    InputError,
    TooLargeError,
    failure,
    failure_from,
)
from pipelines.sources.json_lines import json_records
from pipelines.sources.ranges import (
    RANGE_LINES,
    RANGE_OPTION,
    iter_range_lines,
    line_tasks,
    log_unsplittable,
    split_tar,
    splittable_head,
    tar_range_stream,
)
from pipelines.sources.reading import binary_reason, decode_text, read_bounded, to_lf
from pipelines.sources.sizes import max_document_bytes
from pipelines.sources.tar_members import ArchiveMember, is_tar, iter_tar_members
from pipelines.sources.traits import InputFormat, SourceTraits
from pipelines.sources.web.htmltext import EXTRACTOR_OPTION, extractor_name, html_to_text
from pipelines.sources.web.warc_framing import CorruptRecord, warc_records

NAME = "webtext"
# Crawled pages get the web clean preset. Megatron's OpenWebText cleanup drops web documents
# under 128 GPT-2 tokens, and so does a webtext run unless --min-tokens says otherwise.
TRAITS = SourceTraits(
    web_text=True,
    min_tokens=128,
    input_format=InputFormat(
        "web pages (HTML, text, JSON lines, WARC, or tar of them)",
        lambda head: is_tar(head) or b"\0" not in head,
        refuse_others=False,
    ),
    options=(EXTRACTOR_OPTION,),
)
logger = logging.getLogger(__name__)

# OpenWebText nests one tar inside another; deeper nesting is refused so that a crafted
# archive cannot make a worker recurse without end.
_MAX_TAR_DEPTH = 2
_COMPRESSED_SUFFIX = re.compile(r"\.(?:gz|bz2|xz|zst)$", re.IGNORECASE)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_TYPES = frozenset({"text/plain"})
_DOCUMENT_RECORDS = frozenset({"response", "resource", "conversion"})
_NON_DOCUMENT_RECORDS = frozenset({"warcinfo", "request", "revisit", "metadata"})
# resource and conversion records of other URIs are the crawler's own (metadata:, urn:)
_PAGE_SCHEMES = ("http:", "https:", "ftp:")
# Each kind of WARC record that is not a document is counted under the Beam counter
# `pipelines/webtext_skipped_<kind>` (see record_skip_kind); none of them is a failure.
SKIP_KINDS = (
    "warcinfo", "request", "revisit", "metadata", "other_record", "not_http", "redirect",
    "http_error", "http_status", "crawler_record", "robots_txt", "style", "script", "image",
    "font", "media", "other_type", "no_text",
)
_SKIPPED = {kind: Metrics.counter("pipelines", f"webtext_skipped_{kind}") for kind in SKIP_KINDS}


@dataclasses.dataclass(frozen=True)
class _Settings:
    limit: int  # max_document_bytes
    extractor: str  # the HTML main-text extractor (htmltext.EXTRACTORS)


def document_id(key: str) -> str:
    return f"{NAME}:{hashlib.sha1(key.encode('utf-8')).hexdigest()[:16]}"


def _looks_like_html(head: bytes) -> bool:
    start = head.lstrip()[:64].lower()
    return start.startswith((b"<!doctype html", b"<html", b"<?xml")) and b"html" in start


def _kind(head: bytes, name: str) -> str:
    if head.startswith(b"WARC/"):
        return "warc"
    if is_tar(head):
        return "tar"
    base = _COMPRESSED_SUFFIX.sub("", name.lower())
    if base.endswith((".jsonl", ".json")):
        return "jsonl"
    if base.endswith((".html", ".htm")) or _looks_like_html(head):
        return "html"
    return "text"


def _document(text: str, key: str, location: str, *, url: str = "",
              encoding: str = "", extractor: str = "") -> Document | Failure:
    text = to_lf(text).strip()
    if not text:
        return failure(location, "no_text", "the document has no text")
    meta = {"encoding": encoding} if encoding else {}
    if extractor:  # text from HTML: the clean stage treats vetted structure (htmltext)
        meta["extractor"] = extractor
    return Document(id=document_id(key), source=NAME, text=text, url=url, meta=meta)


def _file_document(data: bytes, kind: str, key: str, location: str,
                   extractor: str) -> Iterator[Document | Failure]:
    if not data.strip():
        return  # an empty file holds no document: nothing is lost
    if kind == "html":
        reason = binary_reason(data)
        if reason is not None:
            yield failure(location, "binary", f"binary data, not HTML: {reason}")
            return
        yield _document(html_to_text(data, extractor=extractor), key, location,
                        extractor=extractor)
        return
    try:
        decoded = decode_text(data)
    except BinaryContentError as error:
        yield failure_from(error, location)
        return
    yield _document(decoded.text, key, location, encoding=decoded.encoding)


def _jsonl_documents(lines: Iterable[tuple[int, bytes | None]], name: str, location: str,
                     limit: int) -> Iterator[Document | Failure]:
    """The documents of (byte offset, line) pairs of a JSONL file, whole or a range of it."""
    for item in json_records(lines, location, limit):
        if isinstance(item, Failure):
            yield item
            continue
        offset, record = item
        where = f"{location}@{offset}"
        text, url = record.get("text"), record.get("url")
        if not isinstance(text, str):
            yield failure(where, "missing_text", "no string field 'text' in the record")
            continue
        url = url if isinstance(url, str) else ""
        yield _document(text, url or f"{name}@{offset}", where, url=url)


def _parse_content_type(value: str | None) -> tuple[str, str | None]:
    if not value:
        return "", None
    mime, _, params = value.partition(";")
    charset = re.search(r"charset\s*=\s*[\"']?([\w.:-]+)", params, re.IGNORECASE)
    return mime.strip().lower(), charset.group(1) if charset else None


def _content_kind(mime: str) -> str:
    major, _, minor = mime.partition("/")
    if minor == "css":
        return "style"
    if "javascript" in minor or "ecmascript" in minor:
        return "script"
    if major == "image":
        return "image"
    if major == "font" or "font" in minor:  # font/woff2, application/font-woff, ...-fontobject
        return "font"
    if major in ("audio", "video"):
        return "media"
    return "other_type"


def record_skip_kind(record_type: str, url: str, status: str, mime: str) -> str | None:
    """Why a WARC record is not a document (one of SKIP_KINDS), or None for a page.

    `status` is the HTTP status code of a response ("" when the record has no HTTP headers) and
    `mime` its payload's media type. A crawl holds far more of these than pages: the crawler's
    requests, a page's style sheets, scripts, images and fonts, redirects, revisits, and the
    crawler's own records (wget's `metadata://` manifest, arguments and log, wpull's
    `urn:X-wpull:log`), which are resource records whose URI is not a web address.
    """
    if record_type not in _DOCUMENT_RECORDS:
        return record_type if record_type in _NON_DOCUMENT_RECORDS else "other_record"
    if record_type == "response":
        if not status:
            return "not_http"  # dns: and other non-HTTP captures
        if status != "200":
            if status.startswith("3"):
                return "redirect"
            return "http_error" if status[:1] in ("4", "5") else "http_status"
    elif not url.lower().startswith(_PAGE_SCHEMES):
        return "crawler_record"
    if mime == "" or mime in _HTML_TYPES:
        return None
    if mime in _TEXT_TYPES:
        return "robots_txt" if urllib.parse.urlsplit(url).path == "/robots.txt" else None
    return _content_kind(mime)


def _skip(kind: str, where: str, url: str) -> None:
    _SKIPPED[kind].inc()
    logger.debug("%s: skipped (%s) %s", where, kind, url)


def _warc_document(record: object, index: int, key: str,
                   location: str, settings: _Settings) -> Document | Failure | None:
    headers = record.rec_headers  # type: ignore[attr-defined]
    url = (headers.get_header("WARC-Target-URI") or "").strip("<> ")
    where = f"{location}:record {index}"
    http_headers = record.http_headers  # type: ignore[attr-defined]
    record_type = record.rec_type  # type: ignore[attr-defined]
    status = ""
    if record_type == "response" and http_headers is not None:
        status = http_headers.get_statuscode() or ""
        mime, charset = _parse_content_type(http_headers.get_header("Content-Type"))
    else:
        mime, charset = _parse_content_type(headers.get_header("Content-Type"))
    kind = record_skip_kind(record_type, url, status, mime)
    if kind is not None:
        _skip(kind, where, url)
        return None
    try:
        body = read_bounded(record.content_stream(), settings.limit, "WARC record body")  # type: ignore[attr-defined]
    except TooLargeError as error:
        return failure_from(error, where)
    record_id = headers.get_header("WARC-Record-ID") or ""
    key = f"{url} {record_id}" if url else f"{key}#{index}"
    if mime in _HTML_TYPES or (mime == "" and _looks_like_html(body[:1024])):
        reason = binary_reason(body)
        if reason is not None:
            return failure(where, "binary", f"binary data, not HTML: {reason}")
        text = html_to_text(body, charset, settings.extractor)
        extractor = settings.extractor
    else:
        try:
            decoded = decode_text(body)
        except BinaryContentError as error:
            return failure_from(error, where)
        text, extractor = decoded.text, ""
    if not text.strip():  # a script-only page, a frameset: read fine, holds no text
        _skip("no_text", where, url)
        return None
    return _document(text, key, where, url=url, extractor=extractor)


def _parse_record(data: bytes, index: int) -> object:
    """warcio's reading of one delimited record (warc_framing checked its length and end)."""
    try:
        return next(iter(ArchiveIterator(io.BytesIO(data))))
    except (StopIteration, ArchiveLoadFailed, ValueError, AttributeError, TypeError) as error:
        # warcio fails in assorted ways on a broken header block (AttributeError on a response
        # with no WARC-Target-URI)
        raise CorruptInputError(f"unreadable WARC record {index}: {error!r}") from None


def _read_warc(stream: BinaryIO, key: str, location: str,
               settings: _Settings) -> Iterator[Document | Failure]:
    """The documents of a WARC stream; a record that cannot be read is one Failure and reading
    goes on at the next record (warc_framing finds it)."""
    for item in warc_records(stream, settings.limit):
        if isinstance(item, CorruptRecord):
            yield failure(f"{location}:record {item.index}", item.reason, item.detail)
            continue
        index, data = item
        try:
            record = _parse_record(data, index)
            result = _warc_document(record, index, key, location, settings)
        except InputError as error:
            yield failure_from(error, f"{location}:record {index}")
            continue
        if result is not None:
            yield result


def _read_member(member: ArchiveMember, key: str, archive_location: str, settings: _Settings,
                 depth: int) -> Iterator[Document | Failure]:
    where = f"{archive_location}:{member.name}"
    member_key = f"{key}/{member.name}" if "#" in key else f"{key}#{member.name}"
    try:
        opened = open_decompressed(member.stream)
        yield from _read_stream(opened, member.name, member_key, where, settings, depth)
    except ArchiveError as error:
        if error.location == archive_location:
            raise  # the archive itself broke: whoever walks it reports it once
        yield failure_from(error, where)
    except InputError as error:  # this member only, e.g. a truncated .xz inside the tar
        yield failure_from(error, where)


def _read_stream(opened: OpenedStream, name: str, key: str, location: str, settings: _Settings,
                 depth: int = 0) -> Iterator[Document | Failure]:
    kind = _kind(opened.head, name)
    if kind == "tar":
        if depth >= _MAX_TAR_DEPTH:
            yield failure(location, "nested_too_deep", f"tar nested more than {_MAX_TAR_DEPTH} deep")
            return
        for item in iter_tar_members(opened.stream, location):
            if isinstance(item, Failure):
                yield item
            else:
                yield from _read_member(item, key, location, settings, depth + 1)
    elif kind == "warc":
        yield from _read_warc(opened.stream, key, location, settings)
    elif kind == "jsonl":
        lines = iter_range_lines(opened.stream, 0, -1, settings.limit)
        yield from _jsonl_documents(lines, key, location, settings.limit)
    else:
        data = read_bounded(opened.stream, settings.limit, "document")
        yield from _file_document(data, kind, key if "#" in key else f"{key}#0", location,
                                  settings.extractor)


def split(task: ReadTask) -> list[ReadTask]:
    """A big uncompressed tar as member ranges, a big uncompressed JSONL file as line ranges;
    any other file stays one task (logged when it is big)."""
    found = splittable_head(task)
    if found is None:
        return [task]
    range_bytes, head = found
    kind = _kind(head, task_name(task))
    if kind == "tar":
        return split_tar(task, range_bytes)
    if kind == "jsonl":
        return line_tasks(task, range_bytes)
    log_unsplittable(task, "one WARC stream" if kind == "warc" else "one document")
    return [task]


def _read_file(raw: BinaryIO, task: ReadTask) -> Iterator[Document | Failure]:
    settings = _Settings(max_document_bytes(task.options), extractor_name(task.options))
    name = task_name(task)
    if task.options.get(RANGE_OPTION) == RANGE_LINES:
        lines = iter_range_lines(raw, task.start, task.end, settings.limit)
        yield from _jsonl_documents(lines, name, task.path, settings.limit)
        return
    opened = open_decompressed(tar_range_stream(raw, task))
    yield from _read_stream(opened, name, name, task.path, settings)


_FILES = FileSource(NAME, TRAITS, _read_file, checks=(extractor_name,))
check_options, plan, read = _FILES.check_options, _FILES.plan, _FILES.read
