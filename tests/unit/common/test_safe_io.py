"""common.safe_io: regular files only, whole reads under a cap, bounded JSON; every
refusal one line naming the file. Real inputs: a tokenizer and a book from ../shared/corpora."""

from __future__ import annotations

import json
import os
import socket

import pytest

from common.safe_io import (
    MAX_INT_DIGITS,
    UnsafeInputError,
    format_bytes,
    json_depth,
    load_json_capped,
    parse_json,
    read_bytes_capped,
    read_text_capped,
    require_regular_file,
)
from tests.conftest import CORPORA

BOOK = CORPORA / "books" / "11-0.txt"


def _refused(call, *fragments) -> str:
    with pytest.raises(UnsafeInputError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


@pytest.mark.timeout(30)
def test_only_regular_files_are_opened(tmp_path):
    assert require_regular_file(BOOK, "book").st_size == os.path.getsize(BOOK)
    os.symlink(BOOK, tmp_path / "link")  # a link to a regular file is that file
    assert read_bytes_capped(tmp_path / "link", "book", 1 << 30) == BOOK.read_bytes()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    os.symlink("/dev/zero", tmp_path / "zero")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        for path, kind in [
            (fifo, "a FIFO"),
            ("/dev/zero", "a character device"),
            (tmp_path / "zero", "a character device"),
            (tmp_path, "a directory"),
            (tmp_path / "sock", "a socket"),
        ]:
            _refused(lambda p=path: read_bytes_capped(p, "input", 10), f"input {path} is {kind}")
    _refused(lambda: require_regular_file(tmp_path / "nope", "input"), "nope: no such file")


def test_whole_reads_stop_at_the_cap(tmp_path):
    size = os.path.getsize(BOOK)
    assert len(read_bytes_capped(BOOK, "book", size)) == size
    _refused(lambda: read_bytes_capped(BOOK, "book", size - 1), "larger than its cap of")
    assert read_text_capped(BOOK, "book", size).startswith(BOOK.read_text(encoding="utf-8")[:50])
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    _refused(lambda: read_text_capped(tmp_path / "latin1.txt", "text", 100), "not UTF-8 (byte 3)")
    assert [format_bytes(n) for n in (512, 1536, 64 << 20, 3 << 30)] == [
        "512 bytes",
        "1.5 KiB",
        "64 MiB",
        "3 GiB",
    ]


def test_json_within_bounds_parses_like_json(tmp_path):
    tokenizer = CORPORA / "vocab" / "gpt2" / "encoder.json"  # GPT-2's vocabulary, 1 MB
    data = tokenizer.read_bytes()
    assert load_json_capped(tokenizer, "tokenizer", len(data)) == json.loads(data)
    # brackets inside strings (escaped quotes too) are text, not nesting
    assert json_depth(r'{"a": "[[[{{{\"]]]", "b": [1, [2]]}') == 3
    assert parse_json(b'{"n": ' + b"9" * MAX_INT_DIGITS + b"}", "x") == {
        "n": int("9" * MAX_INT_DIGITS)
    }


@pytest.mark.parametrize(
    "raw, fault",
    [
        (b"[" * 50_000 + b"]" * 50_000, "JSON nested 50000 deep (at most 64 allowed)"),
        (b'{"vocab_size": ' + b"1" * 5000 + b"}", "an integer of 5000 digits"),
        (b'{"a": -' + b"1" * 41 + b"}", "an integer of 42 digits"),
        (b'{"a": "\xff"}', "not UTF-8 (byte 7)"),
        (b'{"a": 1,}', "not valid JSON"),
        (b"", "not valid JSON"),
    ],
)
def test_json_past_the_bounds_is_one_line(raw, fault):
    _refused(lambda: parse_json(raw, "meta.json"), "meta.json: ", fault)
