"""`python -m pipelines.dedup`: deduplicate already-cleaned documents, Parquet in, Parquet out.

    python -m pipelines.dedup --input 'clean/*.parquet' [more inputs; --input-list FILE]
        --output deduped/ [--keep-rejects]
        [--overwrite]
        [--dedup-threshold 0.8 --dedup-scope all ... --decontaminate wiki.test.tokens]
        [Beam options: --runner DataflowRunner --project ... ; default: Beam's Python runner
        here, FnApiRunner, which --direct_running_mode / --direct_num_workers set up]

Writes OUTPUT/documents-*.parquet (the kept documents), with --keep-rejects also
OUTPUT/rejects-*.parquet (every removed document, its reason and text) and
OUTPUT/clusters-*.parquet (kept_id, removed_id, reason, matched_id, jaccard: one row per removed
duplicate; group by kept_id for a cluster's members), and OUTPUT/stats.json (the run's
"pipelines" counters: removals by reason, candidate pairs, components rounds, and "shuffle": the
bytes each stage sent through a GroupByKey, in all and per byte of input text; "config": the
settings, with the components rounds as the run used them: --dedup-cc-rounds, or by default
enough for the input's rows, read from the Parquet footers before the graph is built).

OUTPUT is claimed as preprocess claims its shard sets (`pipelines.write.claim_output`, the
ownership rule of `common.output_dir`): a folder holding files this tool did not write
is refused, and an earlier dedup output is replaced only with --overwrite. Flags neither dedup
nor Beam knows are refused too, by preprocess's rule (`pipelines.runner.runners.unknown_arguments`),
and inputs are named by its rule too (`pipelines.inputs`).
"""

# ruff: noqa: E402 - the stop signals' handlers go in before the imports
from __future__ import annotations

if __name__ == "__main__":
    from common.signals import exit_on_stop_signals

    exit_on_stop_signals("python -m pipelines.dedup")

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from common.cli import ArgumentParser, known_flags
from pipelines.dedup.components import ComponentsNotConverged
from pipelines.dedup.config import DedupConfig, add_dedup_arguments
from pipelines.dedup.parquet import ReadDocuments, WriteClusters, WriteDocuments, WriteRejects
from pipelines.dedup.sizing import sized_config
from pipelines.dedup.stash import stash_buckets, stash_dir
from pipelines.dedup.transforms import REMOVAL_COUNTERS, Deduplicate
from pipelines.inputs import add_input_arguments, parsed_inputs
from pipelines.output import (
    DEDUP_OUTPUT,
    LOCK_NAME,
    MARKER_NAME,
    STATS_NAME,
    WORK_DIR,
    OutputClaim,
    OutputError,
    claim_output,
    describe_storage_error,
    write_marker,
)
from pipelines.sources.document_bound import parquet_rows_bound
from pipelines.stats import NAMESPACE, shuffle_summary

PROG = "python -m pipelines.dedup"


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="Remove URL, exact and near-duplicate documents (MinHash LSH) and "
        "evaluation-set overlaps from Parquet document files.",
        epilog="Every Beam pipeline option applies too (e.g. --runner DataflowRunner).",
        allow_abbrev=False,  # an abbreviation would pass where the full flag was meant
    )
    add_input_arguments(parser, "Parquet document files")
    parser.add_argument("--output", required=True, help="output directory (local or gs://...)")
    parser.add_argument(
        "--keep-rejects",
        action="store_true",
        help="also write the removed documents and the duplicate clusters, for auditing",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier dedup output in --output (deleted when the run starts)",
    )
    add_dedup_arguments(parser)
    return parser


def build_pipeline(
    pipeline: beam.Pipeline,
    input_patterns: Sequence[str],
    output: str,
    config: DedupConfig,
    keep_rejects: bool,
) -> None:
    out = output.rstrip("/")
    read = ReadDocuments(input_patterns)
    dedup = Deduplicate(config, stash_dir(output), stash_buckets(read.input_bytes))
    result = pipeline | "ReadDocuments" >> read | "Dedup" >> dedup
    result.main | "WriteDocuments" >> WriteDocuments(f"{out}/documents")
    if keep_rejects:
        result["rejects"] | "WriteRejects" >> WriteRejects(f"{out}/rejects")
        result["clusters"] | "WriteClusters" >> WriteClusters(f"{out}/clusters")


def counters(result) -> dict[str, int]:
    query = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
    totals: dict[str, int] = {}
    for counter in query["counters"]:
        name = counter.key.metric.name
        totals[name] = totals.get(name, 0) + int(counter.committed or 0)
    return dict(sorted(totals.items()))


def stats_document(counts: dict[str, int], config: DedupConfig, elapsed_s: float) -> dict:
    removed = {reason: counts.get(name, 0) for reason, name in REMOVAL_COUNTERS.items()}
    kept = counts.get("dedup_kept", 0)
    return {
        "documents_in": kept + sum(removed.values()),
        "kept": kept,
        "removed": removed,
        "counters": counts,
        "shuffle": shuffle_summary(counts),
        "config": dataclasses.asdict(config),
        "elapsed_s": round(elapsed_s, 3),
    }


def _worker_error(error: Exception) -> str | None:
    """The message of one of dedup's own errors (bad input, components that did not converge)
    from a failed run, without the runner's traceback: in-process runs re-raise the error
    itself; worker processes send it back as traceback text."""
    if isinstance(error, (ComponentsNotConverged, ValueError)):
        return str(error).splitlines()[0].split(" [while running")[0]
    for line in reversed(str(error).splitlines()):
        for kind in ("ComponentsNotConverged: ", "ValueError: "):
            if kind in line:
                return line.split(kind, 1)[1].split(" [while running")[0].strip()
    return None


def unknown_flags_error(beam_args: list[str]) -> str | None:
    """The refusal of what in `beam_args` Beam does not take: preprocess's rule, with
    preprocess's own flags counted as unknown here (Beam would take them and ignore them)."""
    from pipelines.options import PreprocessOptions
    from pipelines.runner.runners import unknown_arguments_error

    own = known_flags(build_parser())
    return unknown_arguments_error(
        beam_args, exclude=(PreprocessOptions,), prog=PROG, also_known=own
    )


def main(argv: list[str] | None = None) -> int:
    args, beam_args = build_parser().parse_known_args(argv)
    try:
        refused = unknown_flags_error(beam_args)
        if refused:
            raise ValueError(refused)
        args.input = parsed_inputs(args)
        config = DedupConfig.from_args(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        claim = claim_output(args.output, overwrite=args.overwrite, layout=DEDUP_OUTPUT)
    except OutputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        return _run(args, beam_args, config, claim)
    finally:
        claim.out.child(WORK_DIR).delete_tree()  # what is left: a failed run's stash
        claim.release()


def _run(args, beam_args: list[str], config: DedupConfig, claim: OutputClaim) -> int:
    started = time.time()
    runner = None
    if not any(a == "--runner" or a.startswith("--runner=") for a in beam_args):
        # Beam's DirectRunner would first try its PrismRunner, which makes ~/.apache_beam for a
        # binary cache; this is the Python runner it ends up using, named directly
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        runner = FnApiRunner()
    pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(beam_args))
    try:
        config = sized_config(config, parquet_rows_bound(args.input), ", ".join(args.input))
        build_pipeline(pipeline, args.input, claim.out.url, config, args.keep_rejects)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        result = pipeline.run()
        result.wait_until_finish()
    except Exception as e:  # a worker's error arrives wrapped in the runner's traceback text
        # the stash and band files make dedup write its input's size to OUTPUT's disk
        reason = _worker_error(e) or describe_storage_error(e, claim.out.url)
        if reason is None:
            raise
        print(f"error: {reason}", file=sys.stderr)
        return 1
    stats = stats_document(counters(result), config, time.time() - started)
    out = claim.out
    out.child(WORK_DIR).delete_tree()  # before the marker lists what the output holds
    written = [n for n in out.list_files() if n not in (MARKER_NAME, LOCK_NAME)]
    written += [f"{d}/" for d in out.list_dirs()]  # none, unless a sink left its temporaries
    # The marker names the whole output before stats.json, written last, says it is finished.
    write_marker(out, claim.run_id, {*written, STATS_NAME}, tool=DEDUP_OUTPUT.tool)
    out.write_bytes(STATS_NAME, json.dumps(stats, indent=2).encode("utf-8"))
    removed = ", ".join(f"{k} {v:,}" for k, v in stats["removed"].items() if v) or "nothing"
    print(
        f"dedup: {stats['documents_in']:,} documents in, {stats['kept']:,} kept; removed {removed}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
