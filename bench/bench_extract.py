"""HTML main-text extraction benchmark: quality and speed of each extractor of the webtext source.

    python bench/bench_extract.py [--repeat 5] [--out bench/results/extract.md]

Pages: the 12 pages of the article-extraction benchmark (scrapinghub) in
../shared/corpora/web/html, with their human-checked article text (`articleBody`). Quality is
bag-of-words F1, precision and recall (lower-cased `\\w+` tokens, multiset overlap), averaged over
the pages, as datatrove and the benchmark report it; speed is pages per second of decoding and
extraction, the best of `--repeat` passes over the 12 pages, all extractors in one run (compare
ratios, not absolute numbers). `ours` is what `pipelines.sources.htmltext.main_text` does for
each `extractor` option; the other rows are settings tried and not chosen.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import trafilatura  # noqa: E402
from resiliparse.extract.html2text import extract_plain_text  # noqa: E402

from pipelines.sources import htmltext  # noqa: E402

PAGES = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "web" / "html"


def bag_of_words_scores(extracted: str, truth: str) -> tuple[float, float, float]:
    """(precision, recall, F1) of the extracted text's lower-cased word multiset."""
    ours = collections.Counter(re.findall(r"\w+", extracted.lower()))
    theirs = collections.Counter(re.findall(r"\w+", truth.lower()))
    overlap = sum((ours & theirs).values())
    if not overlap:
        return 0.0, 0.0, 0.0
    precision, recall = overlap / sum(ours.values()), overlap / sum(theirs.values())
    return precision, recall, 2 * precision * recall / (precision + recall)


def load_pages() -> list[tuple[bytes, str]]:
    truth = json.loads((PAGES / "ground-truth.subset.json").read_text(encoding="utf-8"))
    return [(gzip.decompress((PAGES / "html" / f"{page_id}.html.gz").read_bytes()),
             entry["articleBody"]) for page_id, entry in sorted(truth.items())]


def extractors() -> dict[str, Callable[[str], str]]:
    return {
        "trafilatura (ours, default)": lambda html: htmltext.main_text(html, "trafilatura"),
        "resiliparse (ours)": lambda html: htmltext.main_text(html, "resiliparse"),
        "trafilatura, datatrove's settings (deduplicate=True)": lambda html: trafilatura.extract(
            html, favor_precision=True, include_comments=False, deduplicate=True) or "",
        "trafilatura, library defaults": lambda html: trafilatura.extract(html) or "",
        "resiliparse, alt texts + comments + post meta kept": lambda html: extract_plain_text(
            html, preserve_formatting=True, main_content=True),
        "resiliparse, without main_content": lambda html: extract_plain_text(
            html, preserve_formatting=True, main_content=False, alt_texts=False),
    }


def measure(extract: Callable[[str], str], pages: list[tuple[bytes, str]],
            repeat: int) -> dict[str, float]:
    decoded = [(htmltext.decode_html(data)[0], truth) for data, truth in pages]
    scores = [bag_of_words_scores(extract(html), truth) for html, truth in decoded]
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for data, _ in pages:
            extract(htmltext.decode_html(data)[0])
        best = min(best, time.perf_counter() - start)
    return {
        "f1": sum(s[2] for s in scores) / len(scores),
        "precision": sum(s[0] for s in scores) / len(scores),
        "recall": sum(s[1] for s in scores) / len(scores),
        "worst_f1": min(s[2] for s in scores),
        "pages_per_s": len(pages) / best,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default="bench/results/extract.md")
    args = parser.parse_args()
    pages = load_pages()
    rows = {name: measure(extract, pages, args.repeat) for name, extract in extractors().items()}
    lines = [
        "# HTML main-text extraction benchmark",
        "",
        f"`python bench/bench_extract.py --repeat {args.repeat}` on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, trafilatura "
        f"{trafilatura.__version__}.",
        f"Pages: the {len(pages)} pages of the article-extraction benchmark in "
        "`../shared/corpora/web/html`, scored against their human-checked `articleBody`.",
        "",
        "| extractor | F1 | precision | recall | worst page F1 | pages/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['f1']:.3f} | {row['precision']:.3f} | "
                     f"{row['recall']:.3f} | {row['worst_f1']:.3f} | {row['pages_per_s']:.1f} |")
    lines += [
        "",
        "F1, precision and recall: bag of lower-cased words, mean over the pages. pages/s: "
        "charset decoding + extraction, best of the passes, one core; the machine is shared, "
        "so compare the rows of one run.",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as out:
        out.write(report)


if __name__ == "__main__":
    main()
