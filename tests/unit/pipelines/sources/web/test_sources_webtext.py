"""Web text source on the real samples in shared/corpora/web: OpenAI WebText documents, the
OpenWebText release layout rebuilt from them, JSONL, WARC/WET captures, and the article-
extraction benchmark pages (token F1 of the main-text extraction against their ground truth)."""

from __future__ import annotations

import collections
import gzip
import hashlib
import io
import json
import logging
import lzma
import re
import shutil
import tarfile
import zlib
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from pipelines.document import Document, Failure, ReadTask
from pipelines.sources.web import webtext
from tests.helpers.sources_webtext import (
    HTML_DIR,
    WARC_DIR,
    WEB,
    http_headers_of,
    page_bytes,
    wget_style_crawl,
)

WEBTEXT_DIR = WEB / "text" / "webtext_train_10"
DOC_NAMES = [f"{i}.txt" for i in range(10)]


def _doc_text(name: str) -> str:
    return (WEBTEXT_DIR / name).read_text(encoding="utf-8").strip()


def _read(path: Path, **options: str) -> list[Document | Failure]:
    return list(webtext.read(ReadTask(source="webtext", path=str(path), options=options)))


def _read_pattern(pattern: str) -> list[Document | Failure]:
    return [item for task in webtext.plan(pattern, {}) for item in webtext.read(task)]


def _sha_id(key: str) -> str:
    return "webtext:" + hashlib.sha1(key.encode()).hexdigest()[:16]


# ------------------------------------------------------------------------- plain documents


def test_webtext_sample_one_file_one_document() -> None:
    docs = _read_pattern(str(WEBTEXT_DIR))
    assert [d.text for d in docs] == [_doc_text(n) for n in DOC_NAMES]
    assert [d.id for d in docs] == [_sha_id(f"{n}#0") for n in DOC_NAMES]
    assert len({d.id for d in docs}) == 10
    assert all(d.source == "webtext" and d.url == "" for d in docs)


def test_ids_do_not_depend_on_where_the_corpus_lives(tmp_path: Path) -> None:
    shutil.copytree(WEBTEXT_DIR, tmp_path / "copy")
    assert [d.id for d in _read_pattern(str(tmp_path / "copy"))] == [
        d.id for d in _read_pattern(f"{WEBTEXT_DIR}/*.txt")]


def test_binary_and_empty_files(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "zlib.txt").write_bytes(zlib.compress((WEBTEXT_DIR / "4.txt").read_bytes() * 20))
    assert _read(tmp_path / "empty.txt") == []
    assert [f.reason for f in _read(tmp_path / "zlib.txt")] == ["binary"]


def test_cp1252_document(tmp_path: Path) -> None:
    text = (WEBTEXT_DIR / "3.txt").read_text(encoding="utf-8")
    (tmp_path / "doc.txt").write_bytes(text.replace("'", "’").encode("cp1252"))
    (doc,) = _read(tmp_path / "doc.txt")
    assert doc.meta["encoding"] == "cp1252" and "’" in doc.text


def test_50_mb_document_and_size_limit(tmp_path: Path) -> None:
    data = (WEBTEXT_DIR / "6.txt").read_bytes()
    path = tmp_path / "big.txt"
    big = data * (50_000_000 // len(data) + 1)
    path.write_bytes(big)
    (doc,) = _read(path)
    assert len(big) > 50_000_000 and doc.text == big.decode("utf-8").strip()
    assert [f.reason for f in _read(path, max_document_bytes="20MB")] == ["too_large"]


# ------------------------------------------------------------------- OpenWebText releases


def _tar_bytes(members: dict[str, bytes], compression: str = "") -> bytes:
    buffer = io.BytesIO()
    options = {"preset": 1} if compression == "xz" else {}
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}", **options) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _subset(names: list[str]) -> bytes:
    """One OpenWebText `urlsf_subsetNN-M_data.xz`: an xz-compressed tar of .txt documents."""
    return _tar_bytes({f"{i:07d}-{n}": (WEBTEXT_DIR / n).read_bytes() for i, n in
                       enumerate(names)}, "xz")


def _release(tmp_path: Path, subsets: dict[str, bytes], compression: str = "") -> Path:
    path = tmp_path / ("openwebtext.tar" + (f".{compression}" if compression else ""))
    path.write_bytes(_tar_bytes(subsets, compression))
    return path


@pytest.mark.parametrize("compression", ["", "xz"])
def test_openwebtext_release_layout(tmp_path: Path, compression: str) -> None:
    path = _release(tmp_path, {"openwebtext/urlsf_subset00-1_data.xz": _subset(DOC_NAMES[:6]),
                               "openwebtext/urlsf_subset00-2_data.xz": _subset(DOC_NAMES[6:])},
                    compression)
    docs = _read(path)
    assert [d.text for d in docs] == [_doc_text(n) for n in DOC_NAMES]
    first = f"{path.name}#openwebtext/urlsf_subset00-1_data.xz/0000000-0.txt"
    assert docs[0].id == _sha_id(first)
    assert len({d.id for d in docs}) == 10


def test_openwebtext_inner_subset_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "urlsf_subset00-1_data.xz"
    path.write_bytes(_subset(DOC_NAMES))
    assert [d.text for d in _read(path)] == [_doc_text(n) for n in DOC_NAMES]


def test_tar_of_txt_documents(tmp_path: Path) -> None:
    path = tmp_path / "docs.tar.gz"
    path.write_bytes(_tar_bytes({n: (WEBTEXT_DIR / n).read_bytes() for n in DOC_NAMES}, "gz"))
    docs = _read(path)
    assert [d.text for d in docs] == [_doc_text(n) for n in DOC_NAMES]
    assert docs[0].id == _sha_id("docs.tar.gz#0.txt")


def test_truncated_release_keeps_documents_before_the_cut(tmp_path: Path) -> None:
    subsets = {f"owt/subset{i}.xz": _subset(DOC_NAMES[i * 5:(i + 1) * 5]) for i in range(2)}
    whole = _tar_bytes(subsets)
    path = tmp_path / "cut.tar"
    path.write_bytes(whole[: len(whole) - len(subsets["owt/subset1.xz"]) // 2 - 1024])
    out = _read(path)
    docs = [d for d in out if isinstance(d, Document)]
    failures = [f for f in out if isinstance(f, Failure)]
    assert 5 <= len(docs) < 10
    assert [d.text for d in docs] == [_doc_text(n) for n in DOC_NAMES[: len(docs)]]
    assert [(f.reason, f.location) for f in failures] == [("truncated_input", str(path))]
    assert out[-1] == failures[0]
    assert failures[0].lost_from == 0  # the file broke off: its input counts as lost (stats)


def test_truncated_subset_inside_a_whole_release_fails_only_that_member(tmp_path: Path) -> None:
    broken = _subset(DOC_NAMES[3:6])
    path = _release(tmp_path, {"a.xz": _subset(DOC_NAMES[:3]), "b.xz": broken[: len(broken) - 300],
                               "c.xz": _subset(DOC_NAMES[6:])})
    out = _read(path)
    failures = [f for f in out if isinstance(f, Failure)]
    assert [(f.reason, f.location) for f in failures] == [("truncated_input", f"{path}:b.xz")]
    assert failures[0].lost_from is None  # one member; the release itself was read on
    texts = [d.text for d in out if isinstance(d, Document)]
    assert texts[:3] == [_doc_text(n) for n in DOC_NAMES[:3]]
    assert texts[-4:] == [_doc_text(n) for n in DOC_NAMES[6:]]  # reading went on after b.xz


def test_tar_nested_too_deep_is_refused(tmp_path: Path) -> None:
    inner = _tar_bytes({"deeper.tar": _tar_bytes({"0.txt": (WEBTEXT_DIR / "0.txt").read_bytes()})})
    path = tmp_path / "outer.tar"
    path.write_bytes(_tar_bytes({"inner.tar": inner}))
    assert [f.reason for f in _read(path)] == ["nested_too_deep"]


def test_unsafe_member_in_release(tmp_path: Path) -> None:
    path = tmp_path / "evil.tar"
    path.write_bytes(_tar_bytes({"../../0.txt": (WEBTEXT_DIR / "0.txt").read_bytes(),
                                 "1.txt": (WEBTEXT_DIR / "1.txt").read_bytes()}))
    out = _read(path)
    assert isinstance(out[0], Failure) and out[0].reason == "unsafe_tar_member"
    assert [d.text for d in out[1:]] == [_doc_text("1.txt")]


# ---------------------------------------------------------------------------------- JSONL


def test_jsonl_with_url_and_text(tmp_path: Path) -> None:
    urls = (HTML_DIR / "urls.txt").read_text().split()
    lines = [json.dumps({"url": u, "text": _doc_text(n)}) for u, n in zip(urls, DOC_NAMES)]
    lines.insert(4, '{"url": "http://broken.example/", "text": "no end')
    lines.insert(6, json.dumps({"url": "http://no-text.example/"}))
    path = tmp_path / "owt.jsonl.gz"
    path.write_bytes(gzip.compress("\n".join(lines).encode()))
    out = _read(path)
    docs = [d for d in out if isinstance(d, Document)]
    assert [d.url for d in docs] == urls[:10]
    assert [d.id for d in docs] == [_sha_id(u) for u in urls[:10]]
    assert [d.text for d in docs] == [_doc_text(n) for n in DOC_NAMES]
    offsets = [sum(len(line.encode()) + 1 for line in lines[:i]) for i in (4, 6)]
    assert [(f.reason, f.location) for f in out if isinstance(f, Failure)] == [
        ("bad_json", f"{path}@{offsets[0]}"), ("missing_text", f"{path}@{offsets[1]}")]


# ------------------------------------------------------------- one big file, several tasks


def _pages() -> list[tuple[str, str]]:
    """(url, text) of real pages: the WebText documents (no URL) and the benchmark articles
    (Korean and Russian among them: 3- and 2-byte UTF-8; the German one is 17 KB)."""
    truth = json.loads((HTML_DIR / "ground-truth.subset.json").read_text(encoding="utf-8"))
    articles = [(page["url"], page["articleBody"]) for page in truth.values()]
    return [("", _doc_text(n)) for n in DOC_NAMES[:5]] + articles + [
        ("", _doc_text(n)) for n in DOC_NAMES[5:]]


def _read_split(path: Path, **options: str) -> tuple[list[Document | Failure], int]:
    tasks = [t for task in webtext.plan(str(path), options) for t in webtext.split(task)]
    return [record for task in tasks for record in webtext.read(task)], len(tasks)


def _jsonl_pages(path: Path) -> bytes:
    lines = [json.dumps({"url": url, "text": text} if url else {"text": text},
                        ensure_ascii=False) for url, text in _pages()]
    lines.insert(7, '{"text": "a record cut short')
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("task_bytes", ["1000", "4KiB", "inside a character"])
def test_a_big_jsonl_file_is_read_by_several_tasks_with_the_same_documents(
        tmp_path: Path, task_bytes: str) -> None:
    path = tmp_path / "owt.jsonl"
    data = _jsonl_pages(path)
    if task_bytes == "inside a character":  # the first range ends inside a Korean character
        task_bytes = str(next(i for i in range(3000, len(data)) if 0x80 <= data[i] < 0xC0))
    whole, whole_tasks = _read_split(path)
    split, tasks = _read_split(path, task_bytes=task_bytes)
    assert whole_tasks == 1 and tasks >= 8
    assert split == whole  # ids, texts and the failure, each exactly once
    docs = [d for d in whole if isinstance(d, Document)]
    assert [d.text for d in docs] == [text.strip() for _, text in _pages()]
    assert len({d.id for d in docs}) == len(docs)
    # the ranges cut inside a multi-byte character, and lie inside one long record
    range_bytes = webtext.split(webtext.plan(str(path), {"task_bytes": task_bytes})[0])[1].start
    starts = range(range_bytes, len(data), range_bytes)
    assert any(0x80 <= data[start] < 0xC0 for start in starts)
    line_starts = {0} | {i + 1 for i, byte in enumerate(data) if byte == 0x0A}
    assert any(not line_starts & set(range(start, start + range_bytes)) for start in starts)


def test_jsonl_ids_are_urls_or_byte_offsets(tmp_path: Path) -> None:
    path = tmp_path / "owt.jsonl"
    data = _jsonl_pages(path)
    docs = [d for d in _read(path) if isinstance(d, Document)]
    first_article = _pages()[5][0]
    assert docs[5].id == _sha_id(first_article) and docs[5].url == first_article
    assert docs[0].id == _sha_id("owt.jsonl@0")
    offset = data.index(json.dumps({"text": _doc_text(DOC_NAMES[1])}).encode())
    assert docs[1].id == _sha_id(f"owt.jsonl@{offset}")


def test_a_big_tar_is_read_as_member_ranges_with_the_same_documents(tmp_path: Path) -> None:
    members = {f"{i:07d}-{n}": (WEBTEXT_DIR / n).read_bytes() for i, n in enumerate(DOC_NAMES)}
    # a name over 100 bytes takes a GNU long-name header block before the member's own
    members["openwebtext/" + "long-" * 30 + "name.txt"] = (WEBTEXT_DIR / "4.txt").read_bytes()
    members["subset.xz"] = _subset(DOC_NAMES[:4])  # OpenWebText's tar of tars
    members["ελληνικά.txt"] = "Καλημέρα κόσμε: ένα κείμενο.\n".encode() * 40
    path = tmp_path / "owt.tar"
    path.write_bytes(_tar_bytes(members))
    whole, whole_tasks = _read_split(path)
    split, tasks = _read_split(path, task_bytes="5000")
    assert whole_tasks == 1 and tasks >= 5
    assert split == whole
    assert len(whole) == len(members) + 3 and all(isinstance(d, Document) for d in whole)
    assert whole[0].id == _sha_id(f"owt.tar#0000000-{DOC_NAMES[0]}")
    nested = f"owt.tar#subset.xz/0000003-{DOC_NAMES[3]}"
    assert _sha_id(nested) in {d.id for d in split}


@pytest.mark.parametrize("name, compress, logged", [
    ("owt.tar.xz", lambda data: lzma.compress(data, preset=1), "one xz stream"),
    ("owt.jsonl.gz", gzip.compress, "one gzip stream"),
    ("page.txt", None, "one document"),
    ("crawl.warc", None, "one WARC stream"),
])
def test_inputs_that_cannot_be_split_are_one_task_and_the_log_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, compress, logged: str) -> None:
    if name.startswith("owt.tar"):
        data = _tar_bytes({n: (WEBTEXT_DIR / n).read_bytes() for n in DOC_NAMES})
    elif name.startswith("owt.jsonl"):
        data = _jsonl_pages(tmp_path / "plain.jsonl")
    elif name.endswith(".warc"):
        data = (WARC_DIR / "example-iana.org-chunked.warc").read_bytes()
    else:
        data = "\n\n".join(text for _, text in _pages()).encode()
    path = tmp_path / name
    path.write_bytes(compress(data) if compress else data)
    with caplog.at_level(logging.INFO, logger="pipelines.sources.ranges"):
        records, tasks = _read_split(path, task_bytes="1000")
    assert tasks == 1 and logged in caplog.text
    assert records == _read(path)


# ----------------------------------------------------------------------------------- WARC


def test_warc_gz_response_record() -> None:
    out = _read(WARC_DIR / "example.warc.gz")  # warcinfo x2, response, requests, revisit
    (doc,) = out
    assert doc.url == "http://example.com/"
    assert doc.text.startswith("This domain is established") or doc.text.startswith(
        "Example Domain\n\nThis domain is established")  # trafilatura drops the heading
    record_id = "<urn:uuid:a9c51e3e-0221-11e7-bf66-0242ac120005>"
    assert doc.id == _sha_id(f"http://example.com/ {record_id}")


def test_warc_chunked_transfer_encoding_is_undone() -> None:
    (doc,) = _read(WARC_DIR / "example-iana.org-chunked.warc")
    assert doc.url == "http://www.iana.org/"
    assert "Management of the DNS Root Zone (assignments of ccTLDs and gTLDs)" in doc.text
    # chunk-size lines ("1f4a\r\n") between the HTML pieces must not reach the text
    assert not [line for line in doc.text.split("\n") if re.fullmatch(r"[0-9a-fA-F]{1,6}", line)]
    assert "<" not in doc.text and "\r" not in doc.text


def _wet_text() -> str:
    with (WARC_DIR / "whirlwind.warc.wet.gz").open("rb") as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type == "conversion":
                return record.content_stream().read().decode("utf-8").strip()
    raise AssertionError("no conversion record")


def test_wet_conversion_record_is_the_document() -> None:
    (doc,) = _read(WARC_DIR / "whirlwind.warc.wet.gz")
    assert doc.url == "https://an.wikipedia.org/wiki/Escopete"
    assert doc.text == _wet_text()


def test_common_crawl_html_response_main_text() -> None:
    (doc,) = _read(WARC_DIR / "whirlwind.warc.gz")
    assert doc.url == "https://an.wikipedia.org/wiki/Escopete"
    ours = collections.Counter(re.findall(r"\w+", doc.text.lower()))
    wet = collections.Counter(re.findall(r"\w+", _wet_text().lower()))
    # Common Crawl's WET text is the whole page; the main text is a subset of it, much shorter
    assert sum((ours & wet).values()) / sum(ours.values()) > 0.9
    assert sum(ours.values()) < sum(wet.values()) * 0.8


def test_wat_metadata_file_has_no_documents() -> None:
    assert _read(WARC_DIR / "whirlwind.warc.wat.gz") == []


def _warc(path: Path, records: list[tuple[str, str, str, bytes]]) -> None:
    with path.open("wb") as stream:
        writer = WARCWriter(stream, gzip=True)
        for url, status, content_type, body in records:
            headers = StatusAndHeaders(status, [("Content-Type", content_type)],
                                       protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(
                url, "response", payload=io.BytesIO(body), http_headers=headers))


def test_pages_that_cannot_be_read_are_failures(tmp_path: Path) -> None:
    page = page_bytes("14cc")
    path = tmp_path / "crawl.warc.gz"
    _warc(path, [("https://a.example/story", "200 OK", "text/html; charset=utf-8", page),
                 ("https://a.example/zip", "200 OK", "text/html", zlib.compress(page))])
    out = _read(path)
    assert [(type(x).__name__, getattr(x, "reason", x.url if isinstance(x, Document) else ""))
            for x in out] == [("Document", "https://a.example/story"), ("Failure", "binary")]
    assert "Europa" in out[0].text
    assert _read(path, max_document_bytes="1KiB")[0].reason == "too_large"


def test_crawl_records_that_are_not_pages_are_skipped_not_failed(tmp_path: Path) -> None:
    path = tmp_path / "crawl.warc.gz"
    wget_style_crawl(path)
    out = _read(path)
    assert [type(x).__name__ for x in out] == ["Document"], out
    assert out[0].url == "https://a.example/story" and "Europa" in out[0].text


@pytest.mark.parametrize(("record_type", "url", "status", "mime", "kind"), [
    ("warcinfo", "", "", "application/warc-fields", "warcinfo"),
    ("request", "https://a.example/", "", "", "request"),
    ("revisit", "https://a.example/", "200", "text/html", "revisit"),
    ("metadata", "https://a.example/", "", "application/warc-fields", "metadata"),
    ("continuation", "https://a.example/", "", "", "other_record"),
    ("response", "dns:a.example", "", "text/dns", "not_http"),
    ("response", "https://a.example/old", "301", "text/html", "redirect"),
    ("response", "https://a.example/old", "404", "text/html", "http_error"),
    ("response", "https://a.example/old", "503", "text/html", "http_error"),
    ("response", "https://a.example/part", "206", "text/html", "http_status"),
    ("response", "https://a.example/a.css", "200", "text/css", "style"),
    ("response", "https://a.example/a.js", "200", "text/javascript", "script"),
    ("response", "https://a.example/a.js", "200", "application/x-javascript", "script"),
    ("response", "https://a.example/a.png", "200", "image/png", "image"),
    ("response", "https://a.example/a.woff", "200", "application/font-woff", "font"),
    ("response", "https://a.example/a.woff2", "200", "font/woff2", "font"),
    ("response", "https://a.example/a.mp4", "200", "video/mp4", "media"),
    ("response", "https://a.example/feed", "200", "application/rss+xml", "other_type"),
    ("response", "https://a.example/robots.txt", "200", "text/plain", "robots_txt"),
    ("resource", "metadata://gnu.org/software/wget/warc/wget.log", "", "text/plain",
     "crawler_record"),
    ("resource", "urn:X-wpull:log", "", "text/plain", "crawler_record"),
    ("resource", "wget.log", "", "text/plain", "crawler_record"),
    ("response", "https://a.example/", "200", "text/html", None),
    ("response", "https://a.example/", "200", "application/xhtml+xml", None),
    ("response", "https://a.example/notes.txt", "200", "text/plain", None),
    ("response", "https://a.example/untyped", "200", "", None),
    ("resource", "https://a.example/", "", "text/html", None),
    ("conversion", "https://a.example/", "", "text/plain", None),
])
def test_record_skip_kind(record_type: str, url: str, status: str, mime: str,
                          kind: str | None) -> None:
    assert webtext.record_skip_kind(record_type, url, status, mime) == kind


def _record_bytes(url: str, body: bytes) -> bytes:
    buffer = io.BytesIO()
    writer = WARCWriter(buffer, gzip=False)
    writer.write_record(writer.create_warc_record(
        url, "response", payload=io.BytesIO(body),
        http_headers=http_headers_of("200 OK", "text/html; charset=utf-8")))
    return buffer.getvalue()


def _with_length_off_by(record: bytes, delta: int) -> bytes:
    length = int(re.search(rb"Content-Length: (\d+)\r\n", record).group(1))
    return record.replace(b"Content-Length: %d\r\n" % length,
                          b"Content-Length: %d\r\n" % (length + delta), 1)


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("delta", [-700, -1, 4, 300])
def test_record_whose_content_length_is_wrong_is_a_failure(tmp_path: Path, compressed: bool,
                                                           delta: int) -> None:
    # Two real benchmark pages; the first record's Content-Length is made short (the text would
    # stop mid-sentence) or long (the text would take in the next record's WARC and HTTP headers)
    first = _with_length_off_by(_record_bytes("https://a.example/one", page_bytes("14cc")), delta)
    second = _record_bytes("https://a.example/two", page_bytes("359f"))
    path = tmp_path / ("bad.warc.gz" if compressed else "bad.warc")
    path.write_bytes(b"".join(gzip.compress(r) for r in (first, second)) if compressed
                     else first + second)
    out = _read(path)
    # the bad record is one failure; the record after it is still read (resynchronised)
    assert [(type(x).__name__, getattr(x, "reason", "")) for x in out] == [
        ("Failure", "corrupt_input"), ("Document", "")], out
    assert "record 1" in out[0].detail and "Content-Length" in out[0].detail
    assert out[0].lost_from is None and out[1].url == "https://a.example/two"
    # the same two records with their true lengths are two documents
    path.write_bytes(_record_bytes("https://a.example/one", page_bytes("14cc")) + second)
    assert [type(x).__name__ for x in _read(path)] == ["Document", "Document"]


@pytest.mark.parametrize("delta", [-500, 300])
def test_a_bad_content_length_halfway_costs_one_record(tmp_path: Path, delta: int) -> None:
    """Issue 18: a record with a wrong Content-Length halfway lost every record after it."""
    real = b"".join([gzip.decompress((WARC_DIR / "whirlwind.warc.gz").read_bytes()),
                     gzip.decompress((WARC_DIR / "example.warc.gz").read_bytes()),
                     (WARC_DIR / "example-iana.org-chunked.warc").read_bytes()])
    (tmp_path / "real.warc").write_bytes(real)
    expected = _read(tmp_path / "real.warc")
    assert len(expected) == 3 and not [x for x in expected if isinstance(x, Failure)]
    bad = _with_length_off_by(_record_bytes("https://a.example/one", page_bytes("14cc")), delta)
    path = tmp_path / "crawl.warc.gz"
    path.write_bytes(gzip.compress(real + bad + real))
    out = _read(path)
    failures = [x for x in out if isinstance(x, Failure)]
    assert [(f.reason, f.location) for f in failures] == [
        ("corrupt_input", f"{path}:record {real.count(b'WARC/1.') + 1}")]
    assert [x for x in out if not isinstance(x, Failure)] == expected * 2


def test_garbage_after_warc_header_is_corrupt(tmp_path: Path) -> None:
    whole = (WARC_DIR / "example-iana.org-chunked.warc").read_bytes()
    path = tmp_path / "bad.warc"
    start = whole.index(b"WARC/1.0", 10)
    path.write_bytes(whole[:start] + b"NOT A WARC RECORD\r\n" * 50 + whole[start:])
    out = _read(path)
    # the record the garbage follows fails, and the records after the garbage are read
    assert [(type(x).__name__, getattr(x, "reason", "")) for x in out] == [
        ("Failure", "corrupt_input"), ("Document", "")], out
    assert out[0].location == f"{path}:record 1"
    assert out[1] == _read(WARC_DIR / "example-iana.org-chunked.warc")[0]


def test_page_declaring_utf8_but_written_in_cp1251(tmp_path: Path) -> None:
    # the benchmark's Russian page (gto-normativy.ru), re-encoded in cp1251 while its
    # <meta charset="UTF-8"> and the HTTP header still say UTF-8, as a misconfigured server
    # sends it; the text must be the same Russian text as from the UTF-8 original
    original = page_bytes("c4a3")
    cp1251 = original.decode("utf-8").encode("cp1251")
    assert b'<meta charset="UTF-8">' in cp1251
    (tmp_path / "utf8.html").write_bytes(original)
    (tmp_path / "cp1251.html").write_bytes(cp1251)
    _warc(tmp_path / "cp1251.warc.gz",
          [("https://gto-normativy.ru/a", "200 OK", "text/html; charset=utf-8", cp1251)])
    (expected,) = _read(tmp_path / "utf8.html")
    assert "Характеристики бега можно увеличить" in expected.text
    (from_file,) = _read(tmp_path / "cp1251.html")
    (from_warc,) = _read(tmp_path / "cp1251.warc.gz")
    assert from_file.text == expected.text
    assert from_warc.text == expected.text


def test_utf8_page_with_a_few_damaged_bytes_stays_utf8(tmp_path: Path) -> None:
    # the same real page in UTF-8 with two stray bytes: one broken character must not turn
    # every Cyrillic letter into mojibake
    original = page_bytes("c4a3")
    cut = original.index("Характеристики бега".encode()) + 2
    (tmp_path / "damaged.html").write_bytes(original[:cut] + b"\xff\xfe" + original[cut:])
    (doc,) = _read(tmp_path / "damaged.html")
    assert "арактеристики бега" in doc.text and doc.text.count("\ufffd") <= 2


# ----------------------------------------------------------------------- extraction quality


def _bag_of_words(extracted: str, truth: str) -> tuple[float, float]:
    """(precision, F1) of the lower-cased word multiset, as bench/bench_extract.py scores it."""
    ours = collections.Counter(re.findall(r"\w+", extracted.lower()))
    theirs = collections.Counter(re.findall(r"\w+", truth.lower()))
    overlap = sum((ours & theirs).values())
    if not overlap:
        return 0.0, 0.0
    precision, recall = overlap / sum(ours.values()), overlap / sum(theirs.values())
    return precision, 2 * precision * recall / (precision + recall)


# bench/results/extract.md: trafilatura F1 0.991 / precision 0.989 / worst page 0.949;
# resiliparse 0.961 / 0.928 / 0.883. The floors leave room for library updates, and the default's
# precision floor is above what Resiliparse reaches (it keeps sidebars, captions, pagers, bios).
@pytest.mark.parametrize(("options", "f1_floor", "precision_floor", "worst_floor"), [
    ({}, 0.98, 0.97, 0.93),
    ({"extractor": "resiliparse"}, 0.95, 0.91, 0.85),
])
def test_main_text_extraction_on_benchmark_pages(options: dict[str, str], f1_floor: float,
                                                 precision_floor: float,
                                                 worst_floor: float) -> None:
    truth = json.loads((HTML_DIR / "ground-truth.subset.json").read_text(encoding="utf-8"))
    scores = {}
    for page_id, entry in sorted(truth.items()):
        (doc,) = _read(HTML_DIR / "html" / f"{page_id}.html.gz", **options)
        scores[page_id] = _bag_of_words(doc.text, entry["articleBody"])
    assert len(scores) == 12
    precision = sum(p for p, _ in scores.values()) / len(scores)
    f1 = sum(f for _, f in scores.values()) / len(scores)
    assert f1 > f1_floor and precision > precision_floor, scores
    assert min(f for _, f in scores.values()) > worst_floor, scores


def test_unknown_extractor_is_refused_when_planning() -> None:
    with pytest.raises(ValueError, match="unknown extractor 'boilerpipe'; known: trafilatura"):
        webtext.plan(str(WEBTEXT_DIR), {"extractor": "boilerpipe"})
