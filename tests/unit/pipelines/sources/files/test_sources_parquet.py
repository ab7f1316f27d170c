"""Parquet source: files written from the paragraphs of a real book (Moby-Dick) with many row
groups, planned into row-group tasks and read back in order."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.document import Document, Failure, ReadTask
from pipelines.sources import check_options, get_source
from pipelines.sources.files import parquet
from pipelines.sources.files.parquet import row_group_ranges
from tests.conftest import REPO

BOOKS = REPO.parent / "shared" / "corpora" / "books"
PARAGRAPHS = [p for p in (BOOKS / "2701-0.txt").read_text(encoding="utf-8").split("\n\n")
              if p.strip()]


def _write(path: Path, table: pa.Table, row_group_size: int = 250) -> Path:
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def _moby(path: Path) -> Path:
    urls = [f"https://www.gutenberg.org/ebooks/2701#p{i}" for i in range(len(PARAGRAPHS))]
    return _write(path, pa.table({"id": list(range(len(PARAGRAPHS))), "text": PARAGRAPHS,
                                  "url": urls}))


def _read_all(pattern: str, **options: str) -> list[Document | Failure]:
    return [item for task in parquet.plan(pattern, options) for item in parquet.read(task)]


def test_row_group_ranges() -> None:
    assert row_group_ranges([10, 10, 10, 10, 10], 20) == [(0, 2), (2, 4), (4, 5)]
    assert row_group_ranges([100, 1, 1], 50) == [(0, 1), (1, 3)]
    assert row_group_ranges([5, 5], 1000) == [(0, 2)]
    assert row_group_ranges([], 10) == []


def test_big_file_is_split_into_row_group_tasks_read_in_order(tmp_path: Path) -> None:
    path = _moby(tmp_path / "moby.parquet")
    row_groups = pq.ParquetFile(path).metadata.num_row_groups
    assert len(PARAGRAPHS) == 2804 and row_groups == 12  # row groups of 250 rows
    tasks = parquet.plan(str(path), {"task_bytes": "64KiB"})
    assert len(tasks) > 3
    assert tasks[0].start == 0 and tasks[-1].end == row_groups
    assert all(a.end == b.start for a, b in zip(tasks, tasks[1:]))
    docs = [doc for task in tasks for doc in parquet.read(task)]
    assert [d.text for d in docs] == PARAGRAPHS
    assert [d.id for d in docs] == [f"parquet:moby.parquet:{i}" for i in range(len(PARAGRAPHS))]
    assert docs[7].url == "https://www.gutenberg.org/ebooks/2701#p7"
    # a task of the middle row groups alone starts at the right row number
    middle = parquet.read(tasks[1])
    first = next(middle)
    assert first.id == f"parquet:moby.parquet:{tasks[1].start * 250}"


def test_small_file_is_one_task(tmp_path: Path) -> None:
    path = _moby(tmp_path / "moby.parquet")
    (task,) = parquet.plan(str(path), {})
    assert (task.start, task.end) == (0, 12)


def test_text_column_option_and_title(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.parquet", pa.table({"content": PARAGRAPHS[:50],
                                                    "title": ["Moby-Dick"] * 50}))
    docs = _read_all(str(path), text_column="content", batch_rows="7")
    assert [d.text for d in docs] == PARAGRAPHS[:50]
    assert docs[0].title == "Moby-Dick" and docs[0].url == ""
    (missing,) = _read_all(str(path))
    assert missing.reason == "missing_column" and "'content'" in missing.detail


def test_nulls_binary_and_non_text_values(tmp_path: Path) -> None:
    texts = [PARAGRAPHS[0], None, PARAGRAPHS[2]]
    path = _write(tmp_path / "nulls.parquet", pa.table({"text": texts}))
    out = _read_all(str(path))
    assert [type(x) for x in out] == [Document, Failure, Document]
    assert (out[1].reason, out[1].location) == ("missing_text", f"{path}:1")
    assert out[2].id == "parquet:nulls.parquet:2"

    binary = [p.encode("utf-8") for p in PARAGRAPHS[:3]] + [bytes(range(256)) * 4]
    path = _write(tmp_path / "binary.parquet", pa.table({"text": pa.array(binary, pa.binary())}))
    out = _read_all(str(path))
    assert [d.text for d in out[:3]] == PARAGRAPHS[:3]
    assert out[3].reason == "binary"

    path = _write(tmp_path / "ints.parquet", pa.table({"text": [1, 2]}))
    assert [f.reason for f in _read_all(str(path))] == ["bad_field", "bad_field"]


def test_invalid_utf8_in_a_string_column_costs_no_other_row(tmp_path: Path) -> None:
    # Built here: Moby-Dick paragraphs in a string column, one of them with a CESU-8 encoded
    # surrogate (b"\\xed\\xa0\\x80", not UTF-8) that the writer does not check.
    raw = [p.encode("utf-8") for p in PARAGRAPHS[:6]]
    raw[2] = raw[2][:40] + b"\xed\xa0\x80" + raw[2][40:]
    urls = [b"https://example.org/\xed\xa0\x80", *(b"https://example.org/%d" % i
                                                  for i in range(1, 6))]
    strings = {name: pa.array(values, pa.binary()).view(pa.string())
               for name, values in (("text", raw), ("url", urls))}
    path = _write(tmp_path / "bad-utf8.parquet", pa.table(strings))
    out = _read_all(str(path))
    assert all(isinstance(d, Document) for d in out) and len(out) == 6
    assert [d.text for d in out[3:]] == PARAGRAPHS[3:6]
    assert out[2].text.startswith(PARAGRAPHS[2][:40]) and out[2].text.encode("utf-8")
    assert out[0].url == "https://example.org/\ufffd\ufffd\ufffd"
    assert out[5].url == "https://example.org/5"


def test_text_over_the_size_limit(tmp_path: Path) -> None:
    long_text = "\n\n".join(PARAGRAPHS)
    path = _write(tmp_path / "long.parquet", pa.table({"text": [PARAGRAPHS[0], long_text]}))
    out = _read_all(str(path), max_document_bytes="100KiB")
    assert out[0].text == PARAGRAPHS[0]
    assert (out[1].reason, out[1].location) == ("too_large", f"{path}:1")


def test_corrupt_and_empty_files(tmp_path: Path) -> None:
    whole = _moby(tmp_path / "whole.parquet").read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(whole[: len(whole) // 2])
    (task,) = parquet.plan(str(cut), {})  # the footer is gone: one task that reports it
    (failure,) = parquet.read(task)
    assert (failure.reason, failure.location) == ("unreadable_file", str(cut))

    empty = _write(tmp_path / "empty.parquet", pa.table({"text": pa.array([], pa.string())}))
    assert _read_all(str(empty)) == []


def test_corrupt_page_after_good_rows(tmp_path: Path) -> None:
    path = _moby(tmp_path / "moby.parquet")
    metadata = pq.ParquetFile(path).metadata
    page_start = metadata.row_group(6).column(1).data_page_offset
    data = bytearray(path.read_bytes())
    data[page_start:page_start + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    task = ReadTask(source="parquet", path=str(path), start=0, end=12)
    out = list(parquet.read(task))
    failures = [(i, f) for i, f in enumerate(out) if isinstance(f, Failure)]
    assert [(f.reason, f.location, f.rows_lost) for _, f in failures] == [
        ("corrupt_input", f"{path}:row group 6 (rows 1500-1749)", 250)]
    # every row before the broken row group, and every row after it, still arrives
    rows = {int(d.id.rsplit(":", 1)[1]): d.text for d in out if isinstance(d, Document)}
    assert all(PARAGRAPHS[row] == text for row, text in rows.items())
    assert set(rows) == set(range(len(PARAGRAPHS))) - set(range(1500, 1750))


def _zigzag_varint(number: int) -> bytes:
    """An i64 as Thrift's compact protocol writes it (zigzag, then 7 bits a byte)."""
    value, out = number << 1, b""
    while value >= 0x80:
        out += bytes([value & 0x7F | 0x80])
        value >>= 7
    return out + bytes([value])


def test_a_footer_that_promises_more_rows_than_its_pages_hold(tmp_path: Path) -> None:
    """Row group 2's num_rows in the Thrift footer is rewritten from 250 to 300 (field 3, an i64
    after field 2: header byte 0x16); its pages still hold 250 rows, so 50 rows are lost."""
    path = _moby(tmp_path / "moby.parquet")
    data = path.read_bytes()
    footer_length = int.from_bytes(data[-8:-4], "little")
    footer_start = len(data) - 8 - footer_length
    footer = data[footer_start:-8]
    honest, lying = b"\x16" + _zigzag_varint(250), b"\x16" + _zigzag_varint(300)
    assert len(honest) == len(lying)
    for at in range(len(footer)):
        if footer[at:at + len(honest)] != honest:
            continue
        patched = footer[:at] + lying + footer[at + len(honest):]
        path.write_bytes(data[:footer_start] + patched + data[-8:])
        if pq.ParquetFile(path).metadata.row_group(2).num_rows == 300:
            break
    assert pq.ParquetFile(path).metadata.row_group(2).num_rows == 300
    out = _read_all(str(path))
    failures = [f for f in out if isinstance(f, Failure)]
    assert [(f.reason, f.location, f.rows_lost) for f in failures] == [
        ("rows_missing", f"{path}:row group 2 (rows 500-799)", 50)]
    assert [d.text for d in out if isinstance(d, Document)] == PARAGRAPHS


def test_bad_options_fail_at_plan_time(tmp_path: Path) -> None:
    path = _moby(tmp_path / "moby.parquet")
    with pytest.raises(ValueError):
        parquet.plan(str(path), {"task_bytes": "0"})
    with pytest.raises(ValueError, match="batch_rows must be a whole number, got 'many'"):
        parquet.plan(str(path), {"batch_rows": "many"})
    for bad in ({"task_bytes": "0"}, {"batch_rows": "0"}, {"max_document_bytes": "lots"}):
        with pytest.raises(ValueError):  # the launcher's check, before a run
            check_options(get_source("parquet"), bad)
