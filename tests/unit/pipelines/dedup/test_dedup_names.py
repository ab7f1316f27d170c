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
import tarfile
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from pipelines.dedup import DedupConfig, Deduplicate
from pipelines.dedup.parquet import DOCUMENT_SCHEMA, document_to_row
from pipelines.document import Failure
from pipelines.sources.books import books
from pipelines.sources.input_errors import printable_name
from pipelines.sources.tar_members import iter_tar_members
from pipelines.write import reject_record
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
LATIN1_NAME = b"caf\xe9.txt"  # "café.txt" in Latin-1: not UTF-8


def _book_text() -> bytes:
    text = (CORPORA / "books" / "11-0.txt").read_text(encoding="utf-8-sig")
    return text[20_000:26_000].encode("utf-8")


def _tar_with_member(name: bytes, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tar:
        info = tarfile.TarInfo(name.decode("latin-1"))
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture()
def corpus_dir(tmp_path) -> Path:
    """in/pages.tar holding caf\\xe9.txt, and in/caf\\xe9.txt itself: the same book text."""
    directory = tmp_path / "in"
    directory.mkdir()
    text = _book_text()
    (directory / "pages.tar").write_bytes(_tar_with_member(LATIN1_NAME, text))
    with open(os.fsencode(directory) + b"/" + LATIN1_NAME, "wb") as f:
        f.write(text)
    return directory


def _read_books(directory: Path) -> list:
    return [d for task in books.plan(str(directory), {}) for d in books.read(task)]


def test_printable_name_escapes_only_bytes_that_are_not_utf8():
    assert printable_name("café/naïve.txt") == "café/naïve.txt"
    assert printable_name(os.fsdecode(LATIN1_NAME)) == "caf\\xe9.txt"
    assert printable_name("a\ud800b") == "a\\ud800b"  # a lone surrogate not from a byte
    # different bytes, different names; the same bytes, the same name on every run
    assert printable_name(os.fsdecode(b"\xe8")) != printable_name(os.fsdecode(b"\xe9"))
    printable_name(os.fsdecode(b"\xff\xfe")).encode("utf-8")


def test_documents_named_from_non_utf8_names_have_writable_ids(corpus_dir):
    docs = _read_books(corpus_dir)
    assert sorted(d.id for d in docs) == ["books:caf\\xe9.txt", "books:pages.tar/caf\\xe9.txt"]
    # Parquet (dedup's and the cleaned-documents format) takes them.
    table = pa.Table.from_pylist([document_to_row(d) for d in docs], schema=DOCUMENT_SCHEMA)
    assert sorted(table.column("id").to_pylist()) == sorted(d.id for d in docs)


def test_a_failure_at_a_non_utf8_member_name_writes_as_utf8_json():
    unsafe = _tar_with_member(b"../" + LATIN1_NAME, b"escape attempt")
    (failure,) = iter_tar_members(io.BytesIO(unsafe), "bad.tar")
    assert isinstance(failure, Failure) and failure.reason == "unsafe_tar_member"
    assert "caf\\xe9.txt" in failure.location
    _, line = reject_record(failure)
    line.encode("utf-8")


@pytest.mark.slow
def test_non_utf8_names_pass_through_dedup(corpus_dir, tmp_path):
    docs = _read_books(corpus_dir)
    options = PipelineOptions(["--runner", "DirectRunner"])
    with beam.Pipeline(options=options) as p:
        result = p | beam.Create(docs) | Deduplicate(DedupConfig(), str(tmp_path))
        # The two documents hold the same text: the smaller id is kept, the other rejected.
        kept = result.main | "KeptIds" >> beam.Map(lambda d: d.id)
        assert_that(kept, equal_to(["books:caf\\xe9.txt"]), label="Kept")
        rejects = result["rejects"] | "RejectJson" >> beam.Map(
            lambda r: (r.doc_id, r.reason, reject_record(r)[1].encode("utf-8") != b"")
        )
        assert_that(
            rejects,
            equal_to([("books:pages.tar/caf\\xe9.txt", "exact_duplicate", True)]),
            label="Rejected",
        )
