"""stats.py's account of what failed input lost (issue 18): bytes of files that broke off, failed
records per file; pure functions."""

from __future__ import annotations

import pytest

from pipelines.document import Failure
from pipelines.stats import (
    INPUT_BYTES,
    MAX_FILES_LISTED,
    AccountError,
    BundleCounts,
    build_stats,
    check_stats,
    file_failure_key,
    format_report,
    input_loss_counts,
    merge_counts,
)


def _counts(**extra: int) -> dict[str, int]:
    return {"docs_read": 999, "docs_written": 999, "read_failures": 1, "failed_truncated_input": 1,
            **extra}


def test_a_record_failure_loses_no_input_bytes():
    assert input_loss_counts(Failure("f.jsonl@10", "bad_json"), 5_000) == {}


def test_a_broken_file_loses_its_bytes_from_the_fault():
    cut = Failure("a.jsonl.gz", "truncated_input", lost_from=0)
    corrupt = Failure("b.jsonl.gz", "corrupt_input", lost_from=3_000)
    assert input_loss_counts(cut, 5_000)["input_bytes_lost"] == 5_000
    assert input_loss_counts(corrupt, 5_000)["input_bytes_lost"] == 2_000
    # a fault past the task's planned end (a file that grew) loses nothing, never less
    assert input_loss_counts(Failure("c", "corrupt_input", lost_from=9_000), 5_000) == {
        "input_bytes_lost": 0, "input_bytes_lost\tcorrupt_input\tc": 0}


def test_files_broken_off_survive_bundles_and_merging():
    bundles = []
    for name, lost_from in (("b.gz", 0), ("a.gz", 600)):
        counts = BundleCounts()
        counts.inc(INPUT_BYTES, 1_000)
        for key, value in input_loss_counts(Failure(name, "truncated_input", lost_from=lost_from),
                                            1_000).items():
            counts.inc(key, value)
        bundles.append(counts.drain())
    stats = build_stats(_counts(**merge_counts(bundles)))
    assert stats["input_bytes"] == 2_000 and stats["input_bytes_lost"] == 1_400
    assert stats["input_loss_rate"] == pytest.approx(0.7)
    assert stats["files_broken_off"] == [
        {"file": "b.gz", "reason": "truncated_input", "bytes_lost": 1_000},
        {"file": "a.gz", "reason": "truncated_input", "bytes_lost": 400},
    ]


def test_the_byte_share_fails_a_run_the_record_share_would_pass():
    lost = input_loss_counts(Failure("dump/x.jsonl.gz", "truncated_input", lost_from=0), 60_000)
    stats = build_stats(_counts(input_bytes=100_000, **lost))
    assert stats["failure_rate"] < stats["max_failure_rate"] < stats["input_loss_rate"]
    with pytest.raises(AccountError) as raised:
        check_stats(stats)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("1 input file(s) broke off: dump/x.jsonl.gz (truncated_input, 60,000")
    assert "60.00% > --max-failure-rate 1.00%" in message
    check_stats(build_stats(_counts(input_bytes=100_000, **lost), max_failure_rate=0.6))
    report = format_report(stats)
    assert "input lost" in report and "60.0 kB  of 100.0 kB: 1 file(s) broke off" in report


def test_without_input_counts_nothing_is_lost():
    stats = build_stats(_counts())
    assert stats["input_loss_rate"] == 0.0 and stats["files_broken_off"] == []
    check_stats(stats)
    assert "input lost" not in format_report(stats)


def test_failed_records_are_listed_by_file_most_first_and_capped():
    counts = _counts()
    counts[file_failure_key("big.jsonl", "bad_json")] = 5
    counts[file_failure_key("big.jsonl", "too_large")] = 1
    for n in range(MAX_FILES_LISTED + 10):
        counts[file_failure_key(f"part-{n:04d}.jsonl", "bad_json")] = 1
    drained = BundleCounts()
    for key, value in counts.items():
        drained.inc(key, value)
    stats = build_stats(merge_counts([drained.drain()]), max_failure_rate=0.0001)
    assert stats["files_with_failures"] == MAX_FILES_LISTED + 11
    assert len(stats["failed_by_file"]) == MAX_FILES_LISTED
    assert stats["failed_by_file"][:3] == [
        {"file": "big.jsonl", "reason": "bad_json", "records": 5},
        {"file": "big.jsonl", "reason": "too_large", "records": 1},
        {"file": "part-0000.jsonl", "reason": "bad_json", "records": 1},
    ]
    assert stats["failed"] == {"truncated_input": 1} and stats["balanced"]  # not per file
    with pytest.raises(AccountError) as raised:
        check_stats(stats)
    assert "most in big.jsonl (5 bad_json), big.jsonl (1 too_large)" in str(raised.value)
