"""The default run against the bare one: what the language filter and dedup cost.

    python bench/bench_default_run.py [--rounds 1] [--out bench/results/default_run.md]

Two corpora of distinct real text, as JSON lines: every document of every shared book and dump
(bench_language.documents: books, Wikipedia dumps in English and Greek, WebText, WikiText, web
articles), and the same text cut into documents of ~800 characters (a web page's size, where
costs paid per document show). Each is run through the real command line
(`python -m pipelines.preprocess --source jsonl`, GPT-2 vocabulary) four ways:

- default            language en, dedup on (the command's defaults)
- no dedup           `--no-dedup`
- language any       `--language any`
- bare               `--no-dedup --language any`

CPU seconds are those of the command's whole process tree (user + sys, from the waited-for
child's rusage); with --rounds N the runs are interleaved and the least of each is kept. The
sizing is the default run's: one TB of raw text needs 1e6 MB / (MB per CPU-s x 3600) vCPU-hours.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_language import (  # noqa: E402
    documents,
    preprocess_stats,
    short_documents,
    write_corpus,
)

RUNS = {
    "default": [],
    "no dedup": ["--no-dedup"],
    "language any": ["--language=any"],
    "bare": ["--no-dedup", "--language=any"],
}
# Dataflow batch list prices: $0.056 per vCPU-hour and $0.0035 per GB-hour, 4 GB a vCPU
PRICE_PER_VCPU_HOUR = 0.056 + 4 * 0.0035


def run(corpus: Path, flags: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        stats = preprocess_stats("jsonl", f"{corpus}/*.jsonl", out, flags)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu": cpu, "wall": wall, "written": stats["written"], "read": stats["read"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "default_run.md")
    args = parser.parse_args()

    docs = documents()
    texts = [doc["text"] for doc in docs]
    corpora = {"documents": texts, "short documents": short_documents(docs, limit=40000)}
    results: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as work:
        sizes = {}
        for name, group in corpora.items():
            sizes[name] = write_corpus(Path(work, name.replace(" ", "_")), group)
        for _ in range(args.rounds):
            for name in corpora:
                for run_name, flags in RUNS.items():
                    found = run(Path(work, name.replace(" ", "_")), flags)
                    kept = results.setdefault(name, {}).get(run_name)
                    if kept is None or found["cpu"] < kept["cpu"]:
                        results[name][run_name] = found

    load = os.getloadavg()[0]
    lines = [
        "# The default run against the bare one",
        "",
        f"Run {time.strftime('%Y-%m-%d')} by `bench/bench_default_run.py --rounds {args.rounds}` "
        f"on 2 cores shared with other jobs (load average {load:.1f} at the end). CPU s: the "
        "command's process tree, user + sys"
        + (", least of the interleaved rounds" if args.rounds > 1 else "")
        + ". MB = 10^6 bytes of raw text.",
        "",
        "| corpus | run | MB | documents read | kept | CPU s | wall s | MB per CPU-s | CPU x bare |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in results.items():
        bare = runs["bare"]["cpu"]
        for run_name, found in runs.items():
            lines.append(
                f"| {name} | {run_name} | {sizes[name]:.1f} | {found['read']:,} | "
                f"{found['written']:,} | {found['cpu']:.1f} | {found['wall']:.1f} | "
                f"{sizes[name] / found['cpu']:.2f} | {found['cpu'] / bare:.2f}x |"
            )
    rate = sizes["documents"] / results["documents"]["default"]["cpu"]
    hours = 1e6 / (rate * 3600)
    lines += [
        "",
        f"Sizing from the default run on the documents: {rate:.2f} MB per CPU-second, so one TB "
        f"of raw text needs 1e6 / ({rate:.2f} x 3600) = **{hours:.0f} vCPU-hours**, about "
        f"**${hours * PRICE_PER_VCPU_HOUR:.1f}** at Dataflow batch list prices "
        f"(${PRICE_PER_VCPU_HOUR:.3f} per vCPU-hour with 4 GB), before shuffle and storage. "
        "These documents are small (20 MB in all), so a run's start-up is a large share of its "
        "CPU: the rate is a lower bound.",
    ]
    report = "\n".join(lines) + "\n"
    print(report)
    args.out.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
