"""Reader benchmark: our ShardSet against a bare np.memmap slice of the same files.

    python bench/bench_reader.py [--documents 10000000] [--out bench/results/reader.md]

Measured in one run, as ratios, so a loaded machine moves both sides alike:
- open time of a set of `--documents` documents (target < 0.5 s at 10 M),
- random document access (view; and view + int64 copy, as a dataset's __getitem__ does),
- random 2,048-token windows across document boundaries.
The limit ("bare") is what a hand-written loop over np.memmap gets with the document
offsets already in memory: one slice per access and nothing else.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from dataset_format import (  # noqa: E402
    IndexedDatasetWriter,
    ShardSet,
    shard_info,
    write_shard_set_manifest,
)


def build_set(directory: str, documents: int, shards: int, seed: int = 0) -> None:
    """Documents of geometric random length (mean 64 tokens), random GPT-2-range ids."""
    rng = np.random.default_rng(seed)
    infos = []
    per = -(-documents // shards)
    for k in range(shards):
        n = min(per, documents - k * per)
        lengths = rng.geometric(1 / 64, size=n).astype(np.int64)
        tokens = rng.integers(0, 50257, size=int(lengths.sum()), dtype=np.uint16)
        prefix = os.path.join(directory, f"shard-{k:05d}")
        writer = IndexedDatasetWriter(prefix, np.uint16)
        writer.add_documents(tokens, lengths)
        writer.finalize()
        infos.append(shard_info(prefix))
    write_shard_set_manifest(directory, infos, dtype="uint16", sequence_unit="document")


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=10_000_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--accesses", type=int, default=200_000)
    parser.add_argument("--window", type=int, default=2048)
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(__file__), "results", "reader.md")
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as directory:
        t0 = time.perf_counter()
        build_set(directory, args.documents, args.shards)
        build_s = time.perf_counter() - t0

        # Cold-ish open: a fresh ShardSet each time (the OS page cache stays warm either way).
        open_s = timed(lambda: ShardSet(directory), repeat=5)
        ss = ShardSet(directory)

        # The bare limit: memmaps of the .bin files plus offsets computed up front.
        bare_bins = [np.memmap(s.prefix + ".bin", dtype=np.uint16, mode="r") for s in ss.shards]
        bare_offsets = [s.document_offsets().copy() for s in ss.shards]
        first_doc = np.cumsum([0] + [s.num_documents for s in ss.shards])
        rng = np.random.default_rng(1)
        doc_ids = rng.integers(0, ss.num_documents, size=args.accesses).tolist()
        shard_of = (np.searchsorted(first_doc, doc_ids, side="right") - 1).tolist()
        local_of = [d - int(first_doc[s]) for d, s in zip(doc_ids, shard_of)]
        # Bare: the caller already knows (shard, local) for every access — the most favourable
        # case for the baseline.
        pairs = list(zip(shard_of, local_of))

        def ours_view():
            document = ss.document
            for d in doc_ids:
                document(d)

        def bare_view():
            for s, i in pairs:
                o = bare_offsets[s]
                bare_bins[s][o[i] : o[i + 1]]

        def ours_copy():
            document = ss.document
            for d in doc_ids:
                np.array(document(d), dtype=np.int64)

        def bare_copy():
            for s, i in pairs:
                o = bare_offsets[s]
                np.array(bare_bins[s][o[i] : o[i + 1]], dtype=np.int64)

        shard0 = ss.shards[0]
        starts = rng.integers(0, shard0.num_tokens - args.window - 1, size=args.accesses).tolist()
        window = args.window + 1

        def ours_window():
            tokens = ss.tokens
            for s in starts:
                np.array(tokens(s, window), dtype=np.int64)

        def bare_window():
            b = bare_bins[0]
            for s in starts:
                np.array(b[s : s + window], dtype=np.int64)

        ss.document(0)  # first access builds the offsets once; not part of the steady state
        rows = []
        for name, ours, bare in (
            ("random document (view)", ours_view, bare_view),
            ("random document (view + int64 copy)", ours_copy, bare_copy),
            (f"random {args.window}-token window (+ int64 copy)", ours_window, bare_window),
        ):
            t_ours = t_bare = float("inf")
            for _ in range(5):  # interleaved, best of 5: load on the machine hits both alike
                t_ours, t_bare = min(t_ours, timed(ours, 1)), min(t_bare, timed(bare, 1))
            rows.append((name, args.accesses / t_ours, args.accesses / t_bare, t_bare / t_ours))

    lines = [
        "# Reader benchmark",
        "",
        f"`python bench/bench_reader.py --documents {args.documents}` on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}.",
        f"Set: {args.documents:,} documents in {args.shards} shards "
        f"({ss.num_tokens:,} tokens, built in {build_s:.1f} s with the bulk writer).",
        "",
        f"Open time of the whole set (`ShardSet(dir)`, best of 5): **{open_s * 1000:.1f} ms** "
        "(target < 500 ms).",
        "",
        "| access | ours (ops/s) | bare np.memmap slice (ops/s) | ours / bare |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {n} | {o:,.0f} | {b:,.0f} | {r:.0%} |" for n, o, b, r in rows]
    lines += [
        "",
        "Target: ours / bare >= 80%. 'Bare' is handed each document's shard and local number "
        "and its offsets array up front; ours takes a global document number.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
