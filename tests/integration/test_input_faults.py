"""Issue 18, pipeline inputs: a file that breaks off is counted by what was lost.

Each case runs `python -m pipelines.preprocess` (in this process, on the in-memory runner) on
real text cut or corrupted here, and checks the exit code, the one-line message, the counts in
stats.json and that nothing beside the output folder changed:

- a compressed stream cut short (gzip, bz2, zstd, xz of real book paragraphs as JSONL) fails
  the run at the default --max-failure-rate, naming the file; a higher rate accepts the loss;
- a Wikipedia dump with a control character in one title, and a crawl with a wrong
  Content-Length halfway, lose that one record, not the rest of the file;
- an --input naming a FIFO is refused before it is opened (it used to hang).
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipelines.document import Document, ReadTask
from pipelines.preprocess import main
from pipelines.sources.wikipedia import wikipedia
from pipelines.stats import DEFAULT_MAX_FAILURE_RATE
from tests.conftest import REPO
from tests.shard_fixtures import book_paragraphs

pytestmark = pytest.mark.slow  # each case is a whole preprocess run (~3 s of CPU)

CORPORA = REPO.parent / "shared" / "corpora"
GPT2 = str(CORPORA / "vocab" / "gpt2")
SIMPLEWIKI = CORPORA / "wikipedia" / "simplewiki-sample.xml.bz2"
WARC_DIR = CORPORA / "web" / "warc"

COMPRESS = {
    "gz": gzip.compress,
    "bz2": lambda data: bz2.compress(data, 1),  # 100 kB blocks: a cut keeps the first ones
    "zst": zstandard.ZstdCompressor().compress,
    "xz": lzma.compress,
}


def preprocess(capsys, inputs: Path, output: Path, source: str, *args: str):
    """(exit code, stderr, stats.json or None), checking that only `output` changed."""
    before = _tree(inputs.parent, output)
    code = main([f"--source={source}", f"--input={inputs}", f"--output={output}",
                 f"--tokenizer={GPT2}", "--progress-interval=0",
                 "--direct_running_mode=in_memory", "--direct_num_workers=1", *args])
    err = capsys.readouterr().err
    assert _tree(inputs.parent, output) == before
    assert "Traceback" not in err
    stats_path = output / "stats.json"
    return code, err, json.loads(stats_path.read_text()) if stats_path.exists() else None


def _tree(root: Path, skip: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
            if p != skip and skip not in p.parents}


def _failed_line(err: str) -> str:
    (line,) = [line for line in err.splitlines() if line.startswith("preprocess: FAILED")]
    return line


def _book_jsonl(documents: int = 400) -> bytes:
    paragraphs = book_paragraphs()[:documents]
    assert len(paragraphs) == documents
    return "".join(json.dumps({"text": p}) + "\n" for p in paragraphs).encode()


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_a_stream_cut_short_fails_the_run_naming_the_file(tmp_path: Path, capsys, suffix: str):
    data = COMPRESS[suffix](_book_jsonl())
    inputs = tmp_path / "in"
    inputs.mkdir()
    cut = inputs / f"book.jsonl.{suffix}"
    cut.write_bytes(data[: len(data) // 2] if suffix != "zst" else data[:-20])
    code, err, stats = preprocess(capsys, cut, tmp_path / "out", "jsonl")
    assert code == 1
    line = _failed_line(err)
    assert str(cut) in line and "broke off" in line and "truncated_input" in line
    assert stats["status"] == "failed"
    assert stats["failed"] == {"truncated_input": 1}
    # a record count alone would pass: one failure among hundreds of documents
    assert stats["failure_rate"] < DEFAULT_MAX_FAILURE_RATE
    size = cut.stat().st_size
    assert stats["input_bytes"] == stats["input_bytes_lost"] == size
    assert stats["files_broken_off"] == [
        {"file": str(cut), "reason": "truncated_input", "bytes_lost": size}]
    assert stats["failed_by_file"] == [{"file": str(cut), "reason": "truncated_input", "records": 1}]


def test_max_failure_rate_accepts_a_cut_file_and_stats_still_say_so(tmp_path: Path, capsys):
    whole = gzip.compress(_book_jsonl())
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.jsonl.gz").write_bytes(whole)
    cut = inputs / "b.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    code, err, stats = preprocess(capsys, inputs, tmp_path / "out", "jsonl",
                                  "--max-failure-rate=0.5")
    assert code == 0, err
    assert stats["status"] == "ok"
    assert stats["input_bytes"] == len(whole) + cut.stat().st_size
    assert stats["input_bytes_lost"] == cut.stat().st_size
    assert stats["input_loss_rate"] == pytest.approx(cut.stat().st_size / stats["input_bytes"])
    assert [f["file"] for f in stats["files_broken_off"]] == [str(cut)]


def test_corrupt_data_halfway_counts_the_bytes_after_it(tmp_path: Path, capsys):
    data = bytearray(gzip.compress(_book_jsonl()))
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    inputs = tmp_path / "in"
    inputs.mkdir()
    path = inputs / "book.jsonl.gz"
    path.write_bytes(bytes(data))
    code, err, stats = preprocess(capsys, path, tmp_path / "out", "jsonl")
    assert code == 1 and "corrupt_input" in _failed_line(err)
    # counted from the 64 kB chunk in which zlib found the fault (zeros can decode for a while
    # before an invalid code shows), not the whole file
    (broken,) = stats["files_broken_off"]
    assert broken["reason"] == "corrupt_input" and broken["file"] == str(path)
    assert 0 < stats["input_bytes_lost"] == broken["bytes_lost"] < len(data) - middle + (64 << 10)
    assert stats["input_bytes_lost"] < len(data)


def test_a_control_character_in_a_wikipedia_title_costs_one_page(tmp_path: Path, capsys):
    xml = bz2.decompress(SIMPLEWIKI.read_bytes())
    articles = [d for d in wikipedia.read(ReadTask("wikipedia", str(SIMPLEWIKI)))
                if isinstance(d, Document)]
    assert "August" in [d.title for d in articles]
    title = b"<title>August</title>"
    inputs = tmp_path / "in"
    inputs.mkdir()
    path = inputs / "simplewiki-control.xml.bz2"
    path.write_bytes(bz2.compress(xml.replace(title, b"<title>Aug\x01ust</title>")))
    # one failure in 7 records is over 1%: a real dump has thousands of pages
    code, err, stats = preprocess(capsys, path, tmp_path / "out", "wikipedia",
                                  "--max-failure-rate=0.2")
    assert code == 0, err
    assert stats["failed"] == {"malformed_xml": 1} and stats["balanced"]
    # every other article was read: the broken one counts as the failure in its place
    assert stats["read"] == len(articles) and stats["documents_read"] == len(articles) - 1
    assert stats["input_bytes_lost"] == 0 and stats["files_broken_off"] == []


def test_a_wrong_content_length_halfway_costs_one_record(tmp_path: Path, capsys):
    real = gzip.decompress((WARC_DIR / "whirlwind.warc.gz").read_bytes())
    response = real.index(b"WARC/1.0\r\nWARC-Type: response")
    length_at = real.index(b"Content-Length: ", response) + len(b"Content-Length: ")
    length = int(real[length_at : real.index(b"\r\n", length_at)])
    bad = real[:length_at] + str(length + 300).encode() + real[real.index(b"\r\n", length_at):]
    inputs = tmp_path / "in"
    inputs.mkdir()
    path = inputs / "crawl.warc.gz"
    path.write_bytes(gzip.compress(real + bad + real + real))
    # the page is no article for the web rules: every copy read drops, so the run writes nothing
    # and fails on that (not this case); its stats.json still holds the whole account
    code, err, stats = preprocess(capsys, path, tmp_path / "out", "webtext",
                                  "--max-failure-rate=0.3", "--max-drop-share=0")
    assert code == 1 and "no document was written" in _failed_line(err)
    assert stats["failed"] == {"corrupt_input": 1} and stats["balanced"]
    # whirlwind holds one page: the copies before and after the bad one are read
    assert stats["documents_read"] == 3
    assert stats["failed_by_file"] == [{"file": str(path), "reason": "corrupt_input", "records": 1}]
    assert stats["input_bytes_lost"] == 0


def test_a_corrupt_parquet_row_group_counts_its_rows_as_lost(tmp_path: Path, capsys):
    """Issue 27.1: one row group of 250 rows is corrupt among a book's paragraphs; its rows
    never reached a stage, so they count as failed records, and the run fails (it used to pass
    with one failure among the records read)."""
    paragraphs = book_paragraphs()
    inputs = tmp_path / "in"
    inputs.mkdir()
    path = inputs / "moby.parquet"
    pq.write_table(pa.table({"text": list(paragraphs)}), path, row_group_size=250)
    offset = pq.ParquetFile(path).metadata.row_group(2).column(0).data_page_offset
    data = bytearray(path.read_bytes())
    data[offset:offset + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    code, err, stats = preprocess(capsys, path, tmp_path / "out", "parquet")
    assert code == 1 and stats["status"] == "failed"
    assert stats["input_rows_lost"] == 250 and stats["failed"] == {"corrupt_input": 1}
    assert stats["failure_rate"] == pytest.approx(251 / (len(paragraphs) + 1))
    assert "250 rows the input promised were lost" in _failed_line(err)
    # the same loss is accepted when the rate allows it, and stats.json still says so
    code, _, stats = preprocess(capsys, path, tmp_path / "out2", "parquet",
                                "--max-failure-rate=0.2")
    assert code == 0 and stats["input_rows_lost"] == 250


@pytest.fixture
def damaged_model_cache(monkeypatch, tmp_path):
    """The language model's cache built under tmp_path/cache, then its widened feature table
    zeroed (same shape and dtype); the process's loaded model forgotten before and after."""
    import numpy as np

    from pipelines.clean import language

    monkeypatch.setenv(language.CACHE_ENV, str(tmp_path / "cache"))
    loaded = (language.decompressed_model, language.load_identifier, language.supported_languages)
    for function in loaded:
        function.cache_clear()
    directory = language.decompressed_model()
    table = np.load(directory / "ptc32.npy", mmap_mode="r")
    np.save(directory / "ptc32.npy", np.zeros(table.shape, table.dtype))
    for function in loaded:
        function.cache_clear()
    yield directory
    for function in loaded:
        function.cache_clear()


def test_a_damaged_language_model_cache_is_rebuilt_not_trusted(tmp_path: Path, capsys,
                                                               damaged_model_cache):
    """Issue 27.2: with the cache's feature table zeroed every document used to drop as
    "language" and the run passed with an empty set; now the cache is rebuilt first."""
    inputs = tmp_path / "run" / "in"
    inputs.mkdir(parents=True)
    (inputs / "book.jsonl").write_bytes(_book_jsonl(200))
    code, err, stats = preprocess(capsys, inputs, tmp_path / "run" / "out", "jsonl")
    assert code == 0, err
    assert f"language model cache {damaged_model_cache}: ptc32.npy changed" in err
    assert stats["written"] > 150 and stats["dropped"].get("language", 0) < 5


def test_one_reason_dropping_every_document_fails_the_run(tmp_path: Path, capsys):
    """Issue 27.2: an English book run with --language=el drops all of it as "language"; that
    used to be a successful run with an empty shard set."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "book.jsonl").write_bytes(_book_jsonl(100))
    code, err, stats = preprocess(capsys, inputs, tmp_path / "out", "jsonl", "--language=el")
    assert code == 1 and stats["status"] == "failed"
    # a run that writes nothing fails on that first, naming what changes the reason
    assert _failed_line(err).endswith("no document was written: of 100 records read, 100 "
                                      "dropped as 'language' (--language, e.g. --language any)")
    # a lower bound fails a run that drops less than all (here: the too-short paragraphs)
    code, err, stats = preprocess(capsys, inputs, tmp_path / "out2", "jsonl", "--language=en",
                                  "--max-drop-share=0.0001")
    assert code == (1 if stats["dropped"] else 0)


def test_a_flood_of_unreadable_records_logs_the_first_of_each_reason_then_counts(
        tmp_path: Path, capsys):
    """Issue 27.6: a real book's JSONL with 100,000 `{}` lines appended used to log one WARNING
    per line; now the first of each reason, then a line per doubling; stats.json counts all."""
    from pipelines.reason_log import FIRST

    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "book.jsonl").write_bytes(_book_jsonl(100) + b"{}\n" * 100_000)
    code, err, stats = preprocess(capsys, inputs, tmp_path / "out", "jsonl",
                                  "--max-failure-rate=1")
    assert code == 0, err[-2000:]
    assert stats["failed"] == {"missing_text": 100_000} and stats["written"] > 0
    lines = err.splitlines()
    # per reason and logger: FIRST lines, then one per doubling up to 100,000 (13 of them)
    assert len([line for line in lines if "missing_text" in line]) <= 2 * (FIRST + 13)
    assert len(lines) < 200
    assert any("65536 records skipped as missing_text" in line for line in lines)


def test_a_fifo_input_is_refused_not_opened(tmp_path: Path, capsys):
    inputs = tmp_path / "in"
    inputs.mkdir()
    fifo = inputs / "pipe.jsonl"
    os.mkfifo(fifo)
    code, err, stats = preprocess(capsys, fifo, tmp_path / "out", "jsonl")
    assert code == 2 and stats is None
    assert err.strip().splitlines()[-1] == (
        f"preprocess: error: input {fifo} is a FIFO, not a regular file")
    assert not (tmp_path / "out").exists()
