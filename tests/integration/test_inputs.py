"""The tests of tests/unit/pipelines/sources/test_inputs.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.document import Document
from pipelines.inputs import match_patterns
from pipelines.preprocess import main
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
BOOKS = CORPORA / "books"
GPT2 = str(CORPORA / "vocab" / "gpt2")
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
ALICE, SWIFT, IRVING = (str(BOOKS / n) for n in ("11-0.txt", "pg1080.txt", "41-0.txt"))


def _preprocess(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["--source=books", f"--tokenizer={GPT2}", "--no-dedup",
                 "--progress-interval=0", *IN_PROCESS, *args])  # fmt: skip
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_pattern_that_matches_nothing_is_named(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match=r"no input files match '.*\*\.nope'"):
        match_patterns([SWIFT, f"{BOOKS}/*.nope"])
    code, out, err = _preprocess(capsys, "--input", SWIFT, f"{BOOKS}/*.nope",
                                 f"--output={tmp_path / 'o'}")  # fmt: skip
    assert code == 2 and out == ""
    assert err == f"preprocess: error: no input files match '{BOOKS}/*.nope'\n"
    assert not (tmp_path / "o").exists()


def test_a_word_no_option_takes_is_refused(tmp_path, capsys):
    # `--output out extra`: Beam's parser dropped 'extra' without a word
    code, out, err = _preprocess(capsys, f"--input={SWIFT}", "--output", str(tmp_path / "o"),
                                 "extra")  # fmt: skip
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "preprocess: error: unexpected argument(s) 'extra': no option takes them "
        "(inputs go after --input)"
    ]
    assert not (tmp_path / "o").exists()


def test_input_and_input_list_together_read_every_book_once(tmp_path, capsys):
    listing = tmp_path / "inputs.txt"
    listing.write_text(f"{ALICE}\n{BOOKS}/pg*.txt\n")  # pg1080.txt is also named by --input
    out = tmp_path / "out"
    code, _, err = _preprocess(capsys, "--input", SWIFT, IRVING, "--input", SWIFT,
                               f"--input-list={listing}", f"--output={out}")  # fmt: skip
    assert code == 0, err
    stats = json.loads((out / "stats.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    assert stats["documents_read"] == stats["tasks_read"] == 3
    assert manifest["source"]["files"] == 3
    assert manifest["source"]["input"] == [SWIFT, IRVING, ALICE, f"{BOOKS}/pg*.txt"]


@pytest.mark.slow
def test_dedup_reads_every_parquet_input_once(tmp_path, capsys):
    from pipelines.dedup.__main__ import main as dedup_main
    from pipelines.dedup.parquet import DOCUMENT_SCHEMA, document_to_row

    paragraphs = [p for p in Path(ALICE).read_text().split("\n\n") if len(p) > 400][:12]
    files = []
    for part in range(2):
        docs = [Document(f"books:alice:{part}-{i}", "books", text)
                for i, text in enumerate(paragraphs[part * 6:(part + 1) * 6])]  # fmt: skip
        files.append(tmp_path / f"part-{part}.parquet")
        table = pa.Table.from_pylist([document_to_row(d) for d in docs], schema=DOCUMENT_SCHEMA)
        pq.write_table(table, files[-1])
    listing = tmp_path / "list.txt"
    listing.write_text("part-1.parquet\n")
    code = dedup_main(["--input", str(files[0]), str(files[1]), "--input-list", str(listing),
                       "--output", str(tmp_path / "out")])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["documents_in"] == 12
    code = dedup_main(["--input", str(files[0]), str(tmp_path / "*.nope"),
                       "--output", str(tmp_path / "o2")])  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err.endswith(
        "no input files match '" + str(tmp_path / "*.nope") + "'\n"
    )
