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
a JSONL file's lines, or a Parquet file's rows (`pipelines.dedup.sizing`), and a component has
at most that many. Where the input gives no
bound (a remote listing without sizes, no expansion limit on compressed input) it is
FALLBACK_CC_ROUNDS, the former fixed default, which is also the most it is sized to: the bound
from bytes is loose (a compressed dump is bounded by its expansion limit; a plain book file,
which is one document, is counted as one), so without the cap a small real input unrolled more
rounds than before (the demo's Wikipedia dump 25), and a component too big for 16 rounds
still fails the run loudly, naming the --dedup-cc-rounds to use. `--dedup-cc-rounds N` sets
it outright.
"""

from __future__ import annotations

import argparse
import dataclasses

from pipelines.dedup.components import rounds_for
from pipelines.dedup.decontaminate import DecontaminationConfig
from pipelines.dedup.shingles import SHINGLE_KINDS

SCOPES = ("all", "source")
# Rounds when the input's size gives no bound on the documents (the fixed default before they
# were sized to the input), and the most a bound sizes them to (module docstring).
FALLBACK_CC_ROUNDS = 16


@dataclasses.dataclass(frozen=True)
class DedupConfig:
    """Settings of `Deduplicate`. Defaults: the near-duplicate threshold J >= 0.8 on 5-word
    shingles, 14 x 8 MinHash LSH with exact verification, across all sources.

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

    threshold: float = 0.8
    shingle: str = "word"
    ngram: int = 5
    bands: int = 14
    rows: int = 8
    seed: int = 1
    verify: bool = True
    max_pairs_members: int = 100
    cc_rounds: int | None = None
    scope: str = "all"
    exact: bool = True
    url: bool = True
    near: bool = True
    source_priority: tuple[str, ...] = ()
    eval_files: tuple[str, ...] = ()
    decontam_ngram: int = 13
    decontam_frequent_docs: int = 10
    batch_docs: int = 512
    batch_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"dedup threshold must be in (0, 1], not {self.threshold}")
        if self.shingle not in SHINGLE_KINDS:
            raise ValueError(f"shingle must be one of {SHINGLE_KINDS}, not {self.shingle!r}")
        if self.scope not in SCOPES:
            raise ValueError(f"dedup scope must be one of {SCOPES}, not {self.scope!r}")
        for name in ("ngram", "bands", "rows", "cc_rounds", "batch_docs", "batch_bytes"):
            if name == "cc_rounds" and self.cc_rounds is None:
                continue
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)}")
        if self.bands > 255:
            raise ValueError(f"at most 255 bands, not {self.bands}")
        if self.max_pairs_members < 2:
            raise ValueError(f"max_pairs_members must be >= 2, not {self.max_pairs_members}")
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
        return cls(
            threshold=args.dedup_threshold,
            shingle=args.dedup_shingle,
            ngram=args.dedup_ngram,
            bands=args.dedup_bands,
            rows=args.dedup_rows,
            seed=args.dedup_seed,
            verify=args.dedup_verify,
            max_pairs_members=args.dedup_bucket_cap,
            cc_rounds=args.dedup_cc_rounds,
            scope=args.dedup_scope,
            exact=args.dedup_exact,
            url=args.dedup_url,
            near=args.dedup_near,
            source_priority=tuple(s for s in args.dedup_source_priority.split(",") if s),
            eval_files=tuple(args.decontaminate),
            decontam_ngram=args.decontaminate_ngram,
        )


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


def add_dedup_arguments(parser: argparse.ArgumentParser, *, with_disable_flag: bool = True) -> None:
    """Add the dedup flags (one argument group) to a CLI; `DedupConfig.from_args` reads them.

    with_disable_flag adds --no-dedup (args.dedup is then False), for pipelines where dedup is
    one optional stage.
    """
    d = DedupConfig()
    group = parser.add_argument_group("deduplication")
    if with_disable_flag:
        group.add_argument(
            "--no-dedup", dest="dedup", action="store_false", help="skip deduplication entirely"
        )
    group.add_argument(
        "--dedup-threshold",
        type=float,
        default=d.threshold,
        help=f"Jaccard similarity at or above which documents are near-duplicates ({d.threshold})",
    )
    group.add_argument(
        "--dedup-scope",
        choices=SCOPES,
        default=d.scope,
        help="all: find duplicates across sources (default); source: only within each source",
    )
    group.add_argument(
        "--dedup-shingle",
        choices=SHINGLE_KINDS,
        default=d.shingle,
        help="shingle words (default) or characters",
    )
    group.add_argument(
        "--dedup-ngram",
        type=int,
        default=d.ngram,
        help=f"words (or characters) per shingle ({d.ngram})",
    )
    group.add_argument("--dedup-bands", type=int, default=d.bands, help=f"LSH bands ({d.bands})")
    group.add_argument(
        "--dedup-rows", type=int, default=d.rows, help=f"MinHash rows per band ({d.rows})"
    )
    group.add_argument("--dedup-seed", type=int, default=d.seed, help="MinHash permutation seed")
    group.add_argument(
        "--dedup-no-verify",
        dest="dedup_verify",
        action="store_false",
        help="accept LSH candidates without computing their exact Jaccard (cheaper, less precise)",
    )
    group.add_argument(
        "--dedup-bucket-cap",
        type=int,
        default=d.max_pairs_members,
        help="LSH buckets with more members are chained to their smallest document "
        f"instead of linking all pairs ({d.max_pairs_members})",
    )
    group.add_argument(
        "--dedup-cc-rounds",
        type=_rounds_flag,
        default=d.cc_rounds,
        metavar="N|auto",
        help="connected-components rounds; the run fails if they do not suffice (auto: enough "
        f"for the input's size, or {FALLBACK_CC_ROUNDS} where its size is unknown)",
    )
    group.add_argument(
        "--dedup-source-priority",
        default="",
        help="comma-separated sources to keep first within a duplicate group, e.g. wikipedia,books "
        "(then the smallest document id)",
    )
    group.add_argument(
        "--no-exact-dedup", dest="dedup_exact", action="store_false", help="skip exact-text dedup"
    )
    group.add_argument(
        "--no-url-dedup", dest="dedup_url", action="store_false", help="skip URL dedup"
    )
    group.add_argument(
        "--no-near-dedup",
        dest="dedup_near",
        action="store_false",
        help="skip MinHash near-duplicate dedup",
    )
    group.add_argument(
        "--decontaminate",
        nargs="+",
        default=[],
        metavar="EVAL_FILE",
        help="evaluation sets (text lines or JSON lines with 'text'; globs ok) whose 13-grams "
        "are cut out of the training documents, as Megatron's filter_ngrams.py does",
    )
    group.add_argument(
        "--decontaminate-ngram",
        type=int,
        default=d.decontam_ngram,
        help=f"n-gram length for decontamination ({d.decontam_ngram})",
    )
