"""Throughput of the clean and tokenize stages on one core, on the shared sample corpora.

    RAYON_NUM_THREADS=1 .venv/bin/python bench/bench_clean_tokenize.py [--repeats 3]

Measures MB/s (UTF-8 input bytes per second of one process, best of --repeats) on the books
and webtext samples of ../shared/corpora:

- normalize_text with its exact fast pre-check (`needs_ftfy`), with ftfy's own `is_bad` as the
  pre-check instead, and plain `ftfy.fix_text` on every text (what running ftfy everywhere
  would cost); the two pre-checks alone;
- language identification: ours (bounded sample, vectorised walk) against py3langid's own
  byte-at-a-time walk on the same samples;
- clean_document with the books and the web presets (normalisation + every filter);
- GPT-2 encoding through `tokenizers` (encode_batch) and through the tiktoken fast path, whose
  ids are checked identical here too.

Writes bench/results/clean_tokenize.md. The machine is shared, so compare ratios within one
run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before tokenizers is imported: one core

import datetime  # noqa: E402
import functools  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from unittest import mock  # noqa: E402

import ftfy  # noqa: E402
import numpy as np  # noqa: E402
import tiktoken  # noqa: E402
import tokenizers  # noqa: E402
from ftfy.badness import is_bad  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from py3langid.langid import LanguageIdentifier  # noqa: E402

from dataset_format.tokenizer import load_tokenizer  # noqa: E402
from pipelines.clean import CleanConfig, clean_document, language, normalize  # noqa: E402
from pipelines.clean.normalize import needs_ftfy, normalize_text  # noqa: E402
from pipelines.document import Document  # noqa: E402
from pipelines.sources import source_traits  # noqa: E402

CORPORA = ROOT.parent / "shared" / "corpora"
RESULTS = ROOT / "bench" / "results" / "clean_tokenize.md"
WEB = CleanConfig.for_source(source_traits("webtext"))
BOOKS = CleanConfig.for_source(source_traits("books"))


def corpus() -> dict[str, list[str]]:
    paths = sorted((CORPORA / "books").glob("*.txt"))
    english = [p.read_text("utf-8") for p in paths if p.name != "Candide-fr.txt"]
    french = [(CORPORA / "books" / "Candide-fr.txt").read_text("utf-8")]
    web = [p.read_text("utf-8") for p in sorted((CORPORA / "web" / "text").glob("*/*.txt"))]
    return {"books": english, "candide": french, "webtext": web}


def best_seconds(run: Callable[[], object], repeats: int, min_total: float = 1.0) -> float:
    """Fastest of at least `repeats` runs, repeating small inputs until `min_total` seconds
    have been spent (at most 50 runs), so a burst of other load hides in the slow runs."""
    best, spent, runs = float("inf"), 0.0, 0
    while runs < repeats or (spent < min_total and runs < 50):
        start = time.perf_counter()
        run()
        elapsed = time.perf_counter() - start
        best, spent, runs = min(best, elapsed), spent + elapsed, runs + 1
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    texts = corpus()
    sizes = {name: sum(len(t.encode("utf-8")) for t in group) for name, group in texts.items()}
    load_before = os.getloadavg()

    def ftfy_gate(text: str) -> bool:
        # The obvious pre-check: ftfy's own detector, plus the non-mojibake reasons to run.
        return is_bad(text) or needs_ftfy(text)

    def normalize_with_is_bad(group: list[str]) -> None:
        with mock.patch.object(normalize, "needs_ftfy", ftfy_gate):
            for text in group:
                normalize_text(text)

    plain_langid = LanguageIdentifier.from_model_file(language.packaged_model(), norm_probs=True)

    def py3langid_loop(group: list[str]) -> None:
        # py3langid's own byte-at-a-time walk, on the same windows as ours
        for text in group:
            for window in language.language_windows(text):
                plain_langid.classify(window)

    gpt2 = load_tokenizer(str(CORPORA / "vocab" / "gpt2"))
    for name, group in texts.items():  # warm up: model loads, lazy builds
        clean_document(Document("warm", name, group[0][:5000]), CleanConfig())
        gpt2.encode_batch(group[:1])
        gpt2.encode_batch_hf(group[:1])
        ids_fast, ids_hf = gpt2.encode_batch(group), gpt2.encode_batch_hf(group)
        assert all(np.array_equal(a, b) for a, b in zip(ids_fast, ids_hf)), "fast path differs"

    def language_all(group: list[str]) -> None:
        for text in group:
            language.identify_language(text)

    measures: list[tuple[str, Callable[[list[str]], object]]] = [
        ("normalize_text (exact fast pre-check)", lambda g: [normalize_text(t) for t in g]),
        ("normalize_text with ftfy is_bad as pre-check", normalize_with_is_bad),
        ("ftfy.fix_text on every text (defaults)", lambda g: [ftfy.fix_text(t) for t in g]),
        ("pre-check alone: needs_ftfy", lambda g: [needs_ftfy(t) for t in g]),
        ("pre-check alone: ftfy.badness.is_bad", lambda g: [is_bad(t) for t in g]),
        ("language id: identify_language (vectorised walk)", language_all),
        ("language id: py3langid's own walk, same samples", py3langid_loop),
        (
            "clean_document, books preset",
            lambda g: [clean_document(Document("d", "books", t), BOOKS) for t in g],
        ),
        (
            "clean_document, web preset",
            lambda g: [clean_document(Document("d", "webtext", t), WEB) for t in g],
        ),
        ("GPT-2 encode: tokenizers encode_batch", gpt2.encode_batch_hf),
        ("GPT-2 encode: tiktoken fast path", gpt2.encode_batch),
    ]
    rows = []
    for label, run in measures:
        speeds = {
            name: sizes[name] / 1e6 / best_seconds(functools.partial(run, group), args.repeats)
            for name, group in texts.items()
        }
        rows.append((label, speeds))
        print(f"{label:48s} " + "  ".join(f"{n} {s:8.1f} MB/s" for n, s in speeds.items()))

    by_label = dict(rows)

    def ratio(numerator: str, denominator: str, name: str) -> float:
        return by_label[numerator][name] / by_label[denominator][name]

    lines = [
        "# Clean and tokenize throughput (one core)",
        "",
        f"Run {datetime.date.today()} by `bench/bench_clean_tokenize.py --repeats {args.repeats}` "
        f"on {platform.machine()}, {os.cpu_count()} cores shared with other jobs (load average "
        f"{load_before[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end); Python "
        f"{platform.python_version()}, ftfy {ftfy.__version__}, tokenizers "
        f"{tokenizers.__version__}, tiktoken {tiktoken.__version__}. One process, "
        "RAYON_NUM_THREADS=1, fastest of at least the repeats (small inputs repeated for 1 s); MB = 10^6 UTF-8 input bytes. Inputs: the 7 "
        f"shared English books ({sizes['books'] / 1e6:.2f} MB), the French one (Candide, "
        f"{sizes['candide'] / 1e3:.0f} kB) and the 10 WebText documents "
        f"({sizes['webtext'] / 1e3:.0f} kB), all clean text (no mojibake). Absolute figures "
        "vary with the machine's load: read the ratios.",
        "",
        "| measure | English books MB/s | Candide (French) MB/s | webtext MB/s |",
        "|---|---:|---:|---:|",
    ]
    for label, speeds in rows:
        lines.append(
            f"| {label} | {speeds['books']:.1f} | {speeds['candide']:.1f} | "
            f"{speeds['webtext']:.1f} |"
        )
    fast, gated, everywhere = (
        "normalize_text (exact fast pre-check)",
        "normalize_text with ftfy is_bad as pre-check",
        "ftfy.fix_text on every text (defaults)",
    )
    hf, tik = "GPT-2 encode: tokenizers encode_batch", "GPT-2 encode: tiktoken fast path"
    ours, theirs = (
        "language id: identify_language (vectorised walk)",
        "language id: py3langid's own walk, same samples",
    )
    lines += [
        "",
        "Ratios (same run):",
        "",
        f"- normalize_text vs the same with ftfy's is_bad as pre-check: "
        f"{ratio(fast, gated, 'books'):.1f}x (English books), "
        f"{ratio(fast, gated, 'candide'):.1f}x (Candide), {ratio(fast, gated, 'webtext'):.1f}x "
        "(webtext).",
        f"- normalize_text vs ftfy.fix_text on everything: {ratio(fast, everywhere, 'books'):.1f}x "
        f"(English books), {ratio(fast, everywhere, 'candide'):.1f}x (Candide), "
        f"{ratio(fast, everywhere, 'webtext'):.1f}x (webtext).",
        f"- tiktoken fast path vs tokenizers encode_batch (identical ids, checked in the run): "
        f"{ratio(tik, hf, 'books'):.1f}x (English books), {ratio(tik, hf, 'candide'):.1f}x "
        f"(Candide), {ratio(tik, hf, 'webtext'):.1f}x (webtext).",
        f"- language id, our vectorised walk vs py3langid's own (same samples, same scores bit "
        f"for bit: tests/unit/pipelines/clean/test_clean_speed_cuts.py): {ratio(ours, theirs, 'books'):.1f}x (English "
        f"books), {ratio(ours, theirs, 'candide'):.1f}x (Candide), "
        f"{ratio(ours, theirs, 'webtext'):.1f}x (webtext).",
        "",
        "Accented letters are characters ftfy's detector reasons about, so on French text (and "
        "Greek or Cyrillic) the exact pre-check has to run ftfy's regex over much of the text. "
        "Language identification classifies a bounded sample (at most ~2,000 characters), so "
        "its cost is per document: it weighs on short web pages, little on books. Both "
        "clean_document presets do the same work on Candide (rejected as French before any web "
        "rule runs), so the gap between those two cells shows this run's measurement noise.",
        "",
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
