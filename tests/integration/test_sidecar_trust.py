"""A shard set's metadata sidecar is checked against the shard's .idx, not trusted for the
manifest's hash: rows moved or with other token counts (re-hashed into the manifest) fail
`tools/dump --verify` and `--doc`; a sidecar that is a FIFO is refused before it is opened; a
sidecar that decodes to a huge title is refused (or, under the bound, printed cut). On a set
that preprocess writes from the shared web text."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dataset_format import FormatError, ShardSet
from dataset_format.sidecar import MAX_ROW_GROUP_BYTES, SHOWN_FIELD_CHARS, SidecarWriter
from pipelines.preprocess import main
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
SIDECAR = "shard-00000-00000.meta.parquet"


def dump(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "tools" / "dump"), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


# Runs tools/dump as its only child and prints the child's peak RSS (KiB) as its last line.
_PEAK = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
         "sys.exit(code)")


def dump_peak_kib(*args) -> tuple[subprocess.CompletedProcess, int]:
    done = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, str(REPO / "tools" / "dump"),
                           *map(str, args)], capture_output=True, text=True, timeout=120)  # fmt: skip
    return done, int(done.stderr.splitlines()[-1])


@pytest.fixture(scope="module")
def web_set(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("web") / "set"
    code = main(["--source=webtext", f"--tokenizer={CORPORA / 'vocab' / 'gpt2'}", "--no-dedup",
                 "--progress-interval=0", "--direct_running_mode=in_memory",
                 "--direct_num_workers=1", f"--input={CORPORA / 'web' / 'text' / 'webtext_train_10'}",
                 f"--output={out}"])  # fmt: skip
    assert code == 0
    return out


@pytest.fixture
def copy(web_set, tmp_path) -> Path:
    target = tmp_path / "set"
    shutil.copytree(web_set, target)
    return target


def _rows(directory: Path) -> list[dict]:
    return pq.read_table(directory / SIDECAR).to_pylist()


def _rewrite(directory: Path, rows: list[dict]) -> None:
    """Write `rows` as the sidecar and re-hash it into the manifest, as a careless or hostile
    editor of the set would."""
    path = directory / SIDECAR
    path.unlink()
    writer = SidecarWriter(str(path))
    for row in rows:
        writer.add(row)
    writer.finalize()
    _rehash(directory, path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())


def _rehash(directory: Path, size: int, digest: str) -> None:
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["shards"][0]["meta"].update(bytes=size, sha256=digest)
    (directory / "manifest.json").write_text(json.dumps(manifest))


def test_the_set_as_written_verifies_and_shows_each_documents_source(web_set):
    rows = _rows(web_set)
    assert len(rows) == ShardSet(str(web_set)).num_documents > 3
    assert dump(web_set, "--verify").returncode == 0
    shown = json.loads(dump(web_set, "--doc", 3, "--json").stdout)
    assert shown["metadata"]["id"] == rows[3]["id"] and shown["length"] == rows[3]["tokens"]


def test_rows_in_another_order_fail_verify_and_doc(copy):
    rows = _rows(copy)
    assert rows[0]["tokens"] != rows[1]["tokens"]
    rows[0], rows[1] = rows[1], rows[0]
    _rewrite(copy, rows)
    done = dump(copy, "--verify")
    assert done.returncode == 1
    assert "row 0 says" in done.stderr and "not the shard's documents in order" in done.stderr
    done = dump(copy, "--doc", 1)  # showed document 0's source as document 1's
    assert done.returncode == 1 and rows[0]["id"] not in done.stdout
    with pytest.raises(FormatError, match="row 0 says"):
        ShardSet(str(copy)).document_metadata(0)


def test_a_token_count_that_disagrees_with_the_index_fails_verify(copy):
    rows = _rows(copy)
    rows[-1]["tokens"] += 1
    _rewrite(copy, rows)
    done = dump(copy, "--verify")
    assert done.returncode == 1
    assert f"row {len(rows) - 1} says {rows[-1]['tokens']} tokens" in done.stderr


def test_a_row_without_its_id_fails_verify(copy):
    rows = _rows(copy)
    rows[2]["id"] = ""
    _rewrite(copy, rows)
    done = dump(copy, "--verify")
    assert done.returncode == 1 and "row 2 has no document id" in done.stderr


def test_a_sidecar_that_is_a_fifo_is_refused_before_it_is_opened(copy):
    (copy / SIDECAR).unlink()
    os.mkfifo(copy / SIDECAR)
    _rehash(copy, 0, hashlib.sha256(b"").hexdigest())  # the FIFO's size and an empty file's hash
    for args in (["--verify"], ["--doc", 0]):
        try:
            done = dump(copy, *args, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"tools/dump {' '.join(map(str, args))} blocked on the FIFO")
        assert done.returncode == 1
        assert done.stderr.strip().endswith("is a FIFO, not a regular file")


def test_a_title_that_decodes_past_the_bound_is_refused_in_bounded_memory(copy):
    rows = _rows(copy)
    rows[0]["title"] = "A" * (MAX_ROW_GROUP_BYTES + (16 << 20))
    _rewrite(copy, rows)
    del rows
    assert (copy / SIDECAR).stat().st_size < 1 << 20  # zstd: a small file
    for args in (["--doc", 0], ["--verify"]):
        done, peak = dump_peak_kib(copy, *args)
        assert done.returncode == 1, done.stdout[:300]
        assert "row group 0 decodes to" in done.stderr and len(done.stdout) < 4096
        assert peak < 300 << 10  # KiB: the title alone is 80 MiB, 1.3 GB printed before


def test_a_long_title_under_the_bound_is_printed_cut_saying_so(copy):
    rows = _rows(copy)
    rows[0]["title"] = "The " + "very " * 400_000 + "long title"
    _rewrite(copy, rows)
    assert dump(copy, "--verify").returncode == 0  # legal, if odd
    done = dump(copy, "--doc", 0, "--max-tokens", 5)
    assert done.returncode == 0
    assert len(done.stdout) < 3 * SHOWN_FIELD_CHARS
    assert "(1,999,014 more characters not shown)" in done.stdout
    assert f"(title: cut at {SHOWN_FIELD_CHARS:,} characters)" in done.stdout
    record = json.loads(dump(copy, "--doc", 0, "--json").stdout)
    assert record["metadata_cut"] == ["title"]
    assert len(record["metadata"]["title"]) < SHOWN_FIELD_CHARS + 100


def test_rows_written_as_the_pipeline_writes_them_pass(copy):
    """The check is on meaning, not on bytes: the same rows rewritten (another file, re-hashed)
    verify."""
    _rewrite(copy, _rows(copy))
    assert dump(copy, "--verify").returncode == 0
    assert pa.types.is_int64(pq.read_schema(copy / SIDECAR).field("tokens").type)


def test_foreign_token_files_that_are_fifos_are_named_as_fifos(tmp_path, web_set):
    """The converters' inputs too: a FIFO is named for what it is before it is opened (a
    nanoGPT .bin made of the real set's tokens beside it reads)."""
    import numpy as np

    from dataset_format.interop import read_llmc, read_nanogpt

    tokens = np.asarray(ShardSet(str(web_set)).document(0), dtype="<u2")
    tokens.tofile(tmp_path / "train.bin")
    assert read_nanogpt(str(tmp_path / "train.bin")).tolist() == tokens.tolist()
    os.mkfifo(tmp_path / "fifo.bin")
    for read in (read_nanogpt, read_llmc):
        with pytest.raises(FormatError, match=r"fifo.bin is a FIFO, not a regular file$"):
            read(str(tmp_path / "fifo.bin"))
