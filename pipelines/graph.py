"""The preprocess graph: what the launcher plans before building it (`plan_run`), the output it
claims (`prepare`), and the graph itself (`build_pipeline`): ReadSource -> Clean ->
Deduplicate (unless --no-dedup) -> Tokenize -> WriteShards -> Finish."""

from __future__ import annotations

import collections
import dataclasses
import logging
from typing import TYPE_CHECKING

import apache_beam as beam
import numpy as np

from dataset_format import dtype_for_vocab
from pipelines.clean.transforms import Clean
from pipelines.document import with_min_tokens
from pipelines.inputs import match_patterns
from pipelines.options import PreprocessConfig
from pipelines.runner.runners import tokenizer_threads
from pipelines.sources import (
    check_input,
    check_options,
    get_source,
    sized_read_options,
    source_traits,
)
from pipelines.sources.formats import check_input_format
from pipelines.sources.transforms import ReadSource
from pipelines.stage import CountRejects
from pipelines.stats import MergeCounts
from pipelines.tokenize.tokenizer_ref import TokenizerRef
from pipelines.tokenize.transforms import Tokenize
from pipelines.write import (
    TOKENIZER_NAME,
    DeleteSpillsDoFn,
    FinishShardSetDoFn,
    OutputClaim,
    ShardSetSpec,
    WriteRejects,
    WriteShards,
    claim_output,
    default_num_buckets,
)

if TYPE_CHECKING:
    from pipelines.dedup import DedupConfig
    from pipelines.io import InputFile

LOG = logging.getLogger(__name__)
# The modules unpickling the graph's DoFns imports: the runner has its workers import them
# before their first bundle (standby workers, a Dask cluster's).
WORKER_MODULES = tuple(
    sorted({stage.__module__ for stage in (ReadSource, Clean, Tokenize, WriteShards)})
)
# Input files the launcher opens to say which language the run keeps, where each file names its
# own (a few KB read from each)
LANGUAGE_PROBES = 8


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the launcher decided before building the graph."""

    config: PreprocessConfig  # num_buckets resolved
    input_files: int
    input_bytes: int
    # the workers the runner has, when the launcher knows (tasks are sized for them)
    workers: int | None = None
    # which languages the run keeps and why (`language_line`), said as the graph is built
    language: str = ""

    def read_options(self) -> dict[str, str]:
        """The source options the readers get: the user's, with the task size for this run."""
        config = self.config
        return sized_read_options(
            config.source, config.source_options, self.input_bytes, self.workers
        )


def plan_run(config: PreprocessConfig) -> Plan:
    """Match inputs (one listing: file count and total size) and fix the bucket count (from the
    input size unless given) and dedup's components rounds (from the files, unless given). Read
    tasks are planned at run time, by ReadSource."""
    # an unknown --source or a bad --source-option fails here, not on the workers
    check_options(get_source(config.source), dict(config.source_options))
    files = match_patterns(config.input)  # each file once; a pattern matching none: an error
    check_input_format(config.source, [f.path for f in files])  # a book given to wikipedia
    # the text's field missing from the first record: one line, not a failure per record
    check_input(get_source(config.source), [f.path for f in files], config.source_options)
    input_bytes = sum(f.size_bytes for f in files)
    if config.num_buckets is None:
        config = dataclasses.replace(config, num_buckets=default_num_buckets(input_bytes))
    if config.dedup:  # components rounds sized to the input (recorded in the manifest)
        config = dataclasses.replace(config, dedup_config=sized_dedup_config(config, files))
    language = language_line(config, [f.path for f in files])
    return Plan(config, len(files), input_bytes, language=language)


def sized_dedup_config(config: PreprocessConfig, files: list[InputFile]) -> DedupConfig:
    """The run's DedupConfig (None: the defaults), its components rounds sized to the documents
    of `files` that can pass cleaning."""
    from pipelines.dedup import DedupConfig
    from pipelines.dedup.sizing import sized_config
    from pipelines.sources.document_bound import input_documents_bound

    dedup = config.dedup_config or DedupConfig()
    if dedup.cc_rounds is not None:
        return dedup
    bound = input_documents_bound(
        files,
        config.source,
        config.source_options,
        config.max_expansion,
        config.clean_config().min_chars,
    )
    return sized_config(dedup, bound, ", ".join(config.input))


def language_line(config: PreprocessConfig, paths: list[str]) -> str:
    """The run's first line about the language filter: the languages it keeps and why; where
    the source's files name their own (SourceTraits.input_language), those of the first few
    files, each of which decides for its own documents on the worker that reads it."""
    clean = config.clean_config()
    default = "any" if clean.language == "any" else ",".join(clean.language)
    if not clean.language_from_source:
        why = "--language" if config.language is not None else "the default; --language sets it"
        return f"language: {default} ({why})"
    from pipelines.clean import supported_languages

    probe = source_traits(config.source).input_language
    found = [code for code in map(probe, paths[:LANGUAGE_PROBES]) if code is not None]
    unknown = " (not one the identifier knows: no document of it is dropped for its language)"
    named = [
        f"{code}{'' if code in supported_languages() else unknown}"
        if code
        else f"{default} (the input names none)"
        for code in found
    ]
    unopened = len(paths) - LANGUAGE_PROBES
    more = f"; {unopened} more files not opened" if unopened > 0 else ""
    if len(set(named)) == 1 and not more:
        return f"language: {named[0]} (from the input's own siteinfo; --language overrides)"
    counts = ", ".join(f"{name}: {n} file(s)" for name, n in collections.Counter(named).items())
    return (
        f"language: each input file's own, from its siteinfo: {counts}{more}; --language overrides"
    )


def prepare(plan: Plan, tokenizer, run_id: str) -> tuple[OutputClaim, TokenizerRef]:
    """Lock the output, clear what a previous run of ours left there, and put the tokenizer
    there for the workers. The caller releases the claim when the run is over."""
    config = plan.config
    claim = claim_output(
        config.output, run_id=run_id, overwrite=config.overwrite, needed_bytes=plan.input_bytes
    )
    try:
        return claim, TokenizerRef.save(tokenizer, claim.out.path(TOKENIZER_NAME))
    except BaseException:
        claim.release()
        raise


def drop_flags(config: PreprocessConfig) -> dict[str, str]:
    """Each drop reason of the graph's stages -> what changes it, as each stage declares."""
    from pipelines.clean import FILTER_FLAGS
    from pipelines.tokenize.encode import DROP_FLAGS as TOKENIZE_FLAGS

    flags = {**FILTER_FLAGS, **TOKENIZE_FLAGS}
    if config.dedup:
        from pipelines.dedup.transforms import DROP_FLAGS as DEDUP_FLAGS

        flags.update(DEDUP_FLAGS)
    return flags


def shard_set_spec(
    plan: Plan, tokenizer_ref: TokenizerRef, run_info: dict | None = None
) -> ShardSetSpec:
    config = plan.config
    return ShardSetSpec(
        output=config.output,
        dtype=str(np.dtype(dtype_for_vocab(tokenizer_ref.vocab_size))),
        sequence_unit="sentence" if config.split_sentences else "document",
        max_failure_rate=config.max_failure_rate,
        max_drop_share=config.max_drop_share,
        drop_flags=drop_flags(config),
        source={
            "name": config.source,
            "input": list(config.input),
            "files": plan.input_files,
            "input_bytes": plan.input_bytes,
        },
        pipeline={
            **config.describe(),
            "tokenizer_spec": config.tokenizer,
            # Switched off on load: shards hold no padding and no truncated sequence.
            "tokenizer_disabled": dict(tokenizer_ref.disabled),
        },
        run=dict(run_info or {}),
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
    if plan.language:
        LOG.info("%s", plan.language)
    spec = shard_set_spec(plan, tokenizer_ref, run_info)
    keep = config.keep_rejects
    read = p | "ReadSource" >> ReadSource(
        config.source,
        config.input,
        plan.read_options(),
        keep_failures=keep,
        progress_dir=progress_dir,
        max_expansion=config.max_expansion,
    )
    cleaned = read["documents"] | "Clean" >> Clean(config.clean_config(), keep_rejects=keep)
    documents = cleaned["documents"]
    counts = [read["counts"], cleaned["counts"]]
    rejects = [read["failures"], cleaned["rejects"], cleaned["failures"]]
    if config.write_cleaned:  # the clean stage's output, for rerunning dedup on its own
        from pipelines.dedup.parquet import WriteDocuments

        # each carrying this run's token floor, which the last pass of a staged run applies
        _ = (
            documents
            | "CarryMinTokens" >> beam.Map(with_min_tokens, config.min_tokens)
            | "WriteCleaned" >> WriteDocuments(config.write_cleaned)
        )
    if config.dedup:
        from pipelines.dedup import Deduplicate
        from pipelines.dedup.stash import stash_buckets, stash_dir

        deduplicated = documents | "Deduplicate" >> Deduplicate(
            config.dedup_config, stash_dir(config.output), stash_buckets(plan.input_bytes)
        )
        documents = deduplicated.main
        dedup_rejects = deduplicated["rejects"] | "CountDedupRejects" >> CountRejects(
            keep_rejects=keep
        )
        counts += [dedup_rejects["counts"], deduplicated["counts"]]  # + dedup's shuffle bytes
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
        threads=tokenizer_threads(p.options),
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
    # Side inputs of the one finishing step, which runs from an Impulse: a CombineGlobally's
    # default or a ToList as its main input added 5-8 transforms each (a Create, its reshuffle,
    # maps), and every transform costs a small run a few ms of CPU to build and start whatever
    # data flows (bench/results/startup.md).
    totals = (
        counts
        | "FlattenCounts" >> beam.Flatten()
        | "MergeCounts" >> beam.CombineGlobally(MergeCounts()).without_defaults()
    )
    rejects_written = 0
    if keep:
        rejects_written = beam.pvalue.AsSingleton(
            rejects
            | "FlattenRejects" >> beam.Flatten()
            | "WriteRejects" >> WriteRejects(config.output, config.num_buckets)
        )
    finished = (
        p
        | "Once" >> beam.Impulse()
        | "Finish"
        >> beam.ParDo(
            FinishShardSetDoFn(spec, tokenizer_ref),
            shards=beam.pvalue.AsList(written["shards"]),
            counts=beam.pvalue.AsSingleton(totals, default_value={}),
            rejects_written=rejects_written,
        )
    )
    # Only once the set is finished (the side input waits for it), one bucket per element.
    _ = written["spills"] | "DeleteSpills" >> beam.ParDo(
        DeleteSpillsDoFn(config.output), finished=beam.pvalue.AsSingleton(finished)
    )
    return finished
