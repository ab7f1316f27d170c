"""The Markdown report of bench_preprocess.py (bench/results/preprocess.md): the throughput
table with its ratios and targets, and the plain loop's per-stage table. Pure functions of the
measured rows; the measuring is bench_preprocess.py's.
"""

from __future__ import annotations

import datetime
import os
import platform


def render(
    rows: list[dict],
    startup: dict,
    small: dict,
    corpus: dict,
    args,
    load: tuple[float, float],
    labels: dict[str, str],
    startup_labels: dict[str, str],
) -> str:
    """The throughput table, the ratios and the targets; `labels` name each contender's row,
    `startup_labels` each start-up measurement."""
    import apache_beam
    import ftfy
    import tiktoken
    import tokenizers

    by = {r["name"]: r for r in rows}
    lines = [
        "# Preprocessing throughput, end to end",
        "",
        f"Run {datetime.date.today()} by `bench/bench_preprocess.py --target-mb {args.target_mb:g} "
        f"--workers {args.workers} --budget-s {args.budget_s:g}` on {platform.machine()}, "
        f"{os.cpu_count()} cores shared with other jobs (load average {load[0]:.1f} at start, "
        f"{load[1]:.1f} at end); Python {platform.python_version()}, apache-beam "
        f"{apache_beam.__version__}, tokenizers {tokenizers.__version__}, tiktoken "
        f"{tiktoken.__version__}, ftfy {ftfy.__version__}; RAYON_NUM_THREADS=1.",
        "",
        f"Corpus: {corpus['text_bytes'] / 1e6:,.1f} MB of UTF-8 text in {corpus['files']} JSONL files, "
        f"{corpus['documents']:,} documents ({corpus['unique_documents']:,} distinct real "
        f"documents from the shared books, Wikipedia, WebText and WikiText samples, "
        f"{corpus['copies']} copies). GPT-2 vocabulary, EOD appended, MMIDIDX output. "
        "MB = 10^6 bytes of raw input text.",
        "",
        "| contender | MB done | wall s | CPU s | processes | MB per CPU-s | MB/s per core (wall) "
        "| peak RSS MB | documents | tokens |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        done = f"{r['mb']:,.1f}" + ("" if r["complete"] else " (budget)")
        lines.append(
            f"| {labels[r['name']]} | {done} | {r['wall_s']:,.1f} | {r['cpu_s']:,.1f} | "
            f"{r['cores']} | {r['mb_per_cpu_s']:.2f} | {r['mb_per_core_s']:.2f} | "
            f"{r['peak_rss_mb']:,.0f} | {r['documents']:,} | {r['tokens']:,} |"
        )
    pipeline = by["pipeline"]
    shares = ", ".join(f"{r['name']} {r['cpu_s'] / (r['wall_s'] * r['cores']):.2f}" for r in rows)
    lines += [
        "",
        f"Share of a core each working process got, CPU s / (wall s x processes): {shares}. "
        "On a shared machine the wall-clock figures measure the other jobs too; the MB per "
        "CPU-second column is the robust comparison.",
        "",
        "Ratios (same run), pipeline against each contender:",
        "",
    ]
    for name in (n for n in ("loop", "naive", "megatron", "datatrove") if n in by):
        r = by[name]
        lines.append(
            f"- vs {labels[name]}: {pipeline['mb_per_cpu_s'] / r['mb_per_cpu_s']:.2f}x per "
            f"CPU-second, {pipeline['mb_per_core_s'] / r['mb_per_core_s']:.2f}x per core (wall)."
        )
    target = pipeline["mb_per_cpu_s"] / by["loop"]["mb_per_cpu_s"]
    fixed = {name: startup[name]["cpu_s"] for name in startup}
    steady = (pipeline["cpu_s"] - fixed["pipeline"]) and (
        (by["loop"]["cpu_s"] - fixed["loop"]) / (pipeline["cpu_s"] - fixed["pipeline"])
    )
    # The wall-clock target: the pipeline's MB per wall second against what `workers` copies of
    # the plain loop would do, each at the loop's own rate per core.
    ideal = args.workers * by["loop"]["mb_per_core_s"]
    wall_share = pipeline["mb"] / pipeline["wall_s"] / ideal
    lines += [
        "",
        f"Wall-clock: the pipeline did {pipeline['mb'] / pipeline['wall_s']:.2f} MB/s with "
        f"{args.workers} workers; {args.workers} x (1)'s {by['loop']['mb_per_core_s']:.2f} MB/s "
        f"per core is {ideal:.2f} MB/s: **{wall_share:.0%}** (target >= 80%: "
        f"{'met' if wall_share >= 0.8 else 'NOT met'}; meaningful only with load below the "
        f"core count).",
        "",
        "Start-up, the same commands on five short documents (wall s / CPU s): "
        + ", ".join(
            f"{startup_labels[name]} {startup[name]['wall_s']:.1f} / {fixed[name]:.1f}"
            for name in startup
        )
        + f". Net of start-up, the pipeline's MB per CPU-second is **{steady:.0%}** of (1)'s: "
        "Beam's cost per MB once it runs.",
        *_startup_target(startup),
        "",
        f"Peak memory (summed RSS of the launcher and its {args.workers} workers; the workers "
        "are forked from the launcher, so the pages they share with it, Beam and the "
        "tokenizer, are counted in each): "
        f"{pipeline['peak_rss_mb']:,.0f} MB on the whole corpus, {small['peak_rss_mb']:,.0f} MB "
        f"on a quarter of it ({small['mb']:,.1f} MB): "
        + (
            f"flat (within 20%) while the input grows {pipeline['mb'] / small['mb']:.1f}x. Each "
            if pipeline["peak_rss_mb"] <= 1.2 * small["peak_rss_mb"]
            else "it GROWS with the input. Each "
        )
        + "process holds Beam, the tokenizer and one batch of documents; shards are written "
        "from spill files, never from memory.",
        "",
        f"Target: pipeline >= 90% of (1) per CPU-second: **{target:.0%}** "
        f"({'met' if target >= 0.9 else 'NOT met'}); ahead of every other contender per "
        f"CPU-second: **{'yes' if all(pipeline['mb_per_cpu_s'] > r['mb_per_cpu_s'] for r in rows if r['name'] not in ('pipeline', 'loop')) else 'no'}**.",
        "",
        "The pipeline and (1) run the same clean (light preset, language en) and tokenizer (the "
        "tiktoken fast path), so they write the same documents and tokens; (2) and (3) do no "
        "filtering and use tokenizers' per-document encode, as those tools do. The pipeline's "
        "CPU seconds include Beam's start-up (the launcher importing Beam and loading the "
        "tokenizer and language model once, its worker processes forked from it), its spill "
        "and merge of shards, and the finishing step.",
    ]
    return "\n".join(lines) + "\n"


def _startup_target(startup: dict) -> list[str]:
    """Issue 21's start-up target, where this run measured the command it is about."""
    if "pipeline_default" not in startup:
        return []
    wall = startup["pipeline_default"]["wall_s"]
    line = (
        f"Start-up target (under 1.5 s wall for five short documents, the side-by-side's "
        f"command as a user types it: no running mode given, no dedup): **{wall:.2f} s** "
        f"({'met' if wall < 1.5 else 'NOT met'})"
    )
    if "pipeline_dedup" in startup:
        line += f"; with deduplication, on by default, {startup['pipeline_dedup']['wall_s']:.2f} s"
    return ["", line + "."]


def render_stages(profile: dict, stages_labels: dict[str, str]) -> str:
    """The per-stage table and the loop's ratios (issue 21's targets); `stages_labels` names
    the stages in the order a document meets them."""
    mb = profile["mb"]
    stages = profile["stages"]
    loop = profile["loop_cpu_s"]
    alone = profile["tokenize_alone_cpu_s"]
    lines = [
        "## The plain loop per stage (CPU seconds, one process, after start-up)",
        "",
        f"{mb:,.1f} MB; the loop's stages timed with process_time around each call (nested "
        "calls subtracted from their caller), tokenization alone in the same process right "
        "after, on the same raw texts and in the same batches.",
        "",
        "| stage | CPU s | share of the loop | MB per CPU-s |",
        "|---|---:|---:|---:|",
    ]
    for name, label in stages_labels.items():
        seconds = stages[name]
        rate = f"{mb / seconds:,.0f}" if seconds > 0.001 else "-"
        lines.append(f"| {label} | {seconds:.2f} | {seconds / loop:.1%} | {rate} |")
    other = loop - sum(stages.values())
    lines += [
        f"| other (the loop's own bookkeeping) | {other:.2f} | {other / loop:.1%} | |",
        f"| **the loop** | **{loop:.2f}** | 100% | **{mb / loop:.2f}** |",
        f"| tokenization alone (same process) | {alone:.2f} | | {mb / alone:.2f} |",
        f"| sentence splitting, kept texts (BERT runs only; not in the loop) | "
        f"{profile['sentence_split_cpu_s']:.2f} | | {mb / profile['sentence_split_cpu_s']:,.1f} |",
        "",
        f"The loop per CPU-second as a share of tokenization alone: **{alone / loop:.0%}** "
        f"(target >= 60%: {'met' if alone / loop >= 0.6 else 'NOT met'}).",
    ]
    return "\n".join(lines) + "\n"
