"""Dedup quality: precision, recall and F1 of the duplicate pairs the dedup stage finds, against
exact Jaccard ground truth, on real documents with near-duplicates planted at known similarity.

    .venv/bin/python bench/bench_dedup_quality.py [--configs 14x8,14x8-noverify,20x13-noverify]

Corpus: real documents from ../shared/corpora (book chunks, WikiText articles, WebText pages),
plus, for a share of them, one planted copy each: word edits tuned to hit a target Jaccard
(0.5 .. 0.98), exact copies (other case and spacing), and copies with paragraphs shuffled.

Ground truth is computed independently of the code under test: the exact Jaccard of Python
sets of 5-word tuples (`re.findall(r"\\w+", text.lower())`), for every pair of documents that
shares a shingle (an inverted index, so real accidental duplicates such as the Gutenberg licence
chunks count too). A pair is a true duplicate when J >= the threshold (0.8).

A pair is *found* when the dedup stage put both documents in one duplicate group (one of them
was removed for the other, directly or through their group: the --keep-rejects clusters).
precision = found true pairs / found pairs; recall = found true pairs / true pairs.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from pipelines.dedup.__main__ import main as dedup_main  # noqa: E402
from pipelines.dedup.parquet import DOCUMENT_SCHEMA, document_to_row  # noqa: E402
from pipelines.document import Document  # noqa: E402
from tests.measure import find_root  # noqa: E402

CORPORA = REPO.parent / "shared" / "corpora"
THRESHOLD = 0.8
LEVELS = (0.5, 0.6, 0.7, 0.75, 0.78, 0.8, 0.82, 0.85, 0.9, 0.95, 0.98)  # planted targets
BINS = (0.0, 0.55, 0.65, 0.72, 0.77, 0.8, 0.82, 0.85, 0.9, 0.95, 0.98, 1.0)  # reported ranges
CONFIGS = {
    "14x8": ["--dedup-bands", "14", "--dedup-rows", "8"],
    "14x8-noverify": ["--dedup-bands", "14", "--dedup-rows", "8", "--dedup-no-verify"],
    "20x13": ["--dedup-bands", "20", "--dedup-rows", "13"],
    "20x13-noverify": ["--dedup-bands", "20", "--dedup-rows", "13", "--dedup-no-verify"],
    "9x13-noverify": ["--dedup-bands", "9", "--dedup-rows", "13", "--dedup-no-verify"],
}


def _chunks(paragraphs: list[str], target_chars: int) -> list[str]:
    out, current = [], []
    for p in paragraphs:
        current.append(p)
        if sum(map(len, current)) >= target_chars:
            out.append("\n\n".join(current))
            current = []
    return out


def _detokenize(line: str) -> str:
    text = line.strip().replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    return re.sub(r" ([.,;:!?')])", r"\1", text)


def real_documents(target_chars: int = 2500) -> list[Document]:
    """Real text from ../shared/corpora cut into documents: ~1,900 of ~2,500 characters."""
    docs = []
    for path in sorted((CORPORA / "books").glob("*.txt")):
        text = path.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
        for i, chunk in enumerate(_chunks(paragraphs, target_chars)):
            docs.append(Document(f"books:{path.stem}:{i:04d}", "books", chunk))
    for path in (
        CORPORA / "wikitext" / "wikitext-2" / "wiki.test.tokens",
        CORPORA / "wikitext" / "wikitext-103" / "wiki.valid.tokens",
    ):
        lines = path.read_text(encoding="utf-8").splitlines()
        paragraphs = [_detokenize(t) for t in lines if t.strip() and not t.strip().startswith("=")]
        for i, chunk in enumerate(_chunks(paragraphs, target_chars)):
            docs.append(Document(f"wikipedia:{path.parent.name}:{i:04d}", "wikipedia", chunk))
    for path in sorted((CORPORA / "web" / "text" / "webtext_train_10").glob("*.txt")):
        docs.append(Document(f"webtext:{path.stem}", "webtext", path.read_text(encoding="utf-8")))
    return docs


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def shingle_tuples(text: str, n: int = 5) -> set[tuple[str, ...]]:
    w = words(text)
    if len(w) < n:
        return {tuple(w)} if w else set()
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def edited_to(text: str, target: float, rng: random.Random) -> tuple[str, float]:
    """A copy with words replaced, as close to `target` Jaccard as the word count allows."""
    spans = [m.span() for m in re.finditer(r"\w+", text)]
    order = list(range(len(spans)))
    rng.shuffle(order)
    original = shingle_tuples(text)

    def with_edits(k: int) -> str:
        chosen = sorted(order[:k])
        out, last = [], 0
        for idx in chosen:
            start, end = spans[idx]
            out += [text[last:start], f"zq{rng.randrange(10**9)}"]
            last = end
        return "".join(out) + text[last:]

    lo, hi = 0, len(spans)
    while lo < hi:  # the most edits that keep J >= target
        mid = (lo + hi + 1) // 2
        if jaccard(original, shingle_tuples(with_edits(mid))) >= target:
            lo = mid
        else:
            hi = mid - 1
    copy = with_edits(lo)
    return copy, jaccard(original, shingle_tuples(copy))


def planted_corpus(seed: int = 0) -> tuple[list[Document], dict[tuple[str, str], float]]:
    """(documents, {planted pair: its exact Jaccard})."""
    rng = random.Random(seed)
    base = real_documents()
    docs = list(base)
    planted = {}
    candidates = [d for d in base if len(words(d.text)) >= 200]
    rng.shuffle(candidates)
    for i, doc in enumerate(candidates[: int(0.45 * len(candidates))]):
        kind = i % 14
        if kind < 11:
            text, similarity = edited_to(doc.text, LEVELS[kind], rng)
        elif kind == 11:
            text, similarity = "  " + doc.text.upper().replace(" ", "  "), 1.0
        else:
            paragraphs = doc.text.split("\n\n")
            rng.shuffle(paragraphs)
            text = "\n\n".join(paragraphs)
            similarity = jaccard(shingle_tuples(doc.text), shingle_tuples(text))
        copy = Document(f"{doc.source}:copy:{i:04d}", doc.source, text)
        docs.append(copy)
        planted[(doc.id, copy.id)] = similarity
    return docs, planted


def ground_truth(docs: list[Document], threshold: float) -> dict[tuple[str, str], float]:
    """{(a, b): J} for every pair (a < b) with exact Jaccard >= threshold.

    Candidates come from an inverted index (shingles in more than 200 documents, common phrases,
    are left out of the index only); each candidate's J is then computed from the full sets.
    A pair at J >= 0.8 shares at least 0.8 of its smaller set, so no true pair is missed by
    requiring half of it from the index.
    """
    sets = [shingle_tuples(d.text) for d in docs]
    index = collections.defaultdict(list)
    for i, s in enumerate(sets):
        for sh in s:
            index[sh].append(i)
    shared = collections.Counter()
    for holders in index.values():
        if 1 < len(holders) <= 200:
            shared.update(itertools.combinations(holders, 2))
    truth = {}
    for (i, j), count in shared.items():
        if count < 0.5 * min(len(sets[i]), len(sets[j])):
            continue
        similarity = jaccard(sets[i], sets[j])
        if similarity >= threshold:
            truth[tuple(sorted((docs[i].id, docs[j].id)))] = similarity
    return truth


def run_dedup(docs: list[Document], args: list[str]) -> tuple[list[dict], dict, float]:
    """(cluster rows, the run's counters, seconds) of `python -m pipelines.dedup` on docs."""
    with tempfile.TemporaryDirectory() as tmp:
        pq.write_table(
            pa.Table.from_pylist([document_to_row(d) for d in docs], schema=DOCUMENT_SCHEMA),
            f"{tmp}/input.parquet",
        )
        started = time.perf_counter()
        code = dedup_main(
            [
                "--input",
                f"{tmp}/input.parquet",
                "--output",
                f"{tmp}/out",
                "--keep-rejects",
                "--runner",
                "DirectRunner",
                "--dedup-threshold",
                str(THRESHOLD),
                *args,
            ]
        )
        elapsed = time.perf_counter() - started
        assert code == 0
        rows = [
            row
            for f in sorted(Path(tmp, "out").glob("clusters-*.parquet"))
            for row in pq.read_table(f).to_pylist()
        ]
        counters = json.loads(Path(tmp, "out", "stats.json").read_text())["counters"]
    return rows, counters, elapsed


def found_pairs(clusters: list[dict]) -> set[tuple[str, str]]:
    """Pairs of documents in the same duplicate group (groups chained through kept ids)."""
    parent: dict[str, str] = {}
    for row in clusters:
        parent[find_root(parent, row["removed_id"])] = find_root(parent, row["kept_id"])
    groups = collections.defaultdict(list)
    for x in list(parent):
        groups[find_root(parent, x)].append(x)
    return {tuple(sorted(p)) for g in groups.values() for p in itertools.combinations(g, 2)}


def evaluate(truth, planted, found):
    true_found = found & set(truth)
    precision = len(true_found) / len(found) if found else 1.0
    recall = len(true_found) / len(truth) if truth else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    by_level = collections.defaultdict(lambda: [0, 0])
    for pair, similarity in planted.items():
        low = max(edge for edge in BINS if edge <= similarity)
        by_level[low][0] += 1
        by_level[low][1] += tuple(sorted(pair)) in found
    return precision, recall, f1, dict(sorted(by_level.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS)
    )
    args = parser.parse_args()
    docs, planted = planted_corpus()
    truth = ground_truth(docs, THRESHOLD)
    print(
        f"{len(docs)} documents ({len(planted)} planted copies); {len(truth)} true pairs at J >= {THRESHOLD}"
    )
    results = []
    for name in args.configs.split(","):
        clusters, counters, elapsed = run_dedup(docs, CONFIGS[name])
        precision, recall, f1, by_level = evaluate(truth, planted, found_pairs(clusters))
        rounds = sum(1 for k, v in counters.items() if k.startswith("dedup_cc_round") and v)
        results.append((name, precision, recall, f1, by_level, elapsed, rounds, counters))
        print(
            f"{name}: precision {precision:.4f} recall {recall:.4f} F1 {f1:.4f} ({elapsed:.1f} s)",
            flush=True,
        )
    print()
    print(
        "| config | precision | recall | F1 | candidate pairs verified | of them J >= 0.8 | CC rounds that changed edges | run (s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, precision, recall, f1, _, elapsed, rounds, counters in results:
        pairs = counters.get("dedup_pairs_verified", "-")
        similar = counters.get("dedup_pairs_similar", "-")
        print(
            f"| {name} | {precision:.4f} | {recall:.4f} | {f1:.4f} | {pairs} | {similar} | {rounds} | {elapsed:.1f} |"
        )
    print()
    print("| planted pair J | pairs | " + " | ".join(f"found, {r[0]}" for r in results) + " |")
    print("|---|---|" + "---|" * len(results))
    for low in results[0][4]:
        high = next((b for b in BINS if b > low), None)
        label = f"{low:.2f}" if high is None else f"[{low:.2f}, {high:.2f})"
        count = results[0][4][low][0]
        cells = " | ".join(f"{r[4][low][1] / count:.2f}" for r in results)
        print(f"| {label} | {count} | {cells} |")


if __name__ == "__main__":
    main()
