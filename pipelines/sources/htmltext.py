"""An HTML page's main text: its bytes decoded by the right charset, then boilerplate dropped.

Charset: the one the server declared (HTTP Content-Type), else the page's `<meta charset>`, else
Resiliparse's detector. When the bytes do not decode in it (a page that declares UTF-8 but is
cp1251), charset_normalizer decides; a UTF-8 page with a few damaged bytes stays UTF-8 with
U+FFFD in their place.

Extractors (source option `extractor`), measured on the 12 pages of the article-extraction
benchmark by `bench/bench_extract.py` (bench/results/extract.md):

- `trafilatura` (default): trafilatura with datatrove's (FineWeb's) settings, precision
  favoured, comments dropped, but without its cross-document deduplication (see main_text). Bag-of-words F1 0.991 (precision 0.989); it keeps far less of the
  sidebars, teaser lists, image captions, pagers and author bios that Resiliparse keeps.
- `resiliparse`: Resiliparse main-content extraction, F1 0.961 (precision 0.928), about 10x
  the pages per second.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping

import charset_normalizer
import trafilatura
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding

EXTRACTOR_OPTION = "extractor"
EXTRACTORS = ("trafilatura", "resiliparse")
DEFAULT_EXTRACTOR = "trafilatura"


def extractor_name(options: Mapping[str, str]) -> str:
    """The `extractor` option's value; ValueError naming the known ones otherwise."""
    name = str(options.get(EXTRACTOR_OPTION, DEFAULT_EXTRACTOR)).strip().lower()
    if name not in EXTRACTORS:
        raise ValueError(f"unknown {EXTRACTOR_OPTION} {name!r}; known: {', '.join(EXTRACTORS)}")
    return name


def _codec(label: str | None) -> str | None:
    if not label:
        return None
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None


def _mostly_utf8(data: bytes) -> bool:
    """Whether bytes that are not valid UTF-8 still hold more valid multi-byte UTF-8 characters
    than invalid bytes: a UTF-8 page with some damage, not a page in another charset."""
    replaced = data.decode("utf-8", errors="replace")
    invalid = replaced.count("\ufffd") - data.count("\ufffd".encode())
    non_ascii = len(replaced) - len(replaced.encode("ascii", errors="ignore"))
    return non_ascii - replaced.count("\ufffd") >= invalid


def decode_html(data: bytes, declared: str | None = None) -> tuple[str, str]:
    """(the page as text, the codec it was decoded with); `declared` is the HTTP charset."""
    encoding = _codec(declared) or _codec(detect_encoding(data, from_html_meta=True)) or "utf-8"
    try:
        return data.decode(encoding), encoding
    except UnicodeDecodeError:
        pass
    if encoding == "utf-8" and _mostly_utf8(data):
        return data.decode("utf-8", errors="replace"), "utf-8"
    best = charset_normalizer.from_bytes(data).best()
    if best is not None:
        return str(best), best.encoding
    return bytes_to_str(data, encoding, errors="replace"), encoding


def main_text(html: str, extractor: str = DEFAULT_EXTRACTOR) -> str:
    """The main text of a decoded page (boilerplate, navigation, comments, alt texts dropped)."""
    if extractor == "trafilatura":
        # deduplicate=False (datatrove sets True): trafilatura's deduplication remembers text
        # across calls in a process-wide cache, so a page's text would depend on which pages the
        # same worker read before it, and shards would differ with the number of workers
        text = trafilatura.extract(html, favor_precision=True, include_comments=False,
                                   deduplicate=False)
        return (text or "").strip()
    if extractor == "resiliparse":
        text = extract_plain_text(html, preserve_formatting=True, main_content=True,
                                  alt_texts=False, comments=False, post_meta=False)
        return text.strip()
    raise ValueError(f"unknown {EXTRACTOR_OPTION} {extractor!r}; known: {', '.join(EXTRACTORS)}")


def html_to_text(data: bytes, charset: str | None = None,
                 extractor: str = DEFAULT_EXTRACTOR) -> str:
    """The main text of an HTML page's bytes; `charset` is the encoding the server declared."""
    html, _ = decode_html(data, charset)
    return main_text(html, extractor)
