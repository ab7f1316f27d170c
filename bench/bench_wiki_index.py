"""Planning a multistream Wikipedia dump from its index: launcher time and memory at enwiki size.

    python bench/bench_wiki_index.py [--lines 23000000] [--out bench/results/wiki_index.md]
        [--baseline-root DIR]   # also plan with the code of another checkout (e.g. a git archive)

Builds a synthetic `...-multistream-index.txt.bz2` of `--lines` lines (`offset:page_id:title`,
100 pages per bz2 stream, ~95 kB of compressed dump per stream, as in enwiki) and a sparse
stand-in for the dump with a bz2 stream header at every stream offset the planner checks; then
runs `wikipedia.plan()` in a fresh process (its peak RSS is the launcher's cost) and, for
comparison, only decompresses the index (`bz2` at full speed, no parsing): the floor of any
planner that reads the index.
"""

from __future__ import annotations

import argparse
import bz2
import os
import platform
import random
import string
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

PAGES_PER_STREAM = 100
STREAM_BYTES = 95_000
TASK_MB = 64.0
DUMP_NAME = "enwiki-20240101-pages-articles-multistream.xml.bz2"
INDEX_NAME = "enwiki-20240101-pages-articles-multistream-index.txt.bz2"
STREAM_HEADER = b"BZh91AY&SY"


def build(directory: str, lines: int) -> tuple[int, int]:
    """Write the index and the sparse dump; (index bytes uncompressed, dump bytes)."""
    # Titles of two random pseudo-words: the index compresses about as well as a real one.
    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_letters, k=rng.randint(3, 12))) for _ in range(4096)]
    compressor = bz2.BZ2Compressor(1)
    raw_bytes = 0
    task_bytes = int(TASK_MB * 1_000_000)
    checked = [0]  # the stream offsets plan() will check: one per task of TASK_MB
    with open(os.path.join(directory, INDEX_NAME), "wb") as index:
        batch = []
        for line in range(lines):
            offset = 600 + (line // PAGES_PER_STREAM) * STREAM_BYTES
            if offset - checked[-1] >= task_bytes:
                checked.append(offset)
            title = f"{words[rng.randrange(4096)]} {words[rng.randrange(4096)]} {line}"
            batch.append(f"{offset}:{10 + line}:{title}\n")
            if len(batch) == 100_000:
                data = "".join(batch).encode()
                raw_bytes += len(data)
                index.write(compressor.compress(data))
                batch = []
        data = "".join(batch).encode()
        raw_bytes += len(data)
        index.write(compressor.compress(data) + compressor.flush())
    dump_bytes = 600 + (lines // PAGES_PER_STREAM + 1) * STREAM_BYTES
    with open(os.path.join(directory, DUMP_NAME), "wb") as dump:
        for offset in checked:
            dump.seek(offset)
            dump.write(STREAM_HEADER)
        dump.truncate(dump_bytes)
    return raw_bytes, dump_bytes


CHILD = """
import resource, sys, time
sys.path.insert(0, {root!r})
from pipelines.sources.wikipedia import wikipedia
started = time.perf_counter()
count = 0
if {what!r} == "plan":
    count = len(wikipedia.plan({dump!r}, {{"wiki_task_mb": "{task_mb}"}}))
elif {what!r} == "bz2":
    import bz2
    with bz2.open({index!r}) as f:
        while f.read(1 << 20):
            count += 1
elapsed = time.perf_counter() - started
print(count, elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def measure(directory: str, what: str, root: str = ROOT) -> tuple[int, float, int]:
    """(count, seconds, peak RSS in bytes) of one step in a fresh interpreter ("none": only the
    imports, whose RSS is the baseline), with the code under `root`."""
    code = CHILD.format(
        root=root,
        what=what,
        dump=os.path.join(directory, DUMP_NAME),
        index=os.path.join(directory, INDEX_NAME),
        task_mb=TASK_MB,
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(result.stderr)
    count, elapsed, rss = result.stdout.split()
    return int(count), float(elapsed), int(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=23_000_000)
    parser.add_argument("--out", default="")
    parser.add_argument("--baseline-root", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        started = time.perf_counter()
        raw_bytes, dump_bytes = build(directory, args.lines)
        built = time.perf_counter() - started
        index_bytes = os.path.getsize(os.path.join(directory, INDEX_NAME))
        _, _, idle_rss = measure(directory, "none")
        tasks, plan_s, plan_rss = measure(directory, "plan")
        _, bz2_s, bz2_rss = measure(directory, "bz2")
        rows = [
            (
                f"`wikipedia.plan()` of this checkout ({tasks:,} tasks of {TASK_MB:g} MB)",
                plan_s,
                plan_rss,
            ),
            ("only decompressing the index (bz2, no parsing)", bz2_s, bz2_rss),
        ]
        if args.baseline_root:
            tasks, seconds, rss = measure(directory, "plan", args.baseline_root)
            rows.append(
                (f"`wikipedia.plan()` of {args.baseline_root} ({tasks:,} tasks)", seconds, rss)
            )
    report = "\n".join(
        [
            "# Multistream index planning",
            "",
            f"`python bench/bench_wiki_index.py --lines {args.lines}` on {platform.machine()}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}.",
            f"Synthetic index: {args.lines:,} lines ({raw_bytes / 1e6:,.0f} MB, "
            f"{index_bytes / 1e6:,.0f} MB as bz2), {args.lines // PAGES_PER_STREAM:,} streams; "
            f"sparse dump of {dump_bytes / 1e9:,.1f} GB (built in {built:.0f} s).",
            "",
            "| step on the launcher | time (s) | peak RSS above the imports alone (MB) |",
            "|---|---:|---:|",
            *(
                f"| {step} | {seconds:.1f} | {max(0, rss - idle_rss) / 1e6:,.0f} |"
                for step, seconds, rss in rows
            ),
            "",
        ]
    )
    print(report)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as out:
            out.write(report + "\n")


if __name__ == "__main__":
    main()
