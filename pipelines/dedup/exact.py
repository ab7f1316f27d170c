"""Exact and URL duplicates: stable fingerprints, and the keep-one rule every dedup step shares.

A document is a *node* `(rank, id)`: rank is its source's place in the optional source
priority order (sources not listed come after all listed ones), id its stable document id.
Nodes sort by rank, then id; every group of duplicates (an exact-text group, a URL group, a
near-duplicate component) keeps its smallest node. The rule depends on nothing but the
documents themselves, so any runner, bundle split or worker count keeps the same documents.
"""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence

import xxhash

Node = tuple[int, str]

# Query parameters that only track where a click came from: the same page either way.
_TRACKING_PARAMS = frozenset({"fbclid", "gclid", "dclid", "msclkid", "mc_cid", "mc_eid"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def source_rank(source: str, priority: Sequence[str]) -> int:
    """The keep rule's first key: a source's index in `priority`, len(priority) if absent."""
    try:
        return list(priority).index(source)
    except ValueError:
        return len(priority)


def normalize_text(text: str) -> str:
    """What two texts must share to be exact duplicates: case-folded, whitespace runs collapsed.

    Punctuation and digits count: pages that differ only there are near-duplicates, which the
    MinHash step finds with their similarity recorded, rather than silently "exact".
    """
    return " ".join(text.casefold().split())


def text_fingerprint(text: str) -> bytes:
    """16-byte xxh3-128 of the normalised text (stable across processes, unlike hash())."""
    return xxhash.xxh3_128_digest(normalize_text(text).encode("utf-8", "surrogatepass"))


def normalize_url(url: str) -> str:
    """A canonical form under which two URLs of the same page are equal; "" for no URL.

    HTML entities are decoded (URL lists scraped from HTML carry `&amp;`), the scheme and host
    are lowercased, http/https and a leading "www." are folded, default ports, fragments,
    tracking parameters (utm_*, fbclid, ...) and a trailing slash are dropped, and the remaining
    query parameters are sorted.
    """
    url = html.unescape(url.strip())
    if not url:
        return ""
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:  # an unparseable port or bracketed host: compare the raw text instead
        return url.lower()
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower().rstrip(".")
    if host.startswith("www."):
        host = host[4:]
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    path = parts.path or "/"
    if len(path) > 1:
        path = path.rstrip("/")
    query = sorted(
        (k, v)
        for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if not k.lower().startswith("utm_") and k.lower() not in _TRACKING_PARAMS
    )
    encoded = urllib.parse.urlencode(query)
    scheme = "http" if scheme in ("http", "https") else scheme
    return f"{scheme}://{host}{path}" + (f"?{encoded}" if encoded else "")


def keep_smallest(nodes: Iterable[Node]) -> tuple[Node, Iterator[Node]]:
    """The kept node of a duplicate group, and an iterator over every other member.

    Two passes over `nodes` (a GroupByKey value, re-iterable on every runner) so a huge group
    never has to fit in memory.
    """
    kept = min(nodes)
    return kept, (node for node in nodes if node != kept)
