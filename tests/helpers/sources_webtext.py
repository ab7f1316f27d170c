"""What the unit and the integration tests of sources_webtext share."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from tests.conftest import REPO

WEB = REPO.parent / "shared" / "corpora" / "web"
WARC_DIR = WEB / "warc"
HTML_DIR = WEB / "html"


def page_bytes(prefix: str) -> bytes:
    return gzip.decompress(next((HTML_DIR / "html").glob(f"{prefix}*.html.gz")).read_bytes())


def http_headers_of(status: str, content_type: str, *extra: tuple[str, str]) -> StatusAndHeaders:
    return StatusAndHeaders(status, [("Content-Type", content_type), *extra], protocol="HTTP/1.1")


def wget_style_crawl(path: Path) -> None:
    """A crawl laid out as GNU wget (`--warc-file`, `--page-requisites`) and wpull write one:
    warcinfo first, a request + response pair per fetch (robots.txt, the page, its CSS, script,
    image and font, a 301 and a 404), a revisit for a re-fetched duplicate, then the crawler's
    own records: wget's `metadata://gnu.org/software/wget/warc/MANIFEST.txt` (a metadata
    record), `wget_arguments.txt` and `wget.log` (resource records) and wpull's
    `urn:X-wpull:log` resource record, all text/plain. The page is a real benchmark page."""
    with path.open("wb") as stream:
        writer = WARCWriter(stream, gzip=True)
        writer.write_record(writer.create_warcinfo_record(
            "crawl.warc.gz", {"software": "Wget/1.21.4 (linux-gnu)", "format": "WARC File Format 1.0"}))

        def fetch(url: str, status: str, content_type: str, body: bytes, *extra) -> None:
            request = StatusAndHeaders(f"GET /{url.split('/', 3)[-1]} HTTP/1.1",
                                       [("Host", "a.example")], is_http_request=True)
            writer.write_record(writer.create_warc_record(
                url, "request", payload=io.BytesIO(b""), http_headers=request))
            writer.write_record(writer.create_warc_record(
                url, "response", payload=io.BytesIO(body),
                http_headers=http_headers_of(status, content_type, *extra)))

        fetch("https://a.example/robots.txt", "200 OK", "text/plain",
              b"User-agent: *\nDisallow: /private/\n")
        fetch("https://a.example/story", "200 OK", "text/html; charset=utf-8", page_bytes("14cc"))
        fetch("https://a.example/site.css", "200 OK", "text/css",
              b"body { font-family: sans-serif; }\n" * 20)
        fetch("https://a.example/app.js", "200 OK", "application/javascript; charset=utf-8",
              b"document.addEventListener('load', function () { return 1; });\n" * 20)
        fetch("https://a.example/logo.png", "200 OK", "image/png", b"\x89PNG\r\n\x1a\n" + bytes(300))
        fetch("https://a.example/font.woff2", "200 OK", "font/woff2", b"wOF2" + bytes(300))
        fetch("https://a.example/old", "301 Moved Permanently", "text/html",
              b"<html><body><h1>Moved Permanently</h1><p>The document has moved "
              b"<a href='https://a.example/story'>here</a>.</p></body></html>",
              ("Location", "https://a.example/story"))
        fetch("https://a.example/missing", "404 Not Found", "text/html", page_bytes("359f"))
        writer.write_record(writer.create_revisit_record(
            "https://a.example/story?again", "sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "https://a.example/story", "2024-05-18T00:00:00Z",
            http_headers=http_headers_of("200 OK", "text/html; charset=utf-8")))
        log = (b"--2024-05-18 10:00:00--  https://a.example/story\n"
               b"Resolving a.example... 93.184.216.34\nHTTP request sent, awaiting response... "
               b"200 OK\nLength: 7442 (7.3K) [text/html]\nSaving to: 'a.example/story'\n") * 5
        for kind, uri, body in [
            ("metadata", "metadata://gnu.org/software/wget/warc/MANIFEST.txt",
             b"<urn:uuid:0a5d0f4e-4d2f-4a6e-9a4f-6e0d1c1d2e3f>\n"),
            ("resource", "metadata://gnu.org/software/wget/warc/wget_arguments.txt",
             b"\"wget\" \"--page-requisites\" \"--warc-file=crawl\" \"https://a.example/\"\n"),
            ("resource", "metadata://gnu.org/software/wget/warc/wget.log", log),
            ("resource", "urn:X-wpull:log", b"INFO Fetching 'https://a.example/story'.\n" * 20),
        ]:
            writer.write_record(writer.create_warc_record(
                uri, kind, payload=io.BytesIO(body), warc_content_type="text/plain"))
