"""GPU throughput and MFU of the trainer for GPT-2 124M and 355M (bf16, torch.compile), and
two layout cases on the last preset: FSDP2 with full activation checkpointing, and tensor +
sequence parallelism (tp=2, needs two GPUs; skipped on one).

    bench/gpu.sh                      # what to run on a GPU machine (< 5 minutes on one GPU)
    python bench/bench_gpu.py [--presets gpt2-124m gpt2-355m] [--steps 20] [--warmup 8]
                              [--out bench/results/gpu.md] [--smoke]

Each preset trains from scratch on a synthetic shard set (uniform random GPT-2 ids: the
token values do not change the arithmetic) through ``train.loop.main`` exactly as
``train/pretrain.py`` would, one process, one GPU, micro-batch = global batch (no
accumulation), context 1024. tokens/s, TFLOP/s and MFU are the medians over the steps after
``--warmup`` (compilation happens in the first steps); MFU uses the trainer's peak table
(H100/H200 SXM bf16 989 TFLOP/s, A100 312, ...) or ``--peak-tflops``.

``--smoke`` runs the same path on CPU with gpt-tiny, fp32, no compile, a few steps: a test
that the script works, not a measurement.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from dataset_format import (  # noqa: E402
    IndexedDatasetWriter,
    TokenizerInfo,
    shard_info,
    write_shard_set_manifest,
)

GPT2_VOCAB = 50257
# Micro-batches that fit a 40 GB+ GPU in bf16 with full activations (no recomputation).
MICRO_BATCH = {"gpt2-124m": 16, "gpt2-355m": 8, "gpt-tiny": 2}


def build_synthetic_shards(directory: str, tokens: int, seed: int = 0) -> None:
    """Documents of ~2k random GPT-2 ids each, ending in <|endoftext|>, in one shard."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(512, 4096, size=max(16, tokens // 2048)).astype(np.int64)
    ids = rng.integers(0, GPT2_VOCAB - 1, size=int(lengths.sum()), dtype=np.uint16)
    ids[np.cumsum(lengths) - 1] = GPT2_VOCAB - 1  # eod closes every document
    prefix = os.path.join(directory, "shard-00000")
    writer = IndexedDatasetWriter(prefix, np.uint16)
    writer.add_documents(ids, lengths)
    writer.finalize()
    info = TokenizerInfo(
        file=None,
        kind="byte-level-bpe",
        vocab_size=GPT2_VOCAB,
        special_ids={"eod": GPT2_VOCAB - 1},
    )
    write_shard_set_manifest(
        directory, [shard_info(prefix)], dtype="uint16", sequence_unit="document", tokenizer=info
    )


# Layout cases after the plain presets: (label, extra trainer flags, processes). One GPU runs
# FSDP2+AC in one process (full recomputation; FSDP2 over one rank shards nothing, so this
# measures what checkpointing costs); TP+SP needs two GPUs (two ranks cannot share one under
# NCCL) and is reported as skipped on a one-GPU machine.
CASES = {
    "fsdp+ac": (["--parallel", "fsdp", "--activation-checkpointing", "full"], 1),
    "tp+sp": (["--parallel", "tp", "--tp", "2", "--sequence-parallel"], 2),
}


def measure_case(case: str, preset: str, shards: str, run_dir: str, args) -> dict:
    """A layout case through torchrun (train/pretrain.py), as a user would launch it."""
    import subprocess

    flags, processes = CASES[case]
    available = torch.cuda.device_count() if args.device == "cuda" else processes
    label = f"{preset} {case}"
    if available < processes:
        return {"preset": label, "skipped": f"needs {processes} GPUs, {available} visible"}
    micro = args.micro_batch or MICRO_BATCH.get(preset, 8)
    argv = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={processes}", str(REPO / "train" / "pretrain.py"),
        "--data", shards, "--preset", preset, "--out", run_dir,
        "--max-steps", str(args.warmup + args.steps), "--global-batch", str(micro),
        "--micro-batch", str(micro), "--seq-len", str(args.seq_len),
        "--precision", args.precision, "--device", args.device, "--eval-iters", "0",
        "--no-save", "--no-progress", "--split", "100,0,0", "--warmup-steps", "2", *flags,
    ]  # fmt: skip
    if args.compile:
        argv.append("--compile")
    if args.peak_tflops:
        argv += ["--peak-tflops", str(args.peak_tflops)]
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    if result.returncode != 0:
        return {"preset": label, "skipped": "failed: " + result.stderr.strip()[-300:]}
    return summarise(label, preset, micro, run_dir, args, time.perf_counter() - started)


def summarise(label: str, preset: str, micro: int, run_dir: str, args, wall: float) -> dict:
    from train.models.presets import count_params, get_preset

    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        train = [r for r in map(json.loads, f) if r["kind"] == "train"]
    measured = train[args.warmup :]
    mfus = [r["mfu"] for r in measured if r.get("mfu") is not None]
    return {
        "preset": label,
        "params_m": count_params(get_preset(preset).config) / 1e6,
        "micro_batch": micro,
        "seq_len": args.seq_len,
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in measured),
        "tflops": statistics.median(r["tflops"] for r in measured),
        "mfu": statistics.median(mfus) if mfus else None,
        "step_ms": 1000 * statistics.median(r["step_time_s"] for r in measured),
        "first_steps_s": sum(r["step_time_s"] for r in train[: args.warmup]),
        "peak_mem_gb": None,  # another process's; see the plain rows
        "final_loss": train[-1]["loss"],
        "wall_s": wall,
    }


def measure(preset: str, shards: str, run_dir: str, args) -> dict:
    from train.config import TrainConfig
    from train.loop import main

    micro = args.micro_batch or MICRO_BATCH.get(preset, 8)
    seq_len = args.seq_len
    config = TrainConfig(
        data=[shards],
        preset=preset,
        out=run_dir,
        max_steps=args.warmup + args.steps,
        global_batch=micro,
        micro_batch=micro,
        seq_len=seq_len,
        precision=args.precision,
        device=args.device,
        compile=args.compile,
        peak_tflops=args.peak_tflops,
        eval_iters=0,
        save=False,
        progress=False,
        log_interval=5,
        split="100,0,0",
        warmup_steps=2,
        # worker processes prefetch batches while the GPU runs (the loop syncs once a step)
        num_workers=0 if args.smoke else 2,
    )
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    main(config)
    row = summarise(preset, preset, micro, run_dir, args, time.perf_counter() - started)
    if torch.cuda.is_available():
        row["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 2**30
    return row


def table(rows: list[dict], args, device_name: str) -> str:
    lines = [
        "# GPU training throughput: GPT-2 124M / 355M, bf16, torch.compile",
        "",
        f"`bench/gpu.sh` on {device_name}, torch {torch.__version__}, one process; "
        f"{args.steps} measured steps after {args.warmup} warm-up/compile steps, "
        "synthetic GPT-2 ids, AdamW, clip 1.0.",
        "",
        "| preset | params | micro batch x seq | tokens/s | TFLOP/s | MFU | step | "
        "warm-up steps (compile) | peak memory | final loss |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['preset']} | skipped: {r['skipped']} |" + " |" * 8)
            continue
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        memory = f"{r['peak_mem_gb']:.1f} GiB" if r["peak_mem_gb"] is not None else "n/a"
        lines.append(
            f"| {r['preset']} | {r['params_m']:.0f}M | {r['micro_batch']} x {r['seq_len']} | "
            f"{r['tokens_per_s']:,.0f} | {r['tflops']:.1f} | {mfu} | {r['step_ms']:.0f} ms | "
            f"{r['first_steps_s']:.0f} s | {memory} | {r['final_loss']:.3f} |"
        )
    lines += [
        "",
        "FLOPs per token are the model's `flops_per_token(seq_len)` (PaLM appendix B: "
        "6N + 12 L d T, attention counted over the full square), so MFU is comparable with "
        "nanoGPT/llm.c/PaLM figures. The loss of random ids stays near ln(50257) = 10.8: "
        "this measures speed, not learning.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["gpt2-124m", "gpt2-355m"])
    parser.add_argument(
        "--cases", nargs="*", default=list(CASES), choices=list(CASES),
        help="layout cases run on the last preset (through torchrun)",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--micro-batch", type=int, default=None)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "gpu.md"))
    parser.add_argument("--smoke", action="store_true", help="CPU, gpt-tiny, a few steps")
    args = parser.parse_args()
    if args.smoke:
        args.presets, args.steps, args.warmup, args.seq_len = ["gpt-tiny"], 3, 1, 64
        args.precision, args.device, args.compile = "fp32", "cpu", False
    elif not torch.cuda.is_available():
        sys.exit("error: no CUDA device visible to torch (use --smoke for the CPU check)")
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor()
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # the few fp32 matmuls left under autocast
        torch.backends.cudnn.allow_tf32 = True

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        shards = os.path.join(tmp, "shards")
        os.makedirs(shards)
        largest = max(MICRO_BATCH.get(p, 8) for p in args.presets)
        needed = (args.steps + args.warmup) * (args.micro_batch or largest) * (args.seq_len + 1)
        build_synthetic_shards(shards, tokens=2 * needed)
        for preset in args.presets:
            row = measure(preset, shards, os.path.join(tmp, preset), args)
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch._dynamo.reset()  # next preset compiles its own graphs from a clean slate
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        for case in args.cases:
            row = measure_case(case, args.presets[-1], shards,
                               os.path.join(tmp, case.replace("+", "-")), args)  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    text = table(rows, args, device_name or "cpu")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
