"""What the bare run pays per document: Python calls and CPU seconds, against another checkout.

    python bench/bench_per_document.py [--baseline /path/to/checkout] [--rounds 3]
                                       [--out bench/results/per_document.md]

Short documents (~800 characters, the shared text cut as bench_language.short_documents cuts
it) go through the real command line, `python -m pipelines.preprocess --source jsonl
--no-dedup --language any`, for this checkout and, with --baseline, another one (e.g. a
`git worktree add /tmp/base 0309cc8`), run with the same interpreter:

- Python calls per document, a deterministic measure on a machine whose load makes CPU
  seconds noisy: the run in one process (`--direct_running_mode=in_memory`) under cProfile on
  5,000 and on 1,000 documents, (calls5000 - calls1000) / 4,000.
- CPU seconds (user + sys of the process tree) of the command at its default running mode on
  every short document, the checkouts interleaved for --rounds rounds; min and median.
"""

from __future__ import annotations

import argparse
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_language import CORPORA, documents, short_documents, write_corpus  # noqa: E402

SMALL, LARGE = 1000, 5000


def command(checkout: Path, corpus: Path, out: Path, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        *extra,
        "-m",
        "pipelines.preprocess",
        "--source=jsonl",
        f"--input={corpus}/*.jsonl",
        f"--output={out}",
        f"--tokenizer={CORPORA / 'vocab' / 'gpt2'}",
        "--progress-interval=0",
        "--no-dedup",
        "--language=any",
    ]


def run(checkout: Path, corpus: Path, profile: Path | None = None) -> float:
    """CPU seconds of the command's process tree; under cProfile in one process if `profile`."""
    extra = ["-m", "cProfile", "-o", str(profile)] if profile else []
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with tempfile.TemporaryDirectory() as out:
        arguments = command(checkout, corpus, Path(out, "run"), extra)
        if profile:
            arguments.append("--direct_running_mode=in_memory")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(arguments, cwd=checkout, env=env, check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def calls(checkout: Path, corpus: Path) -> int:
    with tempfile.TemporaryDirectory() as work:
        profile = Path(work, "run.prof")
        run(checkout, corpus, profile)
        return sum(entry[1] for entry in pstats.Stats(str(profile)).stats.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "per_document.md")
    args = parser.parse_args()

    texts = short_documents(documents(), limit=40000)
    checkouts = {"this checkout": REPO}
    if args.baseline:
        checkouts = {f"baseline ({args.baseline.name})": args.baseline.resolve(), **checkouts}
    with tempfile.TemporaryDirectory() as work:
        corpora = {}
        for name, count in (("small", SMALL), ("large", LARGE), ("all", len(texts))):
            corpora[name] = Path(work, name)
            size = write_corpus(corpora[name], texts[:count])
        per_doc = {
            name: (calls(path, corpora["large"]) - calls(path, corpora["small"])) / (LARGE - SMALL)
            for name, path in checkouts.items()
        }
        cpu: dict[str, list[float]] = {name: [] for name in checkouts}
        for _ in range(args.rounds):
            for name, path in checkouts.items():
                cpu[name].append(run(path, corpora["all"]))

    lines = [
        "# The bare run per document",
        "",
        f"Run {time.strftime('%Y-%m-%d')} by `bench/bench_per_document.py"
        + (f" --baseline {args.baseline}" if args.baseline else "")
        + f" --rounds {args.rounds}` on 2 cores shared with other jobs (load average "
        f"{os.getloadavg()[0]:.1f} at the end). {len(texts):,} short documents ({size:.1f} MB) "
        "of the shared text, `--no-dedup --language any`.",
        "",
        "| checkout | Python calls per document | CPU s, min | CPU s, median | CPU s, each round |",
        "|---|---:|---:|---:|---|",
    ]
    for name in checkouts:
        lines.append(
            f"| {name} | {per_doc[name]:.0f} | {min(cpu[name]):.2f} | "
            f"{statistics.median(cpu[name]):.2f} | {', '.join(f'{c:.2f}' for c in cpu[name])} |"
        )
    report = "\n".join(lines) + "\n"
    print(report)
    args.out.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
