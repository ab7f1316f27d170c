"""The tests of tests/unit/pipelines/sources/test_input_format.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

from pathlib import Path

from pipelines.preprocess import main
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
GPT2 = str(CORPORA / "vocab" / "gpt2")
BOOK = CORPORA / "books" / "pg1080.txt"
SIMPLEWIKI = CORPORA / "wikipedia" / "simplewiki-sample.xml.bz2"
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _preprocess(capsys, source: str, inputs: Path, output: Path, *args: str):
    code = main([f"--source={source}", f"--input={inputs}", f"--output={output}",
                 f"--tokenizer={GPT2}", "--progress-interval=0", *IN_PROCESS, *args])  # fmt: skip
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_book_given_to_wikipedia_is_named_with_the_sources_that_read_it(tmp_path, capsys):
    code, out, err = _preprocess(capsys, "wikipedia", BOOK, tmp_path / "out")
    assert code == 2 and out == ""
    assert err == (
        f"preprocess: error: {BOOK} is not a MediaWiki XML dump, which --source wikipedia reads "
        "(it starts b'\\xef\\xbb\\xbfThe Project Gutenberg'); --source books or --source "
        "webtext reads it\n"
    )
    assert "broke off" not in err and "--max-failure-rate" not in err
    assert not (tmp_path / "out").exists()


def test_a_dump_that_breaks_off_is_logged_once(tmp_path, capsys):
    cut = tmp_path / "in" / "simplewiki-cut.xml.bz2"
    cut.parent.mkdir()
    data = SIMPLEWIKI.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    # A whole dump beside the cut one, so that the run writes documents (a run that writes
    # none fails, whatever the failure rate allows).
    (cut.parent / "simplewiki-whole.xml.bz2").write_bytes(data)
    code, _, err = _preprocess(capsys, "wikipedia", cut.parent, tmp_path / "out",
                               "--max-failure-rate=1", "--language=any", "--no-dedup")  # fmt: skip
    assert code == 0, err
    logged = [line for line in err.splitlines()
              if line.startswith("WARNING ") and "simplewiki-cut.xml.bz2" in line]  # fmt: skip
    assert len(logged) == 1 and "truncated_input" in logged[0], logged
