"""The --keep-rejects audit files, written by the pipeline's WriteRejects on real records: drops
(with their URL) in rejects-*.jsonl, the parts a source cut from a kept book in
parts_removed-*.jsonl with the cut text bounded."""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to

from pipelines.clean import CleanConfig, clean_document
from pipelines.document import PARTS_REMOVED, Document, ReadTask, Reject
from pipelines.sources import get_source
from pipelines.write import REJECTS_DIR, WriteRejects, reject_record
from pipelines.write.rejects import PARTS_REMOVED_TEXT_CHARS
from tests.conftest import CORPORA

BOOKS = CORPORA / "books"
RUSSIAN_PAGE = "https://gto-normativy.ru/skajrim-skorost-bega-kak-uvelichit/"


def parts_removed_audit(book: str) -> Reject:
    """The read stage's parts-removed record of a shared book (its title page, contents...)."""
    from pipelines.sources.transforms import ReadDoFn

    read = ReadDoFn("books", keep_failures=True, progress_dir=None)
    read.setup()
    read.start_bundle()
    out = list(read.process(ReadTask(source="books", path=str(BOOKS / book))))
    (audit,) = [o.value for o in out if getattr(o, "tag", None) == "failures"]
    assert audit.reason == PARTS_REMOVED
    return audit


def dropped_records() -> list[Reject]:
    """Real drops: Candide (French, in a books run) and a Russian web page (its URL kept)."""
    task = ReadTask(source="books", path=str(BOOKS / "Candide-fr.txt"))
    candide = next(get_source("books").read(task))
    truth = json.loads((CORPORA / "web" / "html" / "ground-truth.subset.json").read_text("utf-8"))
    (page,) = [p for p in truth.values() if p["url"] == RUSSIAN_PAGE]
    web = Document(id="webtext:ru", source="webtext", text=page["articleBody"], url=page["url"])
    drops = [
        clean_document(candide, CleanConfig.for_source("books")),
        clean_document(web, CleanConfig.for_source("webtext")),
    ]
    assert all(isinstance(d, Reject) and d.reason == "language" for d in drops), drops
    return drops


def test_a_parts_removed_record_keeps_the_cut_text_bounded_and_says_so():
    moby = json.loads(reject_record(parts_removed_audit("2701-0.txt"))[1])
    assert moby["kind"] == PARTS_REMOVED and moby["parts"] == "title_page 1, contents 1"
    assert moby["text"].startswith("MOBY-DICK;") and moby["truncated"]
    assert len(moby["text"]) == PARTS_REMOVED_TEXT_CHARS
    swift = json.loads(reject_record(parts_removed_audit("pg1080.txt"))[1])
    assert not swift["truncated"] and swift["text"].endswith("by Dr. Jonathan Swift\n\n1729")


def test_drops_and_cut_parts_go_to_separate_audit_files(tmp_path):
    cuts = [parts_removed_audit("2701-0.txt"), parts_removed_audit("pg1080.txt")]
    drops = dropped_records()
    with beam.Pipeline() as p:
        written = p | beam.Create(cuts + drops) | WriteRejects(str(tmp_path), 2)
        assert_that(written, equal_to([len(drops)]))  # rejects_written counts drops only

    def lines(pattern: str) -> list[dict]:
        files = sorted((tmp_path / REJECTS_DIR).glob(pattern))
        return [json.loads(line) for f in files for line in f.read_text("utf-8").splitlines()]

    rejects, parts = lines("rejects-*.jsonl"), lines("parts_removed-*.jsonl")
    assert sorted(r["id"] for r in parts) == ["books:2701-0.txt", "books:pg1080.txt"]
    assert {r["kind"] for r in parts} == {PARTS_REMOVED}
    assert sorted(r["id"] for r in rejects) == ["books:Candide-fr.txt", "webtext:ru"]
    by_id = {r["id"]: r for r in rejects}
    assert by_id["webtext:ru"]["url"] == RUSSIAN_PAGE and by_id["webtext:ru"]["kind"] == "reject"
    assert by_id["books:Candide-fr.txt"]["url"] == ""
    assert by_id["webtext:ru"]["detail"].startswith("ru p=")
