"""Dedup speed and memory: MinHash signatures per second per core against datasketch, the whole
dedup stage's documents per second, and its workers' peak memory as the corpus grows 4x.

    .venv/bin/python bench/bench_dedup_speed.py [--docs 600] [--reps 5] [--worker-rss]

1. Signatures: the same real documents and the same 5-word shingles, 112 permutations (14 x 8).
   datasketch gets each document's shingles ready-made as bytes (building them is not timed);
   ours starts from the raw text (tokenising and hashing are timed). Time is CPU time of this
   process (time.process_time), so other jobs on a shared machine do not count; the methods
   run interleaved, and the median of --reps runs is reported.
2. The whole stage: `Deduplicate` on the DirectRunner in this process, Parquet in, nothing out,
   and the bytes it shuffles: the `dedup_shuffle_bytes_<stage>` counters (the encoded size of
   every element each GroupByKey receives, see pipelines/dedup/shuffle.py) per stage, in all,
   and per byte of input text. --shuffle-only prints just these tables.
3. Memory of every dedup step, at 1x, 2x and 4x the corpus: each step's DoFn driven directly
   with its input streamed (as a runner feeds a bundle or a group) and its output discarded;
   the peak memory it traces (tracemalloc, numpy buffers included) above what was live before.
   The grouped steps get the worst case: ONE group holding every document (an exact-duplicate
   group, a hot LSH bucket, a star centre, a candidate-pair join), so their peak would grow with
   the corpus if any of them held a group in memory.
   --worker-rss also runs the pipeline with one SDK worker process (--direct_running_mode
   multi_processing) and samples its resident memory. That number tracks the corpus on the
   DirectRunner whatever the steps do: its runner hands a worker each stage's whole input as one
   gRPC message (fn_runner.py, _send_input_to_worker), where Dataflow streams shuffle reads.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import apache_beam as beam  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import xxhash  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from bench_dedup_quality import planted_corpus, real_documents, words  # noqa: E402
from datasketch import MinHash  # noqa: E402

from pipelines.dedup import DedupConfig, Deduplicate  # noqa: E402
from pipelines.dedup.__main__ import counters  # noqa: E402
from pipelines.dedup.bandfiles import BandFileWriter  # noqa: E402
from pipelines.dedup.components import _StarCheckFn, _StarStepFn, large_star, small_star  # noqa: E402
from pipelines.dedup.lsh import pack_nodes  # noqa: E402
from pipelines.dedup.minhash import MinHasher, permutation_parameters  # noqa: E402
from pipelines.dedup.parquet import DOCUMENT_SCHEMA, ReadDocuments, document_to_row  # noqa: E402
from pipelines.dedup.shingles import ShingleBatch, pack_set, shingle_batch  # noqa: E402
from pipelines.dedup.stash import StashDoFn  # noqa: E402
from pipelines.dedup.transforms import (  # noqa: E402
    _ApplyFn,
    _BucketEdgesFn,
    _Decision,
    _FeaturesFn,
    _KeepSmallestFn,
)
from pipelines.dedup.verify import RECEIVES, PairShinglesFn, VerifyFn  # noqa: E402
from pipelines.document import Document  # noqa: E402
from pipelines.stats import shuffle_summary  # noqa: E402
from tests.measure import traced_peak  # noqa: E402

NUM_PERM = 112
BATCH_DOCS, BATCH_CHARS = DedupConfig().batch_docs, DedupConfig().batch_bytes


def batches(texts: list[str]):
    batch, chars = [], 0
    for t in texts:
        batch.append(t)
        chars += len(t)
        if len(batch) >= BATCH_DOCS or chars >= BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def ours(texts: list[str]) -> None:
    hasher = MinHasher(NUM_PERM, 1)
    for batch in batches(texts):
        hasher.signatures(shingle_batch(batch))


def _mod_p_signatures(batch: ShingleBatch) -> np.ndarray:
    """The classic (a*x + b) mod (2^61 - 1) over uint64, vectorised the same way (for comparison)."""
    prime = np.uint64((1 << 61) - 1)
    a, b = permutation_parameters(NUM_PERM, 1)
    a, b = a.astype(np.uint64)[:, None], b.astype(np.uint64)[:, None]
    x = batch.hashes.astype(np.uint64)
    out = np.full((len(batch), NUM_PERM), np.uint64(2**64 - 1))
    work, low = np.empty((NUM_PERM, 2048), np.uint64), np.empty((NUM_PERM, 2048), np.uint64)
    offsets = batch.offsets
    for lo in range(0, len(x), 2048):
        chunk = x[lo : lo + 2048]
        v, t = work[:, : len(chunk)], low[:, : len(chunk)]
        np.multiply(a, chunk, out=v)  # a, x < 2^32: no overflow
        np.add(v, b, out=v)
        np.bitwise_and(v, prime, out=t)  # v mod (2^61 - 1) = (v & p) + (v >> 61), < 2^61 + 8
        np.right_shift(v, np.uint64(61), out=v)
        np.add(v, t, out=v)
        hi = lo + len(chunk)
        first = int(np.searchsorted(offsets, lo, side="right")) - 1
        stop = int(np.searchsorted(offsets, hi, side="left"))
        starts = np.maximum(offsets[first:stop], lo)
        nonempty = np.flatnonzero(np.minimum(offsets[first + 1 : stop + 1], hi) > starts)
        minima = np.minimum.reduceat(v, starts[nonempty] - lo, axis=1)
        rows = first + nonempty
        out[rows] = np.minimum(out[rows], minima.T)
    return out


def ours_mod_p(texts: list[str]) -> None:
    for batch in batches(texts):
        _mod_p_signatures(shingle_batch(batch))


def shingle_bytes(text: str) -> list[bytes]:
    w = words(text)
    if len(w) < 5:
        return [" ".join(w).encode()] if w else []
    return [" ".join(w[i : i + 5]).encode() for i in range(len(w) - 4)]


def cpu_seconds(fn, arg) -> float:
    start = time.process_time()
    fn(arg)
    return time.process_time() - start


def bench_signatures(n_docs: int, reps: int) -> list[tuple[str, float]]:
    docs = [d for d in real_documents() if len(words(d.text)) >= 5]
    step = max(1, len(docs) // n_docs)
    texts = [d.text for d in docs[::step][:n_docs]]
    prepared = [shingle_bytes(t) for t in texts]  # datasketch's input, built before timing
    methods = {
        "ours: text -> signatures, (a*x+b) mod 2^32 (library)": (ours, texts),
        "ours: text -> signatures, (a*x+b) mod (2^61-1) uint64": (ours_mod_p, texts),
        "datasketch 2.0 MinHash.bulk, default scheme (affine32)": (
            lambda p: MinHash.bulk(p, num_perm=NUM_PERM),
            prepared,
        ),
        "datasketch 2.0 MinHash.bulk, scheme='legacy' (mod 2^61-1)": (
            lambda p: MinHash.bulk(p, num_perm=NUM_PERM, scheme="legacy"),
            prepared,
        ),
    }
    ours(texts[:50])  # builds the per-process tables (word characters, powers)
    times = {name: [] for name in methods}
    for _ in range(reps):
        for name, (fn, arg) in methods.items():
            times[name].append(cpu_seconds(fn, arg))
    shingles_total = sum(len(p) for p in prepared)
    print(f"{len(texts)} documents, {shingles_total:,} shingles, {NUM_PERM} permutations")
    return [(name, len(texts) / statistics.median(ts)) for name, ts in times.items()]


def _write_parquet(docs: list[Document], directory: str) -> str:
    table = pa.Table.from_pylist([document_to_row(d) for d in docs], schema=DOCUMENT_SCHEMA)
    pq.write_table(table, f"{directory}/docs.parquet", row_group_size=256)
    return f"{directory}/docs.parquet"


def _run_stage(pattern: str, options: list[str]) -> tuple[float, dict]:
    """(wall seconds, the shuffle summary) of the whole stage on the corpus at `pattern`."""
    pipeline = beam.Pipeline(options=PipelineOptions(["--runner", "DirectRunner", *options]))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        dedup = Deduplicate(DedupConfig(), work)
        result = pipeline | ReadDocuments(pattern) | dedup
        _ = result.main | "Kept" >> beam.combiners.Count.Globally()
        _ = result["rejects"] | "Removed" >> beam.combiners.Count.Globally()
        run = pipeline.run()
        run.wait_until_finish()
    return time.perf_counter() - started, shuffle_summary(counters(run))


def print_shuffle(shuffles: dict[int, dict]) -> None:
    stages = sorted({s for summary in shuffles.values() for s in summary["shuffle_bytes_by_stage"]})
    print("\n| corpus | MB of text | MB shuffled | per input byte | " + " | ".join(stages) + " |")
    print("|---|---|---|---|" + "---|" * len(stages))
    for scale, summary in shuffles.items():
        by_stage = summary["shuffle_bytes_by_stage"]
        cells = " | ".join(
            f"{by_stage.get(s, 0) / summary['input_text_bytes']:.3f}" for s in stages
        )
        print(
            f"| {scale}x | {summary['input_text_bytes'] / 1e6:.1f} "
            f"| {summary['shuffle_bytes'] / 1e6:.1f} | **{summary['shuffle_ratio']:.2f}x** | {cells} |"
        )


def scaled_corpus(scale: int) -> list[Document]:
    """The planted quality corpus, plus (scale - 1) rewritten versions of it: 40% of the words
    replaced, so each version is new text (J ~ 0.1 to its source), not more duplicates."""
    docs, _ = planted_corpus()
    out = list(docs)
    for version in range(1, scale):
        for doc in docs:
            salt = f"{version}:{doc.id}"

            def swap(word: str, salt=salt) -> str:
                h = xxhash.xxh64_intdigest(f"{salt}:{word}".encode())
                return f"w{h % 100_000}" if h % 10 < 4 else word

            text = " ".join(swap(w) for w in doc.text.split(" "))
            out.append(Document(f"{doc.id}:v{version}", doc.source, text))
    return out


def _drain(outputs) -> None:
    for _ in outputs or ():
        pass


class _Group:
    """A GroupByKey value produced on demand, the way a runner streams a large group."""

    def __init__(self, make, n: int) -> None:
        self.make, self.n = make, n

    def __iter__(self):
        return (self.make(i) for i in range(self.n))


def step_memory(docs: list[Document], work_dir: str) -> dict[str, int]:
    """Traced peak bytes of each dedup step's DoFn over this corpus (see the docstring)."""
    features = _FeaturesFn(DedupConfig())
    features.setup()
    features.start_bundle()
    _drain(features.process(docs[0]))  # the per-process tables are built once, before measuring
    _drain(features.finish_bundle())
    n = len(docs)
    nodes = [(0, d.id) for d in docs]
    records = [(node, "", b"\x01" * 16, "", b"\x02" * 112) for node in nodes]
    shingles = pack_set(shingle_batch([docs[0].text]).of(0))
    decision = _Decision("near_duplicate", nodes[0][1], nodes[0][1], None)
    smallest = (0, "")

    def run_features():
        features.start_bundle()
        for doc in docs:
            _drain(features.process(doc))
        _drain(features.finish_bundle())

    class EveryoneReceives:  # every document in a candidate pair: the worst case
        def get(self, doc_id):
            return [RECEIVES]

    def run_pair_shingles():
        fn = PairShinglesFn(DedupConfig(), "unused")
        fn.start_bundle()
        for doc in docs:
            _drain(fn.pair_sets(doc, EveryoneReceives()))
        _drain(fn.finish_bundle())

    def grouped(fn, key, make):
        def run():
            if hasattr(fn, "start_bundle"):
                fn.start_bundle()
            _drain(fn.process((key, _Group(make, n))))
            if hasattr(fn, "finish_bundle"):
                fn.finish_bundle()

        return run

    bands = BandFileWriter(work_dir)  # one band batch a document, every one in one bucket
    band_refs = [bands.write(np.uint64(7).tobytes(), pack_nodes([node])) for node in nodes]
    bands.close()
    stash = StashDoFn(work_dir, 1)  # one bucket: every document's text in its files
    stash.setup()
    stash.start_bundle()
    for doc in docs:
        stash.process(doc)
    applied = [out.value[1] for out in stash.finish_bundle()]
    applied += [("dec", (doc.id, decision)) for doc in docs[::5]]

    def run_apply():
        fn = _ApplyFn(work_dir)
        fn.setup()
        fn.start_bundle()
        _drain(fn.process((0, applied)))
        fn.finish_bundle()

    def incoming(i):
        return ("own", (smallest, shingles)) if i == 0 else ("in", (nodes[i], shingles))

    steps = {
        "features (batched MinHash, fingerprints), every document": run_features,
        "URL / exact keep-smallest, one group of all": grouped(
            _KeepSmallestFn("exact_duplicate", 1.0, {"fingerprint": b""}, 16),
            b"k",
            records.__getitem__,
        ),
        "LSH bucket edges, one band partition holding a hot bucket of all": grouped(
            _BucketEdgesFn(100, work_dir), b"k", band_refs.__getitem__
        ),
        "verify, shingle sets of paired documents: every document": run_pair_shingles,
        "verify, Jaccard: one document paired with all": grouped(VerifyFn(0.8), "x", incoming),
        "components, large-star: a centre linked to all": grouped(
            _StarStepFn(large_star, 1, False), smallest, nodes.__getitem__
        ),
        "components, small-star: a node linked to all": grouped(
            _StarStepFn(small_star, 1, True), (1, ""), nodes.__getitem__
        ),
        "components, convergence check: a star of all": grouped(
            _StarCheckFn(16), smallest, nodes.__getitem__
        ),
        "apply, one bucket of every document (its stash files)": run_apply,
    }
    return {name: traced_peak(run) for name, run in steps.items()}


class PeakRss:
    """Samples the resident memory of this process's SDK worker children."""

    def __init__(self) -> None:
        self.worker = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            for child in me.children(recursive=True):
                try:
                    if "sdk_worker_main" in " ".join(child.cmdline()) and child.name().startswith(
                        "python"
                    ):
                        self.worker = max(self.worker, child.memory_info().rss)
                except psutil.Error:
                    pass
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=600, help="documents for the signature bench")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--worker-rss",
        action="store_true",
        help="also sample the SDK worker's resident memory (see the docstring)",
    )
    parser.add_argument(
        "--shuffle-only",
        action="store_true",
        help="only run the whole stage at each scale and print the bytes it shuffles",
    )
    parser.add_argument(
        "--scales",
        type=int,
        nargs="+",
        default=[1, 2, 4],
        help="corpus scales for --shuffle-only (1x is the planted quality corpus)",
    )
    args = parser.parse_args()

    if args.shuffle_only:
        shuffles = {}
        for scale in args.scales:
            with tempfile.TemporaryDirectory() as tmp:
                _, shuffles[scale] = _run_stage(_write_parquet(scaled_corpus(scale), tmp), [])
        print_shuffle(shuffles)
        return

    rows = bench_signatures(args.docs, args.reps)
    baseline = rows[2][1]
    print("\n| method | signatures/s per core | vs datasketch default |")
    print("|---|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} | {rate / baseline:.2f}x |")

    rss_header = " worker peak RSS (MiB) |" if args.worker_rss else ""
    print(f"\n| corpus | documents | MB of text | stage wall time (s) | docs/s |{rss_header}")
    print("|---|---|---|---|---|" + ("---|" if args.worker_rss else ""))
    memory, shuffles = {}, {}
    for scale in (1, 2, 4):
        docs = scaled_corpus(scale)
        megabytes = sum(len(d.text.encode()) for d in docs) / 1e6
        with tempfile.TemporaryDirectory() as tmp:
            pattern = _write_parquet(docs, tmp)
            elapsed, shuffles[scale] = _run_stage(pattern, [])
            rss = ""
            if args.worker_rss:
                multi = ["--direct_num_workers", "1", "--direct_running_mode", "multi_processing"]
                with PeakRss() as sampled:
                    _run_stage(pattern, multi)
                rss = f" {sampled.worker / 2**20:,.0f} |"
            memory[scale] = step_memory(docs, tmp)
        rate = len(docs) / elapsed
        print(
            f"| {scale}x | {len(docs):,} | {megabytes:.1f} | {elapsed:.1f} | {rate:,.0f} |{rss}",
            flush=True,
        )

    print_shuffle(shuffles)

    scales = " | ".join(f"peak KiB, {s}x" for s in memory)
    print(f"\n| step (its input at each scale) | {scales} | 4x / 1x |")
    print("|---|" + "---|" * (len(memory) + 1))
    for step in memory[1]:
        cells = " | ".join(f"{memory[s][step] / 1024:,.0f}" for s in memory)
        print(f"| {step} | {cells} | {memory[4][step] / memory[1][step]:.2f} |")


if __name__ == "__main__":
    main()
