"""The --keep-rejects audit files, written by the pipeline's WriteRejects on real records: drops
(with their URL) in rejects-*.jsonl, the parts a source cut from a kept book in
parts_removed-*.jsonl with the cut text bounded."""

from __future__ import annotations

import json

from pipelines.document import PARTS_REMOVED, Failure, Reject, bucket_of
from pipelines.write import REJECTS_DIR, reject_record
from pipelines.write.rejects import PARTS_REMOVED_TEXT_CHARS, audit_file
from tests.helpers.audit_files import RUSSIAN_PAGE, dropped_records, parts_removed_audit


def test_a_parts_removed_record_keeps_the_cut_text_bounded_and_says_so():
    moby = json.loads(reject_record(parts_removed_audit("2701-0.txt"))[1])
    assert moby["kind"] == PARTS_REMOVED and moby["parts"] == "title_page 1, contents 1"
    assert moby["text"].startswith("MOBY-DICK;") and moby["truncated"]
    assert len(moby["text"]) == PARTS_REMOVED_TEXT_CHARS
    swift = json.loads(reject_record(parts_removed_audit("pg1080.txt"))[1])
    assert not swift["truncated"] and swift["text"].endswith("by Dr. Jonathan Swift\n\n1729")


def _bundle_files(records_by_bundle, output: str, num_files: int) -> dict:
    """What WriteRejects' GroupByKey hands on: each bundle's ((kind, bucket), file name)s.
    WriteRejects' DoFns are driven directly (why: the bundles a runner cuts cannot be chosen
    through the public transform, and the test needs them cut in several ways)."""
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
    their line, however the bundles that wrote them were cut (the DoFn driven directly, as in
    _bundle_files)."""
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
