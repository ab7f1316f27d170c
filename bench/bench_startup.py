"""Start-up of `python -m pipelines.preprocess` on five short documents, and where it goes.

    python bench/bench_startup.py [--runs 5] [--out bench/results/startup.md]

The input is five real WebText documents (the first 3,000 characters of each of the first five
files of ../shared/corpora/web/text/webtext_train_10), GPT-2 vocabulary, EOD appended, no
running mode given (so the launcher runs a small input in its own process), with dedup off
(the side-by-side's command, issue 21's start-up target: under 1.5 s wall) and on (the
default). Each command runs `--runs` times as a user runs it; wall and CPU seconds (user +
system of the process tree) are the min / median / max.

Then each command runs once more under timers (`--phases`, in a child process): how long the
launcher's steps take (importing Beam, our modules, planning, loading the tokenizer, building
and translating the graph, running its stages), the time the cyclic garbage collector takes,
and how many Beam stages, ParDos and GroupByKeys the graph has. The timers wrap the functions
from outside (this file); the module is run as `__main__`, as the command runs it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "corpora"
GPT2 = SHARED / "vocab" / "gpt2"
WEBTEXT = SHARED / "web" / "text" / "webtext_train_10"
TARGET_S = 1.5
MODES = {"no dedup": ["--no-dedup"], "dedup (the default)": []}


def five_documents(path: Path) -> Path:
    lines = []
    for name in sorted(os.listdir(WEBTEXT), key=lambda n: (len(n), n))[:5]:
        text = (WEBTEXT / name).read_text(encoding="utf-8", errors="replace")[:3000]
        lines.append(json.dumps({"text": text}) + "\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


def command_args(corpus: Path, out: Path, extra: list[str]) -> list[str]:
    """pipelines.preprocess's arguments for the JSONL ``corpus``: GPT-2 tokens with EOD into
    ``out``, then ``extra`` (bench_dedup_peers runs its commands with these too)."""
    return [
        "--source=jsonl",
        f"--input={corpus}",
        f"--output={out}",
        f"--tokenizer={GPT2}",
        "--append-eod",
        *extra,
    ]


def time_command(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the children) of one `python -m pipelines.preprocess` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "pipelines.preprocess", *argv],
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def phases(argv: list[str]) -> dict:
    """Runs in a child: the command as `__main__`, its steps timed (see the module doc)."""
    import gc
    import runpy

    collected = {"s": 0.0, "collections": 0}
    started_at = [0.0]

    def on_gc(phase, _info):
        if phase == "start":
            started_at[0] = time.perf_counter()
        else:
            collected["s"] += time.perf_counter() - started_at[0]
            collected["collections"] += 1

    gc.callbacks.append(on_gc)
    steps: list[tuple[str, float]] = []
    start = time.perf_counter()
    import apache_beam  # noqa: F401

    steps.append(("import apache_beam", time.perf_counter() - start))
    mark = time.perf_counter()
    import pipelines.preprocess  # noqa: F401

    steps.append(("import pipelines.preprocess", time.perf_counter() - mark))
    from apache_beam import pipeline as beam_pipeline
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    import dataset_format.tokenizer as tokenizer_module
    import pipelines.graph as graph

    counts = {"stages": 0}

    def timed(owner, name: str, label: str, inspect=None):
        function = getattr(owner, name)

        def wrapper(*args, **kwargs):
            if inspect:
                inspect(*args)
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                steps.append((label, time.perf_counter() - began))

        setattr(owner, name, wrapper)

    def count_stage(*_args):
        counts["stages"] += 1

    def count_transforms(_runner, proto, *_args):
        leaves = [t for t in proto.components.transforms.values() if not t.subtransforms]
        for kind in ("pardo", "group_by_key"):
            counts[kind] = sum(t.spec.urn.endswith(f":{kind}:v1") for t in leaves)

    timed(graph, "plan_run", "plan the run (pipelines.graph.plan_run)")
    timed(tokenizer_module, "load_tokenizer", "load the tokenizer")
    timed(graph, "build_pipeline", "build the graph")
    timed(beam_pipeline.Pipeline, "to_runner_api", "translate the graph (to_runner_api)")
    timed(
        fn_runner.FnApiRunner,
        "run_via_runner_api",
        "run the stages (FnApiRunner)",
        count_transforms,
    )
    timed(fn_runner.FnApiRunner, "_execute_bundle", "(one stage)", count_stage)
    sys.argv = ["pipelines.preprocess", *argv]
    try:
        runpy.run_module("pipelines.preprocess", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code:
            raise
    total = time.perf_counter() - start
    summed: dict[str, float] = {}
    for label, seconds in steps:
        if label != "(one stage)":
            summed[label] = summed.get(label, 0.0) + seconds
    return {"total_s": total, "steps": summed, "gc": collected, **counts}


def render(rows: dict, detail: dict, runs: int, load: tuple[float, float]) -> str:
    lines = [
        "# Start-up: five short documents, `python -m pipelines.preprocess`",
        "",
        f"Run {datetime.date.today()} by `bench/bench_startup.py --runs {runs}` on "
        f"{platform.machine()}, {os.cpu_count()} cores (load average {load[0]:.1f} at start, "
        f"{load[1]:.1f} at end); Python {platform.python_version()}.",
        "",
        "Five WebText documents (10 KB), GPT-2 vocabulary, EOD appended, no running mode given "
        "(a small input runs in the launcher's process). Each command run "
        f"{runs} times as a user runs it; min / median / max.",
        "",
        "| command | wall s | CPU s | Beam stages | ParDos | GroupByKeys |",
        "|---|---|---|---:|---:|---:|",
    ]
    for mode, (walls, cpus) in rows.items():
        d = detail[mode]
        spread = [
            f"{min(v):.2f} / {statistics.median(v):.2f} / {max(v):.2f}" for v in (walls, cpus)
        ]
        lines.append(
            f"| {mode} | {spread[0]} | {spread[1]} | {d['stages']} | {d['pardo']} | "
            f"{d['group_by_key']} |"
        )
    first = next(iter(rows))
    median = statistics.median(rows[first][0])
    lines += [
        "",
        f"Target (issue 21: under {TARGET_S} s wall for the side-by-side's command, {first}): "
        f"median **{median:.2f} s** ({'met' if median < TARGET_S else 'NOT met'}).",
        "",
        "Where the time goes, one more run of each under timers (seconds; the steps are the "
        "launcher's, in order; what is left is Python's own start, option parsing and the "
        "report):",
        "",
        "| step | " + " | ".join(detail) + " |",
        "|---|" + "---:|" * len(detail),
    ]
    labels = list(next(iter(detail.values()))["steps"])
    for label in labels:
        cells = " | ".join(f"{d['steps'].get(label, 0.0):.3f}" for d in detail.values())
        lines.append(f"| {label} | {cells} |")
    gc_cells = " | ".join(
        f"{d['gc']['s']:.3f} ({d['gc']['collections']} collections)" for d in detail.values()
    )
    total_cells = " | ".join(f"{d['total_s']:.3f}" for d in detail.values())
    lines += [
        f"| of which the cyclic garbage collector, all along | {gc_cells} |",
        f"| **in all, after Python's own start** | {total_cells} |",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "startup.md"))
    parser.add_argument("--phases", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phases is not None:  # the child of the timed run
        print(json.dumps(phases(args.phases)))
        return
    load_start = os.getloadavg()[0]
    rows, detail = {}, {}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        corpus = five_documents(Path(tmp) / "five.jsonl")
        for mode, extra in MODES.items():
            walls, cpus = [], []
            for run in range(args.runs):
                argv = command_args(corpus, Path(tmp) / f"out-{len(rows)}-{run}", extra)
                wall, cpu = time_command(argv)
                walls.append(wall)
                cpus.append(cpu)
            rows[mode] = walls, cpus
            argv = command_args(corpus, Path(tmp) / f"out-{len(rows)}-phases", extra)
            child = subprocess.run(
                [sys.executable, __file__, "--phases", *argv],
                cwd=REPO,
                check=True,
                capture_output=True,
                text=True,
            )
            detail[mode] = json.loads(child.stdout.strip().splitlines()[-1])
            print(f"{mode}: wall {walls}, cpu {cpus}", flush=True)
    text = render(rows, detail, args.runs, (load_start, os.getloadavg()[0]))
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
