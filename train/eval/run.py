"""``python train/evaluate.py``: the evaluation tasks on a checkpoint or an HF model.

  --task wikitext103 --data wiki.test.tokens   sliding-window perplexity, per model token and
                                               adjusted to WikiText's word-level tokens
  --task lambada --data lambada_test.jsonl     last-word accuracy (strict and not) and
                                               last-word perplexity
  --task bert-mlm --data SHARDS                masked-LM accuracy and perplexity with fixed masks

One process, or ``torchrun --nproc_per_node N train/evaluate.py ...``: each rank scores its
share and the sums are all-reduced (the same totals as one process). The result is printed as
one JSON object (and written to ``--output``); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist

from common.cli import ArgumentParser
from common.safe_io import UnsafeInputError, parse_json, read_bytes_capped, read_text_capped
from common.storage import write_text_atomic
from train.eval import lambada, scoring, wikitext
from train.eval.load import (
    LoadedModel,
    LoadError,
    check_vocabulary,
    load_model,
    load_tokenizer,
)
from train.models.registry import get_spec
from train.models.spec import CAUSAL_LM, MASKED_LM

TASKS = ("wikitext103", "lambada", "bert-mlm")
# What the error for a model of the wrong kind calls the kind a task needs.
BATCH_NAMES = {CAUSAL_LM: "causal language", MASKED_LM: "BERT"}


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="train/evaluate.py",
        description="Evaluate a GPT/BERT checkpoint (ours or HF) on WikiText, LAMBADA or masked LM.",
    )
    parser.add_argument("--checkpoint", required=True, help="run directory, checkpoint, or HF dir")
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--data", required=True, help="test file (wikitext, lambada) or shards")
    parser.add_argument(
        "--tokenizer",
        help="tokenizer.json, vocab.txt, encoder.json+vocab.bpe, *.tiktoken or their directory "
        "(default: the run's or HF dir's); refused unless it is the model's",
    )
    parser.add_argument(
        "--context", type=int, help="window length in tokens (default: the model's block size)"
    )
    parser.add_argument(
        "--stride", type=int, help="tokens a window moves on (default: context, no overlap)"
    )
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument(
        "--samples", type=int, default=1024, help="bert-mlm: held-out samples to score"
    )
    parser.add_argument("--seq-len", type=int, default=128, help="bert-mlm: sample length")
    parser.add_argument("--seed", type=int, default=1234, help="bert-mlm: masks' seed")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--output", help="also write the JSON result to this file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


# An earlier report is a few hundred bytes; anything bigger at --output is not one of ours.
REPORT_CAP = 1 << 20


def output_fault(path: str) -> str | None:
    """Why ``--output`` may not be written (None if it may): it is new, or it holds an earlier
    report of this command, which it then replaces. Anything else there (a user's file, a
    directory, a link, a device) is not ours and is never overwritten."""
    if not os.path.lexists(path):
        parent = os.path.dirname(os.path.abspath(path))
        return None if os.path.isdir(parent) else f"--output {path}: no such directory {parent}"
    if os.path.islink(path):
        return f"--output {path} is a symbolic link; choose a new file"
    try:
        report = parse_json(read_bytes_capped(path, "--output", REPORT_CAP), f"--output {path}")
    except UnsafeInputError as e:
        return f"{e}; it is not an earlier report of train/evaluate.py: choose a new file"
    if not (isinstance(report, dict) and report.get("task") in TASKS and "checkpoint" in report):
        return f"--output {path} exists and is not a report of train/evaluate.py; choose a new file"
    return None


def write_report(path: str, text: str) -> None:
    """Write atomically: a reader sees the earlier report or this one, never half of one."""
    write_text_atomic(path, text + "\n", sync=False)


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _partition(device: torch.device) -> scoring.Partition:
    if "WORLD_SIZE" not in os.environ or int(os.environ["WORLD_SIZE"]) == 1:
        return scoring.Partition()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return scoring.Partition(dist.get_rank(), dist.get_world_size())


def _device(choice: str) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            _fail("--device cuda, but torch sees no CUDA device")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


class _Progress:
    """Progress on rank 0, nothing elsewhere: a tqdm bar on a terminal; where stderr is a file
    or a pipe (a job's log), a line at every tenth of the batches, since a bar's carriage
    returns would fill the log with one overwritten line."""

    LINES = 10

    def __init__(self, total: int, label: str, enabled: bool, stream=None) -> None:
        self.bar = None
        self.stream = stream or sys.stderr
        self.total, self.label, self.done, self.lines = total, label, 0, 0
        self.enabled = enabled
        if enabled and self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, unit="batch", file=self.stream, leave=False)

    def __call__(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)
            return
        self.done += n
        if self.enabled and self.total and self.done * self.LINES >= (self.lines + 1) * self.total:
            self.lines = self.done * self.LINES // self.total
            print(f"{self.label}: {self.done:,}/{self.total:,} batches", file=self.stream,
                  flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def evaluate_wikitext(
    loaded: LoadedModel,
    raw_text: str,
    *,
    context: int | None,
    stride: int | None,
    batch_size: int,
    partition: scoring.Partition = scoring.ONE_PROCESS,
    progress: bool = False,
) -> wikitext.Perplexity:
    """Perplexity of ``loaded`` on WikiText's raw test text (see :mod:`train.eval.wikitext`)."""
    ids, word_tokens = wikitext_ids(raw_text, loaded.tokenizer_path)
    return perplexity_of_ids(
        loaded.model,
        ids,
        context=context,
        stride=stride,
        batch_size=batch_size,
        partition=partition,
        progress=progress,
        word_tokens=word_tokens,
    )


def wikitext_ids(raw_text: str, tokenizer_path: str | None) -> tuple[list[int], int]:
    """(model token ids of the detokenised text, WikiText's own token count of the raw text)."""
    tokenizer = load_tokenizer(tokenizer_path)
    ids = tokenizer.encode(wikitext.detokenize(raw_text)).ids
    return ids, wikitext.word_token_count(raw_text)


def perplexity_of_ids(
    model,
    ids: Sequence[int],
    *,
    context: int | None,
    stride: int | None,
    batch_size: int,
    partition: scoring.Partition = scoring.ONE_PROCESS,
    progress: bool = False,
    word_tokens: int | None = None,
    loss_of=None,
) -> wikitext.Perplexity:
    """Sliding-window perplexity of ``model`` over ``ids`` (``loss_of``: see
    :func:`train.eval.scoring.score_windows`)."""
    context = context or model.config.block_size
    if context > model.config.block_size:
        raise ValueError(f"--context {context} exceeds the model's {model.config.block_size}")
    windows = wikitext.windows(len(ids), context, stride or context)
    batches = len(partition.batches(len(windows), batch_size))
    bar = _Progress(batches, "wikitext", progress and partition.rank == 0)
    try:
        nll, scored = scoring.score_windows(
            model,
            ids,
            windows,
            batch_size=batch_size,
            partition=partition,
            progress=bar,
            loss_of=loss_of,
        )
    finally:
        bar.close()
    return wikitext.Perplexity(nll, scored, word_tokens)


def evaluate_lambada(
    loaded: LoadedModel,
    passages: list[str],
    *,
    batch_size: int,
    partition: scoring.Partition = scoring.ONE_PROCESS,
    progress: bool = False,
) -> lambada.LambadaResult:
    tokenizer = load_tokenizer(loaded.tokenizer_path)
    strict, loose = lambada.examples_for(
        lambda text: tokenizer.encode(text).ids, passages, loaded.model.config.block_size
    )
    batches = 2 * len(partition.batches(len(strict), batch_size))
    bar = _Progress(batches, "lambada", progress and partition.rank == 0)
    try:
        strict_counts = scoring.score_last_words(
            loaded.model, strict, batch_size=batch_size, partition=partition, progress=bar
        )
        loose_counts = scoring.score_last_words(
            loaded.model, loose, batch_size=batch_size, partition=partition, progress=bar
        )
    finally:
        bar.close()
    return lambada.LambadaResult(
        strict_counts.examples, strict_counts.correct, loose_counts.correct, strict_counts.nll
    )


def evaluate_masked_lm(
    loaded: LoadedModel,
    shards: str,
    *,
    samples: int,
    seq_len: int,
    seed: int,
    batch_size: int,
    partition: scoring.Partition = scoring.ONE_PROCESS,
    progress: bool = False,
):
    from dataset_format import FormatError
    from train.data import MaskingConfig, build_bert_datasets, check_tokenizers, parse_data_spec
    from train.eval.masked_lm import score_masked_lm

    sources = parse_data_spec([shards])
    info = check_tokenizers(sources)
    if info is None:
        raise ValueError(f"{shards}: the shard set records no tokenizer (BERT needs its ids)")
    check_vocabulary(loaded, info.to_json(), {info.sha256}, f"--data {shards}")
    try:
        dataset = build_bert_datasets(
            sources,
            seq_len=seq_len,
            split="1,0,0",
            seed=seed,
            num_samples={"train": samples},
            masking=MaskingConfig(),
            special_ids=info.special_ids,
            vocab_size=info.vocab_size,
        )["train"]
    except FormatError as e:
        raise ValueError(str(e)) from None
    bar = _Progress(
        len(partition.batches(samples, batch_size)), "bert-mlm", progress and partition.rank == 0
    )
    try:
        return score_masked_lm(
            loaded.model, dataset, samples, batch_size=batch_size, partition=partition, progress=bar
        )
    finally:
        bar.close()


def main(argv: Sequence[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.batch_size < 1:
        _fail(f"--batch-size must be >= 1, got {args.batch_size}")
    fault = output_fault(args.output) if args.output else None
    if fault is not None:  # before any work: a refused output would waste the whole run
        _fail(fault)
    device = _device(args.device)
    partition = _partition(device)
    started = time.perf_counter()
    try:
        loaded = load_model(args.checkpoint, device, args.tokenizer)
        expected = MASKED_LM if args.task == "bert-mlm" else CAUSAL_LM
        if get_spec(loaded.kind).batch != expected:
            _fail(
                f"--task {args.task} needs a {BATCH_NAMES[expected]} model; {loaded.source} "
                f"is {loaded.kind.upper()}"
            )
        # What every task takes alike: the batch size, this rank's share and the progress line.
        batching = dict(
            batch_size=args.batch_size, partition=partition, progress=not args.no_progress
        )
        if args.task == "wikitext103":
            raw = read_text_capped(args.data, "eval data", wikitext.EVAL_DATA_CAP)
            result = evaluate_wikitext(
                loaded, raw, context=args.context, stride=args.stride, **batching
            ).to_json()
        elif args.task == "lambada":
            result = evaluate_lambada(
                loaded, lambada.read_passages(args.data), **batching
            ).to_json()
        else:
            result = evaluate_masked_lm(
                loaded, args.data, samples=args.samples, seq_len=args.seq_len, seed=args.seed,
                **batching,
            ).to_json()  # fmt: skip
    except (LoadError, ValueError, OSError, UnicodeDecodeError) as e:
        _fail(str(e))
    report = {
        "task": args.task,
        "checkpoint": loaded.source,
        "data": args.data,
        **result,
        "seconds": round(time.perf_counter() - started, 3),
        "processes": partition.size,
    }
    if partition.rank == 0:
        text = json.dumps(report)
        print(text)
        if args.output:
            try:
                write_report(args.output, text)
            except OSError as e:
                _fail(f"--output {args.output}: {e.strerror or e}")
    if dist.is_initialized():
        dist.destroy_process_group()
    return report
