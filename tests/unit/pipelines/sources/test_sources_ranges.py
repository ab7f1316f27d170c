"""Splitting one big file into read tasks: line-aligned byte ranges of JSONL, member ranges of an
uncompressed tar. Inputs are built from the real samples: the WebText documents, French
(Candide: 2-byte UTF-8) and Greek Wikipedia text (2-byte UTF-8, and 3-byte punctuation), and
the Gutenberg books."""

from __future__ import annotations

import dataclasses
import gzip
import io
import logging
import tarfile
from pathlib import Path

import pytest

from pipelines.document import Document, Failure
from pipelines.sources.books import books
from pipelines.sources.files import jsonl
from pipelines.sources.ranges import (
    RANGE_LINES,
    RANGE_OPTION,
    RANGE_TAR,
    byte_ranges,
    iter_range_lines,
)
from tests.helpers.sources_ranges import (
    CORPORA,
    _texts,
    as_read_stage_yields,
    read_all,
    write_jsonl,
)


def test_byte_ranges_cover_the_file_once():
    assert byte_ranges(10, 4) == [(0, 4), (4, 8), (8, -1)]
    assert byte_ranges(8, 4) == [(0, 4), (4, -1)]
    assert byte_ranges(0, 4) == [(0, -1)]


@pytest.mark.parametrize("range_bytes", [1, 2, 3, 5, 64, 1000, 4096])
def test_range_lines_read_every_line_exactly_once(range_bytes):
    texts = _texts()
    data = "".join(t.replace("\n", " ") + "\n" for t in texts[-6:]).encode("utf-8")
    data += "last line without a newline: Ελληνικά".encode()
    lines = []
    for start, end in byte_ranges(len(data), range_bytes):
        lines += list(iter_range_lines(io.BytesIO(data), start, end, limit=1 << 20))
    whole = list(iter_range_lines(io.BytesIO(data), 0, -1, limit=1 << 20))
    assert lines == whole
    assert [line for _, line in whole] == data.split(b"\n")
    assert all(data[offset:].startswith(line) for offset, line in whole)


def test_a_big_jsonl_file_is_read_by_several_tasks_with_the_same_documents(tmp_path):
    texts = _texts()
    path = write_jsonl(tmp_path / "owt.jsonl", texts, bad_line=3)
    whole, whole_tasks = read_all(jsonl, str(path))
    assert whole_tasks == 1
    docs = [r for r in whole if isinstance(r, Document)]
    assert [d.text for d in docs] == texts  # the 10 KB Greek line included
    for range_bytes in ("1000", "4KiB", "5555"):
        split, tasks = read_all(jsonl, str(path), task_bytes=range_bytes)
        assert tasks >= 3
        assert split == whole  # same ids, same texts, same failure, each exactly once
    (bad,) = [r for r in whole if isinstance(r, Failure)]
    assert bad.reason == "bad_json" and bad.location.startswith(f"{path}@")
    offset = int(bad.location.rsplit("@", 1)[1])
    assert path.read_bytes()[offset:].startswith(b'{"text": "no closing brace"')
    assert docs[0].id == "jsonl:owt.jsonl@0"


def test_a_compressed_jsonl_file_is_one_task_and_the_log_says_so(tmp_path, caplog):
    texts = _texts()
    plain = write_jsonl(tmp_path / "owt.jsonl", texts)
    packed = tmp_path / "owt.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    with caplog.at_level(logging.INFO, logger="pipelines.sources.ranges"):
        records, tasks = read_all(jsonl, str(packed), task_bytes="1000")
    assert tasks == 1 and "one gzip stream" in caplog.text
    # the same ids as the uncompressed file's: offsets count decompressed bytes
    plain_records, _ = read_all(jsonl, str(plain), task_bytes="1000")
    assert [d.id.replace(".gz", "") for d in records] == [d.id for d in plain_records]


def _tar(path: Path, names: list[str], **tar_options) -> Path:
    with tarfile.open(path, "w", **tar_options) as archive:
        for name in names:
            archive.add(CORPORA / "books" / name, arcname=f"books/{name}")
    return path


BOOKS = ["11-0.txt", "1952-0.txt", "41-0.txt", "46-0.txt", "Candide-fr.txt", "pg1080.txt"]


def test_an_uncompressed_tar_is_read_as_member_ranges(tmp_path):
    path = _tar(tmp_path / "books.tar", BOOKS)
    whole, whole_tasks = read_all(books, str(path))
    assert whole_tasks == 1 and len(whole) == len(BOOKS)
    split, tasks = read_all(books, str(path), task_bytes="100KB")
    assert tasks >= 3
    assert split == whole
    task_options = [t.options.get(RANGE_OPTION) for t in
                    books.split(books.plan(str(path), {"task_bytes": "100KB"})[0])]
    assert set(task_options) == {RANGE_TAR}


def test_a_cut_tar_still_reports_its_truncation_when_split(tmp_path):
    path = _tar(tmp_path / "books.tar", BOOKS)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 30_000])  # inside the last member
    split, tasks = read_all(books, str(path), task_bytes="100KB")
    assert tasks >= 3
    failures = [r for r in split if isinstance(r, Failure)]
    assert [f.reason for f in failures] == ["truncated_input"]
    assert len(split) == len(BOOKS)  # every whole book, and one failure for the cut one


def test_tars_that_cannot_be_split_are_one_task(tmp_path, caplog):
    pax = _tar(tmp_path / "global.tar", BOOKS, format=tarfile.PAX_FORMAT,
               pax_headers={"comment": "applies to every member"})
    assert len(read_all(books, str(pax), task_bytes="100KB")[0]) == len(BOOKS)
    assert read_all(books, str(pax), task_bytes="100KB")[1] == 1
    packed = tmp_path / "books.tar.gz"
    packed.write_bytes(gzip.compress(_tar(tmp_path / "b.tar", BOOKS).read_bytes()))
    with caplog.at_level(logging.INFO, logger="pipelines.sources.ranges"):
        records, tasks = read_all(books, str(packed), task_bytes="100KB")
    assert tasks == 1 and len(records) == len(BOOKS) and "one gzip stream" in caplog.text


def test_a_big_plain_book_is_one_task(tmp_path, caplog):
    path = tmp_path / "moby.txt"
    path.write_bytes((CORPORA / "books" / "2701-0.txt").read_bytes())
    with caplog.at_level(logging.INFO, logger="pipelines.sources.ranges"):
        records, tasks = read_all(books, str(path), task_bytes="100KB")
    assert tasks == 1 and len(records) == 1 and "one document" in caplog.text


def test_a_big_wikipedia_dump_without_an_index_is_one_task_and_the_log_says_so(tmp_path, caplog):
    from pipelines.sources.wikipedia import wikipedia

    dump = tmp_path / "elwiki-20230501-pages-articles.xml.bz2"
    dump.write_bytes((CORPORA / "wikipedia" / "elwiki-pages-articles-head933.xml.bz2").read_bytes())
    with caplog.at_level(logging.INFO, logger="pipelines.sources.wikipedia.wikipedia"):
        tasks = wikipedia.plan(str(dump), {"wiki_task_mb": "0.5"})
    assert len(tasks) == 1 and "no multistream index" in caplog.text
    assert "read start to end by one task (3 MB)" in caplog.text


def test_split_tasks_say_how_they_are_read(tmp_path):
    path = write_jsonl(tmp_path / "owt.jsonl", _texts())
    (task,) = jsonl.plan(str(path), {"task_bytes": "4KiB"})
    tasks = jsonl.split(task)
    assert {t.options[RANGE_OPTION] for t in tasks} == {RANGE_LINES}
    assert tasks[0].start == 0 and tasks[-1].end == -1
    assert all(a.end == b.start for a, b in zip(tasks, tasks[1:]))
    with pytest.raises(ValueError, match="task_bytes"):
        jsonl.plan(str(path), {"task_bytes": "0"})


def test_a_bad_source_option_fails_on_the_launcher(tmp_path):
    """Tasks are planned on the workers, so the launcher checks the source options itself."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.graph import plan_run
    from pipelines.options import PreprocessConfig

    path = write_jsonl(tmp_path / "owt.jsonl", _texts()[:2])
    for option, message in (("json_keys= , ", "json_keys"), ("task_bytes=0", "task_bytes")):
        argv = ["--source=jsonl", f"--input={path}", f"--output={tmp_path / 'out'}",
                "--tokenizer=gpt2", f"--source-option={option}"]
        with pytest.raises(ValueError, match=message):
            plan_run(PreprocessConfig.from_options(PipelineOptions(argv)))


# ------------------------------------------------------ input bytes (the --max-expansion bound)


def _split_tasks(module, pattern: str, **options: str) -> list:
    return [t for task in module.plan(pattern, options) for t in module.split(task)]


def _wiki_multistream(tmp_path: Path) -> Path:
    """The Greek dump (real bz2 data) as a multistream dump with an index beside it: planning
    cuts such a dump into byte ranges (the last one open-ended) without reading the index."""
    dump = tmp_path / "elwiki-20230501-pages-articles-multistream.xml.bz2"
    dump.write_bytes((CORPORA / "wikipedia" / "elwiki-pages-articles-head933.xml.bz2").read_bytes())
    (tmp_path / "elwiki-20230501-pages-articles-multistream-index.txt").write_text("")
    return dump


def _parquet(tmp_path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    paragraphs = [p for name in BOOKS for p in
                  (CORPORA / "books" / name).read_text(encoding="utf-8").split("\n\n") if p.strip()]
    path = tmp_path / "books.parquet"
    pq.write_table(pa.table({"text": paragraphs}), path, row_group_size=500)
    return path


def test_split_tasks_count_their_own_bytes_not_the_whole_file(tmp_path):
    """Each kind of split task's input bytes add up to the file (they counted the whole file
    for the last, open-ended range: N ranges got N+1 ranges' worth of --max-expansion)."""
    from pipelines.sources.files import parquet
    from pipelines.sources.transforms import task_input_bytes
    from pipelines.sources.wikipedia import wikipedia

    line_file = write_jsonl(tmp_path / "owt.jsonl", _texts())
    tar_file = _tar(tmp_path / "books.tar", BOOKS)
    wiki_dump = _wiki_multistream(tmp_path)
    cases = [
        (_split_tasks(jsonl, str(line_file), task_bytes="4KiB"), line_file),
        (_split_tasks(books, str(tar_file), task_bytes="100KB"), tar_file),
        (wikipedia.plan(str(wiki_dump), {"wiki_task_mb": "0.5"}), wiki_dump),
    ]
    for tasks, path in cases:
        assert len(tasks) >= 3 and tasks[-1].end == -1
        sizes = [task_input_bytes(task) for task in tasks]
        assert sum(sizes) == path.stat().st_size
        assert sizes[-1] == path.stat().st_size - tasks[-1].start
    # Parquet tasks count row groups, not bytes: each task's input is its row groups' stored
    # bytes (not the number of row groups), and all of them make up most of the file
    parquet_file = _parquet(tmp_path)
    tasks = parquet.plan(str(parquet_file), {"task_bytes": "200KB"})
    sizes = [task_input_bytes(task) for task in tasks]
    assert len(tasks) >= 3 and all(size > 10_000 for size in sizes)
    assert 0.9 * parquet_file.stat().st_size < sum(sizes) <= parquet_file.stat().st_size


def test_max_expansion_bounds_a_parquet_task_by_its_own_bytes(tmp_path, monkeypatch):
    """Books as Parquet expand ~2x (snappy): a bound of 10x their stored bytes never stops a
    task, while one of 10x the row-group count did."""
    from pipelines.sources import transforms
    from pipelines.sources.files import parquet

    monkeypatch.setattr(transforms, "MIN_EXPANSION_BOUND_BYTES", 1 << 10)
    tasks = parquet.plan(str(_parquet(tmp_path)), {"task_bytes": "200KB"})
    dofn = transforms.ReadDoFn("parquet", keep_failures=True, progress_dir=None,
                               max_expansion=10)
    dofn.setup()
    dofn.start_bundle()
    outputs = [output for task in tasks for output in dofn.process(task)]
    assert [o for o in outputs if hasattr(o, "tag")] == []  # no expansion_limit failure
    expected = [
        as_read_stage_yields(record, task.path) for task in tasks for record in parquet.read(task)
    ]
    assert outputs == expected


# ------------------------------------------------------------- task sizing (the launcher's)


def test_tasks_are_sized_for_the_workers_within_the_bounds():
    from pipelines.sources import MIN_TASK_BYTES, TASKS_PER_WORKER, task_size

    mib = 1 << 20
    # 4 tasks a worker where the input allows
    assert task_size(64 * mib, 2, 64 * mib) == 64 * mib // (2 * TASKS_PER_WORKER)
    # never under the minimum, whatever the worker count
    assert task_size(10 * mib, 16, 64 * mib) == MIN_TASK_BYTES
    # the source's bound stays the most a task reads: a 10 GB input on 2 workers
    assert task_size(10_000 * mib, 2, 64 * mib) == 64 * mib
    # a user's smaller bound wins over the minimum
    assert task_size(64 * mib, 2, 256 << 10) == 256 << 10


def test_sized_options_set_each_sources_own_task_option():
    from pipelines.sources import sized_read_options

    assert sized_read_options("jsonl", {"json_keys": "text"}, 40_000_000, 2) == {
        "json_keys": "text", "task_bytes": "5000000"}
    # Wikipedia's multistream ranges are sized in MB
    assert sized_read_options("wikipedia", {}, 400_000_000, 2)["wiki_task_mb"] == "50.000000"
    # an unknown worker count (a remote runner without --num_workers) keeps the user's options
    assert sized_read_options("jsonl", {"task_bytes": "1MiB"}, 40_000_000, None) == {
        "task_bytes": "1MiB"}


def test_a_40_mb_jsonl_on_two_workers_is_split_by_default(tmp_path):
    """One 30-60 MB file was one task below the 64 MiB default, so 2 workers used one core."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.graph import plan_run
    from pipelines.options import PreprocessConfig

    block = write_jsonl(tmp_path / "one.jsonl", _texts()).read_bytes()
    path = tmp_path / "big.jsonl"
    path.write_bytes(block * (40_000_000 // len(block) + 1))
    argv = ["--source=jsonl", f"--input={path}", f"--output={tmp_path / 'out'}",
            "--tokenizer=gpt2"]
    plan = plan_run(PreprocessConfig.from_options(PipelineOptions(argv)))
    assert _split_tasks(jsonl, str(path), **plan.read_options()) == _split_tasks(jsonl, str(path))
    split = _split_tasks(jsonl, str(path), **dataclasses.replace(plan, workers=2).read_options())
    assert len(split) == 8
