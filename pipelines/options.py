"""Command-line options of `python -m pipelines.preprocess`, as Beam PipelineOptions.

Our flags use dashes (`--shard-tokens`), Beam's own use underscores (`--direct_num_workers`);
both are parsed from the same command line, and every Beam option passes through untouched.
Each flag is declared once, by its field of `PreprocessConfig` (the dedup stage's by
`DedupConfig`'s, on Beam's parser through `pipelines.dedup.DedupOptions`, which the command
adds); `PreprocessConfig.from_options` turns the parsed flags into the settings the pipeline
uses, with the per-source defaults filled in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from apache_beam.options.pipeline_options import PipelineOptions

from common.option_fields import (
    NON_NEGATIVE,
    POSITIVE,
    add_options,
    check_options,
    from_namespace,
    option,
    within,
)
from pipelines.inputs import (
    INPUT_ARGUMENT,
    INPUT_HELP,
    INPUT_LIST_HELP,
    as_patterns,
    input_patterns,
)
from pipelines.stats import DEFAULT_MAX_DROP_SHARE, DEFAULT_MAX_FAILURE_RATE
from pipelines.write import DEFAULT_SHARD_TOKENS

DEFAULT_TOKENIZE_BATCH_DOCS = 256
DEFAULT_TOKENIZE_BATCH_BYTES = 4 << 20
# Text of real corpora compresses 3-10x (zstd on repetitive web text up to ~30x); far past that
# is a decompression bomb (1 MB of .zst holding gigabytes of lines).
DEFAULT_MAX_EXPANSION = 100.0
# Seconds without progress after which a local run is ended: generous, since one document or
# one task of a slow format may keep a worker busy for minutes without moving a counter.
DEFAULT_STALL_TIMEOUT = 1800.0
# The --help group of the dedup stage's flags (pipelines.dedup.config.FLAG_GROUP: dedup stands
# above this module), where --no-dedup is listed with them.
DEDUP_GROUP = "deduplication"


def _source_names() -> list[str]:
    from pipelines.sources import SOURCES

    return sorted(SOURCES)


class PreprocessOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        # Beam's parser serves every options class: a missing required flag is
        # PreprocessConfig.from_options' error, not the parser's
        add_options(parser, PreprocessConfig, group="preprocess", enforce_required=False)


def parse_source_options(items: list[str]) -> dict[str, str]:
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--source-option {item!r}: expected KEY=VALUE")
        options[key.strip()] = value.strip()
    return options


LOWERCASE = {"auto": None, "yes": True, "no": False}


@dataclasses.dataclass(frozen=True)
class PreprocessConfig:
    """Everything the pipeline needs, resolved (no None left but num_buckets before planning).
    Each field declares its flag (`common.option_fields`); PreprocessOptions adds them
    to Beam's parser."""

    source: str = option(choices=_source_names, help="input format")
    # the patterns of --input, then --input-list's (pipelines/inputs.py); from code, one
    # pattern may be a string
    input: tuple[str, ...] = option(
        help=f"input files: {INPUT_HELP}", flag_default=[], **INPUT_ARGUMENT
    )
    output: str = option(help="shard-set directory: local path or URL")
    tokenizer: str = option(
        help="tokenizers JSON file; 'vocab.json,merges.txt' or their directory (GPT-2 BPE); "
        "a BERT vocab.txt"
    )
    input_list: str | None = option(None, metavar="FILE", help=INPUT_LIST_HELP)
    lowercase: bool | None = option(
        None,
        choices=tuple(LOWERCASE),
        convert=LOWERCASE.__getitem__,
        flag_default="auto",
        help="lowercase for a WordPiece vocab.txt (auto: when the vocabulary is uncased)",
    )
    split_sentences: bool = option(
        False, help="one sequence per sentence (BERT); otherwise one per document"
    )
    append_eod: bool = option(
        False, help="append the end-of-document token to every document (GPT)"
    )
    # None: the source's default (its SourceTraits.min_tokens)
    min_tokens: int | None = option(
        None,
        check=NON_NEGATIVE,
        help="drop documents with fewer tokens (default: the source's own: 128 for web "
        "text, else 0: drop only documents with no tokens)",
    )
    # None: the source's own where its input names one (SourceTraits.input_language), else en
    language: str | None = option(
        None,
        help="keep documents in these languages: 'en', 'en,fr', or 'any' (default: a "
        "Wikipedia dump's own, from its <siteinfo>; else en)",
    )
    shard_tokens: int = option(
        DEFAULT_SHARD_TOKENS,
        check=POSITIVE,
        help=f"most tokens per shard (default {DEFAULT_SHARD_TOKENS:,}); a longer single "
        "document gets a shard of its own",
    )
    num_buckets: int | None = option(
        None,
        check=POSITIVE,
        help="hash buckets documents are spread over (= how many workers write shards); "
        "default: one per 256 MiB of input",
    )
    max_failure_rate: float = option(
        DEFAULT_MAX_FAILURE_RATE,
        check=within(0, 1),
        help="fail the run when more than this fraction of records cannot be read, or "
        "of input bytes is lost to files that broke off (a truncated or corrupt "
        "compressed stream; see stats.json files_broken_off) (default %(default)s)",
    )
    max_drop_share: float = option(
        DEFAULT_MAX_DROP_SHARE,
        check=within(0, 1),
        help="fail the run when one reason (a filter, dedup) drops at least this share of "
        "the documents read: a broken filter or model drops everything and must not pass "
        f"as a run (default {DEFAULT_MAX_DROP_SHARE}: all of them; 0: no bound)",
    )
    keep_rejects: bool = option(
        False, help="write every dropped document and failed record to OUTPUT/rejects/*.jsonl"
    )
    write_cleaned: str | None = option(
        None,
        metavar="PREFIX",
        help="also write the cleaned documents (before dedup) to PREFIX-*.parquet, the "
        "input of `python -m pipelines.dedup`, so stages can be rerun independently",
    )
    source_options: Mapping[str, str] = option(
        default_factory=dict,
        flag="--source-option",
        action="append",
        convert=parse_source_options,
        flag_default=[],
        metavar="KEY=VALUE",
        help="an option for the source's planner/reader, e.g. wiki_task_mb=32 (repeatable)",
    )
    tokenize_batch_docs: int = option(
        DEFAULT_TOKENIZE_BATCH_DOCS, check=POSITIVE, help="documents per encode_batch call"
    )
    tokenize_batch_bytes: int = option(DEFAULT_TOKENIZE_BATCH_BYTES, check=POSITIVE, cli=False)
    overwrite: bool = option(
        False,
        help="replace a finished shard set in OUTPUT (deleted when the run starts); "
        "without it such a directory is refused",
    )
    max_expansion: float = option(
        DEFAULT_MAX_EXPANSION,
        check=NON_NEGATIVE,
        help="most bytes of text one read task may produce per byte of its input (a "
        "decompression bomb stops there as a counted failure; 0: no bound; default "
        f"{DEFAULT_MAX_EXPANSION:g})",
    )
    verbose: bool = option(False, help="also show Beam's own log messages (hidden in a normal run)")
    progress_interval: float = option(
        5.0, help="seconds between progress lines of a local run (0: none)"
    )
    stall_timeout: float = option(
        DEFAULT_STALL_TIMEOUT,
        check=NON_NEGATIVE,
        help="end a local run whose workers make no progress for this many seconds, with "
        "one line naming the stage (a stopped or hung worker); the progress line shows how "
        f"long it has been idle (default {DEFAULT_STALL_TIMEOUT:g}; 0: no limit)",
    )
    dedup: bool = option(
        True, flag="--no-dedup", group=DEDUP_GROUP, help="skip deduplication entirely"
    )
    # pipelines.dedup.DedupConfig, from the dedup flags (pipelines.dedup.DedupOptions, which
    # the command parses); None: its defaults
    dedup_config: object = None

    def __post_init__(self) -> None:
        from pipelines.sources import source_traits

        object.__setattr__(self, "input", as_patterns(self.input))
        check_options(self)  # first: an unknown --source is one line, before its traits
        if self.min_tokens is None:  # the source's own default (SourceTraits.min_tokens)
            object.__setattr__(self, "min_tokens", source_traits(self.source).min_tokens)

    @classmethod
    def from_options(
        cls, options: PipelineOptions, dedup_config: object = None
    ) -> PreprocessConfig:
        """The config of preprocess's flags in `options`, with the dedup stage's
        `dedup_config` (kept where dedup runs)."""
        view = options.view_as(PreprocessOptions)
        given = {"dedup_config": dedup_config if view.dedup else None}
        if view.input or view.input_list:  # either names the inputs: neither is then missing
            given["input"] = input_patterns(view.input, view.input_list)
        return from_namespace(cls, view, **given)

    def clean_config(self):
        from pipelines.clean import CleanConfig
        from pipelines.sources import source_traits

        return CleanConfig.for_run(source_traits(self.source), self.language)

    def describe(self) -> dict:
        """The settings that decide the output's content (recorded in manifest.json)."""
        described = {
            "source": self.source,
            "split_sentences": self.split_sentences,
            "append_eod": self.append_eod,
            "min_tokens": self.min_tokens,
            "language": self.language,
            "shard_tokens": self.shard_tokens,
            "num_buckets": self.num_buckets,
            "dedup": self.dedup,
            "source_options": dict(self.source_options),
            "order": "shards by name (shard-<bucket>-<part>); documents by id within a bucket; "
            "bucket = xxh64(id) % num_buckets",
        }
        if self.dedup and dataclasses.is_dataclass(self.dedup_config):
            described["dedup_config"] = _jsonable(dataclasses.asdict(self.dedup_config))
        clean = self.clean_config()
        described["clean"] = _jsonable(dataclasses.asdict(clean))
        return described


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
