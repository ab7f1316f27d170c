"""Wikipedia source: MediaWiki XML export dumps -> one Document per article.

Inputs: `.xml`, or that compressed with gzip, bzip2 (`.xml.bz2`, dump splits such as
`...xml-p10p30302.bz2`), xz or zstd; the compression is told from the first bytes, never from
the name (compression.open_decompressed, as for every source). A multistream dump
(`*-pages-articles-multistream*.xml*.bz2`) whose index file (`...-multistream-index*.txt[.bz2]`)
lies beside it is split by `plan()` into byte ranges of about `wiki_task_mb` MB (option, default
64), so many workers read one dump. The index only marks the dump as multistream and is never
read (enwiki's has ~23M lines): each task reads the bz2 streams that start inside its range,
found by their headers, so streams are read whole and exactly once. Any other file is one task.

The dump's bytes are read and parsed by `wiki_dump.parse_pages` (expat, entities refused, a
page that does not parse skipped to the next one: see there). Only articles are kept: other
namespaces, redirects, disambiguation pages and pages without text are skipped and counted under
the Beam counters `pipelines/wikipedia_skipped_<reason>`; the decision is `classify_page`, a pure
function. Article wikitext becomes plain text through
`wikimarkup.wikitext_to_text`, told the wiki's own names for its File, Media and Category
namespaces from `<siteinfo>` (a range task reads them from the dump's first stream).

Options: `wiki_task_mb` (float, MB of compressed input per task of a multistream dump),
`wiki_index` (an explicit index file, when the pattern matches one dump), `max_document_bytes`.

Each document carries its wiki's language (`dump_language`: "elwiki" -> "el") in
meta["source_language"], the language the clean stage keeps unless --language says otherwise.
"""

from __future__ import annotations

import functools
import logging
import posixpath
import re
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence

from apache_beam.metrics import Metrics

from pipelines.document import SOURCE_LANGUAGE_META, Document, Failure, ReadTask
from pipelines.inputs import as_patterns, match_patterns
from pipelines.io import match_inputs, open_input
from pipelines.sources.file_source import check_file_options
from pipelines.sources.traits import (
    InputFormat,
    SourceTraits,
    TaskSize,
    leading_text,
)
from pipelines.sources.wikipedia import wikimarkup
from pipelines.sources.wikipedia.wiki_dump import (
    BZ2_STREAM_MAGIC,
    SiteInfo,
    WikiPage,
    parse_pages,
    read_siteinfo,
)

NAME = "wikipedia"
WIKI_INDEX_OPTION = "wiki_index"

# --- the wiki's language -------------------------------------------------------------------------

# A dbname is the wiki's code (dashes written "_") and its project: "elwiki", "zh_yuewiki",
# "enwiktionary".
_DBNAME = re.compile(
    r"([a-z][a-z0-9_]*?)(?:wiki|wiktionary|wikibooks|wikinews|wikiquote|wikisource|wikiversity"
    r"|wikivoyage)"
)
# Wikimedia's codes that name a language by another code than ISO 639's (which the language
# identifier uses), and wikis of no one language.
_WIKI_CODES = {"simple": "en", "be-x-old": "be", "be-tarask": "be", "zh-yue": "yue",
               "zh-min-nan": "nan", "zh-classical": "lzh", "nb": "no"}
_MULTILINGUAL = frozenset({"commons", "meta", "species", "wikidata", "incubator", "sources",
                           "mediawiki", "outreach", "test", "beta"})


def dump_language(site: SiteInfo) -> str:
    """The language code of the wiki a dump comes from: its <dbname>'s ("elwiki" -> "el",
    "simplewiki" -> "en", "zh_yuewiki" -> "yue"), else the first label of <base>'s host
    ("https://uk.wikipedia.org/..." -> "uk"); "" for a wiki of no one language (Commons,
    Meta) and a dump that says neither."""
    match = _DBNAME.fullmatch(site.dbname)
    code = match.group(1).replace("_", "-") if match else ""
    if not code and site.base:
        host = urllib.parse.urlsplit(site.base).hostname or ""
        code = host.split(".")[0] if host.count(".") >= 2 else ""
    code = _WIKI_CODES.get(code, code)
    return "" if code in _MULTILINGUAL else code


def input_language(path: str) -> str | None:
    """A dump's language from its <siteinfo> (SourceTraits.input_language); None for a
    multistream index, which is no dump."""
    if _INDEX_NAME.search(path):
        return None
    site = read_siteinfo(path)
    return dump_language(site) if site else ""


# The multistream index beside a dump: "offset:page_id:title" lines.
_INDEX_LINE = re.compile(rb"\d+:\d+:")


def _looks_like_dump(head: bytes) -> bool:
    """A MediaWiki XML export (a multistream piece starts at a <page>), or a dump's index."""
    text = leading_text(head)
    xml = text.startswith(b"<") and (b"<mediawiki" in text or b"<page>" in text)
    return xml or _INDEX_LINE.match(text) is not None


# Curated text (the light clean preset), in the language its dump names. A multistream dump is
# cut into tasks of `wiki_task_mb` MB of compressed input.
TRAITS = SourceTraits(
    task_size=TaskSize("wiki_task_mb", default=64.0, unit=1_000_000, unit_name="MB"),
    input_language=input_language,
    input_format=InputFormat("a MediaWiki XML dump", _looks_like_dump),
    options=(WIKI_INDEX_OPTION,),
)
SKIP_REASONS = ("namespace", "redirect", "disambiguation", "empty")

_log = logging.getLogger(__name__)
_SKIPPED = {r: Metrics.counter("pipelines", f"wikipedia_skipped_{r}") for r in SKIP_REASONS}
_PAGES = Metrics.counter("pipelines", "wikipedia_pages")


# --- classification ----------------------------------------------------------------------------

# "#REDIRECT [[Target]]" in English and in the languages of the big wikis (the magic word is
# localized; siteinfo does not list it). It must not run on into a word: "#Redirected ...".
_REDIRECT_TEXT = re.compile(
    r"\s*#(?:redirect|ανακατευθυνση|ανακατεύθυνση|weiterleitung|redirection|redirección|"
    r"redireccion|rinvia|doorverwijzing|перенаправление|перенаправлення|redirecionamento|"
    r"przekieruj|yönlendirme|átirányítás|přesměruj|omdirigering|uudelleenohjaus|転送|重定向)"
    r"(?![^\W\d_])",
    re.IGNORECASE,
)
# Disambiguation-page templates (en and their redirects, plus el, de, fr, es, it, ru, nl).
DISAMBIGUATION_TEMPLATES = frozenset(
    {
        "disambiguation", "disambig", "dab", "disamb", "dis", "hndis", "geodis", "numberdis",
        "dmbox", "disambiguation cleanup", "mathdab", "schooldis", "letter disambiguation",
        "αποσαφήνιση", "αποσαφ", "begriffsklärung", "homonymie", "desambiguación",
        "desambiguacion", "disambigua", "неоднозначность", "dp", "doorverwijspagina",
    }
)  # fmt: skip
_TEMPLATE_NAME = re.compile(r"\{\{\s*([^{}|\n]{1,100})")
_DISAMBIGUATION_TITLE = re.compile(r"\((?:disambiguation|αποσαφήνιση)\)\s*$", re.IGNORECASE)


def is_disambiguation_template(name: str) -> bool:
    """Whether a template name marks a disambiguation page ("Disambiguation", "dab", "Place
    name disambiguation", "Αποσαφήνιση"; not "Disambiguation needed", an inline tag)."""
    name = wikimarkup.normalize_namespace_name(name)
    name = name.split(":", 1)[1].strip() if ":" in name else name  # "Template:Dab"
    return name in DISAMBIGUATION_TEMPLATES or name.endswith(" disambiguation")


def classify_page(ns: int, title: str, text: str, is_redirect: bool) -> str | None:
    """None to keep a page as an article, else why it is skipped (one of SKIP_REASONS)."""
    if ns != 0:
        return "namespace"
    if is_redirect or _REDIRECT_TEXT.match(text):
        return "redirect"
    if not text.strip():
        return "empty"
    if _DISAMBIGUATION_TITLE.search(title):
        return "disambiguation"
    if "{{" in text:
        for match in _TEMPLATE_NAME.finditer(text):
            if is_disambiguation_template(match.group(1)):
                return "disambiguation"
    return None


def _dbname_from_path(path: str) -> str:
    """A dump's dbname from its file name ("enwiki-20240101-pages..." -> "enwiki"), else the
    name without extensions: the id prefix when a dump has no <siteinfo>."""
    name = posixpath.basename(path.rstrip("/"))
    match = re.match(r"([a-z][a-z0-9_]*wik[a-z]*)-", name)
    if match:
        return match.group(1)
    return re.sub(r"(\.(xml|bz2|gz|txt))+$", "", name) or name


# --- documents ---------------------------------------------------------------------------------

_URL_SAFE = ";@$!*(),/~:"  # what MediaWiki leaves unescaped in article URLs


def page_url(base: str, title: str) -> str:
    """The article URL, from siteinfo's <base> (the main page's URL); "" without one."""
    if not base:
        return ""
    marker = base.find("/wiki/")
    prefix = base[: marker + 6] if marker >= 0 else base.rsplit("/", 1)[0] + "/"
    return prefix + urllib.parse.quote(title.replace(" ", "_"), safe=_URL_SAFE)


@functools.lru_cache(maxsize=64)
def _markup_config(site: SiteInfo) -> wikimarkup.MarkupConfig:
    return wikimarkup.config_for_namespaces(
        file_names=(site.namespace_name(6), site.namespace_name(-2)),
        category_names=(site.namespace_name(14),),
    )


def page_document(page: WikiPage, dbname: str) -> Document | None:
    """The Document of a kept page, or None when no prose is left once markup is gone."""
    text = wikimarkup.wikitext_to_text(page.text, _markup_config(page.site))
    if not text:
        return None
    meta = {"page_id": page.page_id, "revision_id": page.revision_id, "dbname": dbname}
    language = dump_language(page.site)
    if language:
        meta[SOURCE_LANGUAGE_META] = language
    return Document(
        id=f"wikipedia:{dbname}:{page.page_id}",
        source=NAME,
        text=text,
        url=page_url(page.site.base, page.title),
        title=page.title,
        meta=meta,
    )


def read(task: ReadTask) -> Iterator[Document | Failure]:
    """Documents for the articles of one task, and Failures for what could not be read."""
    fallback_dbname = _dbname_from_path(task.path)
    for item in parse_pages(task):
        if isinstance(item, Failure):  # logged where it is counted (stage.py), once
            yield item
            continue
        _PAGES.inc()
        reason = classify_page(item.ns, item.title, item.text, item.is_redirect)
        document = None
        if reason is None:
            document = page_document(item, item.site.dbname or fallback_dbname)
            if document is None:
                reason = "empty"
        if document is None:
            _SKIPPED[reason].inc()
            continue
        yield document


# --- planning ----------------------------------------------------------------------------------

_MULTISTREAM_NAME = re.compile(
    r"^(?P<head>.*multistream)(?P<num>\d*)\.xml(?P<range>-p\d+p\d+)?\.bz2$"
)
_INDEX_NAME = re.compile(r"multistream-index\d*\.txt(-p\d+p\d+)?(\.bz2)?$")


def index_candidates(dump_path: str) -> list[str]:
    """Where the index of a multistream dump lies by Wikimedia's naming, most likely first."""
    directory, name = posixpath.split(dump_path)
    match = _MULTISTREAM_NAME.match(name)
    if not match:
        return []
    stem = f"{match['head']}-index{match['num']}.txt{match['range'] or ''}"
    return [posixpath.join(directory, stem + ".bz2"), posixpath.join(directory, stem)]


def _existing(path: str) -> bool:
    try:
        return bool(match_inputs(path))
    except FileNotFoundError:
        return False


def _multistream_tasks(
    dump_path: str, size: int, task_bytes: int, options: Mapping[str, str]
) -> list[ReadTask]:
    """Byte ranges of `task_bytes`; each task reads the bz2 streams that start inside its range
    (parse_pages finds them), so the launcher never reads the index: enwiki's has ~23M lines,
    minutes of bz2 on one core (bench/results/wiki_index.md)."""
    with open_input(dump_path) as raw:
        if not BZ2_STREAM_MAGIC.match(raw.read(10)):
            raise ValueError(f"{dump_path}: has a multistream index but is not a bz2 dump")
    starts = range(0, max(size, 1), task_bytes)
    return [
        ReadTask(
            source=NAME,
            path=dump_path,
            start=start,
            end=start + task_bytes if start + task_bytes < size else -1,
            options=dict(options),
        )
        for start in starts
    ]


def check_options(options: Mapping[str, str]) -> None:
    check_file_options(options, TRAITS)


def plan(patterns: str | Sequence[str], options: Mapping[str, str]) -> list[ReadTask]:
    """One task per dump file, except multistream dumps with an index, which become byte ranges
    of about `wiki_task_mb` MB (whole bz2 streams once read). Index files matched by the
    patterns mark their dump as multistream; they are not read as dumps, nor read at all."""
    check_options(options)  # a bad option fails on the launcher, not on workers
    task_bytes = TRAITS.task_size.bytes(options)
    named = ", ".join(map(repr, as_patterns(patterns)))
    dumps = [f for f in match_patterns(patterns) if not _INDEX_NAME.search(f.path)]
    if not dumps:
        raise FileNotFoundError(f"{named} match(es) only multistream index files, no dump")
    explicit_index = options.get(WIKI_INDEX_OPTION, "")
    if explicit_index and len(dumps) != 1:
        raise ValueError(f"wiki_index names one index, but {named} match {len(dumps)} dumps")
    if explicit_index and not _existing(explicit_index):
        raise FileNotFoundError(f"wiki_index {explicit_index!r} does not exist")
    tasks: list[ReadTask] = []
    for dump in dumps:
        index = explicit_index or next((c for c in index_candidates(dump.path) if _existing(c)), "")
        if index:
            tasks.extend(_multistream_tasks(dump.path, dump.size_bytes, task_bytes, options))
            continue
        if dump.size_bytes > task_bytes:  # it bounds the run's wall time: say why
            _log.info("%s: no multistream index beside it: read start to end by one task "
                      "(%.0f MB); a multistream dump with its index (or wiki_index=) is read "
                      "in parallel", dump.path, dump.size_bytes / 1e6)
        tasks.append(ReadTask(source=NAME, path=dump.path, options=dict(options)))
    return tasks
