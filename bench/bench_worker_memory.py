"""Peak memory of one worker per byte of document: the factor behind `max_document_bytes`.

    .venv/bin/python bench/bench_worker_memory.py [--sizes-mb 8,16,32,64] [--out bench/results/worker_memory.md]

One document of N bytes (a real book, tinyshakespeare, repeated to N; compressed with xz as a
book download would be) goes through what a worker does with it, each size in a fresh process:
read (decompress, decode), clean (books preset), dedup signatures (word 5-gram shingles,
MinHash, as the default dedup does), tokenize (GPT-2, tiktoken path) and spill. The factor is
(peak RSS - RSS before reading) / N. A worker's peak is then about factor x the largest
document it is given (`max_document_bytes`) plus its fixed base; the README states the bound.
"""

from __future__ import annotations

import argparse
import datetime
import json
import lzma
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ROOT.parent / "shared" / "corpora"
GPT2 = CORPORA / "vocab" / "gpt2"
RESULTS = ROOT / "bench" / "results" / "worker_memory.md"


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """Start the peak (VmHWM) over from the current RSS (Linux >= 4.0), so the tokenizer's
    loading does not count as the document's."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def measure(size_bytes: int, workdir: str) -> dict:
    """In this (fresh) process: peak RSS over its starting RSS for one document of size_bytes."""
    sys.path.insert(0, str(ROOT))
    from dataset_format.tokenizer import load_tokenizer
    from pipelines.clean import CleanConfig, clean_document
    from pipelines.dedup.minhash import MinHasher
    from pipelines.dedup.shingles import shingle_batch
    from pipelines.document import Document, ReadTask
    from pipelines.sources import get_source, source_traits
    from pipelines.tokenize.encode import tokenize_batch
    from pipelines.write import SpillWriter

    book = (CORPORA / "books" / "tinyshakespeare-input.txt").read_bytes()
    path = Path(workdir) / "book.txt.xz"
    with lzma.open(path, "wb", preset=1) as f:
        written = 0
        while written < size_bytes:
            piece = book[: size_bytes - written]
            f.write(piece)
            written += len(piece)
    tokenizer = load_tokenizer(str(GPT2))
    tokenizer.encode_batch(["warm up the tokenizer"])
    hasher = MinHasher(128, 1)
    source = get_source("books")
    _reset_peak()
    base = _status_bytes("VmRSS")
    (doc,) = [r for r in source.read(ReadTask(source="books", path=str(path))) if isinstance(r, Document)]
    cleaned = clean_document(doc, CleanConfig.for_source(source_traits("books"), language="any"))
    shingles = shingle_batch([cleaned.text], kind="word", n=5)
    hasher.signatures(shingles)
    del shingles
    tokenized, _ = tokenize_batch([cleaned], tokenizer, split_sentences=False, append_eod=True, min_tokens=0)
    writer = SpillWriter(str(Path(workdir) / "b.spill"), "uint16")
    writer.add(tokenized[0])
    writer.close()
    peak = _status_bytes("VmHWM")
    return {
        "document_bytes": len(doc.text.encode("utf-8")),
        "base_rss": base,
        "peak_rss": peak,
        "factor": (peak - base) / len(doc.text.encode("utf-8")),
        "tokens": int(sum(len(s) for s in tokenized[0].sequences)),
    }


def run_child(size_bytes: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as workdir:
        result = subprocess.run(
            [sys.executable, __file__, "--child", str(size_bytes), "--workdir", workdir],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "RAYON_NUM_THREADS": "1"},
        )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", default="8,16,32,64")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.workdir)))
        return
    rows = [run_child(int(float(mb) * 1e6)) for mb in args.sizes_mb.split(",")]
    worst = max(r["factor"] for r in rows)
    lines = [
        "# Worker memory per document byte",
        "",
        f"Run {datetime.date.today()} by `bench/bench_worker_memory.py --sizes-mb {args.sizes_mb}` "
        f"on {platform.machine()}, Python {platform.python_version()}: one .xz book of N bytes "
        "read, cleaned, MinHash-signed, tokenized (GPT-2) and spilled in a fresh process.",
        "",
        "| document | tokens | RSS before | peak RSS | (peak - before) / document |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['document_bytes'] / 1e6:,.1f} MB | {r['tokens']:,} | {r['base_rss'] / 1e6:,.0f} MB "
            f"| {r['peak_rss'] / 1e6:,.0f} MB | {r['factor']:.1f}x |"
        )
    big, bigger = sorted(rows, key=lambda r: r["document_bytes"])[-2:]
    grown = [r["peak_rss"] - r["base_rss"] for r in (big, bigger)]
    slope = (grown[1] - grown[0]) / (bigger["document_bytes"] - big["document_bytes"])
    fixed = grown[1] - slope * bigger["document_bytes"]
    lines += [
        "",
        f"Largest factor: **{worst:.1f}x** (small documents: first-use buffers dominate). "
        f"Between the two largest sizes each further document byte costs **{slope:.1f}** bytes, "
        f"on top of **{fixed / 1e6:,.0f} MB** of first-use buffers.",
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
