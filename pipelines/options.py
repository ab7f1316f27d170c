"""Command-line options of `python -m pipelines.preprocess`, as Beam PipelineOptions.

Our flags use dashes (`--shard-tokens`), Beam's own use underscores (`--direct_num_workers`);
both are parsed from the same command line, and every Beam option passes through untouched.
`PreprocessConfig.from_options` turns the parsed flags into the settings the pipeline uses,
with the per-source defaults filled in.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.stats import DEFAULT_MAX_DROP_SHARE, DEFAULT_MAX_FAILURE_RATE
from pipelines.write import DEFAULT_SHARD_TOKENS

# Megatron's OpenWebText cleanup drops web documents under 128 GPT-2 tokens; curated sources
# keep every document that has a token at all (tokenize_batch always drops empty ones).
DEFAULT_MIN_TOKENS = {"webtext": 128}
DEFAULT_TOKENIZE_BATCH_DOCS = 256
DEFAULT_TOKENIZE_BATCH_BYTES = 4 << 20
# Text of real corpora compresses 3-10x (zstd on repetitive web text up to ~30x); far past that
# is a decompression bomb (1 MB of .zst holding gigabytes of lines).
DEFAULT_MAX_EXPANSION = 100.0
# Seconds without progress after which a local run is ended: generous, since one document or
# one task of a slow format may keep a worker busy for minutes without moving a counter.
DEFAULT_STALL_TIMEOUT = 1800.0


def _source_names() -> list[str]:
    from pipelines.sources import SOURCES

    return sorted(SOURCES)


class PreprocessOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        group = parser.add_argument_group("preprocess")
        group.add_argument("--source", choices=_source_names(), help="input format")
        group.add_argument(
            "--input", help="glob of input files: a local path or a gs://, s3://, fsspec URL"
        )
        group.add_argument("--output", help="shard-set directory: local path or URL")
        group.add_argument(
            "--tokenizer",
            help="tokenizers JSON file; 'vocab.json,merges.txt' or their directory (GPT-2 BPE); "
            "a BERT vocab.txt",
        )
        group.add_argument(
            "--lowercase",
            choices=("auto", "yes", "no"),
            default="auto",
            help="lowercase for a WordPiece vocab.txt (auto: when the vocabulary is uncased)",
        )
        group.add_argument(
            "--split-sentences",
            action="store_true",
            help="one sequence per sentence (BERT); otherwise one per document",
        )
        group.add_argument(
            "--append-eod",
            action="store_true",
            help="append the end-of-document token to every document (GPT)",
        )
        group.add_argument(
            "--min-tokens",
            type=int,
            default=None,
            help="drop documents with fewer tokens (default: 128 for webtext, else 0: drop "
            "only documents with no tokens)",
        )
        group.add_argument(
            "--language",
            default="en",
            help="keep documents in these languages: 'en', 'en,fr', or 'any' (default en)",
        )
        group.add_argument(
            "--shard-tokens",
            type=int,
            default=DEFAULT_SHARD_TOKENS,
            help=f"most tokens per shard (default {DEFAULT_SHARD_TOKENS:,}); a longer single "
            "document gets a shard of its own",
        )
        group.add_argument(
            "--num-buckets",
            type=int,
            default=None,
            help="hash buckets documents are spread over (= how many workers write shards); "
            "default: one per 256 MiB of input",
        )
        group.add_argument(
            "--max-failure-rate",
            type=float,
            default=DEFAULT_MAX_FAILURE_RATE,
            help="fail the run when more than this fraction of records cannot be read, or "
            "of input bytes is lost to files that broke off (a truncated or corrupt "
            f"compressed stream; see stats.json files_broken_off) (default "
            f"{DEFAULT_MAX_FAILURE_RATE})",
        )
        group.add_argument(
            "--max-drop-share",
            type=float,
            default=DEFAULT_MAX_DROP_SHARE,
            help="fail the run when one reason (a filter, dedup) drops at least this share of "
            "the documents read: a broken filter or model drops everything and must not pass "
            f"as a run (default {DEFAULT_MAX_DROP_SHARE}: all of them; 0: no bound)",
        )
        group.add_argument(
            "--keep-rejects",
            action="store_true",
            help="write every dropped document and failed record to OUTPUT/rejects/*.jsonl",
        )
        group.add_argument(
            "--write-cleaned",
            default=None,
            metavar="PREFIX",
            help="also write the cleaned documents (before dedup) to PREFIX-*.parquet, the "
            "input of `python -m pipelines.dedup`, so stages can be rerun independently",
        )
        group.add_argument(
            "--source-option",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="an option for the source's planner/reader, e.g. wiki_task_mb=32 (repeatable)",
        )
        group.add_argument(
            "--tokenize-batch-docs",
            type=int,
            default=DEFAULT_TOKENIZE_BATCH_DOCS,
            help="documents per encode_batch call",
        )
        group.add_argument(
            "--overwrite",
            action="store_true",
            help="replace a finished shard set in OUTPUT (deleted when the run starts); "
            "without it such a directory is refused",
        )
        group.add_argument(
            "--max-expansion",
            type=float,
            default=DEFAULT_MAX_EXPANSION,
            help="most bytes of text one read task may produce per byte of its input (a "
            "decompression bomb stops there as a counted failure; 0: no bound; default "
            f"{DEFAULT_MAX_EXPANSION:g})",
        )
        group.add_argument(
            "--verbose",
            action="store_true",
            help="also show Beam's own log messages (hidden in a normal run)",
        )
        group.add_argument(
            "--progress-interval",
            type=float,
            default=5.0,
            help="seconds between progress lines of a local run (0: none)",
        )
        parser.add_argument(
            "--stall-timeout",
            type=float,
            default=DEFAULT_STALL_TIMEOUT,
            help="end a local run whose workers make no progress for this many seconds, with "
            "one line naming the stage (a stopped or hung worker); the progress line shows how "
            f"long it has been idle (default {DEFAULT_STALL_TIMEOUT:g}; 0: no limit)",
        )
        from pipelines.dedup import add_dedup_arguments

        add_dedup_arguments(parser)  # its own group, with --no-dedup


def parse_source_options(items: list[str]) -> dict[str, str]:
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--source-option {item!r}: expected KEY=VALUE")
        options[key.strip()] = value.strip()
    return options


@dataclasses.dataclass(frozen=True)
class PreprocessConfig:
    """Everything the pipeline needs, resolved (no None left but num_buckets before planning)."""

    source: str
    input: str
    output: str
    tokenizer: str
    split_sentences: bool = False
    append_eod: bool = False
    min_tokens: int | None = None
    language: str = "en"
    lowercase: bool | None = None
    shard_tokens: int = DEFAULT_SHARD_TOKENS
    num_buckets: int | None = None
    max_failure_rate: float = DEFAULT_MAX_FAILURE_RATE
    max_drop_share: float = DEFAULT_MAX_DROP_SHARE
    keep_rejects: bool = False
    write_cleaned: str | None = None
    dedup: bool = True
    dedup_config: object = None  # pipelines.dedup.DedupConfig (None: its defaults)
    source_options: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tokenize_batch_docs: int = DEFAULT_TOKENIZE_BATCH_DOCS
    tokenize_batch_bytes: int = DEFAULT_TOKENIZE_BATCH_BYTES
    progress_interval: float = 5.0
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    overwrite: bool = False
    max_expansion: float = DEFAULT_MAX_EXPANSION
    verbose: bool = False

    def __post_init__(self) -> None:
        from pipelines.sources import SOURCES

        if self.source not in SOURCES:
            raise ValueError(f"unknown source {self.source!r}; one of {', '.join(sorted(SOURCES))}")
        if self.min_tokens is None:
            object.__setattr__(self, "min_tokens", DEFAULT_MIN_TOKENS.get(self.source, 0))
        if self.dedup and self.dedup_config is None:
            from pipelines.dedup import DedupConfig

            object.__setattr__(self, "dedup_config", DedupConfig())
        for name in ("shard_tokens", "tokenize_batch_docs", "tokenize_batch_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.num_buckets is not None and self.num_buckets <= 0:
            raise ValueError(f"num_buckets must be positive, got {self.num_buckets}")
        if self.min_tokens < 0:
            raise ValueError(f"min_tokens must be >= 0, got {self.min_tokens}")
        if not self.max_expansion >= 0:  # also refuses NaN
            raise ValueError(f"max_expansion must be >= 0, got {self.max_expansion}")
        if not (0.0 <= self.max_failure_rate <= 1.0) or math.isnan(self.max_failure_rate):
            raise ValueError(f"max_failure_rate must be in [0, 1], got {self.max_failure_rate}")
        if not self.stall_timeout >= 0:  # also refuses NaN
            raise ValueError(f"stall_timeout must be >= 0, got {self.stall_timeout}")
        if not 0.0 <= self.max_drop_share <= 1.0:  # also refuses NaN
            raise ValueError(f"max_drop_share must be in [0, 1], got {self.max_drop_share}")

    @classmethod
    def from_options(cls, options: PipelineOptions) -> PreprocessConfig:
        view = options.view_as(PreprocessOptions)
        missing = [
            f"--{name}"
            for name in ("source", "input", "output", "tokenizer")
            if not getattr(view, name)
        ]
        if missing:
            raise ValueError(f"missing required option(s): {', '.join(missing)}")
        dedup_config = None
        if view.dedup:
            from pipelines.dedup import DedupConfig

            dedup_config = DedupConfig.from_args(view)
        return cls(
            source=view.source,
            input=view.input,
            output=view.output,
            tokenizer=view.tokenizer,
            split_sentences=view.split_sentences,
            append_eod=view.append_eod,
            min_tokens=view.min_tokens,
            language=view.language,
            lowercase={"auto": None, "yes": True, "no": False}[view.lowercase],
            shard_tokens=view.shard_tokens,
            num_buckets=view.num_buckets,
            max_failure_rate=view.max_failure_rate,
            max_drop_share=view.max_drop_share,
            keep_rejects=view.keep_rejects,
            write_cleaned=view.write_cleaned,
            dedup=view.dedup,
            dedup_config=dedup_config,
            source_options=parse_source_options(view.source_option),
            tokenize_batch_docs=view.tokenize_batch_docs,
            progress_interval=view.progress_interval,
            stall_timeout=view.stall_timeout,
            overwrite=view.overwrite,
            max_expansion=view.max_expansion,
            verbose=view.verbose,
        )

    def clean_config(self):
        from pipelines.clean import CleanConfig

        return CleanConfig.for_source(self.source, language=self.language)

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
