"""The pipeline at 1x / 4x / 16x of one corpus in ONE big JSONL file, with dedup.

    python bench/bench_scale.py [--base-mb 1] [--scales 1,4,16] [--workers 2]
                                [--task-bytes 256KiB] [--out bench/results/scale.md]

The corpus is built from the shared real samples (books, Wikipedia, WebText, WikiText; the same
pool as bench_preprocess.py), cut into paragraphs; each document is ~12 paragraphs drawn by a
seeded generator, so documents are distinct (dedup keeps them: no two share more than a
paragraph or two) yet read as natural text to the filters. Scale N holds N x `--base-mb` MB in
one file, read as byte ranges of `--task-bytes` (sources/ranges.py). Each run is
`python -m pipelines.preprocess --source jsonl` (dedup on), FnApiRunner multi_processing with
`--workers` worker processes, watched every 0.1 s with psutil. Reported per scale:

- throughput: MB of raw text per CPU-second of the whole process tree, and per core in wall
  time (MB / (wall s x workers));
- each worker's CPU seconds and share of the workers' total (both busy on the one file?);
- peak RSS of each worker process (flat as the input grows?);
- shuffle bytes per input byte of the dedup stage, from the `dedup_shuffle_bytes_*` Beam
  metrics when the dedup stage reports them.

`--dask-mb N` also runs one N MB file (same kind of corpus, tasks sized by the launcher's
default) on the DirectRunner (`--workers` worker processes) and on our DaskRunner against a
dask.distributed LocalCluster of `--workers` single-threaded worker processes: wall time,
throughput ratio, graph progress lines, and whether the shards are byte-identical.

`--profile-scale N` also runs scale N once in one process (`--direct_running_mode in_memory`,
so every stage runs under one cProfile) and records the functions with the most own time and
the pipeline stages' cumulative time: where the pipeline's time goes besides clean + tokenize.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
GPT2 = REPO.parent / "shared" / "corpora" / "vocab" / "gpt2"
PARAGRAPHS_PER_DOCUMENT = 12
SEED = 20261203


def paragraph_pool() -> list[str]:
    from bench_preprocess import sample_texts

    pool = []
    for text in sample_texts():
        pool += [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) >= 200]
    return sorted(set(pool))


def build_file(path: Path, pool: list[str], target_bytes: int) -> dict:
    """One JSONL file of distinct documents, each paragraphs drawn from the pool."""
    rng = random.Random(SEED)  # every scale starts with the same documents
    written = documents = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target_bytes:
            text = "\n\n".join(rng.sample(pool, PARAGRAPHS_PER_DOCUMENT))
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
            written += len(text.encode("utf-8"))
            documents += 1
    return {"documents": documents, "text_bytes": written, "file_bytes": path.stat().st_size}


def _worker_kind(process: psutil.Process) -> str | None:
    """"standby", "worker" or None (not a worker process)."""
    try:
        command, name = " ".join(process.cmdline()), process.name()
    except psutil.Error:
        return None
    # our local runs start workers as `python -m pipelines.runner.beam_worker` (Beam's own entry point
    # is sdk_worker_main); the `/bin/sh -c` wrapper around one is not a worker. A worker that
    # handed its work to a standby (`--standby`, started by the launcher) only waits for it.
    if name == "sh" or not ("pipelines.runner.beam_worker" in command or "sdk_worker_main" in command):
        return None
    return "standby" if "--standby" in command else "worker"


def run_pipeline(corpus: Path, out: Path, workers: int, task_bytes: str | None,
                 runner: list[str] | None = None) -> dict:
    """One preprocess run (dedup on), watched; `runner` flags replace the local
    multi_processing ones; `task_bytes` None leaves task sizing to the launcher."""
    command = [
        sys.executable, "-m", "pipelines.preprocess", "--source=jsonl", f"--input={corpus}",
        f"--output={out}", f"--tokenizer={GPT2}", "--append-eod", "--progress-interval=0",
        *([f"--source-option=task_bytes={task_bytes}"] if task_bytes else []),
        *(runner or ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]),
    ]
    started = time.monotonic()
    launcher = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    root = psutil.Process(launcher.pid)
    cpu: dict[int, float] = {}  # pid -> last seen user+system CPU seconds
    rss: dict[int, int] = {}  # pid -> peak RSS
    kinds: dict[int, str | None] = {}
    while launcher.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            break
        for process in tree:
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    cpu[process.pid] = times.user + times.system
                    rss[process.pid] = max(rss.get(process.pid, 0), process.memory_info().rss)
                if process.pid not in kinds:
                    kinds[process.pid] = _worker_kind(process)
            except psutil.Error:
                continue
        time.sleep(0.1)
    stdout, stderr = launcher.communicate()
    wall = time.monotonic() - started
    if launcher.returncode != 0:
        raise SystemExit(f"pipeline failed ({launcher.returncode}):\n{stderr[-3000:]}")
    stats = json.loads((out / "stats.json").read_text())
    metrics_line = next((line for line in stdout.splitlines() if line.startswith("Beam metrics")),
                        "")
    metrics = {k: int(v.replace(",", "")) for k, v in
               re.findall(r"(\w+)=([\d,]+)", metrics_line)}
    # the standbys did the work when there were any; else the workers the runner started
    kind = "standby" if "standby" in kinds.values() else "worker"
    worker_pids = [pid for pid, k in kinds.items() if k == kind and pid in cpu]
    workers_cpu = sorted((cpu[p] for p in worker_pids), reverse=True)
    return {
        "wall_s": wall,
        "stderr": stderr,
        "cpu_s": sum(cpu.values()),  # sampled every 0.1 s: the last 0.1 s may be missed
        "workers_cpu_s": workers_cpu,
        "workers_peak_rss_mb": sorted((rss[p] / 1e6 for p in worker_pids), reverse=True),
        "launcher_peak_rss_mb": rss.get(launcher.pid, 0) / 1e6,
        "bytes_read": stats["bytes_read"],
        "documents_read": stats["documents_read"],
        "written": stats["written"],
        "dropped": stats["dropped"],
        "tasks_planned": metrics.get("tasks_planned", 0),
        "tasks_read": metrics.get("tasks_read", 0),
        "shuffle_bytes": {k: v for k, v in metrics.items() if k.startswith("dedup_shuffle_bytes")},
    }


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("shard-*"))}


def dask_comparison(corpus: Path, tmp: Path, workers: int) -> dict:
    """The same file on the DirectRunner and on the DaskRunner (LocalCluster of `workers`
    single-threaded processes, started here): walls, tasks, same shards or not."""
    from dask.distributed import LocalCluster

    load_start = os.getloadavg()[0]  # the machine is shared: a ratio means little without it
    direct = run_pipeline(corpus, tmp / "out-direct", workers, None)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:
        dask = run_pipeline(corpus, tmp / "out-dask", workers, None,
                            ["--runner=DaskRunner",
                             f"--dask_client_address={cluster.scheduler_address}"])
    progress = [line for line in dask["stderr"].splitlines() if line.startswith("dask: ")]
    return {
        "mb": direct["bytes_read"] / 1e6,
        "tasks": direct["tasks_read"],
        "direct_wall_s": direct["wall_s"],
        "dask_wall_s": dask["wall_s"],
        "graph_tasks": progress[-1].split(" of ")[1].split()[0] if progress else "n/a",
        "same_shards": shard_bytes(tmp / "out-direct") == shard_bytes(tmp / "out-dask"),
        "load": (load_start, os.getloadavg()[0]),
    }


def render_dask(row: dict, workers: int) -> str:
    ratio = row["direct_wall_s"] / row["dask_wall_s"]
    return "\n".join([
        f"## DaskRunner against the DirectRunner ({workers} workers, one file, tasks sized by "
        "the launcher)",
        "",
        "| MB read | read tasks | DirectRunner wall s | DaskRunner wall s | Dask throughput / "
        "Direct's (target 80%) | graph tasks | same shards | load average at start / end |",
        "|---:|---:|---:|---:|---:|---:|---|---|",
        f"| {row['mb']:.1f} | {row['tasks']} | {row['direct_wall_s']:.1f} | "
        f"{row['dask_wall_s']:.1f} | {ratio:.0%} | {row['graph_tasks']} | "
        f"{'yes' if row['same_shards'] else 'NO'} | {row['load'][0]:.1f} / {row['load'][1]:.1f} |",
        "",
    ])


def profile_run(corpus: Path, out: Path, task_bytes: str, top: int = 18) -> str:
    """cProfile of one in-memory run: the top functions by own time, as a Markdown table."""
    import cProfile
    import io
    import pstats

    from pipelines.preprocess import main as preprocess

    argv = [
        "--source=jsonl", f"--input={corpus}", f"--output={out}", f"--tokenizer={GPT2}",
        "--append-eod", "--progress-interval=0", f"--source-option=task_bytes={task_bytes}",
        "--direct_running_mode=in_memory", "--direct_num_workers=1",
    ]
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    code = preprocess(argv)
    profiler.disable()
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"profiled run failed ({code})")
    stats = pstats.Stats(profiler, stream=io.StringIO())
    total = sum(entry[2] for entry in stats.stats.values())  # own time of every function
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:top]
    lines = [
        f"Profile: one in-memory run of {corpus.stat().st_size / 1e6:.1f} MB under cProfile, "
        f"{wall:.1f} s wall ({total:.1f} s of own time in Python-visible functions; profiling "
        "slows Python-level code more than native code). Top functions by own time:",
        "",
        "| function | own s | share | calls |",
        "|---|---:|---:|---:|",
    ]
    for (filename, line, name), (_, calls, own, _, _) in rows:
        where = "/".join(Path(filename).parts[-2:]) if filename != "~" else "(builtin)"
        lines.append(f"| `{where}:{line}({name})` | {own:.2f} | {own / total:.1%} | {calls:,} |")
    return "\n".join(lines) + "\n"


def render(runs: list[dict], args, corpus_info: dict, load: tuple[float, float]) -> str:
    import apache_beam

    lines = [
        "# The pipeline at scale: one big JSONL file, dedup on",
        "",
        f"Run {datetime.date.today()} by `bench/bench_scale.py --base-mb {args.base_mb} "
        f"--scales {args.scales} --workers {args.workers} --task-bytes {args.task_bytes}` on "
        f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs (load average "
        f"{load[0]:.1f} at start, {load[1]:.1f} at end); Python {platform.python_version()}, "
        f"apache-beam {apache_beam.__version__}.",
        "",
        f"Corpus: documents of {PARAGRAPHS_PER_DOCUMENT} paragraphs drawn (seeded) from "
        f"{corpus_info['paragraphs']:,} distinct paragraphs of the shared books, Wikipedia, "
        "WebText and WikiText samples, so no two documents are near-duplicates; scale N is one "
        "JSONL file of N x the base size. MB = 10^6 bytes of raw text read.",
        "",
        "| scale | MB read | docs | tasks | wall s | CPU s | MB per CPU-s | MB/s per core (wall) "
        "| worker CPU s | busiest worker's share | worker peak RSS MB | dedup shuffle B per input B |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|",
    ]
    for run in runs:
        mb = run["bytes_read"] / 1e6
        workers_cpu = run["workers_cpu_s"]
        share = max(workers_cpu) / sum(workers_cpu) if sum(workers_cpu) else 0.0
        shuffle = sum(run["shuffle_bytes"].values())
        shuffle_ratio = f"{shuffle / run['bytes_read']:.2f}" if shuffle else "n/a"
        lines.append(
            f"| {run['scale']}x | {mb:.1f} | {run['documents_read']:,} | {run['tasks_read']} | "
            f"{run['wall_s']:.1f} | {run['cpu_s']:.1f} | {mb / run['cpu_s']:.3f} | "
            f"{mb / (run['wall_s'] * args.workers):.3f} | "
            f"{' / '.join(f'{c:.1f}' for c in workers_cpu)} | {share:.0%} | "
            f"{' / '.join(f'{r:.0f}' for r in run['workers_peak_rss_mb'])} | {shuffle_ratio} |"
        )
    first, last = runs[0], runs[-1]
    growth = last["bytes_read"] / first["bytes_read"]

    def per_cpu(run):
        return run["bytes_read"] / 1e6 / run["cpu_s"]

    lines += [
        "",
        f"Input grows {growth:.1f}x from the first to the last scale. Ratios within this run:",
        "",
        f"- MB per CPU-second, last / first scale: {per_cpu(last) / per_cpu(first):.2f}x "
        "(1.0 = flat; the launcher's and workers' start-up, a constant, weighs more on the "
        "small scales).",
        "- Marginal MB per CPU-second (extra MB / extra CPU-s from one scale to the next, so "
        "start-up cancels): "
        + ", ".join(
            f"{a['scale']}x->{b['scale']}x {(b['bytes_read'] - a['bytes_read']) / 1e6 / (b['cpu_s'] - a['cpu_s']):.2f}"
            for a, b in zip(runs, runs[1:]) if b["cpu_s"] > a["cpu_s"]
        )
        + "; marginal worker CPU-s per MB: "
        + ", ".join(
            f"{a['scale']}x->{b['scale']}x {(sum(b['workers_cpu_s']) - sum(a['workers_cpu_s'])) / ((b['bytes_read'] - a['bytes_read']) / 1e6):.2f}"
            for a, b in zip(runs, runs[1:])
        )
        + ".",
        f"- Worker peak RSS, last / first scale: "
        f"{max(last['workers_peak_rss_mb']) / max(first['workers_peak_rss_mb']):.2f}x.",
        f"- Every scale's one file was read by {', '.join(str(r['tasks_read']) for r in runs)} "
        "tasks; the busiest worker's share of the workers' CPU seconds is the balance (50% = "
        "even for 2 workers).",
        "- Documents written / read: "
        + ", ".join(f"{r['written']:,} / {r['documents_read']:,}" for r in runs)
        + " (dedup keeps distinct documents; drops are filters: "
        + ", ".join(json.dumps(r["dropped"]) for r in runs) + ").",
    ]
    if not any(run["shuffle_bytes"] for run in runs):
        lines.append("- The dedup stage reported no `dedup_shuffle_bytes_*` metrics in this "
                     "run, so shuffle bytes are not shown.")
    else:
        lines.append("- Dedup shuffle bytes by counter: "
                     + "; ".join(json.dumps(r["shuffle_bytes"]) for r in runs) + ".")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-mb", type=float, default=1.0)
    parser.add_argument("--scales", default="1,4,16")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--task-bytes", default="256KiB")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "scale.md"))
    parser.add_argument("--dask-mb", type=float, default=0,
                        help="also compare the DaskRunner with the DirectRunner on a file of "
                        "this many MB (0: no comparison)")
    parser.add_argument("--profile-scale", type=int, default=0,
                        help="also profile this scale in one process (0: no profile)")
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    pool = paragraph_pool()
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for scale in (int(s) for s in args.scales.split(",")):
            corpus = Path(tmp) / f"corpus-{scale}x.jsonl"
            info = build_file(corpus, pool, int(scale * args.base_mb * 1e6))
            run = run_pipeline(corpus, Path(tmp) / f"out-{scale}x", args.workers,
                               args.task_bytes)
            run.update(scale=scale, **info)
            runs.append(run)
            run.pop("stderr")
            print(json.dumps(run), flush=True)
        dask = ""
        if args.dask_mb:
            corpus = Path(tmp) / "corpus-dask.jsonl"
            build_file(corpus, pool, int(args.dask_mb * 1e6))
            row = dask_comparison(corpus, Path(tmp), args.workers)
            print(json.dumps(row), flush=True)
            dask = render_dask(row, args.workers)
        profile = ""
        if args.profile_scale:
            corpus = Path(tmp) / f"corpus-{args.profile_scale}x.jsonl"
            if not corpus.exists():
                build_file(corpus, pool, int(args.profile_scale * args.base_mb * 1e6))
            profile = profile_run(corpus, Path(tmp) / "out-profile", args.task_bytes)
    text = render(runs, args, {"paragraphs": len(pool)}, (load_start, os.getloadavg()[0]))
    if dask:
        text += "\n" + dask
    if profile:
        text += "\n" + profile
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
