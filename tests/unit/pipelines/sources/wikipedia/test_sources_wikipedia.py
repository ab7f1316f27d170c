"""The Wikipedia source on the real dump samples: what is kept, what is skipped, how a
multistream dump is split, and what broken, hostile or truncated input gives."""

from __future__ import annotations

import bz2
import collections
import gzip
import html
import lzma
import re
import shutil
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
import zstandard

from pipelines.document import Document, Failure, ReadTask
from pipelines.sources import check_options, get_source
from pipelines.sources.wikipedia import wikipedia
from pipelines.sources.wikipedia.wikipedia import classify_page, parse_pages, plan, read
from tests.conftest import REPO

WIKIPEDIA = REPO.parent / "shared" / "corpora" / "wikipedia"
SIMPLEWIKI = WIKIPEDIA / "simplewiki-sample.xml.bz2"
ENWIKI_PARTIAL = WIKIPEDIA / "enwiki-articles-partial.xml"
ENWIKI_BZ2 = WIKIPEDIA / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
ELWIKI = WIKIPEDIA / "elwiki-pages-articles-head933.xml.bz2"


def read_path(path: Path | str) -> list[Document | Failure]:
    tasks = plan(str(path), {})
    return [item for task in tasks for item in read(task)]


def documents(items: list) -> list[Document]:
    return [item for item in items if isinstance(item, Document)]


def failures(items: list) -> list[Failure]:
    return [item for item in items if isinstance(item, Failure)]


@pytest.fixture(scope="module")
def enwiki_documents() -> list[Document]:
    items = read_path(ENWIKI_BZ2)
    assert not failures(items)
    return documents(items)


# --- the real samples --------------------------------------------------------------------------


def test_simplewiki_articles():
    items = read_path(SIMPLEWIKI)
    assert not failures(items)
    docs = documents(items)
    assert [d.title for d in docs] == [
        "April", "August", "Art", "A", "Air", "Autonomous communities of Spain",
    ]  # fmt: skip
    april = docs[0]
    assert april.id == "wikipedia:simplewiki:1"
    assert april.source == "wikipedia"
    assert april.url == "https://simple.wikipedia.org/wiki/April"
    assert april.meta == {"page_id": "1", "revision_id": "6516364", "dbname": "simplewiki",
                          "source_language": "en"}
    assert april.text.startswith("April is the 4th month of the year, and comes between March")
    for doc in docs:
        for markup in ("{{", "[[", "<ref", "]]", "}}"):
            assert markup not in doc.text, (doc.title, markup)
    assert docs[-1].url == "https://simple.wikipedia.org/wiki/Autonomous_communities_of_Spain"


def test_enwiki_partial_keeps_only_real_articles():
    pages = [p for p in parse_pages(ReadTask("wikipedia", str(ENWIKI_PARTIAL)))]
    assert len(pages) == 11
    assert sum(p.ns == 0 for p in pages) == 7
    assert sum(p.is_redirect for p in pages) == 4
    reasons = collections.Counter(
        classify_page(p.ns, p.title, p.text, p.is_redirect) for p in pages
    )
    assert reasons == {"namespace": 4, "redirect": 3, "disambiguation": 2, None: 2}
    docs = documents(read_path(ENWIKI_PARTIAL))
    assert [d.title for d in docs] == ["Archer (typeface)", "Ricky Minard"]
    assert docs[0].id == "wikipedia:enwiki:7697611"
    assert docs[0].url == "https://en.wikipedia.org/wiki/Archer_(typeface)"


def test_enwiki_dump_split_without_xml_in_its_name(enwiki_documents: list[Document]):
    (task,) = plan(str(ENWIKI_BZ2), {})  # .bz2 told by its magic bytes, one task (no index)
    assert (task.start, task.end) == (0, -1)
    pages = list(parse_pages(task))
    assert len(pages) == 206
    assert sum(p.is_redirect for p in pages) == 100
    assert len(enwiki_documents) == 98  # 99 ns-0 redirects, 1 ns-4 page, 8 disambiguations
    assert len({d.id for d in enwiki_documents}) == 98
    assert all(d.id.startswith("wikipedia:enwiki:") for d in enwiki_documents)
    anarchism = enwiki_documents[0]
    assert anarchism.title == "Anarchism" and anarchism.meta["page_id"] == "12"
    assert anarchism.text.startswith("Anarchism is a political philosophy that advocates")
    assert "References" not in anarchism.text.split("\n\n")


@pytest.mark.slow  # a 15 MB dump, read twice
def test_elwiki_greek_namespaces():
    pages = list(parse_pages(ReadTask("wikipedia", str(ELWIKI))))
    assert len(pages) == 933
    assert sum(p.ns == 0 for p in pages) == 545
    assert sum(p.is_redirect for p in pages) == 26
    assert pages[0].site.namespace_name(6) == "Αρχείο"
    docs = documents(read_path(ELWIKI))
    # 545 articles less 21 redirects, 23 {{αποσαφήνιση}} pages and 1 page that is one template.
    assert len(docs) == 500
    assert all(d.url.startswith("https://el.wikipedia.org/wiki/") for d in docs)
    by_title = {d.title: d for d in docs}
    assert (
        by_title["Κύπρος"].url
        == "https://el.wikipedia.org/wiki/%CE%9A%CF%8D%CF%80%CF%81%CE%BF%CF%82"
    )
    assert all(d.id.startswith("wikipedia:elwiki:") for d in docs)
    for doc in docs:
        assert "Κατηγορία:" not in doc.text and "thumb" not in doc.text, doc.title
    # Without siteinfo's Greek names, the same pages would leak categories and image options.
    kept = [p for p in pages if classify_page(p.ns, p.title, p.text, p.is_redirect) is None]
    leaked = [wikipedia.wikimarkup.wikitext_to_text(p.text) for p in kept]
    # (89 of them: the category links that follow a closing section cut by structure go
    # with it even so.)
    assert sum("Κατηγορία:" in t for t in leaked) > 80


def test_redirect_by_text_without_a_redirect_element(tmp_path: Path):
    xml = ENWIKI_PARTIAL.read_bytes().replace(b'    <redirect title="Coin rolling scams" />\n', b"")
    path = tmp_path / "enwiki-noredirect.xml"
    path.write_bytes(xml)
    pages = {p.title: p for p in parse_pages(ReadTask("wikipedia", str(path)))}
    scam = pages["Penny-and-dime scam"]
    assert not scam.is_redirect and scam.text.startswith("#REDIRECT")
    assert classify_page(scam.ns, scam.title, scam.text, scam.is_redirect) == "redirect"


@pytest.mark.parametrize(
    ("ns", "title", "text", "is_redirect", "reason"),
    [
        (0, "A", "Prose.", False, None),
        (4, "Wikipedia:X", "Prose.", False, "namespace"),
        (0, "A", "Prose.", True, "redirect"),
        (0, "A", "#REDIRECT [[B]]", False, "redirect"),
        (0, "A", "  #redirect[[B]]", False, "redirect"),
        (0, "A", "#ΑΝΑΚΑΤΕΥΘΥΝΣΗ [[Β]]", False, "redirect"),
        (0, "A", "#WEITERLEITUNG [[B]]", False, "redirect"),
        (0, "A", "#Redirected rivers are a list item here.", False, None),
        (0, "A", "", False, "empty"),
        (0, "A", " \n\t", False, "empty"),
        (0, "A", "A may mean:\n* [[B]]\n{{Disambiguation|geo}}", False, "disambiguation"),
        (0, "A", "A may mean: [[B]] {{dab}}", False, "disambiguation"),
        (0, "A", "A may mean: [[B]] {{ Airport_disambiguation }}", False, "disambiguation"),
        (0, "A", "Α: [[Β]]\n{{αποσαφήνιση}}", False, "disambiguation"),
        (0, "A (disambiguation)", "A may mean: [[B]]", False, "disambiguation"),
        (0, "A", "A is a letter.{{Disambiguation needed|date=May 2020}}", False, None),
    ],
)
def test_classify_page(ns: int, title: str, text: str, is_redirect: bool, reason: str | None):
    assert classify_page(ns, title, text, is_redirect) == reason


def test_page_url_escapes_like_mediawiki():
    base = "https://en.wikipedia.org/wiki/Main_Page"
    assert wikipedia.page_url(base, "Mr. & Mrs.") == "https://en.wikipedia.org/wiki/Mr._%26_Mrs."
    assert wikipedia.page_url(base, "AC/DC (band)") == "https://en.wikipedia.org/wiki/AC/DC_(band)"
    assert wikipedia.page_url(base, "Ω?") == "https://en.wikipedia.org/wiki/%CE%A9%3F"
    assert wikipedia.page_url("", "X") == ""


def test_export_schema_and_missing_ns_elements(tmp_path: Path):
    baseline = documents(read_path(ENWIKI_PARTIAL))
    xml = ENWIKI_PARTIAL.read_bytes()
    # A newer export schema (another XML namespace) and no <ns> elements (schemas before 0.6):
    # the namespace is then told from the title prefix, so Category: pages still go.
    changed = re.sub(rb"\s*<ns>\d+</ns>", b"", xml.replace(b"export-0.10", b"export-0.11"))
    path = tmp_path / "enwiki-schema.xml"
    path.write_bytes(changed)
    assert documents(read_path(path)) == baseline


def test_gzip_dump(tmp_path: Path):
    path = tmp_path / "enwiki-partial.xml.gz"
    path.write_bytes(gzip.compress(ENWIKI_PARTIAL.read_bytes()))
    assert read_path(path) == read_path(ENWIKI_PARTIAL)


def test_dbname_from_file_name_when_siteinfo_is_missing(tmp_path: Path):
    xml = re.sub(rb"<siteinfo>.*</siteinfo>", b"", ENWIKI_PARTIAL.read_bytes(), flags=re.DOTALL)
    path = tmp_path / "frwiki-20240101-pages-articles.xml"
    path.write_bytes(xml)
    docs = documents(read_path(path))
    assert [d.title for d in docs] == ["Archer (typeface)", "Ricky Minard"]
    assert docs[0].id == "wikipedia:frwiki:7697611"
    assert docs[0].meta["dbname"] == "frwiki" and docs[0].url == ""


# --- wikis in other scripts (dumps built here, with the siteinfo their wikis export) ------------


def dump_xml(dbname: str, namespaces: dict[int, str] | None, pages: list[tuple[str, str]]) -> str:
    """A MediaWiki export of `pages` (title, wikitext), all in namespace 0; no <siteinfo> when
    `namespaces` is None."""
    site = ""
    if namespaces is not None:
        language = dbname.removesuffix("wiki")
        rows = "".join(
            f'      <namespace key="{key}" case="first-letter">{name}</namespace>\n'
            for key, name in sorted(namespaces.items())
        )
        site = (
            f"  <siteinfo>\n    <sitename>Wikipedia</sitename>\n    <dbname>{dbname}</dbname>\n"
            f"    <base>https://{language}.wikipedia.org/wiki/Main</base>\n"
            f"    <namespaces>\n{rows}    </namespaces>\n  </siteinfo>\n"
        )
    body = "".join(
        f"  <page>\n    <title>{title}</title>\n    <ns>0</ns>\n    <id>{number}</id>\n"
        f"    <revision>\n      <id>{100 + number}</id>\n"
        f'      <text xml:space="preserve">{html.escape(text, quote=False)}</text>\n'
        "    </revision>\n  </page>\n"
        for number, (title, text) in enumerate(pages, start=1)
    )
    return (
        '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11">\n'
        f"{site}{body}</mediawiki>\n"
    )


# What ukwiki, ruwiki and jawiki list in <siteinfo> for Media (-2), File (6) and Category (14).
UKWIKI_NAMESPACES = {-2: "Медіа", 0: "", 6: "Файл", 10: "Шаблон", 14: "Категорія"}
RUWIKI_NAMESPACES = {-2: "Медиа", 0: "", 6: "Файл", 10: "Шаблон", 14: "Категория"}
JAWIKI_NAMESPACES = {-2: "メディア", 0: "", 6: "ファイル", 10: "Template", 14: "Category"}
KYIV = (
    "Київ",
    "'''Київ''' — столиця [[Україна|України]].\n"
    "[[Файл:Kyiv Pechersk Lavra.jpg|міні|праворуч|250пкс|Лавра]]\n"
    "[[Зображення:Coat of Arms of Kyiv.svg|thumb|556px|center|Герб [[Київ]]а]]\n"
    "Місто стоїть на [[Дніпро|Дніпрі]].\n\n"
    "[[Категорія:Міста України]]\n[[Категорія:Столиці країн Європи|Київ]]\n[[en:Kyiv]]",
)
MOSCOW = (
    "Москва",
    "'''Москва''' — столица [[Россия|России]].[[Изображение:Kremlin.jpg|thumb|Кремль]]\n"
    "[[Медиа:Anthem.ogg]]\n[[Категория:Города России]]",
)
TOKYO = (
    "東京都",
    "'''東京都'''は[[日本]]の[[首都]]である。[[ファイル:Tokyo Tower.jpg|サムネイル|東京タワー]]"
    "[[画像:Shinjuku.png|thumb|200px|新宿]]\n\n[[Category:日本の都道府県]]",
)
EXPECTED = {
    "Київ": "Київ — столиця України.\n\nМісто стоїть на Дніпрі.",
    "Москва": "Москва — столица России.",
    "東京都": "東京都は日本の首都である。",
}


@pytest.mark.parametrize(
    ("dbname", "namespaces", "page"),
    [
        ("ukwiki", UKWIKI_NAMESPACES, KYIV),
        ("ruwiki", RUWIKI_NAMESPACES, MOSCOW),
        ("jawiki", JAWIKI_NAMESPACES, TOKYO),
    ],
)
def test_namespace_names_of_other_languages_come_from_siteinfo(
    tmp_path: Path, dbname: str, namespaces: dict[int, str], page: tuple[str, str]
):
    path = tmp_path / f"{dbname}-20240101-pages-articles.xml.bz2"
    path.write_bytes(bz2.compress(dump_xml(dbname, namespaces, [page]).encode()))
    (doc,) = read_path(path)
    assert doc.text == EXPECTED[page[0]]
    assert doc.url.startswith(f"https://{dbname[:2]}.wikipedia.org/wiki/")


def test_without_siteinfo_media_links_still_vanish(tmp_path: Path):
    """No siteinfo: local category names cannot be known, but no image caption or option
    (`thumb|556px|center|`) reaches the text, whatever the File namespace is called there."""
    path = tmp_path / "ukwiki-20240101-pages-articles.xml"
    path.write_text(dump_xml("ukwiki", None, [KYIV]))
    (doc,) = read_path(path)
    assert doc.text.startswith(EXPECTED["Київ"])
    for markup in ("thumb", "px", "міні", "Лавра", "Герб", "[[", "]]", "|"):
        assert markup not in doc.text, markup


def test_multistream_range_tasks_know_the_namespaces_from_the_dump_head(tmp_path: Path):
    """A task reading the middle of a multistream dump never sees <siteinfo>; it takes the
    namespace names from the dump's first stream."""
    source = tmp_path / "source.xml.bz2"
    pages = [(f"{KYIV[0]} {i}", KYIV[1]) for i in range(30)]
    source.write_bytes(bz2.compress(dump_xml("ukwiki", UKWIKI_NAMESPACES, pages).encode()))
    dump = write_multistream(tmp_path, build_multistream(source, 3), index_bz2=True)
    tasks = plan(str(dump), {"wiki_task_mb": "0.001"})
    assert len(tasks) >= 3 and all(t.start > 0 for t in tasks[1:])
    docs = [item for task in tasks for item in read(task)]
    assert len(docs) == 30
    assert {d.text for d in docs} == {EXPECTED["Київ"]}


# --- multistream dumps -------------------------------------------------------------------------


DUMP_NAME = "enwiki-20160101-pages-articles-multistream.xml.bz2"
INDEX_NAME = "enwiki-20160101-pages-articles-multistream-index.txt"


def build_multistream(source: Path, pages_per_stream: int) -> tuple[bytes, bytes]:
    """A real multistream dump of `source`'s pages and its index, as Wikimedia writes them: the
    header (<mediawiki> and <siteinfo>) as one bz2 stream, then `pages_per_stream` pages per
    stream, then `</mediawiki>`; the index has a line `offset:page_id:title` for every page."""
    xml = bz2.open(source).read().decode("utf-8")
    first_page = xml.index("  <page>")
    footer = xml.rindex("</mediawiki>")
    pages = re.findall(r"  <page>.*?</page>\n", xml[first_page:footer], re.DOTALL)
    assert "".join(pages) == xml[first_page:footer]
    streams = [bz2.compress(xml[:first_page].encode())]
    index_lines = []
    offset = len(streams[0])
    for i in range(0, len(pages), pages_per_stream):
        group = pages[i : i + pages_per_stream]
        for page in group:
            page_id = re.search(r"<id>(\d+)</id>", page).group(1)
            title = re.search(r"<title>(.*?)</title>", page).group(1)
            index_lines.append(f"{offset}:{page_id}:{title}\n")
        streams.append(bz2.compress("".join(group).encode()))
        offset += len(streams[-1])
    streams.append(bz2.compress(xml[footer:].encode()))
    return b"".join(streams), "".join(index_lines).encode()


@pytest.fixture(scope="module")
def simple_multistream() -> tuple[bytes, bytes]:
    return build_multistream(SIMPLEWIKI, pages_per_stream=1)


def write_multistream(directory: Path, multistream: tuple[bytes, bytes], index_bz2: bool) -> Path:
    dump, index = multistream
    (directory / DUMP_NAME).write_bytes(dump)
    if index_bz2:
        (directory / (INDEX_NAME + ".bz2")).write_bytes(bz2.compress(index))
    else:
        (directory / INDEX_NAME).write_bytes(index)
    return directory / DUMP_NAME


def check_split_reads_like_whole(dump: Path, tasks: list[ReadTask], expected: list[Document]):
    assert {t.path for t in tasks} == {str(dump)}
    assert tasks[0].start == 0 and tasks[-1].end == -1
    assert all(a.end == b.start for a, b in zip(tasks, tasks[1:]))
    split = [item for task in tasks for item in read(task)]
    assert not failures(split)
    whole = list(read(ReadTask("wikipedia", str(dump))))
    assert split == whole
    assert split == expected


def test_multistream_tasks_read_exactly_the_whole_dump(
    tmp_path: Path, simple_multistream: tuple[bytes, bytes]
):
    dump = write_multistream(tmp_path, simple_multistream, index_bz2=True)
    tasks = plan(str(tmp_path / "*"), {"wiki_task_mb": "0.004"})  # the glob matches the index
    assert len(tasks) >= 3
    # Every task but the last holds whole streams of at least 4 kB.
    assert all(t.end - t.start >= 4000 for t in tasks[:-1])
    check_split_reads_like_whole(dump, tasks, documents(read_path(SIMPLEWIKI)))


@pytest.mark.slow  # compresses and reads a 6 MB dump
def test_enwiki_multistream_in_many_tasks(tmp_path: Path, enwiki_documents: list[Document]):
    dump = write_multistream(tmp_path, build_multistream(ENWIKI_BZ2, 10), index_bz2=True)
    tasks = plan(str(dump), {"wiki_task_mb": "0.1"})
    assert len(tasks) >= 10
    check_split_reads_like_whole(dump, tasks, enwiki_documents)


def test_multistream_plain_index_and_default_task_size(
    tmp_path: Path, simple_multistream: tuple[bytes, bytes]
):
    bz2_index = tmp_path / "a"
    plain_index = tmp_path / "b"
    bz2_index.mkdir()
    plain_index.mkdir()
    write_multistream(bz2_index, simple_multistream, index_bz2=True)
    write_multistream(plain_index, simple_multistream, index_bz2=False)
    options = {"wiki_task_mb": "0.004"}
    ranges = [(t.start, t.end) for t in plan(str(bz2_index / DUMP_NAME), options)]
    assert len(ranges) >= 3
    assert [(t.start, t.end) for t in plan(str(plain_index / DUMP_NAME), options)] == ranges
    # 64 MB tasks by default: this small dump stays one task.
    assert [(t.start, t.end) for t in plan(str(bz2_index / DUMP_NAME), {})] == [(0, -1)]


def test_explicit_index_option_and_the_index_is_never_read(
    tmp_path: Path, simple_multistream: tuple[bytes, bytes]
):
    dump = write_multistream(tmp_path, simple_multistream, index_bz2=False)
    index = tmp_path / INDEX_NAME
    renamed = tmp_path / "other.bz2"
    shutil.move(dump, renamed)
    options = {"wiki_task_mb": "0.004"}
    assert len(plan(str(renamed), options)) == 1  # no index by that name
    tasks = plan(str(renamed), {**options, "wiki_index": str(index)})
    assert len(tasks) >= 3
    # The launcher does not read the index (enwiki's has ~23M lines): tasks find their streams.
    index.write_text("12:x:not even an index line\n")
    assert plan(str(renamed), {**options, "wiki_index": str(index)}) == tasks
    assert [d for t in tasks for d in read(t)] == documents(read_path(SIMPLEWIKI))
    with pytest.raises(FileNotFoundError, match="wiki_index"):
        plan(str(renamed), {**options, "wiki_index": str(tmp_path / "missing.txt")})
    (tmp_path / "plain.xml").write_bytes(bz2.decompress(renamed.read_bytes()))
    with pytest.raises(ValueError, match="not a bz2 dump"):
        plan(str(tmp_path / "plain.xml"), {**options, "wiki_index": str(index)})


def test_a_task_range_holding_no_stream_start_reads_nothing(
    tmp_path: Path, simple_multistream: tuple[bytes, bytes]
):
    """Tasks far smaller than a stream: each stream is read by the one task whose range holds
    its first byte, the others give nothing, and together they read the dump once."""
    dump = write_multistream(tmp_path, simple_multistream, index_bz2=True)
    tasks = plan(str(dump), {"wiki_task_mb": "0.0005"})
    outputs = [list(read(task)) for task in tasks]
    assert sum(not output for output in outputs) > len(tasks) // 2
    check_split_reads_like_whole(dump, tasks, documents(read_path(SIMPLEWIKI)))


@pytest.mark.parametrize("value", ["0", "-3", "abc"])
def test_bad_task_size_option(value: str):
    with pytest.raises(ValueError, match="wiki_task_mb"):
        plan(str(ENWIKI_BZ2), {"wiki_task_mb": value})
    with pytest.raises(ValueError, match="wiki_task_mb"):  # the launcher's check, before a run
        check_options(get_source("wikipedia"), {"wiki_task_mb": value})


def test_no_match_is_an_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        plan(str(tmp_path / "missing-*.bz2"), {})


# --- bad input ---------------------------------------------------------------------------------


def test_truncated_bz2_keeps_every_page_before_the_cut(
    tmp_path: Path, enwiki_documents: list[Document]
):
    data = ENWIKI_BZ2.read_bytes()
    path = tmp_path / "enwiki-cut.xml.bz2"
    path.write_bytes(data[: len(data) // 2])
    items = read_path(path)
    docs = documents(items)
    assert 10 < len(docs) < len(enwiki_documents)
    assert docs == enwiki_documents[: len(docs)]
    assert len(failures(items)) == 1 and items[-1] == failures(items)[0]
    assert items[-1].reason == "truncated_input"
    assert str(path) in items[-1].location


def test_a_control_character_costs_its_page_not_the_rest_of_the_dump(
    tmp_path: Path, enwiki_documents: list[Document]
):
    """Issue 18: one control byte in a title lost every page after it (500 of 1,001)."""
    xml = bz2.decompress(ENWIKI_BZ2.read_bytes())
    victim = enwiki_documents[len(enwiki_documents) // 2]
    title = f"<title>{html.escape(victim.title, quote=False)}</title>".encode()
    assert xml.count(title) == 1
    path = tmp_path / "enwiki-control.xml.bz2"
    path.write_bytes(bz2.compress(xml.replace(title, title[:9] + b"\x01" + title[9:]), 1))
    items = read_path(path)
    (failure,) = failures(items)
    assert failure.reason == "malformed_xml" and "not well-formed" in failure.detail
    assert failure.lost_from is None  # one record, and reading went on
    at = xml.index(title) + 9  # where the control byte went
    line, column = xml[:at].count(b"\n") + 1, at - xml.rindex(b"\n", 0, at) - 1
    assert failure.location == f"{path}:{line}:{column}"
    assert documents(items) == [d for d in enwiki_documents if d.title != victim.title]


def test_two_bad_pages_each_cost_their_own(tmp_path: Path):
    data = ENWIKI_PARTIAL.read_bytes()
    data = data.replace(b"<title>Archer (typeface)", b"<title>Archer\x02 (typeface)")
    data = data.replace(b"<title>Ricky Minard</title>", b"<title>Ricky</titel>")
    path = tmp_path / "enwiki-two-bad.xml"
    path.write_bytes(data)
    items = read_path(path)
    assert [f.reason for f in failures(items)] == ["malformed_xml", "malformed_xml"]
    assert documents(items) == []  # the two articles of the file, both broken


def test_resynchronising_always_moves_on(tmp_path: Path):
    """Broken pages back to back (a bad tag after each is skipped with it): one failure each,
    the parse ends, and the good page after them is read."""
    data = ENWIKI_PARTIAL.read_bytes()
    good = data.rindex(b"<page>", 0, data.index(b"<title>Ricky Minard"))
    broken = b"<page><title>a\x01</title></page>\n<page\x02>\n" * 300
    path = tmp_path / "enwiki-many-bad.xml"
    path.write_bytes(data[:good] + broken + data[good:])
    started = time.perf_counter()
    items = read_path(path)
    assert time.perf_counter() - started < 10
    assert len(failures(items)) == 300
    assert [d.title for d in documents(items)] == ["Archer (typeface)", "Ricky Minard"]


def test_truncated_and_corrupt_streams_say_what_is_lost(tmp_path: Path):
    data = ENWIKI_BZ2.read_bytes()
    cut = tmp_path / "enwiki-cut.xml.bz2"
    cut.write_bytes(data[: len(data) // 2])
    assert failures(read_path(cut))[-1].lost_from == 0  # the missing tail cannot be measured
    corrupt = bytearray(data)
    middle = len(data) // 2
    corrupt[middle : middle + 64] = bytes(64)
    path = tmp_path / "enwiki-corrupt.xml.bz2"
    path.write_bytes(bytes(corrupt))
    lost_from = failures(read_path(path))[-1].lost_from
    # bz2 blocks are ~100-900 kB: the fault is found in the block that holds it
    assert 0 < lost_from <= middle


def test_truncated_plain_xml(tmp_path: Path):
    data = ENWIKI_PARTIAL.read_bytes()
    path = tmp_path / "enwiki-cut.xml"
    path.write_bytes(data[: data.index(b"<title>Penny-and-dime scam")])
    items = read_path(path)
    assert [d.title for d in documents(items)] == ["Archer (typeface)", "Ricky Minard"]
    assert [f.reason for f in failures(items)] == ["truncated_input"]


def test_corrupt_bz2_block(tmp_path: Path, enwiki_documents: list[Document]):
    data = bytearray(ENWIKI_BZ2.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    path = tmp_path / "enwiki-corrupt.xml.bz2"
    path.write_bytes(bytes(data))
    items = read_path(path)
    docs = documents(items)
    assert docs == enwiki_documents[: len(docs)] and len(docs) < len(enwiki_documents)
    # The reason the other sources give corrupt compressed data.
    assert [f.reason for f in failures(items)] == ["corrupt_input"]
    assert "corrupt bz2 data" in items[-1].detail


def test_malformed_xml_reports_line_and_column(tmp_path: Path):
    data = ENWIKI_PARTIAL.read_bytes()
    broken = data.replace(b"<title>Penny-and-dime scam</title>", b"<title>Penny</titel>")
    path = tmp_path / "enwiki-broken.xml"
    path.write_bytes(broken)
    items = read_path(path)
    assert [d.title for d in documents(items)] == ["Archer (typeface)", "Ricky Minard"]
    (failure,) = failures(items)
    line = broken[: broken.index(b"</titel>")].count(b"\n") + 1
    assert failure.reason == "malformed_xml"
    assert failure.location.startswith(f"{path}:{line}:")
    assert f"line {line}, column" in failure.detail and "mismatched tag" in failure.detail


def test_invalid_utf8(tmp_path: Path):
    data = ENWIKI_PARTIAL.read_bytes()
    at = data.index(b"Penny-and-dime scam")
    path = tmp_path / "enwiki-latin1.xml"
    path.write_bytes(data[:at] + b"Penny\xe9\xff" + data[at:])
    items = read_path(path)
    assert [d.title for d in documents(items)] == ["Archer (typeface)", "Ricky Minard"]
    assert [f.reason for f in failures(items)] == ["invalid_utf8"]


@pytest.mark.parametrize(
    ("name", "data", "detail"),
    [
        ("binary.xml.bz2", ENWIKI_BZ2.read_bytes()[4:], "neither XML nor gzip/bz2/xz/zstd"),
        ("empty.xml", b"", "no bytes"),
        ("html.xml", b"<html><body><p>not a dump</p></body></html>", "is not <mediawiki>"),
    ],
)
def test_not_a_dump(tmp_path: Path, name: str, data: bytes, detail: str):
    path = tmp_path / name
    path.write_bytes(data)
    items = read_path(path)
    assert len(items) == 1 and items[0].reason == "unreadable_file"
    assert detail in items[0].detail and str(path) in items[0].location


def test_empty_page_text_is_a_counted_skip(tmp_path: Path):
    data = ENWIKI_PARTIAL.read_bytes()
    start = data.index(b"<text", data.index(b"<title>Archer (typeface)"))
    end = data.index(b"</text>", start) + len(b"</text>")
    path = tmp_path / "enwiki-empty.xml"
    path.write_bytes(data[:start] + b'<text bytes="0" />' + data[end:])
    pages = {p.title: p for p in parse_pages(ReadTask("wikipedia", str(path)))}
    archer = pages["Archer (typeface)"]
    assert classify_page(archer.ns, archer.title, archer.text, archer.is_redirect) == "empty"
    assert [d.title for d in documents(read_path(path))] == ["Ricky Minard"]


def test_text_with_child_elements_is_a_counted_failure(tmp_path: Path):
    """Hostile input: a <text> holding elements is no MediaWiki export; it was dropped as
    "empty" with no count in stats.json. It is a Failure now (counted as failed_bad_page)."""
    xml = ENWIKI_PARTIAL.read_bytes()
    at = xml.index(b"'''Archer''' is")
    path = tmp_path / "enwiki-child.xml"
    path.write_bytes(xml[:at] + b"<b>bold</b>" + xml[at:])
    items = read_path(path)
    assert [d.title for d in documents(items)] == ["Ricky Minard"]
    (failure,) = failures(items)
    assert failure.reason == "bad_page"
    assert "Archer (typeface)" in failure.location and "<text> holds a child element <b>" in (
        failure.detail
    )


def test_page_over_the_document_size_cap_is_a_failure_not_held(tmp_path: Path):
    """A small compressed dump whose page text expands far beyond max_document_bytes: the page
    becomes Failure(too_large) without its text ever being held, and the pages after it are
    read. (gzip here: bz2 takes long to compress repetitive data; every format is read alike.)"""
    page = "  <page><title>Bomb</title><ns>0</ns><id>1</id><revision><id>2</id><text>"
    after = "</text></revision></page>\n  <page><title>After</title><ns>0</ns><id>3</id>"
    after += "<revision><id>4</id><text>Prose after the bomb.</text></revision></page>\n"
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [compressor.compress(f"<mediawiki>\n{page}".encode())]
    block = b"The same sentence again. " * 40_000  # 1 MB
    parts += [compressor.compress(block) for _ in range(16)]
    parts += [compressor.compress(f"{after}</mediawiki>\n".encode()), compressor.flush()]
    path = tmp_path / "enwiki-bomb.xml.gz"
    path.write_bytes(b"".join(parts))
    assert path.stat().st_size < 100_000
    tracemalloc.start()
    try:
        items = list(read(ReadTask("wikipedia", str(path), options={"max_document_bytes": "1MB"})))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [d.title for d in documents(items)] == ["After"]
    (failure,) = failures(items)
    assert failure.reason == "too_large" and "'Bomb'" in failure.location
    assert "max_document_bytes=1000000" in failure.detail
    assert peak < 10_000_000  # the 16 MB page text was never collected


@pytest.mark.parametrize(
    ("suffix", "compress"),
    [(".xml.xz", lzma.compress), (".xml.zst", zstandard.ZstdCompressor().compress)],
)
def test_xz_and_zstd_dumps(tmp_path: Path, suffix: str, compress):
    path = tmp_path / f"enwiki-partial{suffix}"
    path.write_bytes(compress(ENWIKI_PARTIAL.read_bytes()))
    assert read_path(path) == read_path(ENWIKI_PARTIAL)
    path.write_bytes(compress(ENWIKI_PARTIAL.read_bytes())[:-40])
    assert failures(read_path(path))[-1].reason == "truncated_input"


BILLION_LAUGHS = (
    b'<?xml version="1.0"?>\n<!DOCTYPE mediawiki [\n <!ENTITY lol "lol">\n'
    + b"".join(
        b' <!ENTITY lol%d "%s">\n' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
        for i in range(1, 10)
    )
    + b"]>\n"
)


@pytest.mark.parametrize(
    "doctype",
    [
        BILLION_LAUGHS,
        b'<?xml version="1.0"?>\n<!DOCTYPE m [<!ENTITY lol9 SYSTEM "file:///etc/passwd">]>\n',
        b'<?xml version="1.0"?>\n<!DOCTYPE mediawiki SYSTEM "http://example.com/x.dtd">\n',
    ],
)
def test_entity_declarations_are_refused_not_expanded(tmp_path: Path, doctype: bytes):
    data = ENWIKI_PARTIAL.read_bytes()
    data = data.replace(b"'''Archer''' is", b"'''Archer''' &lol9; is")
    path = tmp_path / "enwiki-laughs.xml"
    path.write_bytes(doctype + data)
    started = time.perf_counter()
    items = read_path(path)
    assert time.perf_counter() - started < 5
    assert len(items) == 1 and items[0].reason == "forbidden_dtd"


def test_undeclared_entity_is_malformed(tmp_path: Path):
    data = ENWIKI_PARTIAL.read_bytes().replace(b"'''Archer''' is", b"'''Archer''' &lol9; is")
    path = tmp_path / "enwiki-entity.xml"
    path.write_bytes(data)
    items = read_path(path)
    (failure,) = failures(items)
    assert failure.reason == "malformed_xml" and "undefined entity" in failure.detail
    # the page is skipped, and the parse goes on at the next one
    assert [d.title for d in documents(items)] == ["Ricky Minard"]


def test_missing_file_is_a_failure_not_an_exception(tmp_path: Path):
    items = list(read(ReadTask("wikipedia", str(tmp_path / "gone.xml.bz2"))))
    assert len(items) == 1 and items[0].reason == "unreadable_file"


def test_index_cutting_a_page_in_two_gives_failures_not_wrong_pages(tmp_path: Path):
    """Streams that split a page (not how Wikimedia writes them) are caught at both ends."""
    xml = bz2.open(SIMPLEWIKI).read()
    cut = xml.index(b"<title>Art</title>")  # inside the third page
    head, tail = bz2.compress(xml[:cut]), bz2.compress(xml[cut:])
    (tmp_path / DUMP_NAME).write_bytes(head + tail)
    (tmp_path / INDEX_NAME).write_text(f"{len(head)}:3:Art\n")
    tasks = plan(str(tmp_path / DUMP_NAME), {"wiki_task_mb": "0.001"})
    outputs = [list(read(task)) for task in tasks]
    first = outputs[0]
    second = next(output for output in outputs[1:] if output)
    assert sum(bool(output) for output in outputs) == 2
    assert [d.title for d in documents(first)] == ["April", "August"]
    assert [f.reason for f in failures(first)] == ["truncated_input"]
    assert "ends inside a <page>" in first[-1].detail
    # the tail of "Art" is skipped; the pages after it are read
    assert [f.reason for f in failures(second)] == ["malformed_xml"]
    titles = [d.title for d in documents(second)]
    assert titles and "Art" not in titles
    assert f"<title>{titles[0]}</title>".encode() in xml[cut:]


def test_multistream_on_an_fsspec_filesystem(simple_multistream: tuple[bytes, bytes]):
    """Planning (index lookup, boundary checks) and range reads go through pipelines.io, so a
    dump in object storage works like a local one; memory:// stands in for gs:// here."""
    import fsspec

    fs = fsspec.filesystem("memory")
    dump, index = simple_multistream
    fs.pipe({f"/wiki/{DUMP_NAME}": dump, f"/wiki/{INDEX_NAME}.bz2": bz2.compress(index)})
    try:
        tasks = plan(f"memory:///wiki/{DUMP_NAME}", {"wiki_task_mb": "0.004"})
        assert len(tasks) >= 3
        split = [item for task in tasks for item in read(task)]
        assert split == documents(read_path(SIMPLEWIKI))
    finally:
        fs.rm("/wiki", recursive=True)
