"""Dedup at the cost of its compute: our pipeline with dedup on and off, and datatrove's MinHash
pipeline, side by side on one planted-duplicates corpus, in one run.

    .venv/bin/python bench/bench_dedup_peers.py [--datatrove-python /work/benchenv-dedup/bin/python]
        [--workers 2] [--out bench/results/dedup_peers.md]

Corpus (built here, seeded): real paragraphs of the shared books and WikiText (at least 40
words each, distinct), and for a quarter of them one planted copy each: word edits tuned to a
target Jaccard (0.5 .. 0.98, bench_dedup_quality.edited_to), or an exact copy in other case and
spacing. One JSONL file, one paragraph a line.

Ground truth (bench_dedup_quality.ground_truth, independent of the code under test): every pair
at exact Jaccard >= 0.8 of 5-word tuple sets, planted or accidental, among the documents that
reach dedup (the clean stage's filters drop a few; those are left out of every figure).

Rows, each one process tree watched with psutil (CPU seconds of every process, the launcher's
and workers' peak RSS summed):
- ours, `python -m pipelines.preprocess --source jsonl --keep-rejects`, FnApiRunner
  multi_processing with `--workers` workers, with dedup (the default) and with `--no-dedup`:
  the difference is what dedup costs the user; found pairs from the clusters audit;
- datatrove 0.10.1 MinHash (its 4 stages, 14 buckets x 8 hashes, 5-grams, the same as our
  default), LocalPipelineExecutor with `--workers` processes, in its own venv (never a project
  dependency): the CPU seconds of the dedup stages alone; found pairs from its cluster ids.

A pair is *found* when both documents end in one duplicate group.

`--scale-mb 250,1000` also runs ours with dedup on and off on distinct documents (bench_scale's
corpus: 12 real paragraphs each, no near-duplicates) at each size, with `--dask` on the
DaskRunner too: CPU, wall and the summed peak RSS of the process tree (the launcher, which holds
what crosses each shuffle on the local runner, apart). Every run's stats.json gives the table of
where the CPU goes per stage (`cpu_s`) and what crosses each dedup shuffle (`dedup_shuffle`).
`--profile` also runs the planted corpus once in one process under cProfile and lists the
cumulative CPU of dedup's steps and of the SDK's state cache.

datatrove's venv (never a project dependency): `python -m venv /work/benchenv-dedup &&
/work/benchenv-dedup/bin/pip install datatrove==0.10.1 regex tokenizers orjson spacy
'xxhash<4'` (its MinHash tokenises words with spaCy for English; xxhash 4 refuses the str
datatrove 0.10.1 hashes).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import itertools
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import bench_dedup_quality as dedup_quality  # noqa: E402
import psutil  # noqa: E402
from bench_startup import command_args  # noqa: E402

from pipelines.document import Document  # noqa: E402

CORPORA = REPO.parent / "shared" / "corpora"
SEED = 20261205
MIN_WORDS = 30
PLANTED_SHARE = 0.25


def real_paragraphs() -> list[str]:
    """Distinct real paragraphs of at least MIN_WORDS words: the English books and WikiText."""
    paragraphs = []
    for path in sorted((CORPORA / "books").glob("*.txt")):
        if "fr" in path.stem:
            continue
        text = path.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
        paragraphs += [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    for path in (
        CORPORA / "wikitext" / "wikitext-2" / "wiki.test.tokens",
        CORPORA / "wikitext" / "wikitext-103" / "wiki.valid.tokens",
    ):
        lines = path.read_text(encoding="utf-8").splitlines()
        paragraphs += [
            dedup_quality._detokenize(t)
            for t in lines
            if t.strip() and not t.strip().startswith("=")
        ]
    return sorted({p for p in paragraphs if len(dedup_quality.words(p)) >= MIN_WORDS})


def planted_corpus(seed: int = SEED) -> tuple[list[Document], dict[tuple[str, str], float]]:
    """(documents, {planted pair: its exact Jaccard}): each paragraph a document, a quarter of
    them with a planted copy at one of dedup_quality.LEVELS or an exact copy (other case and
    spacing)."""
    rng = random.Random(seed)
    docs = [Document(f"p{i:05d}", "jsonl", text) for i, text in enumerate(real_paragraphs())]
    originals = list(docs)
    rng.shuffle(originals)
    planted = {}
    for i, doc in enumerate(originals[: int(PLANTED_SHARE * len(originals))]):
        kind = i % (len(dedup_quality.LEVELS) + 1)
        if kind < len(dedup_quality.LEVELS):
            text, similarity = dedup_quality.edited_to(doc.text, dedup_quality.LEVELS[kind], rng)
        else:
            text, similarity = "  " + doc.text.upper().replace(" ", "  "), 1.0
        copy = Document(f"c{i:05d}", "jsonl", text)
        docs.append(copy)
        planted[(doc.id, copy.id)] = similarity
    rng.shuffle(docs)  # copies are not next to their originals in the file
    return docs, planted


def write_jsonl(docs: list[Document], folder: Path, files: int) -> dict[str, str]:
    """The corpus as `files` JSONL files (one per worker: datatrove gives each task whole
    files); {pipeline id (jsonl:<name>@<offset>): bench id}."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = {}
    for n in range(files):
        path, offset = folder / f"part-{n}.jsonl", 0
        with open(path, "wb") as f:
            for doc in docs[n::files]:
                row = {"id": doc.id, "text": doc.text}
                line = (json.dumps(row, ensure_ascii=False) + "\n").encode()
                ids[f"jsonl:{path.name}@{offset}"] = doc.id
                f.write(line)
                offset += len(line)
    return ids


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def watched(command: list[str], cwd: Path, extra: tuple[psutil.Process, ...] = ()) -> dict:
    """Run `command`, sampling its process tree (and the `extra` processes, a cluster's
    workers, whose CPU is counted from the start) every 0.1 s: wall, CPU seconds, summed peak
    RSS, the launcher's peak RSS."""
    started = time.monotonic()
    extra_start = {p.pid: _cpu_s(p) for p in extra}
    proc = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    root = psutil.Process(proc.pid)
    cpu: dict[int, float] = {}
    peak_sum = peak_launcher = 0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True), *extra]
        except psutil.Error:
            break
        rss_now = 0
        for process in tree:
            try:
                with process.oneshot():
                    cpu[process.pid] = _cpu_s(process) - extra_start.get(process.pid, 0.0)
                    rss = process.memory_info().rss
            except psutil.Error:
                continue
            rss_now += rss
            if process.pid == proc.pid:
                peak_launcher = max(peak_launcher, rss)
        peak_sum = max(peak_sum, rss_now)
        time.sleep(0.1)
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{command[:3]} failed ({proc.returncode}):\n{stderr[-3000:]}")
    return {
        "wall_s": time.monotonic() - started,
        "cpu_s": sum(cpu.values()),
        "peak_rss_mb": peak_sum / 1e6,
        "launcher_rss_mb": peak_launcher / 1e6,
        "stdout": stdout,
        "stderr": stderr,
    }


def run_ours(
    corpus: Path,
    out: Path,
    workers: int,
    dedup: bool,
    ids: dict | None,
    dask: tuple[str, tuple[psutil.Process, ...]] | None = None,
) -> dict:
    """One preprocess run, watched; with `ids`, the duplicate pairs it found (clusters audit).
    `dask`: (scheduler address, its worker processes) to run on our DaskRunner instead of the
    FnApiRunner's multi_processing mode."""
    shutil.rmtree(out, ignore_errors=True)
    runner = ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
    if dask is not None:
        runner = ["--runner=DaskRunner", f"--dask_client_address={dask[0]}"]
    run = watched(
        [
            sys.executable,
            "-m",
            "pipelines.preprocess",
            *command_args(corpus, out, ["--progress-interval=0", "--keep-rejects", *runner]),
            *([] if dedup else ["--no-dedup"]),
        ],
        REPO,
        dask[1] if dask else (),
    )
    run["stats"] = json.loads((out / "stats.json").read_text())
    if ids is None:
        return run
    clusters, dropped = [], set()
    for path in sorted((out / "rejects").glob("*.jsonl")):
        for line in path.open(encoding="utf-8"):
            row = json.loads(line)
            if "kept_id" in row:
                clusters.append(
                    {"kept_id": ids[row["kept_id"]], "removed_id": ids[row["removed_id"]]}
                )
            elif not str(row.get("reason", "")).endswith("duplicate"):
                dropped.add(ids.get(row.get("doc_id") or row.get("id") or row.get("location"), ""))
    run.update(found=dedup_quality.found_pairs(clusters), dropped=dropped)
    return run


_DATATROVE_RUN = """
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets,
    MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature)
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter

corpus, work, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
config = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8)
reader = lambda: JsonlReader(corpus, glob_pattern="*.jsonl", id_key="id")
for pipeline, tasks in (
    ([reader(), MinhashDedupSignature(f"{work}/sigs", config=config)], workers),
    ([MinhashDedupBuckets(f"{work}/sigs", f"{work}/buckets", config=config)], 14),
    ([MinhashDedupCluster(f"{work}/buckets", f"{work}/remove", config=config,
                          save_cluster_id=True)], 1),
    ([reader(), MinhashDedupFilter(f"{work}/remove", load_cluster_ids=True,
                                   exclusion_writer=JsonlWriter(f"{work}/removed", compression=None)),
      JsonlWriter(f"{work}/kept", compression=None)], workers),
):
    LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=workers,
                          logging_dir=f"{work}/logs-{len(pipeline)}-{tasks}-{id(pipeline)}").run()
"""


def run_datatrove(python: str, corpus_dir: Path, work: Path, workers: int) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    run = watched([python, "-c", _DATATROVE_RUN, str(corpus_dir), str(work), str(workers)], REPO)
    groups = collections.defaultdict(list)  # datatrove's cluster id -> its documents
    for path in sorted(work.glob("*/*.jsonl")):
        for line in path.open(encoding="utf-8"):
            row = json.loads(line)
            cluster = row.get("metadata", {}).get("minhash_cluster_id", -1)
            if cluster != -1:
                groups[cluster].append(row["id"])
    found = {tuple(sorted(p)) for g in groups.values() for p in itertools.combinations(g, 2)}
    return run | {"found": found}


def dask_runs(corpus: Path, workers: int, tmp: Path, ids: dict | None, name: str) -> tuple:
    """Ours on the DaskRunner (a LocalCluster of `workers` single-threaded processes, started
    here, counted with the run), dedup off and on."""
    from dask.distributed import LocalCluster

    with LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        procs = tuple(psutil.Process().children(recursive=True))
        runs = []
        for dedup in (False, True):
            run = run_ours(
                corpus, tmp / "dask-out", workers, dedup, ids, (cluster.scheduler_address, procs)
            )
            _progress(f"{name}, DaskRunner, {'dedup' if dedup else '--no-dedup'}", run)
            runs.append(run)
    return tuple(runs)


def scale_runs(sizes_mb: list[float], workers: int, tmp: Path, dask: bool) -> list[dict]:
    """Ours with dedup off and on, on bench_scale's distinct documents at each size, on the
    multi_processing runner and, with `dask`, on the DaskRunner too."""
    from bench_scale import build_file, paragraph_pool

    pool, rows = paragraph_pool(), []
    for mb in sizes_mb:
        folder = tmp / f"scale-{mb:g}"
        folder.mkdir()
        info = build_file(folder / "docs.jsonl", pool, int(mb * 1e6))
        size = {"mb": info["text_bytes"] / 1e6, "documents": info["documents"]}
        off = run_ours(folder, tmp / "scale-off", workers, False, None)
        _progress(f"{mb:g} MB, --no-dedup", off)
        on = run_ours(folder, tmp / "scale-on", workers, True, None)
        _progress(f"{mb:g} MB, dedup", on)
        rows.append({**size, "runner": "multi_processing", "off": off, "on": on})
        if dask:
            off, on = dask_runs(folder, workers, tmp, None, f"{mb:g} MB")
            rows.append({**size, "runner": "DaskRunner", "off": off, "on": on})
        shutil.rmtree(folder)
    return rows


def _class_at(path: Path, line: int) -> str:
    """The class whose body holds `line` of `path` (the last `class` line above it)."""
    above = path.read_text(encoding="utf-8").splitlines()[: line - 1]
    names = [re.match(r"class (\w+)", text) for text in above]
    return next((m.group(1) for m in reversed(names) if m), "")


def profile_dedup(corpus: Path, out: Path) -> list[tuple[str, float]]:
    """(step, cumulative CPU s) of one in-process run of the planted corpus under cProfile: the
    whole run, dedup's steps (their process / batch methods, by module), the SDK's state cache."""
    import cProfile
    import pstats

    from pipelines.preprocess import main as preprocess

    profiler = cProfile.Profile()
    profiler.enable()
    code = preprocess(
        command_args(
            corpus,
            out,
            ["--progress-interval=0", "--direct_running_mode=in_memory", "--direct_num_workers=1"],
        )
    )
    profiler.disable()
    if code != 0:
        raise SystemExit(f"profiled run failed ({code})")
    stats = pstats.Stats(profiler).stats
    rows = [("whole run (profiled)", max(entry[3] for entry in stats.values()))]
    for (filename, line, name), (_, _, _, cumulative, _) in stats.items():
        where = Path(filename)
        if where.parent.name == "dedup" and name in ("process", "_flush_batch", "expand"):
            rows.append((f"`dedup/{where.name}: {_class_at(where, line)}.{name}`", cumulative))
        elif where.name == "statecache.py" and name == "get":
            rows.append(("`statecache.get` (side-input loads, objsize weighing)", cumulative))
    return sorted(rows, key=lambda row: -row[1])[:16]


def score(truth: set, found: set, dropped: set) -> tuple[float, float, float]:
    """(precision, recall, F1) of found pairs, pairs with a document dropped before dedup left out."""
    truth = {p for p in truth if not dropped & set(p)}
    found = {p for p in found if not dropped & set(p)}
    hit = len(found & truth)
    precision = hit / len(found) if found else 1.0
    recall = hit / len(truth) if truth else 1.0
    return precision, recall, 2 * precision * recall / (precision + recall or 1)


def _progress(name: str, run: dict) -> None:
    print(
        f"{name}: wall {run['wall_s']:.1f} s, CPU {run['cpu_s']:.1f} s, "
        f"summed peak RSS {run['peak_rss_mb']:.0f} MB",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datatrove-python", default="/work/benchenv-dedup/bin/python")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "dedup_peers.md")
    parser.add_argument("--scale-mb", default="", help="comma-separated sizes, e.g. 25,100")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--dask", action="store_true", help="also the DaskRunner, dedup off/on")
    args = parser.parse_args()
    docs, planted = planted_corpus()
    truth = set(dedup_quality.ground_truth(docs, dedup_quality.THRESHOLD))
    mb = sum(len(d.text.encode("utf-8")) for d in docs) / 1e6
    print(
        f"{len(docs)} documents, {len(planted)} planted, {mb:.1f} MB, {len(truth)} true pairs",
        flush=True,
    )
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp, "corpus")
        ids = write_jsonl(docs, corpus, args.workers)
        off = run_ours(corpus, Path(tmp, "off"), args.workers, False, ids)
        _progress("ours, --no-dedup", off)
        on = run_ours(corpus, Path(tmp, "on"), args.workers, True, ids)
        _progress("ours, dedup", on)
        peer = run_datatrove(args.datatrove_python, corpus, Path(tmp, "datatrove"), args.workers)
        _progress("datatrove", peer)
        dask = dask_runs(corpus, args.workers, Path(tmp), ids, "planted") if args.dask else None
        sizes = [float(x) for x in args.scale_mb.split(",") if x]
        scale = scale_runs(sizes, args.workers, Path(tmp), args.dask)
        profile = profile_dedup(corpus, Path(tmp, "profiled")) if args.profile else []
    load_end = os.getloadavg()[0]
    dedup_cpu = on["cpu_s"] - off["cpu_s"]
    rows = [
        ("ours, --no-dedup", off, None, None),
        ("ours, dedup (default)", on, dedup_cpu, score(truth, on["found"], on["dropped"])),
        (
            "datatrove 0.10.1 MinHash (4 stages)",
            peer,
            peer["cpu_s"],
            score(truth, peer["found"], on["dropped"]),
        ),
    ]
    if dask:
        rows += [
            ("ours on the DaskRunner, --no-dedup", dask[0], None, None),
            (
                "ours on the DaskRunner, dedup",
                dask[1],
                dask[1]["cpu_s"] - dask[0]["cpu_s"],
                score(truth, dask[1]["found"], dask[1]["dropped"]),
            ),
        ]
    text = render(rows, args, len(docs), len(planted), len(truth), mb, (load_start, load_end))
    where = [("planted, multi_processing, dedup off", off), ("planted, multi_processing", on)]
    if dask:
        where += [("planted, DaskRunner, dedup off", dask[0]), ("planted, DaskRunner", dask[1])]
    for row in scale:
        where += [
            (f"{row['mb']:.0f} MB, {row['runner']}, dedup off", row["off"]),
            (f"{row['mb']:.0f} MB, {row['runner']}", row["on"]),
        ]
    text += render_scale(scale) + render_where(where) + render_profile(profile)
    args.out.write_text(text, encoding="utf-8")
    print(text)


def render(rows, args, docs: int, planted: int, truth: int, mb: float, load) -> str:
    import apache_beam

    on, off = rows[1][1], rows[0][1]
    lines = [
        "# Dedup at the cost of its compute: ours against datatrove's MinHash",
        "",
        f"Run {datetime.date.today()} by `bench/bench_dedup_peers.py --workers {args.workers}"
        f"{' --dask' if args.dask else ''}{f' --scale-mb {args.scale_mb}' if args.scale_mb else ''}"
        f"{' --profile' if args.profile else ''}` on "
        f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs (load average "
        f"{load[0]:.1f} at start, {load[1]:.1f} at end); Python {platform.python_version()}, "
        f"apache-beam {apache_beam.__version__}. Corpus: {docs:,} documents ({planted:,} planted "
        f"copies), {mb:.1f} MB of text, {truth:,} true pairs at J >= {dedup_quality.THRESHOLD}.",
        "",
        "| run | wall s | CPU s | summed peak RSS MB | dedup CPU s | dedup CPU s per MB | "
        "precision | recall | F1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, run, dedup_cpu, quality in rows:
        cpu = "-" if dedup_cpu is None else f"{dedup_cpu:.1f}"
        per_mb = "-" if dedup_cpu is None else f"{dedup_cpu / mb:.3f}"
        q = ["-"] * 3 if quality is None else [f"{x:.3f}" for x in quality]
        lines.append(
            f"| {name} | {run['wall_s']:.1f} | {run['cpu_s']:.1f} | "
            f"{run['peak_rss_mb']:.0f} | {cpu} | {per_mb} | {' | '.join(q)} |"
        )
    peer_cpu = rows[2][2]
    lines += [
        "",
        f"Ratios in this run: dedup on / off, CPU {on['cpu_s'] / off['cpu_s']:.2f}x, wall "
        f"{on['wall_s'] / off['wall_s']:.2f}x (target 1.5x each); datatrove's dedup CPU / ours "
        f"{peer_cpu / max(rows[1][2], 1e-9):.2f}x (target 3x)"
        + (
            f"; on the DaskRunner, dedup on / off CPU {rows[4][1]['cpu_s'] / rows[3][1]['cpu_s']:.2f}x, "
            f"wall {rows[4][1]['wall_s'] / rows[3][1]['wall_s']:.2f}x"
            if len(rows) > 3
            else ""
        )
        + ". Ours' dedup CPU is the difference "
        "of the two runs of the whole pipeline; datatrove's is its whole MinHash run (reading "
        "the JSONL twice and writing the kept documents included).",
        "",
    ]
    return "\n".join(lines) + "\n"


def render_scale(rows: list[dict]) -> str:
    if not rows:
        return ""
    lines = [
        "## Distinct documents at each size (bench_scale's corpus)",
        "",
        "| MB | documents | runner | CPU s off / on | CPU on / off | wall s off / on | "
        "wall on / off | summed peak RSS MB off / on | launcher peak RSS MB off / on |",
        "|---:|---:|---|---|---:|---|---:|---|---|",
    ]
    for r in rows:
        off, on = r["off"], r["on"]
        lines.append(
            f"| {r['mb']:.0f} | {r['documents']:,} | {r['runner']} | {off['cpu_s']:.1f} / "
            f"{on['cpu_s']:.1f} | {on['cpu_s'] / off['cpu_s']:.2f}x | {off['wall_s']:.1f} / "
            f"{on['wall_s']:.1f} | {on['wall_s'] / off['wall_s']:.2f}x | "
            f"{off['peak_rss_mb']:.0f} / {on['peak_rss_mb']:.0f} | "
            f"{off['launcher_rss_mb']:.0f} / {on['launcher_rss_mb']:.0f} |"
        )
    for runner in dict.fromkeys(r["runner"] for r in rows):
        mine = [r for r in rows if r["runner"] == runner]
        if len(mine) > 1:
            first, last = mine[0], mine[-1]
            lines += [
                "",
                f"{runner}: summed peak RSS with dedup, {last['mb']:.0f} MB / {first['mb']:.0f} "
                f"MB: {last['on']['peak_rss_mb'] / first['on']['peak_rss_mb']:.2f}x (input "
                f"{last['mb'] / first['mb']:.1f}x; target 1.2x from 250 MB to 1 GB, and under "
                f"1.5 GB at 1 GB); without dedup "
                f"{last['off']['peak_rss_mb'] / first['off']['peak_rss_mb']:.2f}x.",
            ]
    return "\n".join(lines) + "\n\n"


STAGES = ("read", "clean", "dedup", "tokenize", "write")
BOUNDARIES = ("url", "exact", "lsh_buckets", "candidate_edges", "verify_roles", "verify",
              "best_match", "components", "stash", "apply")  # fmt: skip


def render_where(runs: list[tuple[str, dict]]) -> str:
    """Where each run's CPU went (stats.json cpu_s: each stage's own work, timed on the
    workers; the rest is the runner's: bundles, the data plane, the launcher) and what crossed
    each of dedup's shuffles (stats.json dedup_shuffle, the encoded bytes sent to each
    GroupByKey, which the local runner holds in the launcher until the run ends)."""
    lines = [
        "## Where the CPU and the memory go, per stage and per boundary",
        "",
        "CPU seconds: each stage's own work as the run's stats.json counts it (`cpu_s`), and the "
        "rest of the process tree's CPU (the runner: bundles, encoding for the data plane, the "
        "launcher's shuffles, start-up):",
        "",
        f"| run | CPU s | {' | '.join(STAGES)} | runner and the rest |",
        f"|---|---:|{'---:|' * len(STAGES)}---:|",
    ]
    for name, run in runs:
        cpu = run["stats"].get("cpu_s", {})
        own = [cpu.get(stage, 0.0) for stage in STAGES]
        lines.append(
            f"| {name} | {run['cpu_s']:.1f} | {' | '.join(f'{x:.1f}' for x in own)} | "
            f"{run['cpu_s'] - sum(own):.1f} |"
        )
    lines += [
        "",
        "Bytes sent to each dedup shuffle (KB), and all of them per byte of text entering dedup:",
        "",
        f"| run | text MB | {' | '.join(BOUNDARIES)} | per text byte |",
        f"|---|---:|{'---:|' * len(BOUNDARIES)}---:|",
    ]
    for name, run in runs:
        shuffle = run["stats"].get("dedup_shuffle")
        if not shuffle:
            continue
        by_stage = shuffle["shuffle_bytes_by_stage"]
        lines.append(
            f"| {name} | {shuffle['input_text_bytes'] / 1e6:.1f} | "
            + " | ".join(f"{by_stage.get(b, 0) / 1e3:,.0f}" for b in BOUNDARIES)
            + f" | {shuffle['shuffle_ratio']:.4f} |"
        )
    return "\n".join(lines) + "\n\n"


def render_profile(rows: list[tuple[str, float]]) -> str:
    if not rows:
        return ""
    lines = [
        "## Where dedup's CPU goes (one in-process run of the planted corpus under cProfile)",
        "",
        "Cumulative seconds (profiling slows Python code more than native code; the steps "
        "overlap where one calls another):",
        "",
        "| step | cumulative s |",
        "|---|---:|",
        *(f"| {name} | {seconds:.2f} |" for name, seconds in rows),
    ]
    return "\n".join(lines) + "\n\n"


if __name__ == "__main__":
    main()
