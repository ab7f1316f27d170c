"""The bare run end to end against tiktoken alone: GPT-2 encoding of the same text.

    python bench/bench_tiktoken.py [--rounds 3] [--out bench/results/tiktoken.md]

The corpora are bench_default_run's (bench_language: every shared book and dump as documents,
and the same text cut into documents of ~800 characters), as JSON lines. Two ways through
each, CPU seconds (user + sys) least of --rounds, interleaved:

- tiktoken alone: tiktoken's own GPT-2 Encoding (its pattern and `<|endoftext|>`, ranks from
  ../shared/corpora/vocab/gpt2/gpt2.tiktoken, no download) encodes every document's text with
  `encode_ordinary`, one thread, the text already in memory: the floor a tokenizing pipeline
  cannot beat. Its token count is checked against the run's.
- the bare run: `python -m pipelines.preprocess --source jsonl --no-dedup --language any`
  (GPT-2 vocabulary, every other flag at its default), the command's whole process tree, from
  the JSONL file to the shard set (read, clean, tokenize, write, Beam and its workers).

Throughput is MB of text (10^6 bytes of UTF-8, the documents' text) per CPU-second; the ratio
is the run's over tiktoken's. The run's stats.json says which stage spent the CPU it measured
(`cpu_s`); what it does not measure (start-up, Beam's bundles and data plane, the launcher) is
the rest of the process tree's CPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import tiktoken
from tiktoken.load import load_tiktoken_bpe

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_language import (  # noqa: E402
    CORPORA,
    documents,
    preprocess_stats,
    short_documents,
    write_corpus,
)

BARE = ["--no-dedup", "--language=any"]
# tiktoken's own GPT-2 encoding (tiktoken_ext.openai_public.gpt2), built from the shared ranks
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def gpt2_encoding() -> tiktoken.Encoding:
    ranks = load_tiktoken_bpe(str(CORPORA / "vocab" / "gpt2" / "gpt2.tiktoken"))
    return tiktoken.Encoding(
        "gpt2", pat_str=GPT2_PAT, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256}
    )


def tiktoken_alone(encoding: tiktoken.Encoding, texts: list[str]) -> tuple[float, int]:
    """(CPU seconds of this process, tokens) to encode every text."""
    started = time.process_time()
    tokens = sum(len(encoding.encode_ordinary(text)) for text in texts)
    return time.process_time() - started, tokens


def bare_run(corpus: Path) -> tuple[float, dict]:
    """(CPU seconds of the command's process tree, its stats.json)."""
    with tempfile.TemporaryDirectory() as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        stats = preprocess_stats("jsonl", f"{corpus}/*.jsonl", out, BARE)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "tiktoken.md")
    args = parser.parse_args()

    docs = documents()
    corpora = {
        "documents": [doc["text"] for doc in docs],
        "short documents": short_documents(docs, limit=40000),
    }
    encoding = gpt2_encoding()
    encoding.encode_ordinary("warm up")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, texts in corpora.items():
            path = Path(work, name.replace(" ", "_"))
            write_corpus(path, texts)
            mb = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts) / 1e6
            alone, run, stats = [], [], None
            for _ in range(args.rounds):
                seconds, tokens = tiktoken_alone(encoding, texts)
                alone.append(seconds)
                seconds, found = bare_run(path)
                if not run or seconds < min(run):
                    stats = found
                run.append(seconds)
            rows.append((name, mb, len(texts), min(alone), min(run), stats, tokens))

    lines = [
        "# The bare run against tiktoken alone",
        "",
        f"Run {time.strftime('%Y-%m-%d')} by `bench/bench_tiktoken.py --rounds {args.rounds}` on "
        f"2 cores shared with other jobs (load average {os.getloadavg()[0]:.1f} at the end); "
        f"tiktoken {tiktoken.__version__}. CPU s: least of {args.rounds} interleaved rounds, user "
        "+ sys (the command's whole process tree; tiktoken: this process, one thread, "
        "`encode_ordinary` on each document's text in memory). MB = 10^6 bytes of the "
        "documents' UTF-8 text. The run: `python -m pipelines.preprocess --source jsonl "
        "--no-dedup --language any`, GPT-2 vocabulary, other flags at their defaults. Its "
        "tokens are those of the cleaned text (normalised: ftfy where needed, whitespace), so "
        "they can differ a little from tiktoken's.",
        "",
        "| corpus | MB | documents | tiktoken alone: tokens | CPU s | MB per CPU-s | bare run "
        "(`--no-dedup --language any`): tokens | CPU s | MB per CPU-s | run / tiktoken |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, mb, count, alone, run, stats, tokens in rows:
        lines.append(
            f"| {name} | {mb:.1f} | {count:,} | {tokens:,} | {alone:.2f} | {mb / alone:.2f} | "
            f"{stats['tokens_written']:,} | {run:.2f} | {mb / run:.2f} | {alone / run:.2f} |"
        )
    lines += [
        "",
        "Where the run's CPU goes (its fastest round; stats.json `cpu_s` per stage, the rest "
        "is start-up, Beam and the launcher):",
        "",
        "| corpus | run CPU s | read | clean | tokenize | write | rest |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, _, _, _, run, stats, _ in rows:
        stages = [stats["cpu_s"].get(s, 0.0) for s in ("read", "clean", "tokenize", "write")]
        cells = " | ".join(f"{s:.2f}" for s in stages)
        lines.append(f"| {name} | {run:.2f} | {cells} | {run - sum(stages):.2f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    args.out.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
