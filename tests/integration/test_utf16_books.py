"""A book in UTF-16 with a BOM is text (the readers decode it): the launcher's format check
judges it by its text, and the run reads it as the same book in UTF-8. On a shared book."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.preprocess import main
from pipelines.sources.formats import check_input_format
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
BOOK = CORPORA / "books" / "pg1080.txt"
GPT2 = str(CORPORA / "vocab" / "gpt2")
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _run(capsys, book: Path, out: Path) -> dict:
    code = main(["--source=books", f"--tokenizer={GPT2}", "--no-dedup", "--progress-interval=0",
                 *IN_PROCESS, f"--input={book}", f"--output={out}"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    stats = json.loads((out / "stats.json").read_text())
    tokens = pq.read_table(out / "shard-00000-00000.meta.parquet").column("tokens").to_pylist()
    return {"read": stats["documents_read"], "written": stats["written"], "tokens": tokens}


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be"])
def test_a_utf16_book_with_a_bom_reads_as_its_utf8_original(tmp_path, capsys, codec):
    text = BOOK.read_text(encoding="utf-8-sig")
    book = tmp_path / f"swift-{codec}.txt"
    data = text.encode(codec)
    book.write_bytes(data if codec == "utf-16" else b"\xfe\xff" + data)
    check_input_format("books", [str(book)])  # raised "is not plain-text books"
    utf8 = tmp_path / "swift.txt"
    utf8.write_text(text, encoding="utf-8")
    original = _run(capsys, utf8, tmp_path / "utf8")
    assert original["read"] == original["written"] == 1 and original["tokens"][0] > 3000
    assert _run(capsys, book, tmp_path / codec) == original
