"""The run's account: every input record is written, dropped under a reason, or failed.

Counts travel two ways from the one hook a stage counts through (stage.CountingDoFn.stat_update,
which also moves the progress heartbeat). Each counting DoFn increments Beam metrics (namespace
"pipelines") so a runner's UI shows them live, and it also emits its bundle's counts as data,
merged by one tiny CombineGlobally, so that `stats.json` is exact on every runner (metrics are
best-effort on some runners and are discarded with a failed bundle; data outputs are committed
exactly once with their bundle).

Counter names:
    docs_read, bytes_read, read_failures, tasks_read,
    empty_tasks                                         what the sources produced
    input_bytes, input_bytes_lost,
    input_bytes_lost<TAB><reason><TAB><location>        input read, and lost where a file broke
                                                        off (`input_loss_counts`)
    input_rows_lost                                     rows a Parquet footer promised and its
                                                        pages did not deliver (Failure.rows_lost)
    records_failed_in<TAB><reason><TAB><file>           records failed per input file
                                                        (`file_failure_key`)
    seen<TAB><reason><TAB><value>                       what a drop reason's rule measured on
                                                        the documents it judged (the language
                                                        identified: `seen_key`)
Keys holding a TAB carry a file's name: they travel as data only, never as a Beam metric.
    dropped_<reason>                                    a filter or dedup Reject
    failed_<reason>                                     a Failure (unparseable record, a stage error)
    docs_written, sequences_written, tokens_written,
    bytes_written, shards_written                       what the shards hold
    tokens_unknown                                      of them, the tokenizer's unknown token
    cpu_us_<stage>                                      CPU time of a stage's own work, in
                                                        microseconds (stage.StageClock)
    dedup_shuffle_bytes_<stage>, dedup_input_bytes      what dedup shuffled (stats["dedup_shuffle"])

The identity checked at the end (`read` counts documents plus records that could not be read):
    read = docs_read + read_failures = written + sum(dropped) + sum(failed)

A record count cannot see what a file that broke off would have held (a gzip cut in half is one
failure, whatever followed the cut), so `--max-failure-rate` also bounds the share of input
bytes lost: those after a fault no reader could get past (`Failure.lost_from`). A format that
says how many records it holds (Parquet's footer) can count what one failure lost in records:
those rows count as failed records in `failure_rate`, out of the records read plus them.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.document import Failure

NAMESPACE = "pipelines"
DROPPED = "dropped_"
FAILED = "failed_"
SHUFFLE_PREFIX = "dedup_shuffle_bytes_"
DEDUP_INPUT_BYTES = "dedup_input_bytes"
INPUT_BYTES = "input_bytes"
INPUT_BYTES_LOST = "input_bytes_lost"
INPUT_ROWS_LOST = "input_rows_lost"
TOKENS_UNKNOWN = "tokens_unknown"
CPU_US = "cpu_us_"
# The share of the tokens written that are the unknown token ([UNK]) above which the report
# shows it: a vocabulary that cannot spell the text (a cased text through an uncased
# vocabulary with --lowercase no, a script it lacks) loses that text to the model silently.
UNKNOWN_SHARE_SHOWN = 0.01
_LOST_IN = INPUT_BYTES_LOST + "\t"  # + reason + "\t" + location: one key per broken file
# + reason + "\t" + file: records failed per file and reason (not "failed_...": that prefix is
# the per-reason totals)
_FAILED_IN = "records_failed_in\t"
_SEEN = "seen\t"  # + reason + "\t" + value
# A drop reason that takes more than this share of the documents read is named in a note at the
# end of a run that still wrote documents (stats.json "notes").
NOTE_DROP_SHARE = 0.5
# stats.json lists this many files with failed records, most first (and counts them all)
MAX_FILES_LISTED = 100
# Fraction of records that may fail to parse before the run is declared failed. Truncated files
# and the odd bad record are normal in web-scale inputs; more than 1% usually means a wrong
# --source or a broken input, which must not pass quietly.
DEFAULT_MAX_FAILURE_RATE = 0.01
# Share of the documents read that one drop reason may take before the run fails (0: no bound).
# All of them by default: a filter whose model is broken (every document "not English") or a
# wrong --language drops everything under one reason, and an empty shard set must not pass.
DEFAULT_MAX_DROP_SHARE = 1.0


class AccountError(RuntimeError):
    """The counts do not add up, or too many records failed: the run must not look successful."""


class BundleCounts:
    """Counts of one DoFn's bundle: added to Beam metrics and emitted as data once per bundle.

    Incrementing a plain dict per element is far cheaper than a Beam metric call per element;
    both views are updated together at bundle end, so they agree.
    """

    def __init__(self) -> None:
        self.counts: collections.Counter = collections.Counter()
        self._metrics: dict[str, object] = {}

    def inc(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def drain(self) -> dict[str, int]:
        """The bundle's counts (also pushed to Beam metrics), and a fresh start for the next."""
        counts = {k: int(v) for k, v in self.counts.items() if v}
        for name, value in counts.items():
            if "\t" in name:
                continue  # a file's path is data (stats.json), not a metric's name
            metric = self._metrics.get(name)
            if metric is None:
                metric = self._metrics[name] = Metrics.counter(NAMESPACE, name)
            metric.inc(value)
        self.counts = collections.Counter()
        return counts


def merge_counts(parts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: collections.Counter = collections.Counter()
    for part in parts:
        total.update(part)
    return dict(sorted(total.items()))


class MergeCounts(beam.CombineFn):
    """CombineGlobally of per-bundle count dicts into the run's totals (tiny: a few keys)."""

    def create_accumulator(self) -> collections.Counter:
        return collections.Counter()

    def add_input(self, accumulator: collections.Counter, element: Mapping[str, int]):
        accumulator.update(element)
        return accumulator

    def merge_accumulators(self, accumulators):
        total: collections.Counter = collections.Counter()
        for accumulator in accumulators:
            total.update(accumulator)
        return total

    def extract_output(self, accumulator) -> dict[str, int]:
        return dict(sorted(accumulator.items()))


def input_loss_counts(failure: Failure, task_input_bytes: int) -> dict[str, int]:
    """The counts of input a Failure lost: the bytes of its task after `lost_from`, in all and
    under the failed file's name and reason (none for the failure of one record), and the rows
    it stands for (`rows_lost`)."""
    counts = {INPUT_ROWS_LOST: failure.rows_lost} if failure.rows_lost else {}
    if failure.lost_from is None:
        return counts
    lost = max(task_input_bytes - failure.lost_from, 0)
    return {**counts, INPUT_BYTES_LOST: lost,
            f"{_LOST_IN}{failure.reason}\t{failure.location}": lost}


def file_failure_key(path: str, reason: str) -> str:
    """The count key of one record of file `path` that failed under `reason`."""
    return f"{_FAILED_IN}{reason}\t{path}"


def seen_key(reason: str, value: str) -> str:
    """The count key of one document on which the rule of drop reason `reason` measured
    `value` (kept or dropped)."""
    return f"{_SEEN}{reason}\t{value}"


def _seen(counts: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """reason -> {value: documents}, most first."""
    seen: dict[str, dict[str, int]] = {}
    for key, n in counts.items():
        if key.startswith(_SEEN):
            reason, value = key[len(_SEEN) :].split("\t", 1)
            seen.setdefault(reason, {})[value] = int(n)
    return {reason: dict(sorted(values.items(), key=lambda kv: (-kv[1], kv[0])))
            for reason, values in sorted(seen.items())}


def _per_file(counts: Mapping[str, int], prefix: str, count_name: str) -> list[dict]:
    """The per-file keys under `prefix` as {file, reason, count_name}, most first."""
    files = []
    for key, n in counts.items():
        if key.startswith(prefix):
            reason, location = key[len(prefix) :].split("\t", 1)
            files.append({"file": location, "reason": reason, count_name: int(n)})
    return sorted(files, key=lambda f: (-f[count_name], f["file"], f["reason"]))


def broken_files(counts: Mapping[str, int]) -> list[dict]:
    """Each file that broke off: its name, the reason and the input bytes lost, most first."""
    return _per_file(counts, _LOST_IN, "bytes_lost")


def _by_prefix(counts: Mapping[str, int], prefix: str) -> dict[str, int]:
    return {k[len(prefix) :]: int(v) for k, v in sorted(counts.items()) if k.startswith(prefix)}


def shuffle_summary(counts: Mapping[str, int]) -> dict:
    """Dedup's shuffle account: bytes each stage sent through a GroupByKey, in all, and per byte
    of text entering dedup (see pipelines/dedup/shuffle.py for how they are counted)."""
    by_stage = _by_prefix(counts, SHUFFLE_PREFIX)
    total = sum(by_stage.values())
    input_bytes = int(counts.get(DEDUP_INPUT_BYTES, 0))
    return {
        "input_text_bytes": input_bytes,
        "shuffle_bytes": total,
        "shuffle_ratio": round(total / input_bytes, 4) if input_bytes else 0.0,
        "shuffle_bytes_by_stage": by_stage,
    }


def build_stats(
    counts: Mapping[str, int],
    *,
    max_failure_rate: float = DEFAULT_MAX_FAILURE_RATE,
    max_drop_share: float = DEFAULT_MAX_DROP_SHARE,
    extra: Mapping[str, object] | None = None,
) -> dict:
    """The `stats.json` document from the run's merged counts (pure; see `check_stats`)."""
    dropped = _by_prefix(counts, DROPPED)
    failed = _by_prefix(counts, FAILED)
    documents_read = int(counts.get("docs_read", 0))
    read = documents_read + int(counts.get("read_failures", 0))
    written = int(counts.get("docs_written", 0))
    input_bytes = int(counts.get(INPUT_BYTES, 0))
    input_bytes_lost = int(counts.get(INPUT_BYTES_LOST, 0))
    rows_lost = int(counts.get(INPUT_ROWS_LOST, 0))
    failed_by_file = _per_file(counts, _FAILED_IN, "records")
    dropped_total, failed_total = sum(dropped.values()), sum(failed.values())
    unknown, tokens = int(counts.get(TOKENS_UNKNOWN, 0)), int(counts.get("tokens_written", 0))
    stats = {
        "read": read,
        "written": written,
        "dropped_total": dropped_total,
        "failed_total": failed_total,
        "balanced": read == written + dropped_total + failed_total,
        "dropped": dropped,
        "failed": failed,
        # rows lost never reached a stage: they fail beside the records that were read
        "failure_rate": ((failed_total + rows_lost) / (read + rows_lost)) if read else 0.0,
        "max_failure_rate": max_failure_rate,
        "max_drop_share": max_drop_share,
        "input_bytes": input_bytes,
        "input_bytes_lost": input_bytes_lost,
        "input_loss_rate": (input_bytes_lost / input_bytes) if input_bytes else 0.0,
        "input_rows_lost": rows_lost,
        "files_broken_off": broken_files(counts),
        "files_with_failures": len({f["file"] for f in failed_by_file}),
        "failed_by_file": failed_by_file[:MAX_FILES_LISTED],
        "documents_read": documents_read,
        "unreadable_records": int(counts.get("read_failures", 0)),
        "bytes_read": int(counts.get("bytes_read", 0)),
        "tasks_read": int(counts.get("tasks_read", 0)),
        "tasks_cut_short": int(counts.get("read_tasks_cut_short", 0)),
        "empty_tasks": int(counts.get("empty_tasks", 0)),
        "shards": int(counts.get("shards_written", 0)),
        "sequences_written": int(counts.get("sequences_written", 0)),
        "tokens_written": int(counts.get("tokens_written", 0)),
        "bytes_written": int(counts.get("bytes_written", 0)),
        "unknown_tokens": unknown,
        "unknown_token_share": unknown / tokens if tokens else 0.0,
        "seen": _seen(counts),
        # CPU seconds of each stage's own work, summed over workers, most first
        "cpu_s": {stage: round(us / 1e6, 3) for stage, us in sorted(
            _by_prefix(counts, CPU_US).items(), key=lambda kv: (-kv[1], kv[0]))},
    }
    if DEDUP_INPUT_BYTES in counts:
        stats["dedup_shuffle"] = shuffle_summary(counts)
    stats.update(extra or {})
    return stats


def check_stats(stats: Mapping, drop_flags: Mapping[str, str] | None = None) -> None:
    """Raise AccountError when the account does not balance, nothing was read, nothing was
    written, or too many failed. `drop_flags` names what changes each drop reason (each stage
    declares its own; see `nothing_written`)."""
    if not stats["balanced"]:
        raise AccountError(
            f"the account does not balance: read {stats['read']} != written {stats['written']} "
            f"+ dropped {stats['dropped_total']} + failed {stats['failed_total']}; "
            "some stage lost documents without counting them (a bug: please report it)"
        )
    if stats["read"] == 0:
        raise AccountError("no records were read: the input files hold no documents")
    if stats.get("tasks_cut_short"):
        raise AccountError(
            f"{stats['tasks_cut_short']} read task(s) ended early on an unexpected reader error "
            "(failed_read_error; the logs name the input and the error): the records after it "
            "were not read, so the account cannot be complete. Fix or remove those inputs"
        )
    if stats.get("input_loss_rate", 0.0) > stats["max_failure_rate"]:
        files = stats["files_broken_off"]
        named = ", ".join(
            f"{f['file']} ({f['reason']}, {f['bytes_lost']:,} bytes)" for f in files[:3])
        more = f" and {len(files) - 3} more" if len(files) > 3 else ""
        raise AccountError(
            f"{len(files)} input file(s) broke off: {named}{more}; "
            f"{stats['input_bytes_lost']:,} of {stats['input_bytes']:,} input bytes count as "
            "lost (a stream cut short whole, corrupt data from the fault on) "
            f"({stats['input_loss_rate']:.2%} > --max-failure-rate "
            f"{stats['max_failure_rate']:.2%}). Replace those files, or raise --max-failure-rate "
            "to accept the loss"
        )
    if stats["failure_rate"] > stats["max_failure_rate"]:
        worst = sorted(stats["failed"].items(), key=lambda kv: -kv[1])[:3]
        rows_lost = stats.get("input_rows_lost", 0)
        lost = f" (and {rows_lost:,} rows the input promised were lost)" if rows_lost else ""
        raise AccountError(
            f"{stats['failed_total']} of {stats['read']} records failed{lost} "
            f"({stats['failure_rate']:.2%} > --max-failure-rate {stats['max_failure_rate']:.2%}); "
            f"most common: {', '.join(f'{k}={v}' for k, v in worst)}{_most_in(stats)}. The logs "
            "name each failed record's location; --keep-rejects writes them to OUTPUT/rejects/"
        )
    # Past the failures (the input's fault, named with its files): a run that wrote nothing
    # names its largest causes, and only then one reason's share is bounded.
    if stats["written"] == 0:
        raise AccountError(nothing_written(stats, drop_flags or {}))
    _check_drop_share(stats)


# How many of the largest causes the line of a run that wrote nothing names.
CAUSES_NAMED = 3


def nothing_written(stats: Mapping, drop_flags: Mapping[str, str]) -> str:
    """The one line of a run that read records and wrote no document: the largest causes
    (drop reasons and failures) with their counts, and for each drop reason what changes it.
    A shard set of nothing is a failure whatever --max-drop-share says: nobody trains on it."""
    causes = [
        (n, f"{n:,} dropped as {reason!r} ({drop_flags.get(reason, 'no flag changes it')})")
        for reason, n in stats["dropped"].items()
    ] + [
        (n, f"{n:,} failed as {reason!r} (unreadable; the logs name each record)")
        for reason, n in stats["failed"].items()
    ]
    causes.sort(key=lambda cause: -cause[0])
    named = "; ".join(text for _, text in causes[:CAUSES_NAMED])
    more = len(causes) - CAUSES_NAMED
    rest = f"; and {more} more reason(s) in stats.json" if more > 0 else ""
    return f"no document was written: of {stats['read']:,} records read, {named}{rest}"


def drop_notes(stats: Mapping, drop_flags: Mapping[str, str]) -> list[str]:
    """One line for each drop reason that took more than NOTE_DROP_SHARE of the documents read,
    with what its rule saw most (top CAUSES_NAMED) and what changes it."""
    read, notes = stats["documents_read"], []
    for reason, dropped in sorted(stats["dropped"].items(), key=lambda kv: -kv[1]):
        if not read or dropped <= NOTE_DROP_SHARE * read:
            break
        seen = list(stats.get("seen", {}).get(reason, {}).items())[:CAUSES_NAMED]
        saw = f"; it saw {', '.join(f'{v} {n:,}' for v, n in seen)}" if seen else ""
        notes.append(
            f"{reason!r} dropped {dropped:,} of {read:,} documents read ({dropped / read:.1%})"
            f"{saw}; changed by {drop_flags.get(reason, 'no flag')}"
        )
    return notes


def _check_drop_share(stats: Mapping) -> None:
    """AccountError when one reason dropped at least --max-drop-share of the documents read."""
    share, read = stats.get("max_drop_share", 0.0), stats["documents_read"]
    if not share or not read:
        return
    for reason, dropped in sorted(stats["dropped"].items(), key=lambda kv: -kv[1]):
        if dropped >= share * read:
            raise AccountError(
                f"{dropped:,} of {read:,} documents read were dropped as {reason!r} "
                f"({dropped / read:.2%} >= --max-drop-share {share:.2%}): a filter or model that "
                "drops this much is likely broken (a wrong --language, a damaged model cache). "
                "Check the input and options, or raise --max-drop-share (0: no bound)"
            )


def _most_in(stats: Mapping) -> str:
    files = stats.get("failed_by_file") or []
    if not files:
        return ""
    named = ", ".join(f"{f['file']} ({f['records']:,} {f['reason']})" for f in files[:3])
    return f"; most in {named} ({stats['files_with_failures']:,} file(s) in all)"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} kB"


def format_report(stats: Mapping) -> str:
    """The final report: a small table of the account, for the terminal."""
    rows = [
        ("read", f"{stats['read']:,}", f"{_mb(stats['bytes_read'])} of text"),
        ("written", f"{stats['written']:,}", f"{_mb(stats['bytes_written'])} of text"),
    ]
    for reason, n in stats["dropped"].items():
        rows.append((f"  dropped {reason}", f"{n:,}", ""))
    for reason, n in stats["failed"].items():
        rows.append((f"  failed {reason}", f"{n:,}", ""))
    if stats.get("input_bytes_lost"):
        rows.append(("input lost", _mb(stats["input_bytes_lost"]),
                     f"of {_mb(stats['input_bytes'])}: {len(stats['files_broken_off'])} file(s) "
                     "broke off (stats.json files_broken_off)"))
    rows += [
        ("shards", f"{stats['shards']:,}", ""),
        ("sequences", f"{stats['sequences_written']:,}", ""),
        ("tokens", f"{stats['tokens_written']:,}", ""),
    ]
    if stats.get("unknown_token_share", 0.0) > UNKNOWN_SHARE_SHOWN:
        rows.append(("  unknown", f"{stats['unknown_tokens']:,}",
                     f"{stats['unknown_token_share']:.1%} of the tokens are the unknown token or "
                     "byte pieces: text the vocabulary cannot spell (see --lowercase, "
                     "--tokenizer)"))
    cpu = stats.get("cpu_s") or {}
    if cpu:
        rows.append(("cpu", f"{sum(cpu.values()):,.1f} s",
                     ", ".join(f"{stage} {seconds:,.1f} s" for stage, seconds in cpu.items())))
    elapsed = stats.get("elapsed_s")
    if elapsed:
        rows.append(
            (
                "elapsed",
                f"{elapsed:,.1f} s",
                f"{stats['bytes_read'] / 1e6 / elapsed:,.2f} MB/s read",
            )
        )
    width = max(len(r[0]) for r in rows)
    number = max(len(r[1]) for r in rows)
    lines = [f"{name:<{width}}  {value:>{number}}  {note}".rstrip() for name, value, note in rows]
    balance = "balanced" if stats["balanced"] else "NOT BALANCED"
    lines += [f"note: {note}" for note in stats.get("notes", ())]
    lines.append(
        f"account: read = written + dropped + failed: {stats['read']:,} = {stats['written']:,} + "
        f"{stats['dropped_total']:,} + {stats['failed_total']:,} ({balance}); "
        f"failure rate {stats['failure_rate']:.3%} (max {stats['max_failure_rate']:.2%})"
    )
    return "\n".join(lines)
