"""The --keep-rejects audit files, written by the pipeline's WriteRejects on real records: drops
(with their URL) in rejects-*.jsonl, the parts a source cut from a kept book in
parts_removed-*.jsonl with the cut text bounded."""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to

from pipelines.clean import CleanConfig, clean_document
from pipelines.document import PARTS_REMOVED, Document, Failure, ReadTask, Reject, bucket_of
from pipelines.sources import get_source
from pipelines.write import REJECTS_DIR, WriteRejects, reject_record
from pipelines.write.rejects import PARTS_REMOVED_TEXT_CHARS, audit_file
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


def _bundle_files(records_by_bundle, output: str, num_files: int) -> dict:
    """What WriteRejects' GroupByKey hands on: each bundle's ((kind, bucket), file name)s."""
    from pipelines.write.rejects import _SpillRejectsDoFn

    spill = _SpillRejectsDoFn(output, num_files)
    spill.setup()
    grouped: dict = {}
    for bundle in records_by_bundle:
        spill.start_bundle()
        for record in bundle:
            assert list(spill.process(record) or ()) == []
        for element in spill.finish_bundle():
            target, name = element.value
            grouped.setdefault(target, []).append(name)
    spill.teardown()
    return grouped


def test_audit_files_are_sorted_whatever_the_bundles(tmp_path):
    """Each audit file holds its records sorted by key, equal keys (a record read twice) by
    their line, however the bundles that wrote them were cut."""
    from pipelines.write.rejects import _WriteRejectFileDoFn

    drops = dropped_records()
    cuts = [parts_removed_audit("2701-0.txt"), parts_removed_audit("pg1080.txt")]
    twice = [
        Reject("webtext:ru", "webtext", "duplicate_id", "twice", text, RUSSIAN_PAGE)
        for text in ("Вторая копия.", "Third copy.")
    ]
    failures = [
        Failure(f"web/part-{i}.jsonl:{i * 977}", "bad_json", "line\tcut\nshort") for i in range(9)
    ]
    records = drops + cuts + twice + failures
    expected: dict = {}
    for record in records:
        key, line = reject_record(record)
        name = f"{audit_file(record)}-{bucket_of(key, 2):05d}.jsonl"
        expected.setdefault(name, []).append((key, line))
    for cut_at in ((), (3,), (1, 5, 8)):  # one bundle, two, four
        bounds = [0, *cut_at, len(records)]
        bundles = [records[::-1][a:b] for a, b in zip(bounds, bounds[1:])]
        out = tmp_path / f"run{len(bundles)}"
        write = _WriteRejectFileDoFn(str(out))
        write.setup()
        counts = [
            n
            for element in sorted(_bundle_files(bundles, str(out), 2).items())
            for n in write.process(element)
        ]
        assert sum(counts) == len(drops) + len(twice) + len(failures)  # parts removed: no drops
        written = {f.name: f.read_text("utf-8") for f in (out / REJECTS_DIR).iterdir()}
        assert written == {
            name: "".join(line + "\n" for _, line in sorted(pairs))
            for name, pairs in expected.items()
        }


def test_no_audit_text_crosses_the_shuffle(tmp_path):
    """The audit lines wait in per-bundle files: the local runner holds a GroupByKey's input in
    the launcher, where the dropped documents' text grew it with the input. What enters
    WriteRejects' GroupByKey, encoded, holds none of the text of the records written."""
    from apache_beam import coders

    from tests.helpers.text_in_shuffles import FindText, snippets_of

    records = dropped_records() + [parts_removed_audit("2701-0.txt")]
    snippets = snippets_of(records)
    assert snippets
    pipeline = beam.Pipeline()
    source = pipeline | beam.Create(records)
    _ = source | "WriteRejects" >> WriteRejects(str(tmp_path), 2)
    entering = [("input", source)]

    class Inputs(beam.pipeline.PipelineVisitor):
        def visit_transform(self, applied):
            label = applied.full_label
            if label.startswith("WriteRejects/") and isinstance(applied.transform, beam.GroupByKey):
                entering.append((label, applied.inputs[0]))

    pipeline.visit(Inputs())
    assert "WriteRejects/GroupByFile" in [label for label, _ in entering]
    for i, (stage, pcoll) in enumerate(entering):
        coder = coders.registry.get_coder(pcoll.element_type)
        _ = pcoll | f"FindText{i}" >> beam.ParDo(FindText(stage, coder, snippets))
    result = pipeline.run()
    result.wait_until_finish()
    counts = {
        c.key.metric.name: c.committed
        for c in result.metrics().query()["counters"]
        if c.key.metric.namespace == "no_text"
    }
    assert counts["input:text"] == counts["input:checked"] == len(records)
    assert counts["WriteRejects/GroupByFile:checked"] > 0
    leaks = {stage: counts.get(f"{stage}:text", 0) for stage, _ in entering[1:]}
    assert leaks == dict.fromkeys(leaks, 0)
    assert len(list((tmp_path / REJECTS_DIR).iterdir())) >= 2
