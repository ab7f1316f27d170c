"""Hostile names: a file or tar member whose name is not valid UTF-8 (an old tar tool writes
Latin-1 bytes; on Linux os.listdir and tarfile hand such a byte over as a lone surrogate, which
no UTF-8 encoder accepts). The document ids built from such names must pass through dedup's
shuffles, the Parquet writer and the rejects JSON, instead of aborting the run.

The inputs are built here: a tar and a file whose names hold the Latin-1 byte 0xE9, and whose
text is a real book excerpt from ../shared/corpora/books.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.dedup.parquet import DOCUMENT_SCHEMA, document_to_row
from pipelines.document import Failure
from pipelines.sources.input_errors import printable_name
from pipelines.sources.tar_members import iter_tar_members
from pipelines.write import reject_record
from tests.helpers.dedup_names import (
    LATIN1_NAME,
    latin1_corpus,
    read_books,
    tar_with_member,
)


@pytest.fixture()
def corpus_dir(tmp_path) -> Path:
    return latin1_corpus(tmp_path / "in")


def test_printable_name_escapes_only_bytes_that_are_not_utf8():
    assert printable_name("café/naïve.txt") == "café/naïve.txt"
    assert printable_name(os.fsdecode(LATIN1_NAME)) == "caf\\xe9.txt"
    assert printable_name("a\ud800b") == "a\\ud800b"  # a lone surrogate not from a byte
    # different bytes, different names; the same bytes, the same name on every run
    assert printable_name(os.fsdecode(b"\xe8")) != printable_name(os.fsdecode(b"\xe9"))
    printable_name(os.fsdecode(b"\xff\xfe")).encode("utf-8")


def test_documents_named_from_non_utf8_names_have_writable_ids(corpus_dir):
    docs = read_books(corpus_dir)
    assert sorted(d.id for d in docs) == ["books:caf\\xe9.txt", "books:pages.tar/caf\\xe9.txt"]
    # Parquet (dedup's and the cleaned-documents format) takes them.
    table = pa.Table.from_pylist([document_to_row(d) for d in docs], schema=DOCUMENT_SCHEMA)
    assert sorted(table.column("id").to_pylist()) == sorted(d.id for d in docs)


def test_a_failure_at_a_non_utf8_member_name_writes_as_utf8_json():
    unsafe = tar_with_member(b"../" + LATIN1_NAME, b"escape attempt")
    (failure,) = iter_tar_members(io.BytesIO(unsafe), "bad.tar")
    assert isinstance(failure, Failure) and failure.reason == "unsafe_tar_member"
    assert "caf\\xe9.txt" in failure.location
    _, line = reject_record(failure)
    line.encode("utf-8")
