"""End-to-end preprocessing throughput: the Beam pipeline against plain-Python baselines.

    python bench/bench_preprocess.py [--target-mb 96] [--workers 2] [--budget-s 150]
                                     [--out bench/results/preprocess.md]

One corpus, one run, every contender in its own process (so each one's peak memory is its
own). The corpus is JSON lines built from the shared real samples (books, Wikipedia dumps,
WebText, WikiText articles), repeated under new file names until it holds `--target-mb` MB of
UTF-8 text, in 16 files. Every contender reads those files, tokenizes with GPT-2's
vocabulary, appends an end-of-document id and writes an MMIDIDX .bin/.idx:

- pipeline   `python -m pipelines.preprocess --source jsonl --no-dedup`, FnApiRunner
             multi_processing with `--workers` worker processes (our default runner)
- loop       our own per-document functions in a plain loop, one process: the jsonl source's
             read(), clean_document, tokenize_batch, IndexedDatasetWriter. The limit for the
             pipeline: same work, no Beam.
- naive      one process: json.loads, ftfy.fix_text, tokenizers' encode per document
- megatron   Megatron-LM tools/preprocess_data.py style: multiprocessing.Pool(`--workers`)
             .imap(encode, lines, 32) where encode = json.loads + tokenizers' encode + EOD, the
             main process writing the dataset (Megatron's HuggingFaceTokenizer path)
- stages     the loop again, each stage's CPU seconds timed (read, ftfy, normalisation,
             language id, quality filters, tokenize, write), then tokenization alone and
             sentence splitting in the same process: the loop's share of tokenization alone
- datatrove  (only with --only datatrove --datatrove-python PY) datatrove's JsonlReader +
             DocumentTokenizer from a throwaway venv, `--workers` tasks, no cleaning

Throughput is MB of raw text per second per core, two ways: MB per CPU-second of the whole
process tree (robust on a shared machine), and MB / (wall seconds x processes working). The
slow baselines stop after `--budget-s` seconds and report the MB they got through.
Peak memory is the largest summed RSS of the contender's process tree, sampled every 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CORPORA = REPO.parent / "shared" / "corpora"
GPT2 = CORPORA / "vocab" / "gpt2"
FILES = 16

sys.path.insert(0, str(REPO / "bench"))
# The baselines and peers we measure against (naive, Megatron-style, datatrove) and the corpus
# listing they share with this bench: what they run is theirs, how we time them is here.
from preprocess_peers import (  # noqa: E402
    DATATROVE_PYTHON,
    corpus_files,
    run_datatrove,
    run_megatron,
    run_naive,
)
from preprocess_report import render, render_stages  # noqa: E402


# -- the corpus ----------------------------------------------------------------------------------
def sample_texts() -> list[str]:
    """Every document of the shared samples, as the sources read them (raw, not cleaned)."""
    from pipelines.document import Document
    from pipelines.sources import get_source

    texts = []
    for source, pattern in (
        ("books", CORPORA / "books" / "*.txt"),
        ("wikipedia", CORPORA / "wikipedia" / "enwiki-latest-pages-articles1*"),
        ("wikipedia", CORPORA / "wikipedia" / "simplewiki-sample.xml.bz2"),
        ("webtext", CORPORA / "web" / "text" / "webtext_train_10" / "*.txt"),
    ):
        module = get_source(source)
        for task in module.plan(str(pattern), {}):
            texts += [r.text for r in module.read(task) if isinstance(r, Document)]
    for split in (CORPORA / "wikitext").glob("*/wiki.*.tokens"):
        # WikiText articles start at lines " = Title = "
        article: list[str] = []
        for line in split.read_text(encoding="utf-8").splitlines(keepends=True):
            if line.startswith(" = ") and not line.startswith(" = = ") and article:
                texts.append("".join(article))
                article = []
            article.append(line)
        if article:
            texts.append("".join(article))
    return [t for t in texts if t.strip()]


def build_corpus(directory: Path, target_mb: float) -> dict:
    texts = sample_texts()
    lines = [json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts]
    sizes = [len(t.encode("utf-8")) for t in texts]
    directory.mkdir(parents=True, exist_ok=True)
    files = [open(directory / f"part-{i:02d}.jsonl", "w", encoding="utf-8") for i in range(FILES)]
    text_bytes = documents = 0
    copy = 0
    while text_bytes < target_mb * 1e6:
        for i, (line, size) in enumerate(zip(lines, sizes)):
            files[(i + copy) % FILES].write(line)
            text_bytes += size
            documents += 1
        copy += 1
    for f in files:
        f.close()
    return {
        "documents": documents,
        "unique_documents": len(texts),
        "copies": copy,
        "text_bytes": text_bytes,
        "files": FILES,
    }


# -- contenders (each runs in its own process: `--run NAME`) --------------------------------------
def pipeline_arguments(corpus: Path, out: Path, mode_flags: list[str], dedup: bool) -> list[str]:
    return [
        "--source=jsonl",
        f"--input={corpus}/*.jsonl",
        f"--output={out}",
        f"--tokenizer={GPT2}",
        "--append-eod",
        *([] if dedup else ["--no-dedup"]),
        "--progress-interval=0",
        *mode_flags,
    ]


def pipeline_result(out: Path) -> dict:
    stats = json.loads((out / "stats.json").read_text())
    return {
        "bytes": stats["bytes_read"],
        "documents": stats["written"],
        "tokens": stats["tokens_written"],
        "complete": True,
    }


def run_pipeline(corpus: Path, out: Path, workers: int, budget_s: float) -> dict:
    from pipelines.preprocess import main

    mode_flags = ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
    code = main(pipeline_arguments(corpus, out, mode_flags, dedup=False))
    if code != 0:
        raise SystemExit(f"pipeline failed with exit code {code}")
    return pipeline_result(out)


# Start-up as a user sees it: the command itself (`python -m pipelines.preprocess`), where the
# launcher picks where it runs (a small input runs in its own process); name -> dedup on.
STARTUP_COMMANDS = {"pipeline_default": False, "pipeline_dedup": True}


def run_loop(corpus: Path, out: Path, workers: int, budget_s: float) -> dict:
    from dataset_format import IndexedDatasetWriter, dtype_for_vocab
    from dataset_format.tokenizer import load_tokenizer
    from pipelines.clean import CleanConfig, clean_document
    from pipelines.document import Document
    from pipelines.options import DEFAULT_TOKENIZE_BATCH_DOCS
    from pipelines.sources import get_source, source_traits
    from pipelines.tokenize.encode import tokenize_batch

    source = get_source("jsonl")
    config = CleanConfig.for_source(source_traits("jsonl"))
    tokenizer = load_tokenizer(str(GPT2))
    out.mkdir(parents=True, exist_ok=True)
    writer = IndexedDatasetWriter(str(out / "loop"), dtype_for_vocab(tokenizer.vocab_size))
    read_bytes = documents = tokens = 0
    batch: list[Document] = []

    def flush():
        nonlocal documents, tokens
        tokenized, _ = tokenize_batch(batch, tokenizer, split_sentences=False, append_eod=True)
        for doc in tokenized:
            writer.add_document(doc.sequences)
            documents += 1
            tokens += sum(len(s) for s in doc.sequences)
        batch.clear()

    for task in source.plan(f"{corpus}/*.jsonl", {}):
        for record in source.read(task):
            if not isinstance(record, Document):
                continue
            read_bytes += len(record.text.encode("utf-8"))
            cleaned = clean_document(record, config)
            if isinstance(cleaned, Document):
                batch.append(cleaned)
                if len(batch) >= DEFAULT_TOKENIZE_BATCH_DOCS:
                    flush()
    flush()
    writer.finalize()
    return {"bytes": read_bytes, "documents": documents, "tokens": tokens, "complete": True}


# The plain loop's stages, in the order a document meets them (the --stages table).
STAGES = {
    "read": "read (JSONL parse, Document)",
    "ftfy": "ftfy on demand (the exact pre-check, ftfy where it says so)",
    "normalise": "normalisation (line breaks, spaces, controls, NFC, blank lines)",
    "language": "language id (windows, vectorised walk)",
    "filters": "quality filters (length; the rest of clean_document)",
    "tokenize": "tokenize (tiktoken fast path, EOD)",
    "write": "write (MMIDIDX)",
}


class _StageClock:
    """CPU seconds per stage of the plain loop: wraps the module globals clean_document looks
    up at each call (bench only; the measured functions are unchanged). Nested stages are
    subtracted from the stage that called them."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(STAGES, 0.0)
        self._inner = 0.0

    def timed(self, stage: str, function):
        def run(*args, **kwargs):
            outer_inner, self._inner = self._inner, 0.0
            start = time.process_time()
            result = function(*args, **kwargs)
            elapsed = time.process_time() - start
            self.seconds[stage] += elapsed - self._inner
            self._inner = outer_inner + elapsed
            return result

        return run


def run_stages(corpus: Path, out: Path, workers: int, budget_s: float) -> dict:
    """The plain loop with each stage's CPU seconds, then tokenization alone on the same raw
    texts in the same process, and sentence splitting (BERT runs only) on the kept texts."""
    from unittest import mock

    import pipelines.clean as clean
    from dataset_format import IndexedDatasetWriter, dtype_for_vocab
    from dataset_format.tokenizer import load_tokenizer
    from pipelines.clean import normalize
    from pipelines.document import Document
    from pipelines.options import DEFAULT_TOKENIZE_BATCH_DOCS
    from pipelines.sentences import split_sentences
    from pipelines.sources import get_source, source_traits
    from pipelines.tokenize.encode import tokenize_batch

    source = get_source("jsonl")
    config = clean.CleanConfig.for_source(source_traits("jsonl"))
    tokenizer = load_tokenizer(str(GPT2))
    clean.identify_language("Warm the model up: its load is start-up, not a stage.")
    tokenizer.encode_batch(["Warm the tokenizer up as well."])
    out.mkdir(parents=True, exist_ok=True)
    writer = IndexedDatasetWriter(str(out / "stages"), dtype_for_vocab(tokenizer.vocab_size))
    clock = _StageClock()
    read_bytes = documents = 0
    batch: list[Document] = []
    raw_texts: list[str] = []

    def flush():
        nonlocal documents
        tokenized, _ = clock.timed("tokenize", tokenize_batch)(
            batch, tokenizer, split_sentences=False, append_eod=True
        )
        for doc in tokenized:
            clock.timed("write", writer.add_document)(doc.sequences)
            documents += 1
        batch.clear()

    kept_texts = []
    started = time.process_time()
    with (
        mock.patch.object(normalize, "repair", clock.timed("ftfy", normalize.repair)),
        mock.patch.object(clean, "normalize_text", clock.timed("normalise", clean.normalize_text)),
        mock.patch.object(
            clean, "identify_language", clock.timed("language", clean.identify_language)
        ),
    ):
        clean_document = clock.timed("filters", clean.clean_document)
        for task in source.plan(f"{corpus}/*.jsonl", {}):
            records = iter(source.read(task))
            while True:
                record = clock.timed("read", next)(records, None)
                if record is None:
                    break
                if not isinstance(record, Document):
                    continue
                read_bytes += len(record.text.encode("utf-8"))
                raw_texts.append(record.text)
                cleaned = clean_document(record, config)
                if isinstance(cleaned, Document):
                    kept_texts.append(cleaned.text)
                    batch.append(cleaned)
                    if len(batch) >= DEFAULT_TOKENIZE_BATCH_DOCS:
                        flush()
        flush()
        clock.timed("write", writer.finalize)()
    loop_cpu = time.process_time() - started
    # Tokenization alone: the same tokenizer call on the raw texts, in the same batches.
    start = time.process_time()
    for i in range(0, len(raw_texts), DEFAULT_TOKENIZE_BATCH_DOCS):
        tokenizer.encode_batch(raw_texts[i : i + DEFAULT_TOKENIZE_BATCH_DOCS])
    tokenize_alone = time.process_time() - start
    start = time.process_time()
    for text in kept_texts:
        split_sentences(text)
    sentences = time.process_time() - start
    return {
        "bytes": read_bytes,
        "documents": documents,
        "tokens": 0,
        "complete": True,
        "stages": clock.seconds,
        "loop_cpu_s": loop_cpu,
        "tokenize_alone_cpu_s": tokenize_alone,
        "sentence_split_cpu_s": sentences,
    }


CONTENDERS = {
    "pipeline": (run_pipeline, "Beam pipeline (FnApiRunner multi_processing)"),
    "loop": (run_loop, "(1) our clean + tokenize in a plain loop"),
    "naive": (run_naive, "(2) naive ftfy.fix_text + HF encode per document"),
    "megatron": (run_megatron, "(3) Megatron-style multiprocessing.Pool, HF encode"),
}
# Only with --datatrove-python.
PEERS = {"datatrove": (run_datatrove, "(4) datatrove DocumentTokenizer (no cleaning)")}
# Start-up only: the pipeline without a running mode, as a user runs it.
# The plain loop again, timed per stage, with tokenization alone measured in the same process.
PROFILE = {"stages": (run_stages, "the plain loop per stage")}
STARTUP_LABELS = {
    "pipeline": "pipeline multi_processing (launcher + workers)",
    "pipeline_default": "`python -m pipelines.preprocess` as a user runs it, no dedup (in the "
    "launcher's process for a small input)",
    "pipeline_dedup": "the same with deduplication (on by default; the comparison runs without)",
    "loop": "loop",
}
ALL_CONTENDERS = {**CONTENDERS, **PEERS}
# Processes doing the work, for the wall-clock per-core figure.
PARALLEL = {
    "pipeline": True,
    "megatron": True,
    "loop": False,
    "naive": False,
    "pipeline_default": False,
    "pipeline_dedup": False,
    "stages": False,
    "datatrove": True,
}


# -- measuring -----------------------------------------------------------------------------------
def measure(name: str, corpus: Path, work: Path, workers: int, budget_s: float) -> dict:
    import psutil

    result_file = work / f"{name}.json"
    if name in STARTUP_COMMANDS:
        out = work / f"out-{name}"
        command = [
            *(sys.executable, "-m", "pipelines.preprocess"),
            *pipeline_arguments(corpus, out, [], dedup=STARTUP_COMMANDS[name]),
        ]
    else:
        command = [
            *(sys.executable, __file__, "--run", name, "--corpus", str(corpus)),
            *("--work", str(work), "--workers", str(workers), "--budget-s", str(budget_s)),
            *(["--datatrove-python", DATATROVE_PYTHON[0]] if DATATROVE_PYTHON else []),
        ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        env={**os.environ, "RAYON_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if name in STARTUP_COMMANDS else None,
    )
    root = psutil.Process(process.pid)
    peak = 0
    # CPU seconds of every process of the tree, last sampled: a pool whose workers are never
    # waited for (datatrove's) hides them from RUSAGE_CHILDREN.
    sampled: dict[int, float] = {}
    while process.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
            for p in tree:
                times = p.cpu_times()
                sampled[p.pid] = times.user + times.system
        except psutil.Error:
            pass
        time.sleep(0.05)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        raise SystemExit(f"{name} failed (exit {process.returncode})")
    if name in STARTUP_COMMANDS:
        result = pipeline_result(out)
    else:
        result = json.loads(result_file.read_text())
    cpu = max(
        (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        sum(sampled.values()),
    )
    cores = workers if PARALLEL[name] else 1
    mb = result["bytes"] / 1e6
    return {
        **result,
        "name": name,
        "wall_s": wall,
        "cpu_s": cpu,
        "cores": cores,
        "mb": mb,
        "mb_per_cpu_s": mb / cpu,
        "mb_per_core_s": mb / wall / cores,
        "peak_rss_mb": peak / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target-mb", type=float, default=96.0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--budget-s", type=float, default=150.0)
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted({**CONTENDERS, **PROFILE, **PEERS}),
        default=[*CONTENDERS, *PROFILE],
    )
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "preprocess.md"))
    parser.add_argument(
        "--datatrove-python",
        help="a Python with datatrove installed (a throwaway venv): adds datatrove's tokenizer "
        "as contender (4) when 'datatrove' is in --only",
    )
    parser.add_argument("--work", help="scratch directory (default: a temporary one)")
    parser.add_argument(
        "--run",
        choices=sorted({**CONTENDERS, **PROFILE, **PEERS}),
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.datatrove_python:
        DATATROVE_PYTHON.append(args.datatrove_python)
    elif "datatrove" in args.only:
        parser.error("--only datatrove needs --datatrove-python")

    if args.run:  # one contender, in this process
        work = Path(args.work)
        function, _ = {**CONTENDERS, **PROFILE, **PEERS}[args.run]
        result = function(Path(args.corpus), work / f"out-{args.run}", args.workers, args.budget_s)
        (work / f"{args.run}.json").write_text(json.dumps(result))
        return

    with tempfile.TemporaryDirectory(prefix="bench-preprocess-", dir=args.work) as tmp:
        work = Path(tmp)
        corpus = build_corpus(work / "corpus", args.target_mb)
        print(f"corpus: {corpus['text_bytes'] / 1e6:.1f} MB, {corpus['documents']:,} documents")
        load_start = os.getloadavg()[0]
        rows = []
        profile = None
        if "stages" in args.only:
            profile = measure("stages", work / "corpus", work, args.workers, args.budget_s)
            print(render_stages(profile, STAGES), flush=True)
        for name in (name for name in args.only if name in ALL_CONTENDERS):
            row = measure(name, work / "corpus", work, args.workers, args.budget_s)
            print(
                f"{name:9s} {row['mb']:8.1f} MB  wall {row['wall_s']:6.1f} s  cpu {row['cpu_s']:6.1f} s  "
                f"{row['mb_per_cpu_s']:5.2f} MB/cpu-s  {row['mb_per_core_s']:5.2f} MB/s/core  "
                f"peak {row['peak_rss_mb']:6.0f} MB  tokens {row['tokens']:,}",
                flush=True,
            )
            rows.append(row)
        # Memory must not grow with the corpus: the pipeline once more on a quarter of it.
        quarter = work / "quarter"
        (quarter / "corpus").mkdir(parents=True)
        for path in corpus_files(work / "corpus")[: FILES // 4]:
            (quarter / "corpus" / path.name).symlink_to(path)
        small = None
        if "pipeline" in args.only:
            small = measure("pipeline", quarter / "corpus", quarter, args.workers, args.budget_s)
            print(f"pipeline  quarter corpus: peak {small['peak_rss_mb']:.0f} MB", flush=True)
        # Fixed start-up cost: the same two commands on a corpus of five short documents.
        tiny = work / "tiny"
        (tiny / "corpus").mkdir(parents=True)
        first = corpus_files(work / "corpus")[0].read_text(encoding="utf-8").splitlines(True)
        short = sorted(first, key=len)[:5]
        (tiny / "corpus" / "part-00.jsonl").write_text("".join(short), encoding="utf-8")
        startup = {}
        for name in ("pipeline", "pipeline_default", "pipeline_dedup", "loop"):
            if name.split("_")[0] in args.only:
                startup[name] = measure(name, tiny / "corpus", tiny, args.workers, args.budget_s)
                print(
                    f"{name:9s} start-up: wall {startup[name]['wall_s']:.1f} s, "
                    f"cpu {startup[name]['cpu_s']:.1f} s",
                    flush=True,
                )
        # The report needs the pipeline, the loop and its profile; the baselines are optional
        # (a short --budget-s stops the slow ones early).
        if {"pipeline", "loop", "stages"} <= set(args.only):
            by = {r["name"]: r for r in rows}
            if (by["pipeline"]["documents"], by["pipeline"]["tokens"]) != (
                by["loop"]["documents"],
                by["loop"]["tokens"],
            ):
                raise SystemExit("the pipeline and the plain loop wrote different data")
            labels = {name: label for name, (_, label) in ALL_CONTENDERS.items()}
            load = (load_start, os.getloadavg()[0])
            text = render(rows, startup, small, corpus, args, load, labels, STARTUP_LABELS)
            text += "\n" + render_stages(profile, STAGES)
            Path(args.out).write_text(text)
            print(text)


if __name__ == "__main__":
    main()
