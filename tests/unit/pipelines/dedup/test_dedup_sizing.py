"""The bound on documents that sizes dedup's components rounds: from the input's files before the
graph is built (preprocess's plan, python -m pipelines.dedup's Parquet footers)."""

from __future__ import annotations

import gzip
import io
import json
import logging
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.dedup.components import rounds_for
from pipelines.dedup.config import DedupConfig
from pipelines.graph import plan_run
from pipelines.io import InputFile
from pipelines.options import PreprocessConfig
from pipelines.sources import MIN_TASK_BYTES
from pipelines.sources.document_bound import (
    CLEANED_CHARS_PER_BYTE,
    count_lines,
    input_documents_bound,
    parquet_rows_bound,
    plain_text_file,
)
from pipelines.sources.transforms import MIN_EXPANSION_BOUND_BYTES
from tests.conftest import CORPORA
from tests.helpers.dedup_sizing import book_paragraphs


@pytest.fixture(scope="module")
def alice_jsonl(tmp_path_factory):
    path = tmp_path_factory.mktemp("sizing") / "alice.jsonl"
    lines = [json.dumps({"id": f"p{i}", "text": p}) for i, p in enumerate(book_paragraphs(40))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _file(path) -> InputFile:
    return InputFile(str(path), path.stat().st_size)


def test_a_plain_jsonl_is_bounded_by_its_lines_or_its_bytes(alice_jsonl, monkeypatch):
    size = alice_jsonl.stat().st_size
    assert plain_text_file(str(alice_jsonl))
    assert input_documents_bound([_file(alice_jsonl)], "jsonl", {}, 100.0, 50) == 40  # lines
    monkeypatch.setattr("pipelines.sources.document_bound.COUNT_LINES_BYTES", size - 1)  # too big to count
    bound = input_documents_bound([_file(alice_jsonl)], "jsonl", {}, 100.0, 50)
    assert bound == int(size * CLEANED_CHARS_PER_BYTE) // 50
    assert 40 <= bound < 40 * 50  # the 40 paragraphs fit under it, and it is not loose by far


def test_a_plain_book_file_is_one_document(tmp_path):
    books = sorted((CORPORA / "books").glob("*.txt"))
    files = [_file(path) for path in books]
    assert input_documents_bound(files, "books", {}, 100.0, 50) == len(books) == 8
    # A compressed book may be a tar of many: the expansion limit bounds it, as before.
    packed = tmp_path / "alice.txt.gz"
    packed.write_bytes(gzip.compress(books[0].read_bytes()))
    assert input_documents_bound([_file(packed)], "books", {}, 100.0, 50) > 10**6
    config = PreprocessConfig("books", str(CORPORA / "books"), str(tmp_path / "out"), "gpt2")
    assert plan_run(config).config.dedup_config.cc_rounds == rounds_for(8) == 6


def test_lines_are_counted_with_or_without_a_final_newline(tmp_path):
    for text, lines in (("", 0), ("{}", 1), ("{}\n", 1), ("{}\n{}", 2), ("\n\n", 2)):
        path = tmp_path / "f.jsonl"
        path.write_text(text)
        assert count_lines(str(path)) == lines, text


def test_documents_of_exactly_min_chars_stay_under_the_bound(tmp_path):
    path = tmp_path / "short.jsonl"
    texts = [f"{i:04d} " + "x" * 45 for i in range(500)]  # 50 characters each
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    assert input_documents_bound([_file(path)], "jsonl", {}, 100.0, 50) >= 500


def test_compressed_and_archived_files_are_bounded_by_the_expansion_limit(alice_jsonl, tmp_path):
    packed = tmp_path / "alice.jsonl.gz"
    packed.write_bytes(gzip.compress(alice_jsonl.read_bytes()))
    archive = tmp_path / "books.tar"
    with tarfile.open(archive, "w") as tar:
        data = gzip.compress(alice_jsonl.read_bytes())
        info = tarfile.TarInfo("alice.txt.gz")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert not plain_text_file(str(packed)) and not plain_text_file(str(archive))
    size = packed.stat().st_size
    expected = (size * 100 + MIN_EXPANSION_BOUND_BYTES * (1 + size // MIN_TASK_BYTES)) // 50
    assert input_documents_bound([_file(packed)], "jsonl", {}, 100.0, 50) == expected
    # A books tar of compressed members is no plain text either, whatever its head says.
    assert input_documents_bound([_file(archive)], "books", {}, 100.0, 50) > 10**6
    # No expansion limit, or a remote listing without sizes: no bound.
    assert input_documents_bound([_file(packed)], "jsonl", {}, 0.0, 50) is None
    remote = InputFile("gs://bucket/part-0.jsonl", 0)
    assert input_documents_bound([_file(alice_jsonl), remote], "jsonl", {}, 100.0, 50) is None


def test_a_plain_file_of_a_non_text_source_is_not_trusted(alice_jsonl):
    # Wikipedia's markup is not the file's own characters.
    assert input_documents_bound([_file(alice_jsonl)], "wikipedia", {}, 100.0, 50) > 10**6


def test_heads_are_read_only_in_small_listings(alice_jsonl, monkeypatch):
    files = [_file(alice_jsonl)] * 3
    small = input_documents_bound(files, "jsonl", {}, 100.0, 50)
    monkeypatch.setattr("pipelines.sources.document_bound.READ_LOCAL_FILES", 2)
    # Too many files to read their heads: each is bounded as if it were compressed.
    assert input_documents_bound(files, "jsonl", {}, 100.0, 50) > 10**6 > small


def test_parquet_footers_give_the_rows(tmp_path):
    for i, rows in enumerate((3, 5)):
        table = pa.table({"id": [f"d{i}-{r}" for r in range(rows)], "text": ["t"] * rows})
        pq.write_table(table, tmp_path / f"part-{i}.parquet")
    assert parquet_rows_bound(str(tmp_path / "*.parquet")) == 8
    # --source parquet in preprocess: the rows too, whatever the text's size
    parts = [_file(path) for path in sorted(tmp_path.glob("*.parquet"))]
    assert input_documents_bound(parts, "parquet", {}, 100.0, 50) == 8
    (tmp_path / "part-9.parquet").write_bytes(b"not parquet")
    assert parquet_rows_bound(str(tmp_path / "*.parquet")) is None
    with pytest.raises(FileNotFoundError):
        parquet_rows_bound(str(tmp_path / "none-*.parquet"))


def test_the_plan_sizes_the_rounds_records_and_logs_the_bound(alice_jsonl, tmp_path, caplog):
    config = PreprocessConfig("jsonl", str(alice_jsonl), str(tmp_path / "out"), "gpt2")
    with caplog.at_level(logging.DEBUG, logger="pipelines.dedup.sizing"):
        plan = plan_run(config)
    bound = input_documents_bound([_file(alice_jsonl)], "jsonl", {}, config.max_expansion, 50)
    assert plan.config.dedup_config.cc_rounds == rounds_for(bound) < 16
    assert plan.config.describe()["dedup_config"]["cc_rounds"] == rounds_for(bound)  # manifest
    lines = [r.getMessage() for r in caplog.records if r.name == "pipelines.dedup.sizing"]
    assert lines == [
        f"dedup: {rounds_for(bound)} connected-components rounds (at most {bound:,} documents "
        f"from {alice_jsonl})"
    ]
    given = PreprocessConfig(
        "jsonl", str(alice_jsonl), str(tmp_path / "out"), "gpt2",
        dedup_config=DedupConfig(cc_rounds=9),
    )  # fmt: skip
    assert plan_run(given).config.dedup_config.cc_rounds == 9
