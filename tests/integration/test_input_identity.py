"""An input is the file itself, not how it is spelled: one file named several ways (or through
--input and --input-list at once) is read once; a folder linked into an input folder is read,
a link that loops is refused by name; a file name that is not UTF-8 is read and named with its
bytes escaped. All on the shared web text and books."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.inputs import match_patterns
from pipelines.preprocess import main
from tests.conftest import REPO
from tests.helpers.input_identity import webtext_with_a_linked_folder

CORPORA = REPO.parent / "shared" / "corpora"
WEBTEXT = CORPORA / "web" / "text" / "webtext_train_10"
BOOKS = CORPORA / "books"
GPT2 = str(CORPORA / "vocab" / "gpt2")
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _preprocess(capsys, source: str, *args: str) -> tuple[int, str]:
    code = main([f"--source={source}", f"--tokenizer={GPT2}", "--no-dedup",
                 "--progress-interval=0", *IN_PROCESS, *args])  # fmt: skip
    return code, capsys.readouterr().err


def _stats(out: Path) -> dict:
    return json.loads((out / "stats.json").read_text())


@pytest.fixture
def linked_corpus(tmp_path):
    return webtext_with_a_linked_folder(tmp_path)


def test_a_folder_linked_into_an_input_folder_is_read(linked_corpus, tmp_path, capsys):
    names = [Path(f.path).relative_to(linked_corpus).as_posix() for f in
             match_patterns(str(linked_corpus))]  # fmt: skip
    assert names == [f"linked/{i}.txt" for i in range(5, 10)] + [f"own/{i}.txt" for i in range(5)]
    # a glob with ** reaches through the link as well
    assert len(match_patterns(f"{linked_corpus}/**/*.txt")) == 10
    code, err = _preprocess(capsys, "webtext", f"--input={linked_corpus}",
                            f"--output={tmp_path / 'out'}")  # fmt: skip
    assert code == 0, err
    assert _stats(tmp_path / "out")["documents_read"] == 10


def test_a_folder_link_that_loops_is_refused_naming_the_link(linked_corpus, tmp_path, capsys):
    (linked_corpus / "own" / "up").symlink_to("..")
    code, err = _preprocess(capsys, "webtext", f"--input={linked_corpus}",
                            f"--output={tmp_path / 'out'}")  # fmt: skip
    assert code == 2
    (line,) = err.splitlines()
    assert f"{linked_corpus}/own/up -> .." in line and "a loop" in line
    assert not (tmp_path / "out").exists()


def test_one_file_spelled_many_ways_and_listed_is_read_once(tmp_path, monkeypatch, capsys):
    (tmp_path / "books" / "sub").mkdir(parents=True)
    shutil.copy(BOOKS / "pg1080.txt", tmp_path / "books" / "pg1080.txt")
    (tmp_path / "swift.txt").symlink_to(tmp_path / "books" / "pg1080.txt")
    monkeypatch.chdir(tmp_path)
    spellings = ["books/pg1080.txt", "./books/pg1080.txt", "books/sub/../pg1080.txt",
                 str(tmp_path / "books" / "pg1080.txt"), "swift.txt"]  # fmt: skip
    assert [f.path for f in match_patterns(spellings)] == ["books/pg1080.txt"]
    listing = tmp_path / "inputs.txt"
    listing.write_text("books/pg1080.txt\n")
    code, err = _preprocess(capsys, "books", "--input", *spellings, f"--input-list={listing}",
                            "--output=out")  # fmt: skip
    assert code == 0, err
    stats = _stats(tmp_path / "out")
    assert stats["documents_read"] == stats["tasks_read"] == 1
    ids = pq.read_table(tmp_path / "out" / "shard-00000-00000.meta.parquet").column("id")
    (only,) = ids.to_pylist()
    assert only.endswith("pg1080.txt")


def test_a_file_name_that_is_not_utf8_is_read_and_named_escaped(tmp_path, capsys):
    books = tmp_path / "books"
    books.mkdir()
    shutil.copy(BOOKS / "11-0.txt", books / "alice.txt")
    shutil.copy(BOOKS / "pg1080.txt", os.fsdecode(bytes(books) + b"/swift-\xff.txt"))
    out = tmp_path / "out"
    code, err = _preprocess(capsys, "books", f"--input={books}", f"--output={out}")
    assert code == 0, err
    assert _stats(out)["documents_read"] == 2
    table = pq.read_table(out / "shard-00000-00000.meta.parquet").to_pydict()
    assert table["id"] == ["books:alice.txt", "books:swift-\\xff.txt"]
    assert table["input"] == [f"{books}/alice.txt", f"{books}/swift-\\xff.txt"]
    assert all(t > 1000 for t in table["tokens"])


def test_a_broken_link_in_an_input_folder_is_named_not_skipped(linked_corpus, tmp_path, capsys):
    (linked_corpus / "own" / "10.txt").symlink_to(tmp_path / "moved-away.txt")
    code, err = _preprocess(capsys, "webtext", f"--input={linked_corpus}",
                            f"--output={tmp_path / 'out'}")  # fmt: skip
    assert code == 2
    (line,) = err.splitlines()
    assert f"{linked_corpus}/own/10.txt: no such file" in line
