"""The pipeline's pure parts and DoFns without a runner: shard planning, spill + merge, the
account, progress, the output filesystem, options."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import xxhash

from dataset_format import IndexedDataset
from pipelines import progress
from pipelines.document import Failure, Reject, TokenizedDocument
from pipelines.stats import (
    AccountError,
    BundleCounts,
    MergeCounts,
    build_stats,
    check_stats,
    format_report,
    merge_counts,
)
from pipelines.write import (
    OutputDir,
    bucket_of,
    claim_output,
    default_num_buckets,
    reject_record,
    shard_name,
    split_into_parts,
    write_bucket,
)
from tests.shard_fixtures import spill_by_hand


def prepare_output(url: str) -> OutputDir:
    claim = claim_output(url)
    claim.release()
    return claim.out


# -- shard planning ------------------------------------------------------------------------------
def test_split_into_parts_bounds_tokens_and_keeps_long_documents_whole():
    assert split_into_parts([3, 3, 3, 3], 6) == [(0, 2), (2, 4)]
    assert split_into_parts([3, 3, 3], 7) == [(0, 2), (2, 3)]
    # a document longer than a shard gets one of its own, its neighbours are not merged into it
    assert split_into_parts([2, 50, 2, 2], 5) == [(0, 1), (1, 2), (2, 4)]
    assert split_into_parts([], 5) == []
    with pytest.raises(ValueError):
        split_into_parts([1], 0)


def test_every_part_is_within_the_bound_unless_it_is_one_document():
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 40, size=500).tolist()
    parts = split_into_parts(lengths, 100)
    assert parts[0][0] == 0 and parts[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))  # consecutive, no gaps
    for start, end in parts:
        assert sum(lengths[start:end]) <= 100 or end - start == 1


def test_bucket_of_is_a_stable_hash_not_pythons_hash():
    assert bucket_of("books:2701-0.txt", 16) == xxhash.xxh64_intdigest(b"books:2701-0.txt") % 16
    assert bucket_of("books:2701-0.txt", 16) == 2  # fixed: the same on every machine and run
    assert shard_name(3, 12) == "shard-00003-00012"


def test_default_bucket_count_follows_input_size():
    assert default_num_buckets(0) == 1
    assert default_num_buckets(1) == 1
    assert default_num_buckets(256 << 20) == 1
    assert default_num_buckets((256 << 20) + 1) == 2
    assert default_num_buckets(10**15) == 512


# -- spill + merge -------------------------------------------------------------------------------
def _docs(n: int, seed: int = 0) -> list[TokenizedDocument]:
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        sequences = tuple(
            rng.integers(0, 50000, size=int(rng.integers(1, 30))).astype(np.int32)
            for _ in range(int(rng.integers(1, 4)))
        )
        docs.append(TokenizedDocument(f"doc:{i}", "test", sequences, text_bytes=10 + i))
    return docs




def _write_all(output: str, refs, shard_tokens: int) -> dict[str, bytes]:
    out = OutputDir(output)
    for bucket, names in sorted(refs.items()):
        list(write_bucket(bucket, names, out, shard_tokens, "uint16"))
    return {
        n: open(os.path.join(output, n), "rb").read()
        for n in sorted(os.listdir(output))
        if n.startswith("shard-")
    }


def test_shards_do_not_depend_on_bundles(tmp_path):
    docs = _docs(60)
    one = str(tmp_path / "one")
    prepare_output(one)
    files_one = _write_all(one, spill_by_hand(one, [docs], 4), shard_tokens=200)
    # the same documents, shuffled into three bundles of different sizes
    order = np.random.default_rng(1).permutation(len(docs))
    shuffled = [docs[i] for i in order]
    three = str(tmp_path / "three")
    prepare_output(three)
    files_three = _write_all(
        three, spill_by_hand(three, [shuffled[:5], shuffled[5:41], shuffled[41:]], 4), 200
    )
    assert files_one == files_three
    assert len(files_one) > 8  # several parts per bucket: the bound was applied


def test_merged_shards_hold_documents_sorted_by_id_within_the_bound(tmp_path):
    docs = _docs(40)
    out = str(tmp_path / "out")
    prepare_output(out)
    refs = spill_by_hand(out, [docs[::2], docs[1::2]], 2)
    for bucket, names in refs.items():
        infos = [info for info, _ in write_bucket(bucket, names, OutputDir(out), 150, "uint16")]
        expected = sorted((d for d in docs if bucket_of(d.id, 2) == bucket), key=lambda d: d.id)
        got = []
        for info in infos:
            ds = IndexedDataset(os.path.join(out, info.name))
            ds.verify()
            assert info.tokens <= 150 or info.documents == 1
            got += [[s.tolist() for s in ds.document_sequences(i)] for i in range(ds.num_documents)]
        assert got == [[s.tolist() for s in d.sequences] for d in expected]


def test_duplicate_ids_are_ordered_by_content_not_arrival(tmp_path):
    a = TokenizedDocument("same", "t", (np.array([5, 6], np.int32),), 1)
    b = TokenizedDocument("same", "t", (np.array([1, 2, 3], np.int32),), 1)
    results = []
    for name, bundles in (("ab", [[a, b]]), ("ba", [[b], [a]])):
        out = str(tmp_path / name)
        prepare_output(out)
        results.append(_write_all(out, spill_by_hand(out, bundles, 1), 100))
    assert results[0] == results[1]


# -- the account ---------------------------------------------------------------------------------
def test_stats_balance_and_failure_rate():
    counts = {
        "docs_read": 10,
        "read_failures": 2,
        "bytes_read": 1000,
        "docs_written": 7,
        "dropped_too_short": 2,
        "failed_bad_json": 2,
        "failed_clean_error": 1,
    }
    stats = build_stats(counts, max_failure_rate=0.5)
    assert stats["read"] == 12
    assert stats["balanced"] and stats["dropped"] == {"too_short": 2}
    assert stats["failed"] == {"bad_json": 2, "clean_error": 1}
    assert stats["failure_rate"] == pytest.approx(3 / 12)
    check_stats(stats)
    assert "12 = 7 + 2 + 3 (balanced)" in format_report(stats)
    with pytest.raises(AccountError, match="max-failure-rate"):
        check_stats(build_stats(counts, max_failure_rate=0.1))
    with pytest.raises(AccountError, match="does not balance"):
        check_stats(build_stats({**counts, "docs_written": 6}, max_failure_rate=1.0))
    with pytest.raises(AccountError, match="no records"):
        check_stats(build_stats({}, max_failure_rate=1.0))


def test_counts_merge_like_the_combine():
    parts = [{"docs_read": 2, "dropped_x": 1}, {"docs_read": 3}, {}]
    fn = MergeCounts()
    accumulators = [fn.add_input(fn.create_accumulator(), p) for p in parts]
    merged = fn.extract_output(fn.merge_accumulators(accumulators))
    assert merged == merge_counts(parts) == {"docs_read": 5, "dropped_x": 1}
    counts = BundleCounts()
    counts.inc("docs_read", 4)
    counts.inc("empty", 0)
    assert counts.drain() == {"docs_read": 4}
    assert counts.drain() == {}


def test_reject_records_are_json_lines_with_their_reason():
    key, line = reject_record(Reject("d1", "books", "too_short", "12 chars", "tiny"))
    assert key == "d1" and json.loads(line)["reason"] == "too_short"
    key, line = reject_record(Failure("a.jsonl:3", "bad_json", "Expecting value"))
    assert key == "a.jsonl:3" and json.loads(line) == {
        "kind": "failure",
        "location": "a.jsonl:3",
        "reason": "bad_json",
        "detail": "Expecting value",
    }


# -- progress ------------------------------------------------------------------------------------
def test_progress_files_are_summed_across_workers(tmp_path):
    first = progress.ProgressReporter(str(tmp_path))
    second = progress.ProgressReporter(str(tmp_path))
    first.add(docs_read=3, bytes_read=3_000_000)
    second.add(docs_read=2, tasks=1)
    first.flush()
    second.flush()
    totals = progress.read_totals(str(tmp_path))
    assert totals == {"docs_read": 5, "bytes_read": 3_000_000, "tasks": 1}
    line = progress.format_progress(totals, 2.0)
    assert "tasks 1 |" in line and "docs read 5" in line and "(1.50 MB/s)" in line
    second.add(tasks_planned=4)
    second.flush()
    line = progress.format_progress(progress.read_totals(str(tmp_path)), 2.0)
    assert "] | tasks 1/4 | docs read 5" in line
    assert progress.reporter(None) is None
    assert progress.reporter(str(tmp_path)) is progress.reporter(str(tmp_path))


# -- output filesystem ---------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["local", "beam", "fsspec"])
def test_output_dir_backends(tmp_path, backend):
    url = {"local": str(tmp_path / "o"), "beam": str(tmp_path / "o"), "fsspec": "memory://unit-o"}[
        backend
    ]
    out = OutputDir(url, backend)
    out.makedirs()
    src = tmp_path / "src.bin"
    src.write_bytes(b"x" * 1000)
    out.put_file(str(src), "a.bin")
    out.write_bytes("b.json", b"{}")
    out.child("sub").write_bytes("c", b"c")
    assert out.list_files() == ["a.bin", "b.json"]
    assert out.list_dirs() == ["sub"]
    assert out.size("a.bin") == 1000 and out.size("missing") is None
    assert out.read_bytes("b.json") == b"{}"
    out.get_file("a.bin", str(tmp_path / "back"))
    assert (tmp_path / "back").read_bytes() == b"x" * 1000
    out.delete(["b.json"])
    out.child("sub").delete_tree()
    assert out.list_files() == ["a.bin"] and out.list_dirs() == []
    out.delete_tree()


# -- options -------------------------------------------------------------------------------------
def test_options_parse_with_beam_options_and_per_source_defaults():
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

    from pipelines.options import PreprocessConfig, PreprocessOptions
    from pipelines.runner.runners import unknown_arguments

    argv = [
        "--source=webtext",
        "--input=in/*.txt",
        "--output=out",
        "--tokenizer=vocab/gpt2",
        "--append-eod",
        "--shard-tokens=1000",
        "--source-option",
        "json_keys=text,title",
        "--no-dedup",
        "--direct_num_workers=3",
    ]
    options = PipelineOptions(argv)
    assert options.view_as(PreprocessOptions).shard_tokens == 1000
    assert options.view_as(DirectOptions).direct_num_workers == 3
    assert unknown_arguments(argv) == []
    config = PreprocessConfig.from_options(options)
    assert config.min_tokens == 128  # webtext: Megatron's minimum
    assert config.append_eod and not config.dedup
    assert config.source_options == {"json_keys": "text,title"}
    books = PreprocessConfig(source="books", input="x", output="y", tokenizer="t", dedup=False)
    assert books.min_tokens == 0
    assert unknown_arguments(argv + ["--shard-tokns=5"]) == ["--shard-tokns"]
    with pytest.raises(SystemExit):  # ours with Beam's underscores: the parser names ours
        unknown_arguments(argv + ["--shard_tokens=5"])
    with pytest.raises(ValueError, match="--tokenizer"):
        PreprocessConfig.from_options(PipelineOptions(argv[:3]))
    with pytest.raises(ValueError, match="--source must be one of books, .*, got 'nope'"):
        PreprocessConfig(source="nope", input="x", output="y", tokenizer="t", dedup=False)
    safety = PreprocessConfig.from_options(
        PipelineOptions(argv + ["--overwrite", "--max-expansion=20", "--verbose"])
    )
    assert safety.overwrite and safety.max_expansion == 20 and safety.verbose
    assert not config.overwrite and config.max_expansion == 100  # refuse; bound bombs
    with pytest.raises(ValueError, match="--max-expansion must be >= 0, got -1.0"):
        PreprocessConfig.from_options(PipelineOptions(argv + ["--max-expansion=-1"]))


def test_each_flag_is_its_config_fields_declaration():
    """PreprocessConfig's fields declare the flags Beam parses (common.option_fields):
    their defaults are the fields', their checks hold for flags and for code alike."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.dedup import DedupConfig
    from pipelines.options import PreprocessConfig

    required = ["--source=books", "--input=in/*.txt", "--output=out", "--tokenizer=t.json"]

    def config(*argv: str) -> PreprocessConfig:
        return PreprocessConfig.from_options(PipelineOptions([*required, *argv]))

    assert config() == PreprocessConfig("books", "in/*.txt", "out", "t.json")
    assert DedupConfig.from_options(PipelineOptions(required)) == DedupConfig()  # its flags
    with pytest.raises(
        ValueError,
        match=r"^missing required option\(s\): --source, --input, --output, --tokenizer$",
    ):
        PreprocessConfig.from_options(PipelineOptions([]))
    assert (config("--lowercase=no").lowercase, config("--lowercase=yes").lowercase) == (
        False,
        True,
    )
    assert config().lowercase is None  # auto
    with pytest.raises(SystemExit):  # argparse: an int flag, a flag with choices
        config("--shard-tokens=many")
    with pytest.raises(SystemExit):
        config("--lowercase=maybe")
    for argv, message in [
        ("--shard-tokens=0", "--shard-tokens must be positive, got 0"),
        ("--num-buckets=0", "--num-buckets must be positive, got 0"),
        ("--tokenize-batch-docs=0", "--tokenize-batch-docs must be positive, got 0"),
        ("--min-tokens=-1", "--min-tokens must be >= 0, got -1"),
        ("--max-failure-rate=1.5", "--max-failure-rate must be in [0, 1], got 1.5"),
        ("--max-failure-rate=nan", "--max-failure-rate must be in [0, 1], got nan"),
        ("--max-expansion=nan", "--max-expansion must be >= 0, got nan"),
        ("--source-option=wiki_task_mb", "--source-option 'wiki_task_mb': expected KEY=VALUE"),
    ]:
        with pytest.raises(ValueError) as excinfo:
            config(argv)
        assert str(excinfo.value) == message
    with pytest.raises(ValueError, match="^tokenize_batch_bytes must be positive, got 0$"):
        PreprocessConfig("books", "x", "y", "t", tokenize_batch_bytes=0)  # a setting, no flag


def test_a_run_that_submitted_nothing_says_so():
    # Dataflow's --dry_run and --template_location return without a job; "submitted" was wrong.
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.preprocess import not_finished_line

    def line(*argv):
        return not_finished_line(PipelineOptions(list(argv)), "gs://b/out")

    assert line("--dry_run=True") == "dry run: the job was built and nothing was submitted"
    assert "nothing was submitted" in line("--template_location=gs://b/t")
    assert line() == line("--dry_run=False") == "submitted; stats.json will appear in gs://b/out"


def test_help_lists_our_options_and_points_to_beams(capsys):
    from pipelines.preprocess import main

    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "--shard-tokens" in text and "--no-dedup" in text and "--direct_num_workers" in text
