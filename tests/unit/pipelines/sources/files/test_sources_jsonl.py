"""JSON-lines source on Megatron-style loose JSON built from the real WebText sample documents
(and the benchmark pages' URLs), in every supported compression, plus broken lines and files."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import pytest
import zstandard

from pipelines.document import Document, Failure, ReadTask
from pipelines.sources.files import jsonl
from tests.conftest import REPO

WEB = REPO.parent / "shared" / "corpora" / "web"
WEBTEXT_DIR = WEB / "text" / "webtext_train_10"
URLS = (WEB / "html" / "urls.txt").read_text().split()
TEXTS = [(WEBTEXT_DIR / f"{i}.txt").read_text(encoding="utf-8") for i in range(10)]
TITLES = [text.split("\n", 1)[0][:60] for text in TEXTS]
RECORDS = [{"url": u, "title": t, "text": x} for u, t, x in zip(URLS, TITLES, TEXTS)]
LINES = [json.dumps(r, ensure_ascii=False) for r in RECORDS]

COMPRESS = {
    ".jsonl": lambda data: data,
    ".json": lambda data: data,
    ".jsonl.gz": gzip.compress,
    ".jsonl.zst": lambda data: zstandard.ZstdCompressor().compress(data),
    ".jsonl.xz": lzma.compress,
    ".jsonl.bz2": bz2.compress,
}


def _write(path: Path, lines: list[str]) -> Path:
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path.write_bytes(COMPRESS["".join(path.suffixes[-2:]) if len(path.suffixes) > 1
                              else path.suffix](data))
    return path


def _offset(lines: list[str], index: int) -> int:
    """The byte offset of 0-based line `index` in the file _write makes of `lines`."""
    return sum(len(line.encode("utf-8")) + 1 for line in lines[:index])


def _read(path: Path, **options: str) -> list[Document | Failure]:
    return [item for task in jsonl.plan(str(path), options) for item in jsonl.read(task)]


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_every_compression(tmp_path: Path, suffix: str) -> None:
    path = _write(tmp_path / f"webtext{suffix}", LINES)
    docs = _read(path)
    assert [d.text for d in docs] == TEXTS
    assert [d.url for d in docs] == URLS[:10]
    assert [d.title for d in docs] == TITLES
    assert [d.id for d in docs] == [f"jsonl:webtext{suffix}@{_offset(LINES, i)}" for i in range(10)]
    assert all(d.source == "jsonl" for d in docs)


def test_several_json_keys_join_into_one_document(tmp_path: Path) -> None:
    path = _write(tmp_path / "docs.jsonl", LINES)
    docs = _read(path, json_keys="title, text")
    assert [d.text for d in docs] == [f"{t}\n\n{x}" for t, x in zip(TITLES, TEXTS)]


def test_missing_and_wrongly_typed_keys(tmp_path: Path) -> None:
    lines = [json.dumps({"title": TITLES[0]}),  # no text: only the title
             json.dumps({"body": TEXTS[1]}),  # neither key
             json.dumps({"title": None, "text": TEXTS[2]}),
             json.dumps({"title": ["a list"], "text": TEXTS[3]})]
    path = _write(tmp_path / "keys.jsonl", lines)
    out = _read(path, json_keys="title,text")
    assert isinstance(out[0], Document) and out[0].text == TITLES[0]
    assert (out[1].reason, out[1].location) == ("missing_text", f"{path}@{_offset(lines, 1)}")
    assert isinstance(out[2], Document) and out[2].text == TEXTS[2]
    assert (out[3].reason, out[3].location) == ("bad_field", f"{path}@{_offset(lines, 3)}")
    assert "'title'" in out[3].detail


def test_malformed_lines_are_failures_and_the_run_goes_on(tmp_path: Path) -> None:
    lines = LINES[:3] + ['{"text": "unterminated', "", "[1, 2]", "not json at all"] + LINES[3:]
    path = _write(tmp_path / "bad.jsonl", lines)
    out = _read(path)
    failures = [(f.reason, f.location) for f in out if isinstance(f, Failure)]
    assert failures == [("bad_json", f"{path}@{_offset(lines, i)}") for i in (3, 5, 6)]
    docs = [d for d in out if isinstance(d, Document)]
    assert [d.text for d in docs] == TEXTS
    # ids are the lines' byte offsets, the same however the file is split into read tasks
    assert docs[3].id == f"jsonl:bad.jsonl@{_offset(lines, 7)}"


# Hostile lines, built here: valid JSON syntax that Python's json cannot turn into a usable
# record. Each must cost its own line, never the lines after it.
DEEP = 100_000
HOSTILE = [
    '{"text": "a lone surrogate \\ud800 in the text"}',
    '{"text": "fine", "url": "http://x.example/\\udc00"}',  # in another field
    '{"text": "a", "meta": ' + "[" * DEEP + "]" * DEEP + "}",
    "[" * DEEP + "]" * DEEP,
    '{"text": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}",
]


def test_hostile_lines_cost_their_own_line_only(tmp_path: Path) -> None:
    lines = [LINES[0]]
    for hostile, good in zip(HOSTILE, LINES[1:]):
        lines += [hostile, good]
    # An escaped surrogate pair is one character (U+1F600): a good line.
    lines.append('{"text": "a pair \\ud83d\\ude00 is fine"}')
    path = _write(tmp_path / "hostile.jsonl", lines)
    out = _read(path)
    failures = [(f.reason, f.location) for f in out if isinstance(f, Failure)]
    assert failures == [("bad_json", f"{path}@{_offset(lines, 2 * i + 1)}")
                        for i in range(len(HOSTILE))]
    docs = [d for d in out if isinstance(d, Document)]
    assert [d.text for d in docs] == TEXTS[: len(HOSTILE) + 1] + ["a pair \U0001F600 is fine"]
    assert all((d.text + d.url + d.title).encode("utf-8") for d in docs)
    details = [f.detail for f in out if isinstance(f, Failure)]
    assert "U+D800" in details[0] and "U+DC00" in details[1] and "too deep" in details[2]


def test_truncated_gzip_yields_lines_before_the_cut(tmp_path: Path) -> None:
    data = gzip.compress(("\n".join(LINES * 20) + "\n").encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    out = _read(path)
    docs, last = out[:-1], out[-1]
    assert len(docs) > 20
    assert all(isinstance(d, Document) for d in docs)
    assert [d.text for d in docs] == (TEXTS * 20)[: len(docs)]
    assert (last.reason, last.location, last.lost_from) == ("truncated_input", str(path), 0)


def test_invalid_utf8_in_a_line_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"text": "caf\xe9 au lait"}\n' + LINES[0].encode() + b"\n")
    out = _read(path)
    assert out[0].text == "caf\ufffd au lait" and out[1].text == TEXTS[0]


def test_overlong_line_is_too_large(tmp_path: Path) -> None:
    path = _write(tmp_path / "long.jsonl", [LINES[4], LINES[0]])
    out = _read(path, max_document_bytes="1KiB")
    assert (out[0].reason, out[0].location) == ("too_large", f"{path}@0")
    assert out[1].text == TEXTS[0]


def test_json_array_file_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "array.json"
    path.write_text(json.dumps(RECORDS))
    (failure,) = _read(path)
    assert failure.reason == "json_array" and "one object a line" in failure.detail


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "empty.jsonl.gz").write_bytes(gzip.compress(b""))
    assert _read(tmp_path / "empty.jsonl") == []
    assert _read(tmp_path / "empty.jsonl.gz") == []


def test_bad_option_fails_at_plan_time(tmp_path: Path) -> None:
    path = _write(tmp_path / "docs.jsonl", LINES)
    with pytest.raises(ValueError, match="json_keys"):
        jsonl.plan(str(path), {"json_keys": " , "})


def test_missing_file_is_a_failure(tmp_path: Path) -> None:
    task = ReadTask(source="jsonl", path=str(tmp_path / "gone.jsonl"))
    assert [(f.reason, f.lost_from) for f in jsonl.read(task)] == [("unreadable_file", 0)]


def test_a_bad_line_costs_no_input_bytes(tmp_path: Path) -> None:
    path = _write(tmp_path / "docs.jsonl", [LINES[0], "{broken", LINES[1]])
    out = list(jsonl.read(ReadTask(source="jsonl", path=str(path))))
    assert [type(x).__name__ for x in out] == ["Document", "Failure", "Document"]
    assert out[1].lost_from is None  # one line; reading went on
