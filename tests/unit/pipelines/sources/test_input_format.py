"""An input of another format than the source's (pipelines/sources/formats.py) is one line on the
launcher naming the file and the sources that read it, before anything is written; a file that
breaks off is logged once (where it is counted), not once by the reader and again by the stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.preprocess import main
from pipelines.sources import source_traits
from pipelines.sources.formats import _head, check_input_format, sources_reading
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
GPT2 = str(CORPORA / "vocab" / "gpt2")
BOOK = CORPORA / "books" / "pg1080.txt"
SIMPLEWIKI = CORPORA / "wikipedia" / "simplewiki-sample.xml.bz2"
PAGE = sorted((CORPORA / "web" / "html" / "html").glob("*.html.gz"))[0]
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


@pytest.mark.parametrize(
    ("source", "given", "what", "readers"),
    [
        ("books", SIMPLEWIKI, "plain-text books", "--source wikipedia reads it"),
        ("jsonl", BOOK, "JSON lines", "--source books or --source webtext reads it"),
        ("parquet", PAGE, "Parquet", "--source webtext reads it"),
        ("books", PAGE, "plain-text books", "--source webtext reads it"),
    ],
)
def test_each_format_refuses_another_and_names_its_reader(source, given, what, readers):
    with pytest.raises(ValueError) as refused:
        check_input_format(source, [str(given)])
    message = str(refused.value)
    assert message.startswith(f"{given} is not {what}, which --source {source} reads (it starts ")
    assert message.endswith(readers)


def test_the_shared_corpora_match_their_own_sources_format():
    for dump in sorted((CORPORA / "wikipedia").glob("*wiki*")):
        assert sources_reading(_head(str(dump)))[-1] == "wikipedia", dump  # webtext: any text
    for book in sorted((CORPORA / "books").glob("*.txt")):
        assert sources_reading(_head(str(book))) == ["books", "webtext"], book
    assert sources_reading(_head(str(PAGE))) == ["webtext"]
    # the multistream index beside a dump is matched by the dump's pattern: not refused
    assert source_traits("wikipedia").input_format.matches(b"602:10:AccessibleComputing\n")
    # a web crawl holds junk among its pages: its reader counts it, the launcher refuses nothing
    check_input_format("webtext", [str(CORPORA / "vocab" / "gpt2" / "gpt2.tiktoken"), str(BOOK)])


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
