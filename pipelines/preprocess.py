"""`python -m pipelines.preprocess`: raw corpus -> cleaned, deduplicated, tokenized shard set.

    python -m pipelines.preprocess --source wikipedia --input 'dumps/*.xml.bz2' \\
        --output out/wiki --tokenizer vocab/gpt2 --append-eod

Stages: ReadSource -> Clean -> Deduplicate (unless --no-dedup) -> Tokenize -> WriteShards ->
finish (stats.json, tokenizer.json, manifest.json). Any Beam option passes through. Without
--runner the run is local on the Python FnApiRunner, multi_processing over every core (named
explicitly: Beam's "DirectRunner" would first try to fetch and start the Prism runner).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    WorkerOptions,
)

from dataset_format import dtype_for_vocab
from pipelines.document import ReadTask
from pipelines.io import match_inputs
from pipelines.options import PreprocessConfig, PreprocessOptions
from pipelines.progress import ProgressDisplay
from pipelines.sources import get_source
from pipelines.stats import NAMESPACE, MergeCounts, format_report
from pipelines.transforms import Clean, CountRejects, ReadSource, Tokenize, TokenizerRef
from pipelines.write import (
    STATS_NAME,
    TOKENIZER_NAME,
    FinishShardSetDoFn,
    OutputDir,
    ShardSetSpec,
    WriteRejects,
    WriteShards,
    default_num_buckets,
    prepare_output,
)

LOG = logging.getLogger("pipelines.preprocess")
# Runner names that mean "run it here with the Python FnApiRunner".
LOCAL_PYTHON_RUNNERS = ("DirectRunner", "FnApiRunner", "SwitchingDirectRunner")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the launcher decided before building the graph."""

    config: PreprocessConfig  # num_buckets resolved
    tasks: list[ReadTask]
    input_files: int
    input_bytes: int


def plan_run(config: PreprocessConfig) -> Plan:
    """Match inputs, plan read tasks, fix the bucket count (from input size unless given)."""
    pattern = config.input
    if "://" not in pattern and os.path.isdir(pattern):
        pattern = os.path.join(pattern, "**")  # a directory: every file under it (as sources do)
    files = match_inputs(pattern)
    input_bytes = sum(f.size_bytes for f in files)
    tasks = get_source(config.source).plan(config.input, dict(config.source_options))
    if config.num_buckets is None:
        config = dataclasses.replace(config, num_buckets=default_num_buckets(input_bytes))
    return Plan(config, list(tasks), len(files), input_bytes)


def prepare(plan: Plan, tokenizer) -> TokenizerRef:
    """Clear the output of any previous run and put the tokenizer there for the workers."""
    out = prepare_output(plan.config.output)
    return TokenizerRef.save(tokenizer, out.path(TOKENIZER_NAME))


def shard_set_spec(
    plan: Plan, tokenizer_ref: TokenizerRef, run_info: dict | None = None
) -> ShardSetSpec:
    config = plan.config
    return ShardSetSpec(
        output=config.output,
        dtype=str(np.dtype(dtype_for_vocab(tokenizer_ref.vocab_size))),
        sequence_unit="sentence" if config.split_sentences else "document",
        max_failure_rate=config.max_failure_rate,
        source={
            "name": config.source,
            "input": config.input,
            "files": plan.input_files,
            "input_bytes": plan.input_bytes,
        },
        pipeline={
            **config.describe(),
            "tokenizer_spec": config.tokenizer,
            # Switched off on load: shards hold no padding and no truncated sequence.
            "tokenizer_disabled": dict(tokenizer_ref.disabled),
        },
        run={"tasks": len(plan.tasks), **(run_info or {})},
    )


def build_pipeline(
    p: beam.Pipeline,
    plan: Plan,
    tokenizer_ref: TokenizerRef,
    *,
    progress_dir: str | None = None,
    run_info: dict | None = None,
):
    """Apply the whole preprocessing graph to `p`; returns the PCollection of the final stats."""
    config = plan.config
    spec = shard_set_spec(plan, tokenizer_ref, run_info)
    keep = config.keep_rejects
    read = p | "ReadSource" >> ReadSource(
        config.source, plan.tasks, keep_failures=keep, progress_dir=progress_dir
    )
    cleaned = read["documents"] | "Clean" >> Clean(config.clean_config(), keep_rejects=keep)
    documents = cleaned["documents"]
    counts = [read["counts"], cleaned["counts"]]
    rejects = [read["failures"], cleaned["rejects"], cleaned["failures"]]
    if config.write_cleaned:  # the clean stage's output, for rerunning dedup on its own
        from pipelines.dedup.parquet import WriteDocuments

        _ = documents | "WriteCleaned" >> WriteDocuments(config.write_cleaned)
    if config.dedup:
        from pipelines.dedup import Deduplicate

        deduplicated = documents | "Deduplicate" >> Deduplicate(config.dedup_config)
        documents = deduplicated.main
        dedup_rejects = deduplicated["rejects"] | "CountDedupRejects" >> CountRejects(
            keep_rejects=keep
        )
        counts.append(dedup_rejects["counts"])
        rejects.append(dedup_rejects["rejects"])
        if keep:  # the audit of near-duplicate clusters: kept id, removed id, Jaccard
            rejects.append(deduplicated["clusters"])
    tokenized = documents | "Tokenize" >> Tokenize(
        tokenizer_ref,
        split_sentences=config.split_sentences,
        append_eod=config.append_eod,
        min_tokens=config.min_tokens,
        batch_docs=config.tokenize_batch_docs,
        batch_bytes=config.tokenize_batch_bytes,
        keep_rejects=keep,
        progress_dir=progress_dir,
    )
    counts.append(tokenized["counts"])
    rejects += [tokenized["rejects"], tokenized["failures"]]
    written = tokenized["documents"] | "WriteShards" >> WriteShards(
        config.output,
        num_buckets=config.num_buckets,
        shard_tokens=config.shard_tokens,
        dtype=spec.dtype,
        progress_dir=progress_dir,
    )
    counts.append(written["counts"])
    totals = (
        counts
        | "FlattenCounts" >> beam.Flatten()
        | "MergeCounts" >> beam.CombineGlobally(MergeCounts())
    )
    if keep:
        rejects_written = (
            rejects
            | "FlattenRejects" >> beam.Flatten()
            | "WriteRejects" >> WriteRejects(config.output, config.num_buckets)
        )
    else:
        rejects_written = p | "NoRejects" >> beam.Create([0])
    return (
        written["shards"]
        | "AllShards" >> beam.combiners.ToList()
        | "Finish"
        >> beam.ParDo(
            FinishShardSetDoFn(spec, tokenizer_ref),
            counts=beam.pvalue.AsSingleton(totals),
            rejects_written=beam.pvalue.AsSingleton(rejects_written),
        )
    )


# -- the launcher -----------------------------------------------------------------------------
def _parser(option_classes) -> argparse.ArgumentParser:
    # Beam's own parser class: some option classes add value-provider arguments to it.
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    parser = _BeamArgumentParser(
        prog="python -m pipelines.preprocess",
        allow_abbrev=False,
        description=__doc__.split("\n\n")[0],
        epilog="Every Beam pipeline option applies too (--runner, --direct_num_workers, "
        "--direct_running_mode, --project, --region, --temp_location, --setup_file, ...).",
    )
    for cls in option_classes:
        cls._add_argparse_args(parser)
    return parser


def unknown_arguments(argv: Sequence[str]) -> list[str]:
    """Flags no PipelineOptions class knows. Beam drops them with a warning, which would turn a
    typo such as --shard_tokens (ours use dashes) into a silently ignored setting."""
    every = {str(c): c for c in PipelineOptions.__subclasses__()}.values()
    _, unknown = _parser(every).parse_known_args(list(argv))
    return [arg.split("=", 1)[0] for arg in unknown if arg.startswith("-")]


def resolve_runner(options: PipelineOptions, argv: Sequence[str]):
    """(runner to pass to beam.Pipeline, is it a local Python run)."""
    standard = options.view_as(StandardOptions)
    name = standard.runner
    if name is not None and name not in LOCAL_PYTHON_RUNNERS:
        return name, name == "PrismRunner"
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    direct = options.view_as(DirectOptions)
    given = {arg.split("=", 1)[0] for arg in argv if arg.startswith("--")}
    if "--direct_running_mode" not in given:
        direct.direct_running_mode = "multi_processing"
    if "--direct_num_workers" not in given:
        direct.direct_num_workers = 0  # 0 = one worker per core
    provision = None
    if direct.direct_running_mode == "multi_processing":
        # Worker processes start with `python -m apache_beam.runners.worker.sdk_worker_main`:
        # they must import this package from wherever it is, installed or not.
        path = os.environ.get("PYTHONPATH", "")
        if REPO_ROOT not in path.split(os.pathsep):
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, path) if p)
        # Whole documents (a book is megabytes) are allocated and freed all run long; with
        # glibc's adaptive mmap threshold they end up on the heap and fragment it, so a
        # worker's memory crept up with the corpus size. A fixed threshold keeps them in mmap
        # chunks that go back to the OS: worker memory stays flat (bench/results/preprocess.md).
        os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(128 << 10))
        # This runner hands its workers no pipeline options of their own; without a log level
        # they log every gRPC channel they open at INFO.
        level = options.view_as(WorkerOptions).default_sdk_harness_log_level or "WARNING"
        provision = _provision_info({"default_sdk_harness_log_level": level})
    return FnApiRunner(provision_info=provision), True


def _provision_info(worker_options: dict):
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
    from google.protobuf import struct_pb2

    struct = struct_pb2.Struct()
    struct.update(worker_options)
    return ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(
            retrieval_token="unused-retrieval-token", pipeline_options=struct
        )
    )


def worker_count(options: PipelineOptions) -> int:
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "in_memory":
        return 1
    return direct.direct_num_workers or multiprocessing.cpu_count()


def _metrics_summary(result) -> dict[str, int]:
    from apache_beam.metrics.metric import MetricsFilter

    try:
        found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    except Exception:  # a runner without metrics support
        return {}
    totals: dict[str, int] = {}
    for counter in found:
        value = counter.committed if counter.committed is not None else counter.attempted
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + int(value or 0)
    return dict(sorted(totals.items()))


def _read_stats(output: str) -> dict | None:
    out = OutputDir(output)
    if out.size(STATS_NAME) is None:
        return None
    return json.loads(out.read_bytes(STATS_NAME))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("apache_beam", "root"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from pipelines.tokenize import load_tokenizer

    if "-h" in argv or "--help" in argv:
        _parser([PreprocessOptions]).print_help()
        return 0
    options = PipelineOptions(argv)
    try:
        unknown = unknown_arguments(argv)
        if unknown:
            raise ValueError(f"unknown option(s): {', '.join(unknown)}")
        config = PreprocessConfig.from_options(options)
        tokenizer = load_tokenizer(config.tokenizer, lowercase=config.lowercase)
        if config.append_eod and "eod" not in tokenizer.special_ids:
            raise ValueError(
                f"--append-eod: the {tokenizer.kind} tokenizer has no end-of-document token"
            )
        plan = plan_run(config)
        runner, local = resolve_runner(options, argv)
        tokenizer_ref = prepare(plan, tokenizer)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"preprocess: error: {e}", file=sys.stderr)
        return 2
    config = plan.config
    workers = worker_count(options) if local else None
    if local and workers and workers > 1:
        # Each worker process is one core's worth of work: keep tokenizers' own thread pools
        # from multiplying that.
        os.environ.setdefault("RAYON_NUM_THREADS", "1")
    run_info = {
        "runner": type(runner).__name__ if not isinstance(runner, str) else runner,
        "workers": workers,
        "running_mode": options.view_as(DirectOptions).direct_running_mode if local else None,
        "started_at": time.time(),
    }
    LOG.info(
        "%s: %d files (%.1f MB) in %d tasks -> %s, %d buckets, %s",
        config.source,
        plan.input_files,
        plan.input_bytes / 1e6,
        len(plan.tasks),
        config.output,
        config.num_buckets,
        f"{workers} local workers" if local else run_info["runner"],
    )
    progress_dir = tempfile.mkdtemp(prefix="preprocess-progress-") if local else None
    display = None
    try:
        p = beam.Pipeline(runner=runner, options=options)
        build_pipeline(p, plan, tokenizer_ref, progress_dir=progress_dir, run_info=run_info)
        if progress_dir and config.progress_interval > 0:
            display = ProgressDisplay(progress_dir, len(plan.tasks), config.progress_interval)
            display.start()
        result = p.run()
        result.wait_until_finish()
    except Exception as e:
        if display:
            display.stop()
        stats = _read_stats(config.output)
        if stats and stats.get("status") == "failed":
            print(format_report(stats), file=sys.stderr)
            print(f"preprocess: FAILED: {stats['error']}", file=sys.stderr)
        else:
            print(f"preprocess: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        if progress_dir:
            shutil.rmtree(progress_dir, ignore_errors=True)
    if display:
        display.stop()
    stats = _read_stats(config.output)
    if stats is None:  # a remote runner that returned before the job finished
        print(f"preprocess: submitted; stats.json will appear in {config.output}", file=sys.stderr)
        return 0
    print(format_report(stats))
    metrics = _metrics_summary(result)
    if metrics:
        print(
            "Beam metrics (namespace pipelines): "
            + ", ".join(f"{k}={v:,}" for k, v in metrics.items())
        )
    print(f"shard set: {config.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
