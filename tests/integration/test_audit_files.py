"""The tests of tests/unit/pipelines/write/test_audit_files.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to

from pipelines.document import PARTS_REMOVED
from pipelines.write import REJECTS_DIR, WriteRejects
from tests.helpers.audit_files import RUSSIAN_PAGE, dropped_records, parts_removed_audit


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
