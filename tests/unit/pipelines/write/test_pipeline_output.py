"""What a preprocess run may do to its --output directory, and how it fails: the ownership
marker, the lock, overwriting a finished set, storage errors, the finishing step's stats.json,
spill files and their deletion, temporary directories, the read stage's expansion bound, and
which log messages a normal run shows. Inputs are built here; no Beam pipeline runs (see
test_pipeline_e2e.py for those)."""

from __future__ import annotations

import dataclasses
import errno
import io
import json
import logging
import os
import re
from pathlib import Path

import numpy as np
import pytest
import zstandard

from dataset_format import INDEX_CACHE_DIR, MANIFEST_NAME, ShardSet
from pipelines.document import ReadTask, TokenizedDocument
from pipelines.log_setup import OwnMessagesOnly, add_stderr_handler
from pipelines.preprocess import (
    RUN_TMP_PREFIX,
    failure_line,
    make_run_tmp,
    sweep_stale_run_tmps,
)
from pipelines.runner.beam_worker import STANDBY_PREFIX
from pipelines.sources import transforms
from pipelines.stats import AccountError, build_stats, check_stats
from pipelines.write import (
    MARKER_NAME,
    REJECTS_DIR,
    SPILL_DIR,
    STATS_NAME,
    WORK_DIR,
    DeleteSpillsDoFn,
    OutputDir,
    OutputError,
    ShardSetSpec,
    SpillFile,
    check_free_space,
    claim_output,
    describe_storage_error,
    finish_shard_set,
    write_bucket,
)
from tests.conftest import REPO
from tests.shard_fixtures import spill_by_hand

CORPORA = REPO.parent / "shared" / "corpora"


# -- helpers: a real (small) finished set, made with the write path's own functions -------------
def _docs(n: int) -> list[TokenizedDocument]:
    rng = np.random.default_rng(7)
    return [
        TokenizedDocument(
            f"doc:{i:03d}",
            "test",
            tuple(
                rng.integers(0, 50000, size=int(rng.integers(1, 20))).astype(np.int32)
                for _ in range(2)
            ),
            text_bytes=40,
        )
        for i in range(n)
    ]


class _Tokenizer:
    """Stands in for TokenizerRef: the finishing step needs only these facts and the bytes."""

    url = "unused"
    kind = "test"
    vocab_size = 50000
    special_ids = {"eod": 0}

    def read_json(self) -> bytes:
        return b'{"model": "test"}'


def _finished_set(output: str, run_id: str = "run-a", docs: int = 12) -> dict:
    claim = claim_output(output, run_id=run_id)
    try:
        refs = spill_by_hand(output, [_docs(docs)], 2)
        shards = [
            info
            for bucket, names in sorted(refs.items())
            for info, _ in write_bucket(bucket, names, claim.out, 10_000, "uint16")
        ]
        spec = ShardSetSpec(
            output=output,
            dtype="uint16",
            sequence_unit="document",
            max_failure_rate=0.01,
            source={"name": "test"},
            pipeline={},
            run={"run_id": run_id},
        )
        counts = {"docs_read": docs, "docs_written": docs}
        return finish_shard_set(spec, _Tokenizer(), shards, counts)
    finally:
        claim.release()


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


# -- 1. a finished set survives a rerun unless --overwrite -----------------------------------------
def test_a_finished_set_is_refused_without_overwrite_and_kept_intact(tmp_path):
    out = tmp_path / "set"
    _finished_set(str(out))
    ShardSet(str(out)).verify()
    before = _tree(out)
    with pytest.raises(OutputError, match="finished shard set; pass --overwrite"):
        claim_output(str(out), run_id="run-b")
    assert _tree(out) == before  # nothing deleted: a rerun that fails later loses nothing
    ShardSet(str(out)).verify()
    claim = claim_output(str(out), run_id="run-b", overwrite=True)
    claim.release()
    assert sorted(os.listdir(out)) == sorted([MARKER_NAME, WORK_DIR])
    assert json.loads((out / MARKER_NAME).read_text())["run_id"] == "run-b"


def test_the_trainers_index_cache_goes_with_the_set_it_was_built_from(tmp_path):
    """Training on a set writes index-cache/ into it (./dev demo does); a rerun with
    --overwrite was refused as "files its previous run did not write"."""
    out = tmp_path / "set"
    _finished_set(str(out))
    (out / INDEX_CACHE_DIR).mkdir()
    (out / INDEX_CACHE_DIR / "gpt-train-doc_idx.npy").write_bytes(b"derived")
    with pytest.raises(OutputError, match="finished shard set; pass --overwrite"):
        claim_output(str(out), run_id="run-b")
    claim_output(str(out), run_id="run-b", overwrite=True).release()
    assert sorted(os.listdir(out)) == sorted([MARKER_NAME, WORK_DIR])


def test_an_unfinished_run_of_ours_is_cleared_without_overwrite(tmp_path):
    """A killed run: our marker in "running" state, shards and temporaries, no manifest."""
    out = tmp_path / "set"
    claim_output(str(out), run_id="killed").release()
    for name in ("shard-00000-00000.bin", "shard-00000-00000.idx", "stats.json",
                 "shard-00001-00000.bin.tmp-0123456789ab"):  # fmt: skip
        (out / name).write_bytes(b"partial")
    (out / REJECTS_DIR).mkdir()
    (out / REJECTS_DIR / "rejects-00000.jsonl").write_text("{}\n")
    (out / WORK_DIR / SPILL_DIR / "b00000-x.spill").write_bytes(b"spill")
    claim_output(str(out), run_id="again").release()
    assert sorted(os.listdir(out)) == [MARKER_NAME, WORK_DIR]
    assert os.listdir(out / WORK_DIR / SPILL_DIR) == []


# -- 2. only what our marker names is ours; links are never followed -------------------------------
def test_files_that_look_like_ours_without_our_marker_are_refused_and_untouched(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    for name in ("stats.json", "shard-00000-00000.bin", "notes.txt.tmp-0123456789ab"):
        (home / name).write_text("the user's")
    (home / REJECTS_DIR).mkdir()
    (home / REJECTS_DIR / "mine.jsonl").write_text("the user's")
    (home / WORK_DIR).mkdir()
    (home / WORK_DIR / "data.csv").write_text("the user's")
    before = _tree(home)
    with pytest.raises(OutputError, match="not written by this tool"):
        claim_output(str(home))
    assert _tree(home) == before
    assert not (home / MARKER_NAME).exists()


def test_a_users_file_beside_a_finished_set_is_refused_however_it_is_named(tmp_path):
    out = tmp_path / "set"
    _finished_set(str(out))
    (out / "shard-00099-00000.bin").write_text("the user's")  # our pattern, not in our list
    (out / "notes.txt").write_text("the user's")
    before = _tree(out)
    with pytest.raises(OutputError, match="did not write .*notes.txt"):
        claim_output(str(out), overwrite=True)
    assert _tree(out) == before


@pytest.mark.parametrize("linked", [WORK_DIR, REJECTS_DIR])
def test_a_symlinked_work_or_rejects_directory_is_refused(tmp_path, linked):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep")
    out = tmp_path / "set"
    claim_output(str(out), run_id="first").release()  # ours, in "running" state
    if linked == WORK_DIR:
        import shutil

        shutil.rmtree(out / WORK_DIR)
    (out / linked).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(OutputError, match="symbolic link"):
        claim_output(str(out), run_id="second")
    assert sorted(os.listdir(elsewhere)) == ["precious.txt"]  # nothing written through the link
    assert (elsewhere / "precious.txt").read_text() == "keep"


def test_a_marker_that_is_not_ours_is_refused(tmp_path):
    out = tmp_path / "set"
    out.mkdir()
    (out / MARKER_NAME).write_text('{"something": "else"}')
    with pytest.raises(OutputError, match="not a marker this tool wrote"):
        claim_output(str(out))


# -- 3. one run at a time ----------------------------------------------------------------------
def test_a_second_run_on_a_locked_output_refuses_and_touches_nothing(tmp_path):
    out = tmp_path / "set"
    first = claim_output(str(out), run_id="first-run")
    (out / "shard-00000-00000.bin").write_bytes(b"the first run's work")
    try:
        with pytest.raises(OutputError, match=r"another run \(run first-run\)") as refused:
            claim_output(str(out), run_id="second-run")
        assert "\n" not in str(refused.value)
        assert (out / "shard-00000-00000.bin").read_bytes() == b"the first run's work"
        assert json.loads((out / MARKER_NAME).read_text())["run_id"] == "first-run"
    finally:
        first.release()
    claim_output(str(out), run_id="second-run").release()  # free once the first is done


def test_a_remote_output_is_locked_by_a_lock_object(monkeypatch):
    monkeypatch.setattr("pipelines.output.LOCK_SETTLE_S", 0.0)
    url = "memory://output-lock-test/set"
    first = claim_output(url, run_id="first-run")
    with pytest.raises(OutputError, match="first-run.*delete memory://output-lock-test/set/"):
        claim_output(url, run_id="second-run")
    first.release()
    claim_output(url, run_id="second-run").release()


# -- 4. stats.json never says ok for a set that was not finished --------------------------------
def _disk_full_where(monkeypatch, failing) -> None:
    """Writes of the set's JSON files through the storage layer (OutputDir, the seam every
    write goes through) raise ENOSPC where `failing(name, data)` is true."""
    real = OutputDir.write_bytes

    def write_bytes(self, name, data):
        if name.endswith(".json") and failing(name, json.loads(data)):
            raise OSError(errno.ENOSPC, "No space left on device", self.path(name))
        return real(self, name, data)

    monkeypatch.setattr(OutputDir, "write_bytes", write_bytes)


def test_a_failed_manifest_write_leaves_stats_saying_failed(tmp_path, monkeypatch):
    _disk_full_where(monkeypatch, lambda name, data: name == MANIFEST_NAME)
    out = tmp_path / "set"
    with pytest.raises(OSError):
        _finished_set(str(out))
    stats = json.loads((out / STATS_NAME).read_text())
    assert stats["status"] == "failed" and "No space left" in stats["error"]
    assert not (out / MANIFEST_NAME).exists()


def test_a_failed_stats_write_after_the_manifest_takes_the_manifest_back(tmp_path, monkeypatch):
    _disk_full_where(monkeypatch, lambda name, data: name == STATS_NAME and data["status"] == "ok")
    out = tmp_path / "set"
    with pytest.raises(OSError):
        _finished_set(str(out))
    assert json.loads((out / STATS_NAME).read_text())["status"] != "ok"
    assert not (out / MANIFEST_NAME).exists()


# -- 5. storage errors in one line, and before the work where they can be known ------------------
def _real_enospc() -> OSError:
    try:
        with open("/dev/full", "wb") as f:
            f.write(b"x")
            f.flush()
    except OSError as e:
        return e
    pytest.skip("/dev/full did not fail")


def test_storage_errors_become_one_line():
    enospc = _real_enospc()  # a write error names no file: it is put on OUTPUT
    assert describe_storage_error(enospc, "/data/out") == "no space left on /data/out"
    outside = OSError(errno.ENOSPC, "No space left on device", "/tmp/shardsmith-run-x/a")
    assert describe_storage_error(outside, "/data/out") == (
        "no space left on /tmp/shardsmith-run-x/a (outside OUTPUT: the temporary directory?)"
    )
    inside = OSError(errno.ENOSPC, "No space left on device", "/data/out/shard-00000-00001.bin")
    assert describe_storage_error(inside, "/data/out") == "no space left on /data/out"
    rofs = OSError(errno.EROFS, "Read-only file system", "/data/out/_work/spill/b1.spill")
    assert describe_storage_error(rofs, "/data/out") == (
        "/data/out is not writable (read-only file system)"
    )
    # Beam hands a worker's exception back as text inside a RuntimeError
    beam_text = RuntimeError(
        'Traceback (most recent call last):\n  File "x.py", line 3\n'
        "OSError: [Errno 28] No space left on device [while running 'WriteShards/Merge']"
    )
    assert describe_storage_error(beam_text, "/data/out") == "no space left on /data/out"
    line = failure_line(beam_text, "/data/out", verbose=False)
    assert line == "no space left on /data/out" and "\n" not in line
    other = RuntimeError("Traceback ...\n  File x\nValueError: something else")
    assert describe_storage_error(other, "/data/out") is None
    assert failure_line(other, "/data/out", verbose=False) == (
        "ValueError: something else (--verbose shows the whole error)"
    )


def test_too_little_free_space_is_refused_before_the_run(tmp_path):
    out = tmp_path / "set"
    with pytest.raises(OutputError, match="no space left on .* the run needs at least"):
        claim_output(str(out), needed_bytes=1 << 62)
    check_free_space(OutputDir(str(tmp_path)), 1)  # a byte fits


def test_an_output_that_cannot_be_written_is_refused_in_one_line():
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("no sysfs")
    with pytest.raises(OutputError, match="is not writable") as refused:
        claim_output("/sys/kernel/shardsmith-output")  # read-only even for root
    assert "\n" not in str(refused.value)


# -- 9. spill: one file per bundle and bucket, no temporary names; deleted per bucket ------------
@pytest.mark.parametrize("url", ["local", "memory://spill-count/set"])
def test_one_spill_object_per_bundle_and_bucket(tmp_path, url):
    output = str(tmp_path / "set") if url == "local" else url
    claim_output(output).release()
    docs = _docs(30)
    bundles = [docs[:10], docs[10:25], docs[25:]]
    refs = spill_by_hand(output, bundles, 3)
    spill_dir = OutputDir(output).child(WORK_DIR).child(SPILL_DIR)
    names = spill_dir.list_files()
    pairs = {(b, i) for i, bundle in enumerate(bundles) for b in {int(d.id[-3:]) for d in bundle}}
    from pipelines.write import bucket_of

    pairs = {(bucket_of(d.id, 3), i) for i, bundle in enumerate(bundles) for d in bundle}
    assert len(names) == len(pairs) == sum(len(v) for v in refs.values())
    assert not [n for n in names if ".tmp-" in n]
    # every document comes back from its spill file, tokens and all
    by_id = {d.id: d for d in docs}
    for bucket, spill_names in refs.items():
        for name in spill_names:
            local = tmp_path / name
            spill_dir.get_file(name, str(local))
            spill = SpillFile(str(local))
            for j, doc_id in enumerate(spill.ids):
                assert bucket_of(doc_id, 3) == bucket
                got = [s.tolist() for s in spill.document_sequences(j)]
                assert got == [s.tolist() for s in by_id[doc_id].sequences]
    dofn = DeleteSpillsDoFn(output)
    for element in sorted(refs.items()):
        assert list(dofn.process(element, finished={})) == [len(element[1])]
    assert spill_dir.list_files() == []


def test_a_truncated_spill_file_is_a_clear_error(tmp_path):
    out = str(tmp_path / "set")
    claim_output(out).release()
    refs = spill_by_hand(out, [_docs(5)], 1)
    path = Path(out) / WORK_DIR / SPILL_DIR / refs[0][0]
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(RuntimeError, match="not a spill file"):
        SpillFile(str(path))


def _mapped_kb(path: str) -> int:
    """This process's resident KB of its mappings of `path` (Linux's /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):  # a mapping's header: range ... path
            inside = line.split()[-1] == path
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="no /proc/self/smaps")
def test_reading_a_spill_maps_none_of_its_pages(tmp_path):
    """A merge reads a bucket's documents in id order, all over its spills: memory-mapped, a
    mapping's fault-around made every page of the bucket resident in each merging worker
    (~115 MB per 256 MB of input). A document's tokens are read when asked for."""
    from pipelines.write.spill import SpillWriter

    path = str(tmp_path / "b00000-x.spill")
    writer = SpillWriter(path, "uint16")
    docs = [TokenizedDocument(id=f"d{i}", source="jsonl",
                              sequences=(np.arange(i, i + (1 << 20)) % 50257, np.arange(i + 1)))
            for i in range(4)]
    for doc in docs:
        writer.add(doc)
    writer.close()
    spill = SpillFile(path)
    for j in (2, 0, 3, 1):
        assert [s.tolist() for s in spill.document_sequences(j)] == [
            s.tolist() for s in docs[j].sequences]
    assert _mapped_kb(path) == 0
    spill.close()


def test_a_spill_writer_holds_nothing_per_document(tmp_path):
    """A local runner's bundle is a worker's share of a whole stage (half the input on two
    workers): the ids, lengths and provenance a spill writer kept for its footer grew with the
    input. What it holds stays flat from 2,000 documents to 20,000, and they all read back."""
    import tracemalloc

    from pipelines.document import Provenance
    from pipelines.write.spill import SpillWriter

    def doc(i):
        return TokenizedDocument(
            id=f"web/part-{i:06d}\udc80", source="jsonl", text_bytes=100 + i,
            sequences=tuple(np.arange(j, j + i % 5 + 1) for j in range(i % 3 + 1)),
            provenance=Provenance(input="in.jsonl", url=f"https://example.org/{i}",
                                  title=f"Page\n{i}", language="en", language_score=0.5))

    path = str(tmp_path / "b00000-x.spill")
    writer = SpillWriter(path, "uint16")
    tracemalloc.start()
    try:
        for i in range(20_000):
            writer.add(doc(i))
            if i == 2_000:
                held = tracemalloc.get_traced_memory()[0]
        grown = tracemalloc.get_traced_memory()[0] - held
    finally:
        tracemalloc.stop()
    writer.close()
    assert grown < 256 << 10, f"{grown} bytes more held after 18,000 more documents"
    spill = SpillFile(path)
    for i in (0, 1, 7, 19_999):
        expected = doc(i)
        assert spill.ids[i] == expected.id and spill.text_bytes[i] == expected.text_bytes
        assert spill.provenance(i) == dataclasses.asdict(expected.provenance)
        assert [s.tolist() for s in spill.document_sequences(i)] == [
            s.tolist() for s in expected.sequences]
    assert spill.num_documents == 20_000
    spill.close()
    assert os.listdir(tmp_path) == ["b00000-x.spill"]  # the writer's side files are gone


# -- 7. temporary directories of killed runs; the expansion bound --------------------------------
def test_stale_run_directories_are_swept_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setattr("pipelines.preprocess.SWEEP_MIN_AGE_S", 0.0)
    live, live_lock = make_run_tmp(str(tmp_path))
    dead = tmp_path / f"{RUN_TMP_PREFIX}dead"
    (dead / "progress").mkdir(parents=True)
    (tmp_path / "someone-elses").mkdir()
    # issue 27.7: a killed run's standby-socket folder used to be left by every rerun
    dead_standby = tmp_path / f"{STANDBY_PREFIX}dead"
    dead_standby.mkdir()
    (dead_standby / "claimed-0").write_text("")
    try:
        assert sorted(sweep_stale_run_tmps(str(tmp_path))) == [str(dead), str(dead_standby)]
        assert os.path.isdir(live) and not dead.exists() and not dead_standby.exists()
        assert (tmp_path / "someone-elses").is_dir()
    finally:
        os.close(live_lock)


def _zst_lines(path: Path, lines: int) -> None:
    """A .jsonl.zst of distinct, very compressible lines (a line bomb, scaled down)."""
    text = "".join(
        json.dumps({"text": f"line {i:08d} " + "the same words again " * 20}) + "\n"
        for i in range(lines)
    )
    path.write_bytes(zstandard.ZstdCompressor(level=19).compress(text.encode()))


def test_a_decompression_bomb_stops_at_max_expansion(tmp_path, monkeypatch):
    monkeypatch.setattr(transforms, "MIN_EXPANSION_BOUND_BYTES", 1 << 20)
    bomb = tmp_path / "bomb.jsonl.zst"
    _zst_lines(bomb, 40_000)  # ~17 MB of text from a file of a few hundred kB
    input_bytes = bomb.stat().st_size
    task = ReadTask(source="jsonl", path=str(bomb))
    assert transforms.task_input_bytes(task) == input_bytes

    def read(max_expansion):
        dofn = transforms.ReadDoFn("jsonl", keep_failures=True, progress_dir=None,
                                   max_expansion=max_expansion)  # fmt: skip
        dofn.setup()
        dofn.start_bundle()
        outputs = list(dofn.process(task))
        docs = [o for o in outputs if not hasattr(o, "tag")]
        failures = [o.value for o in outputs if getattr(o, "tag", None) == "failures"]
        return docs, failures, dofn.counts.drain()

    docs, failures, counts = read(max_expansion=10)
    text = sum(len(d.text.encode()) for d in docs)
    bound = max(10 * input_bytes, 1 << 20)
    assert text <= bound < 17_000_000
    assert [f.reason for f in failures] == ["expansion_limit"]
    assert counts["failed_expansion_limit"] == 1 and counts["read_failures"] == 1
    assert counts["docs_read"] == len(docs) > 0  # what came before the bound is kept, counted
    docs, failures, _ = read(max_expansion=0)  # 0: no bound
    assert len(docs) == 40_000 and not failures


# -- 6. a normal run's output holds our messages, not Beam's ------------------------------------
def test_the_log_handler_shows_our_messages_only_unless_verbose():
    for verbose, shown in ((False, ["ours"]), (True, ["ours", "beam", "root"])):
        stream = io.StringIO()
        handler = add_stderr_handler(verbose, logging.INFO)
        handler.setStream(stream)
        try:
            logging.getLogger("pipelines.preprocess").warning("ours")
            logging.getLogger("apache_beam.runners.worker.sdk_worker_main").warning("beam")
            logging.getLogger().warning("root")
        finally:
            logging.getLogger().removeHandler(handler)
        assert stream.getvalue().split() == [w for m in shown for w in ("WARNING", _who(m), m)]
    assert OwnMessagesOnly().filter(logging.makeLogRecord({"name": "pipelinesx"})) is False


def _who(message: str) -> str:
    return {
        "ours": "pipelines.preprocess:",
        "beam": "apache_beam.runners.worker.sdk_worker_main:",
        "root": "root:",
    }[message]


def test_a_reader_error_that_ends_a_task_fails_the_run(tmp_path, monkeypatch):
    """A reader that raises after two records of a real JSONL file: the records after it are
    never read, so the run cannot claim a balanced account (it used to, with one failure)."""
    path = tmp_path / "web.jsonl"
    paragraphs = (CORPORA / "books" / "11-0.txt").read_text("utf-8").split("\n\n")
    path.write_text("".join(json.dumps({"text": p}) + "\n" for p in paragraphs[:10]), "utf-8")
    from pipelines.sources.files import jsonl

    real_read = jsonl.read

    def read_then_raise(task):
        for n, record in enumerate(real_read(task)):
            if n == 2:
                raise MemoryError("reader bug")
            yield record

    monkeypatch.setattr(jsonl, "read", read_then_raise)
    dofn = transforms.ReadDoFn("jsonl", keep_failures=False, progress_dir=None)
    dofn.setup()
    dofn.start_bundle()
    outputs = list(dofn.process(ReadTask(source="jsonl", path=str(path))))
    counts = dofn.counts.drain()
    assert counts["docs_read"] == 2 and counts["read_tasks_cut_short"] == 1
    stats = build_stats({**counts, "docs_written": 2, "failed_read_error": 1},
                        max_failure_rate=1.0)  # fmt: skip
    assert stats["balanced"] and stats["tasks_cut_short"] == 1
    with pytest.raises(AccountError, match="1 read task.*ended early.*not read"):
        check_stats(stats)
    assert len([o for o in outputs if not hasattr(o, "tag")]) == 2
