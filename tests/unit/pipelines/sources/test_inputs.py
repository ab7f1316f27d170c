"""--input's one or more patterns and --input-list's file (pipelines/inputs.py), on the shared
books, Wikipedia dumps and Parquet made from a book: every file named is read, once; a pattern
matching nothing and a word no option takes are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.inputs import common_base, match_patterns, read_input_list
from pipelines.options import PreprocessConfig
from pipelines.sources import get_source
from pipelines.sources.file_source import task_name
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
BOOKS = CORPORA / "books"
WIKI = CORPORA / "wikipedia"
GPT2 = str(CORPORA / "vocab" / "gpt2")
ALICE, SWIFT, IRVING = (str(BOOKS / n) for n in ("11-0.txt", "pg1080.txt", "41-0.txt"))


def test_a_shell_expanded_glob_plans_the_files_and_ids_of_the_quoted_glob():
    books = get_source("books")
    quoted = {t.path: task_name(t) for t in books.plan(f"{BOOKS}/*.txt", {})}
    expanded = books.plan(sorted(quoted), {})  # what `--input books/*.txt` unquoted passes
    assert {t.path: task_name(t) for t in expanded} == quoted
    assert len(quoted) == len(list(BOOKS.glob("*.txt"))) > 2


def test_a_file_named_twice_or_by_two_patterns_is_planned_once():
    tasks = get_source("books").plan([SWIFT, IRVING, SWIFT, f"{BOOKS}/pg*.txt"], {})
    assert [t.path for t in tasks] == sorted([SWIFT, IRVING])
    # files in two folders are named from the folder holding both, so their ids differ
    assert common_base([SWIFT, f"{WIKI}/*.bz2"]) == f"{CORPORA}/"
    assert common_base(["gs://b/dumps/en/*.bz2", "gs://b/dumps/el/x.bz2"]) == "gs://b/dumps/"


def test_two_wikipedia_dumps_named_separately_are_both_planned():
    dumps = [
        str(WIKI / "simplewiki-sample.xml.bz2"),
        str(WIKI / "elwiki-pages-articles-head933.xml.bz2"),
    ]
    tasks = get_source("wikipedia").plan(dumps, {})
    assert sorted(t.path for t in tasks) == sorted(dumps)
    # a folder is every file under it, as for every source (it was planned as one "dump")
    tasks = get_source("wikipedia").plan(str(WIKI), {})
    assert sorted(t.path for t in tasks) == sorted(str(p) for p in WIKI.glob("*wiki*"))


def test_input_flags_collect_every_word_and_each_repeat():
    argv = ["--source=books", "--output=o", f"--tokenizer={GPT2}", "--input", SWIFT, IRVING,
            "--input", ALICE]  # fmt: skip
    config = PreprocessConfig.from_options(PipelineOptions(argv))
    assert config.input == (SWIFT, IRVING, ALICE)
    # from code, one pattern may be a string: never read as its characters
    assert PreprocessConfig(source="books", input=SWIFT, output="o", tokenizer="t").input == (
        SWIFT,
    )


def test_an_input_list_skips_comments_and_resolves_paths_from_its_own_folder(tmp_path, monkeypatch):
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "books").symlink_to(BOOKS)
    listing = lists / "inputs.txt"
    listing.write_text(f"# the run's books\n\n  books/pg1080.txt  \n{IRVING}\n# {ALICE}\n")
    assert read_input_list(str(listing)) == [str(lists / "books" / "pg1080.txt"), IRVING]
    listing.write_bytes(b"books/caf\xe9.txt\n")
    with pytest.raises(ValueError, match=r"^--input-list .*inputs.txt: not UTF-8 text \(byte 9\)$"):
        read_input_list(str(listing))
    listing.write_text("# nothing yet\n\n")
    with pytest.raises(ValueError, match=r"names no input \(blank or comments only\)$"):
        read_input_list(str(listing))
    listing.write_text(f"{SWIFT}\n{IRVING}\n")
    monkeypatch.setattr("pipelines.inputs.MAX_LIST_BYTES", len(SWIFT) + 4)
    with pytest.raises(ValueError, match=rf"inputs.txt: over {len(SWIFT) + 4} bytes: not a list of inputs$"):
        read_input_list(str(listing))


def test_the_url_filter_and_train_tokenizer_take_inputs_by_the_same_rule(tmp_path, capsys):
    from pipelines.sources.web.urls import main as urls_main
    from pipelines.tokenize.train_tokenizer import main as train_main

    lines = (CORPORA / "web" / "html" / "urls.txt").read_text().splitlines()
    halves = [tmp_path / "first.txt", tmp_path / "second.txt"]
    halves[0].write_text("\n".join(lines[:5]) + "\n")
    halves[1].write_text("\n".join(lines[5:]) + "\n")
    listing = tmp_path / "list.txt"
    listing.write_text("second.txt\n")
    kept = tmp_path / "kept.txt"
    assert urls_main(["--input", str(halves[0]), "--input-list", str(listing),
                      "--output", str(kept)]) == 0  # fmt: skip
    assert kept.read_text().splitlines() == sorted(set(lines), key=lines.index)
    capsys.readouterr()
    output = tmp_path / "tokenizer.json"
    argv = ["--source", "books", "--input", SWIFT, IRVING, "--vocab-size", "600",
            "--kind", "byte-level-bpe", "--output", str(output)]  # fmt: skip
    assert train_main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["documents"] == summary["tasks"] == 2


def test_url_patterns_are_matched_and_deduplicated_like_paths():
    import fsspec

    fs = fsspec.filesystem("memory")
    for name in ("a/pg1080.txt", "a/41-0.txt", "b/11-0.txt"):
        fs.pipe(f"/inputs-test/{name}", (BOOKS / Path(name).name).read_bytes())
    try:
        patterns = ["memory://inputs-test/a/*.txt", "memory://inputs-test/b/11-0.txt",
                    "memory://inputs-test/a/pg1080.txt"]  # fmt: skip
        listed = ["memory:///inputs-test/a/41-0.txt", "memory:///inputs-test/a/pg1080.txt",
                  "memory:///inputs-test/b/11-0.txt"]  # fmt: skip (fsspec's own spelling)
        assert [f.path for f in match_patterns(patterns)] == listed
        assert [t.path for t in get_source("books").plan(patterns, {})] == listed
        with pytest.raises(FileNotFoundError, match="memory://inputs-test/c/"):
            match_patterns([*patterns, "memory://inputs-test/c/*.txt"])
    finally:
        fs.rm("/inputs-test", recursive=True)
