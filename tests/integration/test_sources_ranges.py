"""The tests of tests/unit/pipelines/sources/test_sources_ranges.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import json

import pytest

from pipelines.sources.files import jsonl
from tests.helpers.sources_ranges import (
    CORPORA,
    _texts,
    as_read_stage_yields,
    read_all,
    write_jsonl,
)


@pytest.mark.slow
def test_the_pipeline_reads_one_big_jsonl_file_with_several_tasks(tmp_path):
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that, equal_to

    from pipelines.sources.transforms import ReadSource
    from pipelines.stats import MergeCounts

    path = write_jsonl(tmp_path / "owt.jsonl", _texts())
    expected, _ = read_all(jsonl, str(path))
    expected = [as_read_stage_yields(record, str(path)) for record in expected]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        read = p | ReadSource("jsonl", str(tmp_path / "*.jsonl"), {"task_bytes": "4KiB"})
        assert_that(read["documents"], equal_to(expected), label="documents")
        counts = read["counts"] | beam.CombineGlobally(MergeCounts())
        assert_that(
            counts | beam.Map(lambda c: (c["files_planned"], c["tasks_planned"] > 3,
                                         c["tasks_read"] == c["tasks_planned"])),
            equal_to([(1, True, True)]), label="tasks")


@pytest.mark.slow
def test_the_same_shards_whatever_the_task_count(tmp_path, capsys):
    from pipelines.preprocess import main

    (tmp_path / "in").mkdir()
    path = write_jsonl(tmp_path / "in" / "owt.jsonl", _texts() * 3)
    outputs = {}
    for label, options in (("default", []), ("small", ["--source-option=task_bytes=4KiB"])):
        outputs[label] = tmp_path / label
        code = main(["--source=jsonl", f"--input={path}", f"--output={outputs[label]}",
                     f"--tokenizer={CORPORA / 'vocab' / 'gpt2'}", "--append-eod", "--no-dedup",
                     "--language=any", "--progress-interval=0", "--num-buckets=2",
                     "--shard-tokens=2000", *options])
        assert code == 0, capsys.readouterr().err
    stats = {label: json.loads((out / "stats.json").read_text()) for label, out in outputs.items()}
    assert stats["default"]["tasks_read"] == 1 and stats["small"]["tasks_read"] > 10
    assert stats["small"]["empty_tasks"] == 0  # a range no line starts in is no empty input
    shards = {label: {p.name: p.read_bytes() for p in sorted(out.glob("shard-*"))}
              for label, out in outputs.items()}
    assert len(shards["default"]) > 2 and shards["small"] == shards["default"]
