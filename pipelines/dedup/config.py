"""Every deduplication setting, its default and why, and the command-line flags that set them.

Bands x rows. Two documents of Jaccard similarity J share an LSH bucket with probability
1 - (1 - J^r)^b. With exact-Jaccard verification on (the default), LSH only has to *propose*
every pair at or above the threshold, and verification removes the false candidates, so the
S-curve should sit a little below the threshold: 14 bands x 8 rows (112 permutations, the
FineWeb setting) proposes a pair at J = 0.8 with p = 0.92, at 0.85 with p = 0.99 and at 0.9
with p = 0.9996, while pairs at J = 0.5 reach verification only 5% of the time. Without
verification, candidates are final, and an S-curve centred on the threshold is the better
trade: 20 x 13 ((1/20)^(1/13) = 0.79) is the usual choice (`--dedup-bands 20 --dedup-rows 13`).
bench/bench_dedup_quality.py measures precision/recall/F1 for these and other settings.

Connected-components rounds. Each unrolled round is a few Beam stages whether or not it has
anything to do (~50 ms of start-up on the DirectRunner), and a component of n documents needs
at most about log2(n) rounds (components.rounds_for). So by default (cc_rounds None, "auto")
the launcher sizes them to the input before it builds the graph (`with_rounds_for`): the
documents that can reach the components step are at most the input's characters of text over
the fewest characters a document needs to get there (preprocess: its cleaning's min_chars), or
a JSONL file's lines, or a Parquet file's rows (`pipelines.sources.document_bound`), and a
component has at most that many. Where the input gives no
bound (a remote listing without sizes, no expansion limit on compressed input) it is
FALLBACK_CC_ROUNDS (16), which is also the most it is sized to: the bound from bytes is loose
(a compressed dump is bounded by its expansion limit; a plain book file, which is one document,
is counted as one), so without the cap a small real input would unroll more rounds than that
(the demo's Wikipedia dump 25), and a component too big for 16 rounds fails the run loudly, naming the --dedup-cc-rounds to use. `--dedup-cc-rounds N` sets
it outright.
"""

from __future__ import annotations

import argparse
import dataclasses

from apache_beam.options.pipeline_options import PipelineOptions

from common import option_fields as fields
from pipelines.dedup.components import rounds_for
from pipelines.dedup.decontaminate import DecontaminationConfig
from pipelines.dedup.shingles import SHINGLE_KINDS

SCOPES = ("all", "source")
# the argument group of --help that holds the dedup flags
FLAG_GROUP = "deduplication"
# Rounds when the input's size gives no bound on the documents (the fixed default before they
# were sized to the input), and the most a bound sizes them to (module docstring).
FALLBACK_CC_ROUNDS = 16


def _rounds_flag(value: str) -> int | None:
    """--dedup-cc-rounds: a positive count, or "auto" (None: sized to the input)."""
    if value == "auto":
        return None
    try:
        rounds = int(value)
    except ValueError:
        rounds = 0
    if rounds < 1:
        raise argparse.ArgumentTypeError(f"expected a count >= 1 or 'auto', not {value!r}")
    return rounds


def _comma_list(value: str) -> tuple[str, ...]:
    return tuple(s for s in value.split(",") if s)


@dataclasses.dataclass(frozen=True)
class DedupConfig:
    """Settings of `Deduplicate`, each declaring its flag (`common.option_fields`).
    Defaults: the near-duplicate threshold J >= 0.8 on 5-word shingles, 14 x 8 MinHash LSH
    with exact verification, across all sources.

    | field | default | meaning |
    |---|---|---|
    | threshold | 0.8 | Jaccard similarity at or above which two documents are near-duplicates |
    | shingle, ngram | "word", 5 | shingles: word 5-grams (or "char" n-grams, e.g. 9) |
    | bands, rows | 14, 8 | LSH bands x rows (bands * rows MinHash permutations) |
    | seed | 1 | MinHash permutation seed: same seed, same signatures everywhere |
    | verify | True | compute the exact Jaccard of every candidate pair; drop those below |
    | max_pairs_members | 100 | a bucket with more members is chained to its smallest |
    | cc_rounds | None | components rounds unrolled; None: sized to the input (module doc) |
    | scope | "all" | "all": duplicates across sources; "source": only within a source |
    | exact, url, near | True | which steps run (URL, then exact text, then near-duplicates) |
    | source_priority | () | sources kept first within a group, e.g. ("wikipedia", "books") |
    | eval_files | () | evaluation sets to cut out (13-grams); empty: no decontamination |
    | batch_docs, batch_bytes | 512, 1 MiB | MinHash batch: bounds a worker's memory |
    """

    threshold: float = fields.option(
        0.8,
        flag="--dedup-threshold",
        check=fields.within(0, 1, low_open=True),
        help="Jaccard similarity at or above which documents are near-duplicates (%(default)s)",
    )
    shingle: str = fields.option(
        "word",
        flag="--dedup-shingle",
        choices=SHINGLE_KINDS,
        help="shingle words (default) or characters",
    )
    ngram: int = fields.option(
        5,
        flag="--dedup-ngram",
        check=fields.at_least(1),
        help="words (or characters) per shingle (%(default)s)",
    )
    bands: int = fields.option(
        14, flag="--dedup-bands", check=fields.within(1, 255), help="LSH bands (%(default)s)"
    )
    rows: int = fields.option(
        8, flag="--dedup-rows", check=fields.at_least(1), help="MinHash rows per band (%(default)s)"
    )
    seed: int = fields.option(1, flag="--dedup-seed", help="MinHash permutation seed")
    verify: bool = fields.option(
        True,
        flag="--dedup-no-verify",
        dest="dedup_verify",
        help="accept LSH candidates without computing their exact Jaccard (cheaper, less precise)",
    )
    max_pairs_members: int = fields.option(
        100,
        flag="--dedup-bucket-cap",
        check=fields.at_least(2),
        help="LSH buckets with more members are chained to their smallest document "
        "instead of linking all pairs (%(default)s)",
    )
    cc_rounds: int | None = fields.option(
        None,
        flag="--dedup-cc-rounds",
        type=_rounds_flag,
        check=fields.at_least(1),
        metavar="N|auto",
        help="connected-components rounds; the run fails if they do not suffice (auto: enough "
        f"for the input's size, or {FALLBACK_CC_ROUNDS} where its size is unknown)",
    )
    scope: str = fields.option(
        "all",
        flag="--dedup-scope",
        choices=SCOPES,
        help="all: find duplicates across sources (default); source: only within each source",
    )
    exact: bool = fields.option(
        True, flag="--no-exact-dedup", dest="dedup_exact", help="skip exact-text dedup"
    )
    url: bool = fields.option(True, flag="--no-url-dedup", dest="dedup_url", help="skip URL dedup")
    near: bool = fields.option(
        True,
        flag="--no-near-dedup",
        dest="dedup_near",
        help="skip MinHash near-duplicate dedup",
    )
    source_priority: tuple[str, ...] = fields.option(
        (),
        flag="--dedup-source-priority",
        type=_comma_list,
        help="comma-separated sources to keep first within a duplicate group, e.g. wikipedia,books "
        "(then the smallest document id)",
    )
    eval_files: tuple[str, ...] = fields.option(
        (),
        flag="--decontaminate",
        nargs="+",
        metavar="EVAL_FILE",
        help="evaluation sets (text lines or JSON lines with 'text'; globs ok) whose 13-grams "
        "are cut out of the training documents, as Megatron's filter_ngrams.py does",
    )
    decontam_ngram: int = fields.option(
        13,
        flag="--decontaminate-ngram",
        help="n-gram length for decontamination (%(default)s)",
    )
    decontam_frequent_docs: int = 10
    batch_docs: int = fields.option(512, check=fields.at_least(1), cli=False)
    batch_bytes: int = fields.option(1 << 20, check=fields.at_least(1), cli=False)

    def __post_init__(self) -> None:
        fields.check_options(self)
        object.__setattr__(self, "source_priority", tuple(self.source_priority))
        object.__setattr__(self, "eval_files", tuple(self.eval_files))

    def with_rounds_for(self, max_documents: int | None) -> DedupConfig:
        """This config with cc_rounds decided: as given, else enough for a component of
        `max_documents` (an upper bound on the documents reaching the components step; None:
        unknown, FALLBACK_CC_ROUNDS)."""
        if self.cc_rounds is not None:
            return self
        rounds = FALLBACK_CC_ROUNDS
        if max_documents is not None:
            rounds = min(rounds, rounds_for(max_documents))
        return dataclasses.replace(self, cc_rounds=rounds)

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows

    @property
    def decontamination(self) -> DecontaminationConfig | None:
        if not self.eval_files:
            return None
        return DecontaminationConfig(
            eval_files=self.eval_files,
            ngram=self.decontam_ngram,
            min_ngram=min(8, self.decontam_ngram),
            frequent_docs=self.decontam_frequent_docs,
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DedupConfig:
        """The config of flags added by `add_dedup_arguments`."""
        return fields.from_namespace(cls, args)

    @classmethod
    def from_options(cls, options: PipelineOptions) -> DedupConfig:
        """The config of a Beam command's dedup flags (`DedupOptions`)."""
        return cls.from_args(options.view_as(DedupOptions))


def add_dedup_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the dedup flags to a CLI, in its FLAG_GROUP argument group (where preprocess's
    --no-dedup is too); `DedupConfig.from_args` reads them."""
    fields.add_options(parser, DedupConfig, group=FLAG_GROUP)


class DedupOptions(PipelineOptions):
    """The dedup flags on Beam's parser, for a command that runs dedup as one of its stages
    (preprocess); the dedup command's own parser takes them itself (`add_dedup_arguments`)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        add_dedup_arguments(parser)
