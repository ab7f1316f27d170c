"""Write recipes/SCALING.md: what the recipes cost, every number with its source.

    python recipes/make_scaling.py           # rewrite recipes/SCALING.md
    python recipes/make_scaling.py --check   # exit 1 when SCALING.md is not what this writes

CPU-hours of the preprocessing pipeline per GB of each source come from the committed bench
tables (bench/results/*.md, read by file and line); GPU-hours of each training run from the
model's FLOPs per token (train.models) and an MFU: measured by bench/gpu.sh when
bench/results/gpu.md exists, otherwise the assumption stated below. Corpus sizes and the runs'
settings come from the papers named next to them.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common.cli import ArgumentParser  # noqa: E402
from train.metrics import lookup_peak_tflops  # noqa: E402
from train.models.presets import count_params, get_preset  # noqa: E402
from train.models.registry import get_spec  # noqa: E402
from train.plan import FITS_WITH, GIB, Layout, plan  # noqa: E402

RESULTS = REPO / "bench" / "results"
SHEET = REPO / "recipes" / "SCALING.md"
SECONDS_PER_HOUR = 3600.0
MB_PER_GB = 1000.0  # the benches' MB are 10^6 bytes


# -- reading the bench tables ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Number:
    """A value and where it comes from (a bench file and line, a paper, or arithmetic)."""

    value: float
    source: str


@dataclasses.dataclass(frozen=True)
class Table:
    path: Path
    header: tuple[str, ...]
    rows: tuple[tuple[int, tuple[str, ...]], ...]  # (1-based line, cells)


def _cells(line: str) -> tuple[str, ...]:
    return tuple(cell.strip() for cell in line.strip().strip("|").split("|"))


def read_tables(path: Path) -> list[Table]:
    """Every Markdown table of a file: a header row, a |---| row, then body rows."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tables, i = [], 0
    while i < len(lines) - 1:
        if lines[i].lstrip().startswith("|") and re.fullmatch(r"\s*\|[\s:|-]+\|\s*", lines[i + 1]):
            header, rows, j = _cells(lines[i]), [], i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                rows.append((j + 1, _cells(lines[j])))
                j += 1
            tables.append(Table(path, header, tuple(rows)))
            i = j
        else:
            i += 1
    return tables


def _plain(text: str) -> str:
    return text.replace("*", "").strip()


def parse_number(cell: str) -> float:
    """The first number of a cell: '**7.99x**' -> 7.99, '51.7 (budget)' -> 51.7, '45.3%' -> 45.3."""
    match = re.search(r"-?\d[\d,]*(?:\.\d+)?", _plain(cell))
    if match is None:
        raise ValueError(f"no number in table cell {cell!r}")
    return float(match.group().replace(",", ""))


def cell(results: Path, file: str, row: str, column: str) -> Number:
    """The number in the row whose first cell is `row`, under `column`, of a bench table."""
    path = results / file
    if not path.exists():
        raise SystemExit(f"error: {path} is missing: the scaling sheet is built from it")
    for table in read_tables(path):
        headers = [_plain(h) for h in table.header]
        if column not in headers:
            continue
        index = headers.index(column)
        for line, cells in table.rows:
            if _plain(cells[0]) == row:
                where = f"[{file}:{line}](../bench/results/{file}#L{line})"
                return Number(parse_number(cells[index]), f"{where} ({row} / {column})")
    raise SystemExit(
        f"error: {path}: no table row {row!r} with a column {column!r}; the bench's table "
        "changed: update recipes/make_scaling.py to read it"
    )


# -- preprocessing ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Step:
    stage: str  # which command of recipes/corpora.sh
    work: str
    times: int  # how often the recipe does this work on each byte of the source
    seconds_per_mb: Number | None  # CPU-seconds per MB of text; None: not measured
    note: str = ""
    beam: bool = True  # measured outside Beam: scale by the pipeline's own cost per MB


def _per_mb(rate: Number, note: str = "") -> Number:
    """CPU-seconds per MB from a one-process MB/s figure."""
    return Number(1.0 / rate.value, rate.source + (f"; {note}" if note else ""))


def preprocessing_steps(results: Path) -> tuple[dict[str, list[Step]], Number]:
    """What recipes/corpora.sh does to each source, with a measured cost per step, and the
    factor that turns a plain-loop cost into the Beam pipeline's."""
    ct = "clean_tokenize.md"
    clean_curated = cell(results, ct, "clean_document, books preset", "English books MB/s")
    clean_curated_web = cell(results, ct, "clean_document, books preset", "webtext MB/s")
    clean_web = cell(results, ct, "clean_document, web preset", "webtext MB/s")
    tiktoken_books = cell(results, ct, "GPT-2 encode: tiktoken fast path", "English books MB/s")
    tiktoken_web = cell(results, ct, "GPT-2 encode: tiktoken fast path", "webtext MB/s")
    hf_encode = cell(results, ct, "GPT-2 encode: tokenizers encode_batch", "English books MB/s")
    pipeline = cell(
        results,
        "preprocess.md",
        "Beam pipeline (FnApiRunner multi_processing)",
        "MB per CPU-s",
    )
    loop = cell(
        results, "preprocess.md", "(1) our clean + tokenize in a plain loop", "MB per CPU-s"
    )
    beam_factor = Number(
        loop.value / pipeline.value,
        f"{loop.source} over {pipeline.source}: the same clean + tokenize work in the pipeline",
    )
    dedup_mb = cell(results, "dedup.md", "4x", "MB of text")
    dedup_s = cell(results, "dedup.md", "4x", "stage wall time (s)")
    dedup = Number(
        dedup_s.value / dedup_mb.value,
        f"{dedup_s.source} over {dedup_mb.source}; wall time of one process, start-up included: "
        "an upper bound on CPU time",
    )
    wordpiece = _per_mb(hf_encode, "proxy: WordPiece through `tokenizers` is not benchmarked")
    wiki_proxy = "proxy for Wikipedia's plain text (English prose)"
    steps = {
        "books": [
            Step("1 clean", "clean (curated rules)", 1, _per_mb(clean_curated)),
            Step("1 clean", "GPT-2 encode (by-product shards)", 1, _per_mb(tiktoken_books)),
            Step("2 dedup", "dedup with Wikipedia (BERT set)", 1, dedup, beam=False),
            Step("3 tokenize", "clean again (parquet source, curated)", 1, _per_mb(clean_curated)),
            Step("3 tokenize", "WordPiece encode (BERT set)", 1, wordpiece),
        ],
        "wikipedia": [
            Step("1 clean", "wikitext markup to plain text", 1, None, "no committed bench"),
            Step("1 clean", "clean (curated rules)", 1, _per_mb(clean_curated, wiki_proxy)),
            Step(
                "1 clean",
                "GPT-2 encode (by-product shards)",
                1,
                _per_mb(tiktoken_books, wiki_proxy),
            ),
            Step("2 dedup", "dedup in both sets", 2, dedup, beam=False),
            Step("3 tokenize", "clean again in both sets", 2, _per_mb(clean_curated, wiki_proxy)),
            Step("3 tokenize", "WordPiece encode (BERT set)", 1, wordpiece),
            Step("3 tokenize", "GPT-2 encode (GPT set)", 1, _per_mb(tiktoken_books, wiki_proxy)),
        ],
        "webtext": [
            Step("1 clean", "clean (web rules: Gopher, C4)", 1, _per_mb(clean_web)),
            Step("1 clean", "GPT-2 encode (by-product shards)", 1, _per_mb(tiktoken_web)),
            Step("2 dedup", "dedup with Wikipedia (GPT set)", 1, dedup, beam=False),
            Step(
                "3 tokenize",
                "clean again (parquet source, curated)",
                1,
                _per_mb(clean_curated_web),
            ),
            Step("3 tokenize", "GPT-2 encode (GPT set)", 1, _per_mb(tiktoken_web)),
        ],
    }
    return steps, beam_factor


def step_cost(step: Step, beam_factor: Number) -> float | None:
    if step.seconds_per_mb is None:
        return None
    factor = beam_factor.value if step.beam else 1.0
    return step.times * step.seconds_per_mb.value * factor


# Sizes of the 2019 corpora, as their papers give them (GB of text).
CORPUS_GB = {
    "books": Number(
        4.0,
        "BookCorpus, 4 GB: Zhang et al. 2022 (OPT), data card; with Wikipedia 16 GB in "
        "Liu et al. 2019 (RoBERTa) §3.2",
    ),
    "wikipedia": Number(12.0, "English Wikipedia, 12 GB: Zhang et al. 2022 (OPT), data card"),
    "webtext": Number(
        38.0,
        "OpenWebText, 38 GB: Liu et al. 2019 (RoBERTa) §3.2 (OpenAI's WebText: 40 GB, "
        "Radford et al. 2019 §2.1)",
    ),
}


# -- training --------------------------------------------------------------------------------------

# The MFU this sheet assumes until bench/gpu.sh has measured one.
ASSUMED_MFU = Number(
    0.30,
    "assumed: Megatron-LM's single-GPU baseline, 39 TFLOP/s = 30% of a V100's peak (Shoeybi "
    "et al. 2019, abstract). If their count includes the forward pass that activation "
    "checkpointing recomputes, as the cross-check below suggests, it is nearer 3/4 of that as "
    "model FLOPs",
)
GPUS = (("V100", "fp16"), ("A100", "bf16"), ("H100 SXM", "bf16"))
GPU_NAMES = {
    "V100": "Tesla V100-SXM2-32GB",
    "A100": "NVIDIA A100-SXM4-80GB",
    "H100 SXM": "NVIDIA H100 80GB HBM3",
}


@dataclasses.dataclass(frozen=True)
class Run:
    name: str
    recipe: str
    preset: str
    seq_len: int
    global_batch: int
    steps: int
    source: str


MEGATRON_GPT = "Shoeybi et al. 2019 §4.2: batch 512 x 1024 tokens, 300k iterations"
NVIDIA_LAMB = "NVIDIA's LAMB recipe (DeepLearningExamples BERT run_pretraining.sh)"
RUNS = (
    Run(
        "BERT-large LAMB, phase 1",
        "bert_large_lamb.sh",
        "bert-large",
        128,
        65536,
        7038,
        f"{NVIDIA_LAMB}: 7,038 steps of 65,536 x 128",
    ),
    Run(
        "BERT-large LAMB, phase 2",
        "bert_large_lamb.sh",
        "bert-large",
        512,
        32768,
        1563,
        f"{NVIDIA_LAMB}: 1,563 steps of 32,768 x 512",
    ),
    Run("GPT-2 345M", "gpt2_345m.sh", "gpt2-355m", 1024, 512, 300_000, MEGATRON_GPT),
    Run("Megatron 8.3B", "megatron_8.3b.sh", "megatron-8.3b-24h", 1024, 512, 300_000, MEGATRON_GPT),
)
# The GPT runs' layouts as their recipes launch them (one machine of 8 GPUs, and the cluster
# defaults), sized by train.plan: (run, where, layout). The trainer puts FSDP2 over the
# data-parallel ranks under tensor parallelism and DDP otherwise (its default --parallel).
LAYOUTS = (
    ("GPT-2 345M", "one machine, 8 GPUs", Layout(dp=8, micro_batch=8, parallel="ddp")),
    ("GPT-2 345M", "8 nodes x 8 GPUs", Layout(dp=64, micro_batch=8, parallel="ddp")),
    (
        "Megatron 8.3B",
        "one machine, 8 GPUs",
        Layout(tp=8, dp=1, micro_batch=8, activation_checkpointing="full"),
    ),
    (
        "Megatron 8.3B",
        "64 nodes x 8 GPUs",
        Layout(tp=8, dp=64, micro_batch=8, activation_checkpointing="full"),
    ),
)
GPU_MEMORY_GIB = 80  # A100 80GB, H100 SXM 80GB
# BERT predicts 15% of positions (--mask-prob); the trainer's MFU counts the MLM head there only.
BERT_MLM_FRACTION = 0.15
# Megatron-LM's 8.3B run: 512 V100s for 9.2 days, 12 ZettaFLOPs (Shoeybi et al. 2019, abstract).
MEGATRON_GPUS, MEGATRON_DAYS, MEGATRON_ZFLOPS = 512, 9.2, 12.0


def run_flops_per_token(run: Run) -> float:
    """The preset's family's FLOPs per token; a masked LM predicts BERT_MLM_FRACTION of them
    (causal families ignore it)."""
    preset = get_preset(run.preset)
    return get_spec(preset.model).flops_per_token(preset.config, run.seq_len, BERT_MLM_FRACTION)


def run_tokens(run: Run) -> int:
    return run.steps * run.global_batch * run.seq_len


def gpu_hours(flops: float, peak_tflops: float, mfu: float) -> float:
    return flops / (mfu * peak_tflops * 1e12) / SECONDS_PER_HOUR


@dataclasses.dataclass(frozen=True)
class MeasuredMFU:
    preset: str
    device: str
    peak_tflops: float | None
    mfu: Number


def measured_mfus(results: Path) -> list[MeasuredMFU]:
    """The MFU rows of bench/results/gpu.md (written by bench/gpu.sh on a GPU), if any."""
    path = results / "gpu.md"
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    device = re.search(r"`bench/gpu.sh` on (.+?), torch", text)
    if device is None:
        raise SystemExit(f"error: {path}: no '`bench/gpu.sh` on DEVICE, torch' line")
    found = []
    for table in read_tables(path):
        headers = [_plain(h) for h in table.header]
        if "preset" not in headers or "MFU" not in headers:
            continue
        for line, cells in table.rows:
            value = cells[headers.index("MFU")] if len(cells) == len(headers) else ""
            if "%" not in value:
                continue  # n/a (a device without a known peak) or a skipped layout case
            where = f"[gpu.md:{line}](../bench/results/gpu.md#L{line})"
            found.append(
                MeasuredMFU(
                    preset=_plain(cells[headers.index("preset")]),
                    device=device.group(1),
                    peak_tflops=lookup_peak_tflops(device.group(1), "bf16"),
                    mfu=Number(parse_number(value) / 100.0, f"{where} (MFU)"),
                )
            )
    return found


# -- the sheet -------------------------------------------------------------------------------------


def _f(value: float, digits: int = 2) -> str:
    return f"{value:,.{digits}f}"


def significant(value: float) -> str:
    """Three significant figures, grouped: 1,234,567 -> '1,230,000'; 0.01234 -> '0.0123'."""
    if value == 0:
        return "0"
    digits = 2 - int(f"{abs(value):e}".split("e")[1])
    return f"{round(value, digits):,.{max(0, digits)}f}"


def preprocessing_section(results: Path) -> list[str]:
    steps, beam_factor = preprocessing_steps(results)
    out = [
        "## Preprocessing: CPU-hours per GB of each source",
        "",
        "What `recipes/corpora.sh` does to each byte of a source (1: read and clean, once; 2: "
        "deduplicate, once per training set the source is in; 3: tokenize the kept documents, "
        "likewise), each step's CPU-seconds per MB from a one-process bench, times the Beam "
        f"pipeline's cost over the same functions in a plain loop ({_f(beam_factor.value)}x: "
        f"{beam_factor.source}). Dedup was measured inside Beam and is not scaled. MB and GB "
        "are 10^6 and 10^9 bytes of text; the benches ran on 2 cores shared with other jobs, so "
        "these are upper bounds for a quiet machine. Costs are per byte of the source's text "
        "throughout (dedup and cleaning remove a little before the later steps).",
        "",
        "| source | step | work | times | CPU-s per MB (each) | CPU-s per MB | from |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    totals: dict[str, float] = {}
    missing: dict[str, list[str]] = {}
    for source, source_steps in steps.items():
        total = 0.0
        for step in source_steps:
            cost = step_cost(step, beam_factor)
            if cost is None:
                missing.setdefault(source, []).append(step.work)
                out.append(
                    f"| {source} | {step.stage} | {step.work} | {step.times} | not measured | "
                    f"- | {step.note} |"
                )
                continue
            total += cost
            scale = f" x {_f(beam_factor.value)}" if step.beam else ""
            out.append(
                f"| {source} | {step.stage} | {step.work} | {step.times} | "
                f"{significant(step.seconds_per_mb.value)}{scale} | {significant(cost)} | "
                f"{step.seconds_per_mb.source} |"
            )
        totals[source] = total
        out.append(
            f"| **{source}** | | **total** | | | **{significant(total)}** | sum of the rows above |"
        )
    out += [
        "",
        "| source | CPU-hours per GB | 2019 corpus size (GB) | size from | CPU-hours for the corpus |",
        "|---|---:|---:|---|---:|",
    ]
    for source, total in totals.items():
        per_gb = total * MB_PER_GB / SECONDS_PER_HOUR
        size = CORPUS_GB[source]
        bound = " (lower bound)" if source in missing else ""
        out.append(
            f"| {source} | {significant(per_gb)}{bound} | {_f(size.value, 0)} | {size.source} | "
            f"{significant(per_gb * size.value)}{bound} |"
        )
    pipeline = cell(
        results, "preprocess.md", "Beam pipeline (FnApiRunner multi_processing)", "MB per CPU-s"
    )
    out += [
        "",
        "CPU-hours per GB = CPU-s per MB x 1000 / 3600. Not in the totals: "
        + "; ".join(
            f"{source}: {', '.join(works)} (no committed bench)"
            for source, works in missing.items()
        )
        + ". Web text read from HTML or WARC pages (not OpenWebText's text files) also pays the "
        f"main-text extraction, {significant(1.0 / cell(results, 'extract.md', 'trafilatura (ours, default)', 'pages/s').value)} "
        f"CPU-s per page ({cell(results, 'extract.md', 'trafilatura (ours, default)', 'pages/s').source}).",
        "",
        f"Cross-check: one end-to-end clean + tokenize pass of the pipeline over mixed books, "
        f"Wikipedia and web JSONL ran at {_f(pipeline.value)} MB per CPU-second "
        f"({pipeline.source}), i.e. {significant(MB_PER_GB / pipeline.value / SECONDS_PER_HOUR)} "
        "CPU-hours per GB for steps 1 or 3 alone.",
        "",
    ]
    return out


def training_section(results: Path) -> list[str]:
    out = [
        "## Training: GPU-hours of each run",
        "",
        "Tokens = steps x global batch x sequence length; FLOPs per token from the model "
        "(`train.models.gpt.flops_per_token` / `train.models.bert.flops_per_token`: PaLM's "
        "6N + 12·L·d·T, the figure the trainer's MFU uses; BERT's MLM head counted at the "
        f"{BERT_MLM_FRACTION:.0%} predicted positions); GPU-hours = FLOPs / (MFU x peak). Peaks "
        "are dense fp16/bf16 tensor TFLOP/s from `train/metrics.py` PEAK_TFLOPS (vendor "
        "datasheets).",
        "",
        "| run | recipe | preset (parameters) | seq | global batch | steps | settings from | tokens | FLOPs per token | total FLOPs |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    flops = {}
    for run in RUNS:
        per_token = run_flops_per_token(run)
        flops[run.name] = run_tokens(run) * per_token
        params = count_params(get_preset(run.preset).config)
        out.append(
            f"| {run.name} | [{run.recipe}]({run.recipe}) | {run.preset} ({params / 1e6:,.0f}M) | "
            f"{run.seq_len} | {run.global_batch:,} | {run.steps:,} | {run.source} | "
            f"{run_tokens(run):.3g} | {per_token:.3g} | {flops[run.name]:.3g} |"
        )
    peaks = {gpu: lookup_peak_tflops(GPU_NAMES[gpu], precision) for gpu, precision in GPUS}
    header = " | ".join(f"{gpu} ({precision}, {peaks[gpu]:g} TFLOP/s)" for gpu, precision in GPUS)
    out += [
        "",
        f"GPU-hours at an MFU of {ASSUMED_MFU.value:.0%} ({ASSUMED_MFU.source}):",
        "",
        f"| run | {header} |",
        "|---|" + "---:|" * len(GPUS),
    ]
    for run in RUNS:
        hours = [gpu_hours(flops[run.name], peaks[gpu], ASSUMED_MFU.value) for gpu, _ in GPUS]
        out.append(f"| {run.name} | " + " | ".join(significant(h) for h in hours) + " |")

    out += [
        "",
        "Memory per GPU of the GPT runs' layouts, from `train/plan.py` (fp32 master weights, "
        "gradients and AdamW moments, sharded by FSDP; bf16 activations after Korthikanti et "
        "al. 2022; scaled_dot_product_attention keeps no attention scores). The planner calls "
        f"a layout fitting when it needs at most {FITS_WITH:.0%} of the GPU:",
        "",
        "| run | where | tp x dp | micro batch | activation checkpointing | GiB per GPU | "
        f"fits {GPU_MEMORY_GIB} GiB |",
        "|---|---|---|---:|---|---:|---|",
    ]
    run_presets = {run.name: run.preset for run in RUNS}
    for name, where, layout in LAYOUTS:
        config = get_preset(run_presets[name]).config
        total = plan(config, dataclasses.replace(layout, seq_len=config.block_size)).total
        fits = "yes" if total <= FITS_WITH * GPU_MEMORY_GIB * GIB else "no"
        out.append(
            f"| {name} | {where} | {layout.tp} x {layout.dp} ({layout.parallel}) | "
            f"{layout.micro_batch} | {layout.activation_checkpointing} | {total / GIB:.1f} | "
            f"{fits} |"
        )

    measured = measured_mfus(results)
    out += ["", "### Measured MFU (`bench/gpu.sh`)", ""]
    if not measured:
        out += [
            "bench/results/gpu.md is not there: `bench/gpu.sh` has not run on a GPU yet, so "
            "every GPU-hour figure above rests on the assumed MFU. When it has, this script "
            "adds each measured preset's run at the measured MFU on that device.",
            "",
        ]
    else:
        out += [
            "| run | device | peak TFLOP/s (bf16) | MFU | GPU-hours |",
            "|---|---|---:|---:|---:|",
        ]
        for row in measured:
            for run in RUNS:
                if run.preset != row.preset or row.peak_tflops is None:
                    continue
                hours = gpu_hours(flops[run.name], row.peak_tflops, row.mfu.value)
                out.append(
                    f"| {run.name} | {row.device} | {row.peak_tflops:g} | "
                    f"{row.mfu.value:.1%} ({row.mfu.source}) | {significant(hours)} |"
                )
        out += [
            "",
            "Measured on one GPU with no communication (the bench's micro-batch, no gradient "
            "accumulation): an upper bound on a multi-node run's MFU.",
            "",
        ]

    megatron = next(run for run in RUNS if run.preset.startswith("megatron"))
    paper_gpu_hours = MEGATRON_GPUS * MEGATRON_DAYS * 24
    v100 = peaks["V100"]
    implied = flops[megatron.name] / (paper_gpu_hours * SECONDS_PER_HOUR * v100 * 1e12)
    out += [
        "### Cross-check against the Megatron-LM paper",
        "",
        f"The 8.3B run took {MEGATRON_GPUS} V100s {MEGATRON_DAYS} days and "
        f"{MEGATRON_ZFLOPS:g} ZettaFLOPs (Shoeybi et al. 2019, abstract): "
        f"{significant(paper_gpu_hours)} GPU-hours. Our count of the same run is "
        f"{flops[megatron.name] / 1e21:.2f} ZettaFLOPs of model FLOPs "
        f"({flops[megatron.name] * 4 / 3 / 1e21:.2f} with the forward pass that activation "
        "checkpointing recomputes, nearer the paper's figure: it seems to count that pass). In "
        f"model FLOPs their run's MFU was {implied:.1%} of the V100's fp16 peak, below the "
        f"{ASSUMED_MFU.value:.0%} assumed "
        "above: the sheet's figures are what a well-tuned run reaches, not what a first run "
        "will.",
        "",
    ]
    return out


def render(results: Path = RESULTS) -> str:
    lines = [
        "# Scaling sheet: what the recipes cost",
        "",
        "Generated by `python recipes/make_scaling.py` from the committed bench results "
        "(`bench/results/`), the model presets and the papers named beside each number; do "
        "not edit by hand (tests/unit/recipes/test_recipes.py checks that it is current). Each figure "
        "names its source: a bench file and line, a paper, or the arithmetic shown.",
        "",
        *preprocessing_section(results),
        *training_section(results),
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if SCALING.md is stale")
    parser.add_argument("--results", type=Path, default=RESULTS, help="bench results directory")
    parser.add_argument("--out", type=Path, default=SHEET)
    args = parser.parse_args(argv)
    text = render(args.results)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run python recipes/make_scaling.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
