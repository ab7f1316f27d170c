"""`python -m pipelines.tokenize.train_tokenizer`: train a tokenizer on a sample of a corpus.

    python -m pipelines.tokenize.train_tokenizer --kind byte-level-bpe --source books \\
        --input 'corpus/books/*.txt' --vocab-size 32000 --output out/tokenizer.json

The sample is read through the same source reader and cleaner as `pipelines.preprocess`, so
the tokenizer sees the text it will later encode. It is spread over the input: up to
`--sample-mb` MB, first taken evenly from (at most) one read task per 256 KiB of sample (each
task's share ending at a word boundary), then, while the budget lasts, from the other tasks. Trained with Hugging Face `tokenizers`:

- byte-level-bpe (GPT): BPE with GPT-2's ByteLevel pre-tokenizer and decoder, the 256 byte
  symbols as initial alphabet, and `<|endoftext|>` as special token (id 0). Without
  --lowercase it gets the tiktoken fast path in `dataset_format.tokenizer`.
- wordpiece (BERT): WordPiece with BertNormalizer (lower-casing with --lowercase),
  BertPreTokenizer, and [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0..4).

The output is a tokenizers JSON that `dataset_format.tokenizer.load_tokenizer` (and --tokenizer of
preprocess) loads. A one-line JSON summary goes to stdout.
"""

# ruff: noqa: E402 - the stop signals' handlers go in before the imports
from __future__ import annotations

if __name__ == "__main__":
    from common.signals import exit_on_stop_signals

    exit_on_stop_signals("python -m pipelines.tokenize.train_tokenizer")

import argparse
import contextlib
import dataclasses
import json
import logging
import sys
import time
from collections.abc import Iterable, Iterator, Sequence

from common.cli import ArgumentParser
from dataset_format.tokenizer import (
    BERT_SPECIAL_TOKENS,
    EOD_TOKEN,
    TextTokenizer,
    load_tokenizer,
)
from pipelines.clean import CleanConfig, clean_document
from pipelines.document import Document, Failure
from pipelines.inputs import add_input_arguments, parsed_inputs
from pipelines.log_setup import add_stderr_handler
from pipelines.reason_log import ReasonLog
from pipelines.sources import source_traits

LOG = logging.getLogger("pipelines.tokenize.train_tokenizer")
_SKIPS = ReasonLog(LOG)  # every skip counted in stats.failures; a few logged per reason
KINDS = ("byte-level-bpe", "wordpiece")
# One read task per this much sample: enough files to be representative, few enough that
# each contributes whole paragraphs rather than a line.
BYTES_PER_TASK = 256 * 1024


@dataclasses.dataclass
class SampleStats:
    documents: int = 0
    bytes: int = 0
    rejected: int = 0
    failures: int = 0
    tasks: int = 0


def spread_indices(total: int, count: int) -> list[int]:
    """`count` indices evenly spaced over range(total) (all of them when there are no more)."""
    if total <= count:
        return list(range(total))
    return [i * total // count for i in range(count)]


def _truncate(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` within `max_bytes` UTF-8 bytes that ends at whitespace."""
    prefix = text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")
    cut = max(prefix.rfind(" "), prefix.rfind("\n"))
    return prefix[:cut] if cut > 0 else prefix


def sample_texts(
    source: str,
    patterns: str | Sequence[str],
    *,
    sample_bytes: int,
    clean_config: CleanConfig,
    stats: SampleStats,
) -> Iterator[str]:
    """Cleaned document texts from the source, up to `sample_bytes` UTF-8 bytes in all.

    Unreadable records and rejected documents are counted in `stats` (and the unreadable ones
    logged) and skipped.
    """
    from pipelines.sources import get_source

    module = get_source(source)
    tasks = module.plan(patterns, {})
    chosen = spread_indices(len(tasks), max(1, sample_bytes // BYTES_PER_TASK))
    # The evenly spread tasks first; if files are smaller than their shares, the others after.
    chosen_set = set(chosen)
    order = chosen + [i for i in range(len(tasks)) if i not in chosen_set]
    remaining = sample_bytes
    for position, task_index in enumerate(order):
        if remaining <= 0:
            break
        task = tasks[task_index]
        stats.tasks += 1
        share = remaining // max(1, len(chosen) - position)
        taken = 0
        # closing(): stop reading the file as soon as its share is taken.
        with contextlib.closing(module.read(task)) as records:
            for record in records:
                if isinstance(record, Failure):
                    stats.failures += 1
                    _SKIPS.warning(record.reason, "skipped %s: %s %s", record.location,
                                   record.reason, record.detail)
                    continue
                result = clean_document(record, clean_config)
                if not isinstance(result, Document):
                    stats.rejected += 1
                    continue
                text = result.text
                size = len(text.encode("utf-8"))
                if size > share - taken:
                    text = _truncate(text, share - taken)
                    size = len(text.encode("utf-8"))
                if text:
                    stats.documents += 1
                    stats.bytes += size
                    taken += size
                    yield text
                if taken >= share or not text:
                    break
        remaining -= taken


def train_tokenizer(
    texts: Iterable[str],
    *,
    kind: str,
    vocab_size: int,
    lowercase: bool = False,
    min_frequency: int = 2,
) -> TextTokenizer:
    """Train a `kind` tokenizer (see the module docstring) on `texts`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if kind == "byte-level-bpe":
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        if vocab_size <= len(alphabet) + 1:
            raise ValueError(f"--vocab-size {vocab_size}: byte-level BPE needs more than 257")
        tokenizer = Tokenizer(models.BPE())
        if lowercase:
            tokenizer.normalizer = normalizers.Lowercase()
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=[EOD_TOKEN],
            initial_alphabet=alphabet,
            show_progress=False,
        )
    elif kind == "wordpiece":
        if vocab_size <= len(BERT_SPECIAL_TOKENS):
            raise ValueError(f"--vocab-size {vocab_size} is too small for WordPiece")
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
        )
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece(prefix="##")
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(BERT_SPECIAL_TOKENS),
            show_progress=False,
        )
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {', '.join(KINDS)}")
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return TextTokenizer(tokenizer.to_str())


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pipelines.tokenize.train_tokenizer",
        description="Train a byte-level BPE (GPT) or WordPiece (BERT) tokenizer on a corpus sample.",
    )
    parser.add_argument("--kind", required=True, choices=KINDS)
    add_input_arguments(parser)
    parser.add_argument("--source", required=True, help="source format, as for preprocess")
    parser.add_argument("--vocab-size", required=True, type=int)
    parser.add_argument("--output", required=True, help="where to write the tokenizer JSON")
    parser.add_argument(
        "--sample-mb", type=float, default=100.0, help="MB of cleaned text to train on (100)"
    )
    parser.add_argument("--lowercase", action="store_true", help="lower-case text (uncased)")
    parser.add_argument(
        "--language",
        help='documents kept by the cleaner: "en", codes such as "en,fr", or "any" (default: '
        "a Wikipedia dump's own, from its <siteinfo>, as preprocess; else en)",
    )
    parser.add_argument("--min-frequency", type=int, default=2, help="least count of a merge (2)")
    parser.add_argument(
        "--verbose", action="store_true", help="also print other libraries' log (Beam's)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # our own messages only: reading the input imports Beam, which logs GCP notices
    root = logging.getLogger()
    level = root.level
    handler = add_stderr_handler(args.verbose, logging.INFO)
    try:
        return _train(args)
    finally:  # as it was: main() may be called from a program with logging of its own
        root.removeHandler(handler)
        root.setLevel(level)


def _train(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        inputs = parsed_inputs(args)
        clean_config = CleanConfig.for_run(source_traits(args.source), args.language)
        stats = SampleStats()
        texts = sample_texts(
            args.source,
            inputs,
            sample_bytes=int(args.sample_mb * 1_000_000),
            clean_config=clean_config,
            stats=stats,
        )
        tokenizer = train_tokenizer(
            texts,
            kind=args.kind,
            vocab_size=args.vocab_size,
            lowercase=args.lowercase,
            min_frequency=args.min_frequency,
        )
    except (ValueError, FileNotFoundError) as error:
        print(f"train_tokenizer: {error}", file=sys.stderr)
        return 2
    if stats.documents == 0:
        print(
            f"train_tokenizer: no text in {', '.join(inputs)} survived reading and cleaning "
            f"({stats.rejected} rejected, {stats.failures} unreadable); check --source and "
            f"--language",
            file=sys.stderr,
        )
        return 2
    tokenizer.save(args.output)
    # What preprocess will do with the file: fail here, not there, if it does not load.
    loaded = load_tokenizer(args.output)
    summary = {
        "output": args.output,
        **loaded.identity(),
        "fast_path": loaded.uses_fast_path,
        **dataclasses.asdict(stats),
        "seconds": round(time.monotonic() - started, 2),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
