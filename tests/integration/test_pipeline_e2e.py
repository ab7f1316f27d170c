"""End to end: `python -m pipelines.preprocess` on the real sample corpora, on the FnApiRunner
in-process and multi_processing, checked against the stages' own functions called in a loop.

Every run here is a real Beam pipeline, hence `slow`.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import io
import json
import lzma
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from dataset_format import IndexedDataset, Manifest, ShardSet
from dataset_format.tokenizer import load_tokenizer
from pipelines.clean import CleanConfig, clean_document
from pipelines.document import Document
from pipelines.preprocess import main
from pipelines.sentences import split_sentences
from pipelines.sources import get_source, source_traits
from pipelines.tokenize.encode import tokenize_batch
from pipelines.write import MARKER_NAME, bucket_of
from tests.conftest import REPO

pytestmark = pytest.mark.slow

CORPORA = REPO.parent / "shared" / "corpora"
GPT2 = str(CORPORA / "vocab" / "gpt2")
BERT = str(CORPORA / "vocab" / "bert-base-uncased" / "vocab.txt")
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
TWO_PROCESSES = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


# -- helpers -------------------------------------------------------------------------------------
def preprocess(capsys, *args: str) -> tuple[int, str, str]:
    code = main([*args, "--progress-interval=0"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def set_files(directory: Path) -> dict[str, bytes]:
    """Every file of a finished set except stats.json and our marker (which record the run)."""
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if p.name not in ("stats.json", MARKER_NAME)
    }


def dump(directory: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "tools" / "dump"), str(directory), *map(str, args)],
        capture_output=True,
        text=True,
    )


def dump_verify(directory: Path) -> None:
    result = dump(directory, "--verify")
    assert result.returncode == 0, result.stdout + result.stderr


def reference(
    source: str,
    pattern: str,
    tokenizer,
    *,
    num_buckets: int,
    language: str = "en",
    min_tokens: int = 0,
    sentences: bool = False,
    eod: bool = True,
    options: dict | None = None,
):
    """What the shards must hold, from the stages' pure functions in a plain loop:
    (documents in shard order, cleaned text by id, number of records read)."""
    module = get_source(source)
    records = [r for task in module.plan(pattern, options or {}) for r in module.read(task)]
    config = CleanConfig.for_source(source_traits(source), language=language)
    cleaned = [clean_document(r, config) for r in records if isinstance(r, Document)]
    cleaned = [d for d in cleaned if isinstance(d, Document)]
    tokenized, _ = tokenize_batch(
        cleaned, tokenizer, split_sentences=sentences, append_eod=eod, min_tokens=min_tokens
    )
    order = sorted(tokenized, key=lambda d: (bucket_of(d.id, num_buckets), d.id))
    return order, {d.id: d.text for d in cleaned}, len(records)


def assert_matches_reference(out: Path, order, texts, tokenizer, shard_tokens: int, eod=True):
    shard_set = ShardSet(str(out))
    shard_set.verify()
    assert shard_set.num_documents == len(order)
    eod_id = tokenizer.special_ids["eod"]
    for i, doc in enumerate(order):
        sequences = shard_set.document_sequences(i)
        assert [s.tolist() for s in sequences] == [s.tolist() for s in doc.sequences], doc.id
        if eod:
            tokens = shard_set.document(i)
            assert tokens[-1] == eod_id
            assert tokenizer.decode(tokens[:-1]) == texts[doc.id]  # decodes to the cleaned text
    manifest = Manifest.read(str(out))
    names = [s.name for s in manifest.shards]
    assert names == sorted(names)
    for info in manifest.shards:
        assert info.tokens <= shard_tokens or info.documents == 1


def assert_sidecars_match(out: Path, order) -> dict[str, dict]:
    """Row i of the metadata sidecars (read with pyarrow, shard by shard in manifest order) is
    document i of the set: its id, token count, URL, title, language, and an input file that
    exists. Returns the rows by document id."""
    import pyarrow.parquet as pq

    manifest = Manifest.read(str(out))
    rows = []
    for info in manifest.shards:
        table = pq.read_table(out / info.meta.file)
        assert table.num_rows == info.meta.rows == info.documents
        rows += table.to_pylist()
    assert [r["id"] for r in rows] == [d.id for d in order]
    assert [r["tokens"] for r in rows] == [sum(len(s) for s in d.sequences) for d in order]
    for row, doc in zip(rows, order):
        wanted = doc.provenance
        assert (row["url"], row["title"], row["language"]) == (
            wanted.url, wanted.title, wanted.language
        ), doc.id
        assert row["language_score"] == pytest.approx(wanted.language_score, abs=1e-4)
        assert Path(row["input"]).is_file(), row
    return {r["id"]: r for r in rows}


def assert_dump_shows_books_and_verify_checks_sidecars(out: Path, tmp_path: Path) -> None:
    """tools/dump --doc on a whole book: its file and title, and a bounded preview; --verify
    on copies of the set whose sidecar lost a row (re-hashed) or a byte, or is gone."""
    shards = len(Manifest.read(str(out)).shards)
    assert f"metadata    per-document sidecar ({shards} of {shards} shards" in dump(out).stdout
    shown = dump(out, "--doc", 0)
    record = json.loads(dump(out, "--doc", 0, "--json", "--ids").stdout)
    metadata = record["metadata"]
    assert Path(metadata["input"]).name == metadata["id"].removeprefix("books:")
    assert f"input           {metadata['input']}" in shown.stdout
    assert f"title           {metadata['title']}" in shown.stdout
    assert record["length"] == metadata["tokens"] > 2000 and record["truncated"]
    assert len(record["ids"]) == record["shown"] == 200
    assert len(shown.stdout) < 3000, len(shown.stdout)  # a book's 1.5 MB is the old default
    # --hist of a few whole books: rows from the shortest to the longest, empty runs merged
    rows = [line.split() for line in dump(out, "--hist").stdout.splitlines()[1:]]
    counts = [int(row[1]) for row in rows]
    assert counts[0] > 0 and counts[-1] > 0 and sum(counts) == manifest_documents(out)
    assert all(a or b for a, b in zip(counts, counts[1:])), rows  # never two empty rows
    lengths = sorted(ShardSet(str(out)).document_lengths().tolist())
    assert rows[0][0].startswith(f"{lengths[0]}-")
    assert rows[-1][0].endswith(f"-{lengths[-1]}")

    manifest = Manifest.read(str(out))
    sidecar = manifest.shards[0].meta.file

    def broken_copy(name: str, breaks) -> Path:
        import shutil

        copy = tmp_path / name
        shutil.copytree(out, copy)
        breaks(copy / sidecar)
        return copy

    def drop_a_row(path: Path) -> None:
        import hashlib

        import pyarrow.parquet as pq

        table = pq.read_table(path)
        pq.write_table(table.slice(1), path)
        data = json.loads((path.parent / "manifest.json").read_text())
        data["shards"][0]["meta"].update(
            bytes=path.stat().st_size, sha256=hashlib.sha256(path.read_bytes()).hexdigest()
        )
        (path.parent / "manifest.json").write_text(json.dumps(data))

    def flip_a_byte(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))

    rows = manifest.shards[0].documents
    for name, breaks, fault in (
        ("row", drop_a_row, f"{rows - 1} rows, but the manifest lists {rows} and the shard "
                            f"holds {rows} documents"),
        ("byte", flip_a_byte, "checksum mismatch"),
        ("gone", Path.unlink, "metadata sidecar named in the manifest is missing"),
    ):
        result = dump(broken_copy(name, breaks), "--verify")
        assert result.returncode == 1 and f"{sidecar}: {fault}" in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    # training never reads a sidecar: the set without one still opens and serves its tokens
    assert ShardSet(str(tmp_path / "gone")).document(0).tolist() == ShardSet(str(out)).document(
        0
    ).tolist()


def manifest_documents(out: Path) -> int:
    return Manifest.read(str(out)).documents


def web_pages() -> list[dict]:
    """The article-extraction benchmark's pages: human-checked text and the page's URL."""
    path = CORPORA / "web" / "html" / "ground-truth.subset.json"
    return list(json.loads(path.read_text(encoding="utf-8")).values())


def assert_provenance_of(source: str, rows: dict[str, dict]) -> None:
    """Each source's documents map back to where they came from."""
    if source == "books":
        for doc_id, row in rows.items():
            assert Path(row["input"]).name == doc_id.removeprefix("books:")
        assert rows["books:pg1080.txt"]["title"].startswith("A Modest Proposal")
        assert rows["books:pg1080.txt"]["language"] == "en"
    elif source == "wikipedia":
        titles = {row["title"]: row for row in rows.values()}
        assert titles["April"]["input"].endswith("simplewiki-sample.xml.bz2")
        assert titles["April"]["url"] == "https://simple.wikipedia.org/wiki/April"
        assert titles["Archer (typeface)"]["input"].endswith("enwiki-articles-partial.xml")
    elif source == "webtext":
        urls = {row["url"]: row for row in rows.values() if row["url"]}
        english = {p["url"] for p in web_pages()} & {
            "https://www.space.com/jupiter-moon-europa-water-vapor-confirmed.html",
            "https://phys.org/news/2019-11-hibernating-astronauts-smaller-spacecraft.html",
        }
        assert len(english) == 2 and english <= set(urls)
        assert all(urls[u]["input"].endswith("pages.jsonl") for u in urls)
        assert set(urls) <= {p["url"] for p in web_pages()}
    else:
        assert {Path(row["input"]).name for row in rows.values()} == {
            "part-0.jsonl", "part-1.jsonl"
        }


# -- inputs --------------------------------------------------------------------------------------
def _links(directory: Path, files: list[Path]) -> str:
    directory.mkdir()
    for f in files:
        (directory / f.name).symlink_to(f)
    return str(directory / "*")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("inputs")
    books = [
        CORPORA / "books" / n for n in ("pg1080.txt", "1952-0.txt", "41-0.txt", "Candide-fr.txt")
    ]
    wiki = [
        CORPORA / "wikipedia" / "simplewiki-sample.xml.bz2",
        CORPORA / "wikipedia" / "enwiki-articles-partial.xml",
    ]
    webtext = sorted((CORPORA / "web" / "text" / "webtext_train_10").glob("*.txt"))
    # web: the WebText pages, and the article-extraction benchmark's pages with their URLs
    web = root / "web"
    web.mkdir()
    for path in webtext:
        (web / path.name).symlink_to(path)
    with open(web / "pages.jsonl", "w", encoding="utf-8") as f:
        for page in web_pages():
            f.write(json.dumps({"text": page["articleBody"], "url": page["url"]}) + "\n")
    jsonl = root / "jsonl"
    jsonl.mkdir()
    for i, group in enumerate((webtext[:5], webtext[5:])):
        with open(jsonl / f"part-{i}.jsonl", "w", encoding="utf-8") as f:
            for path in group:
                f.write(json.dumps({"text": path.read_text(encoding="utf-8")}) + "\n")
    return {
        "books": _links(root / "books", books),
        "wikipedia": _links(root / "wiki", wiki),
        "webtext": str(web / "*"),
        "jsonl": str(jsonl / "*.jsonl"),
    }


@pytest.fixture(scope="module")
def gpt2():
    return load_tokenizer(GPT2)


# -- every source, in-process and with two worker processes ---------------------------------------
BEAM_NOISE = ("apitools", "semi_persistent_directory", "Traceback")


@pytest.mark.parametrize("source", ["books", "wikipedia", "webtext", "jsonl"])
def test_source_end_to_end_in_process_and_multi_processing(source, inputs, gpt2, tmp_path, capfd):
    capsys = capfd  # file-descriptor level: the worker processes' stderr is checked too
    shard_tokens, buckets = 3000, 3
    min_tokens = 128 if source == "webtext" else 0
    args = [
        f"--source={source}",
        f"--input={inputs[source]}",
        f"--tokenizer={GPT2}",
        "--append-eod",
        "--no-dedup",
        f"--shard-tokens={shard_tokens}",
        f"--num-buckets={buckets}",
    ]
    code, report, err = preprocess(capsys, *args, f"--output={tmp_path / 'a'}", *IN_PROCESS)
    assert code == 0, err
    assert "(balanced)" in report
    order, texts, records = reference(
        source, inputs[source], gpt2, num_buckets=buckets, min_tokens=min_tokens
    )
    assert order, "the sample must leave documents to write"
    assert_matches_reference(tmp_path / "a", order, texts, gpt2, shard_tokens)
    assert_provenance_of(source, assert_sidecars_match(tmp_path / "a", order))
    dump_verify(tmp_path / "a")
    if source == "books":
        assert_dump_shows_books_and_verify_checks_sidecars(tmp_path / "a", tmp_path)
    stats = json.loads((tmp_path / "a" / "stats.json").read_text())
    assert stats["read"] == records and stats["written"] == len(order)
    assert stats["read"] == stats["written"] + stats["dropped_total"] + stats["failed_total"]
    if source == "books":
        assert stats["dropped"].get("language") == 1  # Candide is French; the default is en

    code, _, err = preprocess(capsys, *args, f"--output={tmp_path / 'b'}", *TWO_PROCESSES)
    assert code == 0, err
    assert set_files(tmp_path / "b") == set_files(tmp_path / "a")  # byte-identical
    assert not [n for n in BEAM_NOISE if n in err], err  # Beam's own warnings stay out


def test_rerun_gives_byte_identical_shards_and_dedup_drops_copies(inputs, gpt2, tmp_path, capsys):
    """Default pipeline (with dedup) on JSONL holding every document twice, run twice."""
    doubled = tmp_path / "doubled"
    doubled.mkdir()
    for path in sorted(Path(inputs["jsonl"]).parent.glob("*.jsonl")):
        for copy in ("x", "y"):
            (doubled / f"{copy}-{path.name}").write_bytes(path.read_bytes())
    args = [
        "--source=jsonl",
        f"--input={doubled}/*.jsonl",
        f"--tokenizer={GPT2}",
        "--append-eod",
        "--num-buckets=2",
        *IN_PROCESS,
    ]
    code, _, err = preprocess(capsys, *args, f"--output={tmp_path / 'first'}")
    assert code == 0, err
    first = set_files(tmp_path / "first")
    stats = json.loads((tmp_path / "first" / "stats.json").read_text())
    # A finished set is never taken apart by a plain rerun (which might then fail) ...
    code, _, err = preprocess(capsys, *args, f"--output={tmp_path / 'first'}")
    assert code == 2 and "--overwrite" in err and len(err.strip().splitlines()) == 1
    assert set_files(tmp_path / "first") == first
    # ... only by one that asks to replace it; same input, same bytes.
    code, _, err = preprocess(capsys, *args, "--overwrite", f"--output={tmp_path / 'first'}")
    assert code == 0, err
    assert set_files(tmp_path / "first") == first
    order, _, _ = reference("jsonl", f"{doubled}/*.jsonl", gpt2, num_buckets=2)
    assert stats["written"] * 2 == len(order)  # one of each pair of copies kept
    assert stats["dropped"]["exact_duplicate"] == len(order) // 2
    assert stats["balanced"]
    # --keep-rejects: every removed copy is there, and so is its cluster (who was kept instead).
    code, _, err = preprocess(capsys, *args, "--keep-rejects", f"--output={tmp_path / 'audit'}")
    assert code == 0, err
    lines = [
        json.loads(line)
        for f in sorted((tmp_path / "audit" / "rejects").glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    clusters = [r for r in lines if r["kind"] == "cluster"]
    removed = {r["id"] for r in lines if r["kind"] == "reject" and r["reason"] == "exact_duplicate"}
    assert len(removed) == len(order) // 2
    assert {c["removed_id"] for c in clusters} == removed
    assert all(c["kept_id"] < c["removed_id"] and c["jaccard"] == 1.0 for c in clusters)


def test_bert_one_sequence_per_sentence(inputs, tmp_path, capsys):
    bert = load_tokenizer(BERT)
    pattern = str(CORPORA / "books" / "pg1080.txt")
    code, _, err = preprocess(
        capsys,
        "--source=books",
        f"--input={pattern}",
        f"--output={tmp_path / 'bert'}",
        f"--tokenizer={BERT}",
        "--split-sentences",
        "--no-dedup",
        *IN_PROCESS,
    )
    assert code == 0, err
    shard_set = ShardSet(str(tmp_path / "bert"))
    assert shard_set.manifest.sequence_unit == "sentence"
    assert shard_set.manifest.tokenizer.special_ids["cls"] == 101
    order, texts, _ = reference("books", pattern, bert, num_buckets=1, sentences=True, eod=False)
    (doc,) = order
    sentences = split_sentences(texts[doc.id])
    expected = [s for s in bert.encode_batch(sentences) if len(s)]
    got = shard_set.document_sequences(0)
    assert len(got) == len(expected) > 50
    assert all(g.tolist() == e.tolist() for g, e in zip(got, expected))


# -- killed and restarted ------------------------------------------------------------------------
def test_sigkill_leaves_no_whole_looking_partial_shard_and_rerun_equals_clean_run(tmp_path, capsys):
    books = str(CORPORA / "books" / "*.txt")
    args = [
        "--source=books",
        f"--input={books}",
        f"--tokenizer={GPT2}",
        "--append-eod",
        "--no-dedup",
        "--language=any",
        "--shard-tokens=4000",
        "--num-buckets=2",
        *IN_PROCESS,
    ]
    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAYON_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "pipelines.preprocess", *args, f"--output={killed}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not list(killed.glob("shard-*.idx")):
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGKILL)  # mid-way through writing shards
    finally:
        process.wait()
    assert not (killed / "manifest.json").exists()
    code, _, err = preprocess(capsys, *args, f"--output={tmp_path / 'clean'}")
    assert code == 0, err
    whole = set_files(tmp_path / "clean")
    left = sorted(p.name for p in killed.glob("shard-*.idx"))
    # The kill lands once the first pair is renamed into place; on a fast machine the other
    # (small) pairs may all follow before it arrives, but never the manifest.
    assert 0 < len(left) <= len([n for n in whole if n.endswith(".idx")])
    for name in left:  # every pair that looks whole is whole, and is the final one
        prefix = killed / name[: -len(".idx")]
        IndexedDataset(str(prefix)).verify()
        assert (killed / name).read_bytes() == whole[name]
        assert prefix.with_suffix(".bin").read_bytes() == whole[prefix.name + ".bin"]

    code, _, err = preprocess(capsys, *args, f"--output={killed}")
    assert code == 0, err
    assert set_files(killed) == whole
    assert not (killed / "_work").exists()


def _books_run_in_two_processes(tmp_path, *flags):
    """(TMPDIR, OUTPUT, process) of `python -m pipelines.preprocess` on the shared books with two
    worker processes, started in a session of its own (so a test can signal its group)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAYON_NUM_THREADS": "1", "TMPDIR": str(temp)}
    process = subprocess.Popen(
        [sys.executable, "-m", "pipelines.preprocess", "--source=books",
         f"--input={CORPORA / 'books'}/*.txt", f"--output={out}", f"--tokenizer={GPT2}",
         "--no-dedup", "--language=any", *flags, *TWO_PROCESSES],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    return temp, out, process


@pytest.mark.parametrize(
    "signum, group, said",
    [
        (signal.SIGTERM, False, "terminated (SIGTERM)"),  # the launcher only: a job scheduler
        (signal.SIGINT, True, "interrupted"),  # every process of the group: Ctrl-C at a terminal
        (signal.SIGHUP, False, "hung up (SIGHUP)"),  # the terminal or ssh session went away
    ],
)
def test_a_stopping_signal_is_one_line_and_leaves_no_temporary_directories_or_work_area(
    tmp_path, signum, group, said
):
    temp, out, process = _books_run_in_two_processes(tmp_path, "--progress-interval=0")
    try:
        deadline = time.monotonic() + 300
        # the workers have started writing: progress files in the run's temporary directory
        while not list(temp.glob("shardsmith-run-*/progress/*.json")):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        if group:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 128 + signum, err
    lines = [line for line in err.splitlines() if not line.startswith("INFO pipelines.")]
    assert lines == [f"preprocess: {said}; no shard set was finished"], err
    assert os.listdir(temp) == []
    assert not (out / "_work").exists() and not (out / "manifest.json").exists()


@pytest.mark.parametrize("signum", [signal.SIGSTOP, signal.SIGKILL])
def test_a_stopped_or_killed_worker_ends_the_run_with_one_line(tmp_path, signum):
    """Issue 27.5 and 27.7: a SIGSTOPped worker used to freeze the run with no timeout, and a
    killed one printed three gRPC tracebacks before the failure line. The workers writing
    progress files are stopped (or killed): the run ends in one line (after --stall-timeout
    seconds without progress, naming the stage, for a stopped one), with no traceback and no
    temporary directory left."""
    temp, out, process = _books_run_in_two_processes(
        tmp_path, "--progress-interval=1", "--stall-timeout=6"
    )
    stopped: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while not stopped:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline
            for heartbeat in temp.glob("shardsmith-run-*/progress/*.json"):
                pid = int(heartbeat.name.split("-", 1)[0])
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)
                stopped.add(pid)
            time.sleep(0.02)
        started = time.monotonic()
        _, err = process.communicate(timeout=120)
        waited = time.monotonic() - started
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert process.returncode == 1, err
    failed = [line for line in err.splitlines() if line.startswith("preprocess: FAILED")]
    assert len(failed) == 1 and "Traceback" not in err, err
    if signum == signal.SIGSTOP:
        assert "no progress for" in failed[0] and "stage (--stall-timeout 6s)" in failed[0]
        assert "idle " in err  # the progress line shows the idle time against the timeout
        assert 5 < waited < 60
    assert os.listdir(temp) == []
    assert not (out / "_work").exists() and not (out / "manifest.json").exists()


def test_disk_full_at_the_final_write_is_one_line_and_stats_say_failed(
    tmp_path, capsys, monkeypatch
):
    from pipelines.output import OutputDir

    real = OutputDir.write_bytes

    def disk_full_at_manifest(out, name, data):
        if name == "manifest.json":
            raise OSError(errno.ENOSPC, "No space left on device", out.path(name))
        return real(out, name, data)

    # the storage layer every write goes through; an in-process run sees the patch
    monkeypatch.setattr(OutputDir, "write_bytes", disk_full_at_manifest)
    out = tmp_path / "out"
    code, report, err = preprocess(
        capsys,
        "--source=books",
        f"--input={CORPORA / 'books' / 'pg1080.txt'}",
        f"--output={out}",
        f"--tokenizer={GPT2}",
        "--no-dedup",
        *IN_PROCESS,
    )
    assert code == 1
    assert err.strip().splitlines()[-1] == f"preprocess: FAILED: no space left on {out}"
    assert "Traceback" not in err
    stats = json.loads((out / "stats.json").read_text())
    assert stats["status"] == "failed" and "No space left" in stats["error"]
    assert not (out / "manifest.json").exists() and not (out / "_work").exists()


# -- bad inputs ----------------------------------------------------------------------------------
def _tar_with_escape(path: Path, good_text: str) -> None:
    with tarfile.open(path, "w") as tar:
        for name, text in (("../../escape.txt", "evil " * 100), ("ok/doc.txt", good_text)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_bad_web_inputs_are_counted_not_fatal(tmp_path, capsys):
    web = sorted((CORPORA / "web" / "text" / "webtext_train_10").glob("*.txt"))
    good = web[2].read_text(encoding="utf-8")  # a long article that passes the web filters
    bad = tmp_path / "web"
    bad.mkdir()
    (bad / "good.txt").write_text(good, encoding="utf-8")
    (bad / "latin1.txt").write_bytes(web[3].read_bytes() + b"\xff\xfe broken \xc3(")
    (bad / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40)
    (bad / "empty.txt").write_bytes(b"")
    _tar_with_escape(bad / "pages.tar", web[4].read_text(encoding="utf-8"))
    records = "".join(json.dumps({"text": p.read_text(encoding="utf-8")}) + "\n" for p in web)
    packed = lzma.compress(records.encode("utf-8"))
    (bad / "cut.jsonl.xz").write_bytes(packed[: len(packed) // 2])
    out = tmp_path / "out"
    code, report, err = preprocess(
        capsys,
        "--source=webtext",
        f"--input={bad}/*",
        f"--output={out}",
        f"--tokenizer={GPT2}",
        "--append-eod",
        "--no-dedup",
        "--max-failure-rate=1",
        "--keep-rejects",
        *IN_PROCESS,
    )
    assert code == 0, err
    stats = json.loads((out / "stats.json").read_text())
    assert stats["balanced"]
    assert stats["failed"].get("binary") == 1
    assert stats["failed"].get("unsafe_tar_member") == 1
    assert stats["failed"].get("truncated_input") == 1  # the xz file cut in half
    assert stats["failed_total"] == 3
    assert stats["empty_tasks"] == 1  # the empty file: no record, but counted and logged
    # good.txt, the invalid UTF-8 file (decoded with replacement), the tar's safe member, and
    # whichever JSON lines of the cut xz file came before the cut
    assert stats["documents_read"] >= 3
    assert stats["documents_read"] == stats["written"] + stats["dropped_total"]
    assert stats["written"] >= 2
    dump_verify(out)
    lines = [
        json.loads(line)
        for f in sorted((out / "rejects").glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    assert len(lines) == stats["dropped_total"] + stats["failed_total"]
    assert any(r["kind"] == "failure" and "escape.txt" in r["location"] for r in lines)


def test_bad_wikipedia_inputs_are_counted_not_fatal(tmp_path, capsys):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    good = (CORPORA / "wikipedia" / "simplewiki-sample.xml.bz2").read_bytes()
    (dumps / "good.xml.bz2").write_bytes(good)
    (dumps / "truncated.xml.bz2").write_bytes(good[: len(good) // 2])
    xml = bz2.decompress(good).decode("utf-8")
    other = (CORPORA / "wikipedia" / "enwiki-articles-partial.xml").read_text(encoding="utf-8")
    (dumps / "malformed.xml").write_text(
        other[: len(other) * 2 // 3] + "<page><title>x</ti", encoding="utf-8"
    )
    no_text = xml.split("<page>")[0] + (
        "<page><title>Empty</title><ns>0</ns><id>99</id><revision><id>1</id>"
        '<text xml:space="preserve" /></revision></page></mediawiki>'
    )
    (dumps / "no_text.xml").write_text(no_text, encoding="utf-8")
    out = tmp_path / "out"
    code, report, err = preprocess(
        capsys,
        "--source=wikipedia",
        f"--input={dumps}/*",
        f"--output={out}",
        f"--tokenizer={GPT2}",
        "--append-eod",
        "--no-dedup",
        "--max-failure-rate=1",
        *IN_PROCESS,
    )
    assert code == 0, err
    stats = json.loads((out / "stats.json").read_text())
    assert stats["balanced"] and stats["failed_total"] == 2  # truncated + malformed
    assert set(stats["failed"]) <= {"truncated_input", "corrupt_input"}
    order, _, records = reference("wikipedia", f"{dumps}/*", load_tokenizer(GPT2), num_buckets=1)
    # the good dump's articles, and those of the malformed file before its fault
    assert stats["read"] == records and stats["written"] == len(order) > 6
    assert "wikipedia_skipped_empty=1" in report  # the page without text: a counted skip
    dump_verify(out)


def test_too_many_failures_fail_the_run_loudly(tmp_path, capsys, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where the run's temporary files go
    bad = tmp_path / "web"
    bad.mkdir()
    good = sorted((CORPORA / "web" / "text" / "webtext_train_10").glob("*.txt"))[2]
    (bad / "good.txt").write_bytes(good.read_bytes())
    for i in range(2):
        (bad / f"blob{i}.bin").write_bytes(b"\x00\x01\x02\x03" * 3000)
    out = tmp_path / "out"
    code, _, err = preprocess(
        capsys,
        "--source=webtext",
        f"--input={bad}/*",
        f"--output={out}",
        f"--tokenizer={GPT2}",
        "--no-dedup",
        *IN_PROCESS,
    )
    assert code == 1
    assert "FAILED" in err and "--max-failure-rate" in err
    stats = json.loads((out / "stats.json").read_text())
    assert stats["status"] == "failed" and stats["failed_total"] == 2
    assert not (out / "manifest.json").exists()
    assert os.listdir(temp) == [] and not (out / "_work").exists()  # nothing left behind


def test_an_input_with_no_records_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "empty.txt").write_bytes(b"")
    out = tmp_path / "out"
    code, _, err = preprocess(
        capsys,
        "--source=books",
        f"--input={tmp_path}/in/*.txt",
        f"--output={out}",
        f"--tokenizer={GPT2}",
        "--no-dedup",
        *IN_PROCESS,
    )
    assert code == 1 and "no records were read" in err
    assert not (out / "manifest.json").exists()


def _paragraphs(name: str, count: int, min_chars: int = 400) -> list[str]:
    """The first `count` paragraphs of a shared book that are at least `min_chars` long."""
    text = (CORPORA / "books" / name).read_text(encoding="utf-8-sig")
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    return [p for p in paragraphs if len(p) >= min_chars][:count]


def test_a_run_that_writes_no_document_fails_naming_the_largest_causes(tmp_path, capsys):
    # Real text that every stage drops part of: three chapter headings (too short), two French
    # paragraphs of Candide (not English), four English paragraphs of a book under a
    # --min-tokens none reaches (one of them twice: one copy is an exact duplicate). No reason
    # drops everything, so --max-drop-share passes the run; nothing is written, so it fails,
    # naming the three largest causes, largest first, each with what changes it.
    lines = (CORPORA / "books" / "11-0.txt").read_text(encoding="utf-8-sig").splitlines()
    headings = [line for line in lines if line.startswith("CHAPTER ")][:3]
    english = _paragraphs("pg1080.txt", 4)
    texts = headings + _paragraphs("Candide-fr.txt", 2) + english + english[:1]
    (tmp_path / "mixed.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8"
    )

    def run(out, *flags):
        args = [f"--input={tmp_path / 'mixed.jsonl'}", f"--output={out}", f"--tokenizer={GPT2}"]
        return preprocess(capsys, "--source=jsonl", *args, "--min-tokens=100000", *flags,
                          *IN_PROCESS)

    for number, flags in enumerate(((), ("--max-drop-share=0",))):
        out = tmp_path / f"out{number}"
        code, report, err = run(out, *flags)
        assert code == 1, err
        line = err.strip().splitlines()[-1]
        assert line == (
            "preprocess: FAILED: no document was written: of 10 records read, "
            "4 dropped as 'too_few_tokens' (--min-tokens); "
            "3 dropped as 'too_short' (the clean preset of --source: min_chars); "
            "2 dropped as 'language' (--language, e.g. --language any); "
            "and 1 more reason(s) in stats.json"
        )
        stats = json.loads((out / "stats.json").read_text())
        assert stats["status"] == "failed" and stats["dropped"] == {
            "exact_duplicate": 1, "language": 2, "too_few_tokens": 4, "too_short": 3}
        assert not (out / "manifest.json").exists()


def test_a_fifty_megabyte_document(tmp_path, gpt2, capsys):
    text = (CORPORA / "books" / "tinyshakespeare-input.txt").read_text(encoding="utf-8")
    big = tmp_path / "big"
    big.mkdir()
    (big / "huge.txt").write_text((text * 45)[:50_000_000], encoding="utf-8")
    (big / "small.txt").write_bytes((CORPORA / "books" / "pg1080.txt").read_bytes())
    out = tmp_path / "out"
    code, _, err = preprocess(
        capsys,
        "--source=books",
        f"--input={big}/*",
        f"--output={out}",
        f"--tokenizer={GPT2}",
        "--append-eod",
        "--no-dedup",
        "--shard-tokens=1000000",
        *IN_PROCESS,
    )
    assert code == 0, err
    shard_set = ShardSet(str(out))
    lengths = shard_set.document_lengths()
    assert len(lengths) == 2 and lengths.max() > 10_000_000
    big_shard = [s for s in shard_set.manifest.shards if s.tokens > 1_000_000]
    assert len(big_shard) == 1 and big_shard[0].documents == 1  # alone in its shard


# -- outputs elsewhere, progress, command-line errors --------------------------------------------
def test_fsspec_output_with_rejects(inputs, gpt2, capsys):
    url = "memory://pipeline-e2e/set"
    code, _, err = preprocess(
        capsys,
        "--source=webtext",
        f"--input={inputs['webtext']}",
        f"--output={url}",
        f"--tokenizer={GPT2}",
        "--append-eod",
        "--no-dedup",
        "--keep-rejects",
        "--num-buckets=2",
        *IN_PROCESS,
    )
    assert code == 0, err
    import fsspec

    fs = fsspec.filesystem("memory")
    stats = json.loads(fs.cat_file("/pipeline-e2e/set/stats.json"))
    shard_set = ShardSet(url)
    shard_set.verify()
    assert shard_set.num_documents == stats["written"] > 0
    rejects = [
        json.loads(line)
        for path in fs.glob("/pipeline-e2e/set/rejects/*.jsonl")
        for line in fs.cat_file(path).decode().splitlines()
    ]
    assert len(rejects) == stats["dropped_total"] > 0
    assert all(r["kind"] == "reject" and r["text"] for r in rejects)
    # a dropped web page is named by its URL: the Korean and Russian benchmark pages (not en)
    dropped_pages = {r["url"]: r for r in rejects if r["url"]}
    assert set(dropped_pages) <= {p["url"] for p in web_pages()}
    assert dropped_pages["https://gto-normativy.ru/skajrim-skorost-bega-kak-uvelichit/"][
        "reason"] == "language"
    assert any(url.startswith("http://entermedia.co.kr/") for url in dropped_pages)
    assert not fs.exists("/pipeline-e2e/set/_work")


def test_progress_lines_and_final_report(inputs, tmp_path, capsys):
    code = main(
        [
            "--source=books",
            f"--input={CORPORA / 'books' / '2701-0.txt'}",
            f"--output={tmp_path / 'out'}",
            f"--tokenizer={GPT2}",
            "--no-dedup",
            "--progress-interval=0.2",
            *IN_PROCESS,
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    progress_lines = [line for line in captured.err.splitlines() if "tasks " in line]
    assert progress_lines and "docs read" in progress_lines[-1]
    # tasks read of those planned, or read alone before any is planned: never "13/None"
    assert all(re.search(r"\] \| tasks \d+(/[1-9]\d*)? \| ", line) for line in progress_lines)
    assert "read " in captured.out and "account: read = written + dropped + failed" in captured.out
    assert "Beam metrics (namespace pipelines): " in captured.out


def test_command_line_errors_are_clear(tmp_path, capsys):
    base = ["--source=books", f"--tokenizer={GPT2}", *IN_PROCESS]
    code, _, err = preprocess(capsys, *base, "--input=/nonexistent/*.txt", f"--output={tmp_path}/o")
    assert code == 2 and "no input files match" in err
    with pytest.raises(SystemExit) as exited:  # the parser's refusal: ours with Beam's "_"
        preprocess(
            capsys,
            *base,
            f"--input={CORPORA}/books/pg1080.txt",
            f"--output={tmp_path}/o",
            "--shard_tokens=5",
        )
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "--shard_tokens: the flag is spelled --shard-tokens" in err
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    code, _, err = preprocess(
        capsys, *base, f"--input={CORPORA}/books/pg1080.txt", f"--output={tmp_path}/mine"
    )
    assert code == 2 and "notes.txt" in err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_stages_rerun_independently_through_parquet(gpt2, tmp_path, capsys):
    """clean (preprocess --write-cleaned) -> dedup alone (python -m pipelines.dedup) ->
    tokenize the deduplicated documents (preprocess --source parquet --no-dedup)."""
    from pipelines.dedup.__main__ import main as dedup_main
    from pipelines.dedup.parquet import read_parquet_documents

    books = tmp_path / "books"
    books.mkdir()
    for name in ("11-0.txt", "46-0.txt", "41-0.txt"):
        (books / name).write_bytes((CORPORA / "books" / name).read_bytes())
    (books / "zz-copy-of-alice.txt").write_bytes((CORPORA / "books" / "11-0.txt").read_bytes())
    code, _, err = preprocess(
        capsys,
        "--source=books",
        f"--input={books}/*.txt",
        f"--output={tmp_path / 'no-dedup'}",
        f"--tokenizer={GPT2}",
        "--no-dedup",
        f"--write-cleaned={tmp_path / 'cleaned' / 'docs'}",
        *IN_PROCESS,
    )
    assert code == 0, err
    cleaned = [
        doc for f in sorted((tmp_path / "cleaned").glob("docs-*.parquet"))
        for doc in read_parquet_documents(str(f))
    ]  # fmt: skip
    assert sorted(d.id for d in cleaned) == sorted(
        f"books:{n}" for n in ("11-0.txt", "46-0.txt", "41-0.txt", "zz-copy-of-alice.txt")
    )
    assert dedup_main(
        ["--input", str(tmp_path / "cleaned" / "docs-*.parquet"), "--output", str(tmp_path / "dd")]
    ) == 0
    kept = sorted(
        d.id for f in (tmp_path / "dd").glob("documents-*.parquet")
        for d in read_parquet_documents(str(f))
    )  # fmt: skip
    assert kept == ["books:11-0.txt", "books:41-0.txt", "books:46-0.txt"]
    code, _, err = preprocess(
        capsys,
        "--source=parquet",
        f"--input={tmp_path / 'dd'}/documents-*.parquet",
        f"--output={tmp_path / 'shards'}",
        f"--tokenizer={GPT2}",
        "--no-dedup",
        *IN_PROCESS,
    )
    assert code == 0, err
    shard_set = ShardSet(str(tmp_path / "shards"))
    shard_set.verify()
    assert shard_set.num_documents == 3
    texts = sorted(d.text for d in cleaned if d.id != "books:zz-copy-of-alice.txt")
    decoded = sorted(gpt2.decode(shard_set.document(i).tolist()) for i in range(3))
    assert decoded == texts
