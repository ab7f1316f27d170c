"""Training speed on one GPU, side by side with Hugging Face ``transformers``.

    bench/gpu.sh                      # what to run on a GPU machine (4 minutes on one H200)
    python bench/bench_gpu.py [--cases gpt2-124m bert-large-128-bf16 ...] [--steps 15]
                              [--out bench/results/gpu.md] [--profile DIR] [--smoke]

Each case trains one model at one shape and precision, ours (``train.models``) and then HF's
(``GPT2LMHeadModel`` / ``BertForPreTraining``, sdpa attention) at the same micro-batch,
precision, optimizer (fused AdamW for GPT, ``train.optim.Lamb`` for BERT) and compile
setting, on random ids resident on the GPU: the model and optimizer step the trainer runs,
without its data loader or logging. BERT predicts a fixed ``max_predictions_per_seq``
positions a sequence (20 at seq 128, 80 at 512, the NVIDIA recipe); ours runs its MLM head on
those only (``mlm_positions``), HF's runs it on every token, as its model does. No padding
(``attention_mask=None`` on both): fused attention. The GPT micro-batch is
``train.plan.suggest_micro_batch`` for the GPU (at most 64).

The table is written row by row (a run cut short keeps the rows done), most important first,
after a bf16 matmul ceiling. tokens/s: median of ``--steps`` steps timed with CUDA events
after ``--warmup`` steps; compile warm-up: the wall time of those warm-up steps; recompiles:
dynamo graphs compiled after warm-up (target 0). MFU counts the same model FLOPs for ours and
HF's (``flops_per_token``, PaLM appendix B, BERT's MLM head at the predicted share) against
the dense bf16/fp16 peak (989 TFLOP/s on H100/H200, ``--peak-tflops``).

``--smoke`` runs the same path on CPU with tiny models, fp32, a few steps (the suite's check
that the script works, not a measurement); HF rows are skipped when transformers is absent.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import signal
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from train.models.presets import build_model, get_preset  # noqa: E402
from train.optim import build_optimizer, scale_grads_  # noqa: E402
from train.precision import Precision  # noqa: E402

PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


@dataclass(frozen=True)
class Case:
    preset: str
    seq_len: int
    precision: str
    micro_batch: int | None = None  # None: the planner's suggestion (GPT)
    max_predictions: int = 0  # BERT: masked positions a sequence
    # "model": torch.compile of the whole loss (what --compile does on one GPU); "blocks":
    # each transformer block compiled alone (one graph reused by every layer: a fraction of
    # the warm-up; embeddings, head and loss run eagerly) on both sides
    compile: str = "model"
    hf: bool = True  # measure HF's model too


CASES = {
    "gpt2-124m": Case("gpt2-124m", 1024, "bf16"),
    # HF's BertForPreTraining compiled whole took over 80 s to warm up on an H200: ours only
    "bert-large-128-bf16-whole": Case("bert-large", 128, "bf16", 256, 20, "model", hf=False),
    "bert-large-128-bf16": Case("bert-large", 128, "bf16", 256, 20, "blocks"),
    "bert-large-128-fp16": Case("bert-large", 128, "fp16", 256, 20, "blocks"),
    "gpt2-355m": Case("gpt2-355m", 1024, "bf16", compile="blocks"),
    "bert-large-512-bf16": Case("bert-large", 512, "bf16", 32, 80, "blocks"),
    "bert-large-512-fp16": Case("bert-large", 512, "fp16", 32, 80, "blocks"),
}
SMOKE_CASES = {
    "gpt-tiny": Case("gpt-tiny", 64, "fp32", 2),
    "bert-tiny": Case("bert-tiny", 64, "fp32", 4, 10),
}


def micro_batch_for(case: Case) -> int:
    if case.micro_batch is not None:
        return case.micro_batch
    from train.plan import Layout, suggest_micro_batch

    layout = Layout(seq_len=case.seq_len, activation_bytes=2)
    return min(64, suggest_micro_batch(get_preset(case.preset).config, layout, "h200-141gb"))


def make_batches(kind: str, vocab: int, micro: int, case: Case, device, count: int = 4):
    """``count`` random batches (same shapes, different ids and masked positions)."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(count):
        ids = torch.randint(0, vocab, (micro, case.seq_len), generator=generator)
        if kind == "gpt":
            batches.append({"input_ids": ids, "labels": ids.roll(-1, dims=1)})
            continue
        scores = torch.rand(micro, case.seq_len, generator=generator)
        positions = scores.topk(case.max_predictions, dim=1).indices.sort(dim=1).values
        labels = torch.randint(0, vocab, positions.shape, generator=generator)
        dense = torch.full_like(ids, -100).scatter_(1, positions, labels)
        batches.append(
            {
                "input_ids": ids,
                "token_type_ids": (torch.arange(case.seq_len) >= case.seq_len // 2)
                .long()
                .expand(micro, -1)
                .contiguous(),
                "mlm_positions": positions,
                "mlm_labels": labels,
                "dense_mlm_labels": dense,
                "nsp_label": torch.randint(0, 2, (micro,), generator=generator),
            }
        )
    return [{k: v.to(device) for k, v in b.items()} for b in batches]


def ours(kind: str, config, device):
    model = build_model(config).to(device)

    def loss_of(batch):
        if kind == "gpt":
            return model(batch["input_ids"], batch["labels"])[1]
        return model(
            batch["input_ids"], batch["token_type_ids"], None, batch["mlm_labels"],
            batch["nsp_label"], mlm_positions=batch["mlm_positions"],
        ).loss  # fmt: skip

    return model, loss_of


def huggingface(kind: str, config, device):
    from train.models import bert_spec, gpt_spec

    if kind == "gpt":
        import transformers

        hf_config = gpt_spec.config_to_hf(config, attn_implementation="sdpa")
        model = transformers.GPT2LMHeadModel(hf_config).to(device)

        def loss_of(batch):
            # HF shifts labels itself: give it the inputs as labels (same loss positions - 1)
            # use_cache off: a training step keeps no KV cache (HF's default builds one, and
            # its per-layer state recompiles each compiled block)
            return model(
                input_ids=batch["input_ids"], labels=batch["input_ids"], use_cache=False
            ).loss

        return model, loss_of
    import transformers

    hf_config = bert_spec.config_to_hf(config, attn_implementation="sdpa")
    model = transformers.BertForPreTraining(hf_config).to(device)

    def loss_of(batch):
        return model(
            input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
            labels=batch["dense_mlm_labels"], next_sentence_label=batch["nsp_label"],
        ).loss  # fmt: skip

    return model, loss_of


def unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(side: str, case: Case, args, device) -> dict:
    """Warm up, then time ``args.steps`` training steps of one side of one case."""
    preset = get_preset(case.preset)
    kind = preset.model
    micro = micro_batch_for(case)
    build = ours if side == "ours" else huggingface
    torch.manual_seed(0)
    model, loss_of = build(kind, preset.config, device)
    model.train()
    optimizer = build_optimizer(
        model, "adamw" if kind == "gpt" else "lamb", lr=1e-4, weight_decay=0.01,
        betas=(0.9, 0.999), eps=1e-6 if kind == "bert" else 1e-8, max_grad_norm=1.0,
    )  # fmt: skip
    params = [p for g in optimizer.param_groups for p in g["params"]]
    precision = Precision(case.precision, device.type)
    step_loss = loss_of
    if args.compile and case.compile == "model":
        step_loss = torch.compile(loss_of)
    elif args.compile and case.compile == "blocks":
        for block in blocks_of(model):
            block.compile()
    batches = make_batches(kind, preset.config.vocab_size, micro, case, device)

    def step(index: int) -> torch.Tensor:
        with precision.autocast():
            loss = step_loss(batches[index % len(batches)])
        precision.scale_loss(loss).backward()
        if precision.mode == "fp16":
            scale_grads_(params, precision.unscale_factor)
        if kind == "gpt":  # clipping on the device (LAMB normalises by the global norm itself)
            torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    synchronize(device)
    started = time.perf_counter()
    for index in range(args.warmup):
        step(index)
    synchronize(device)
    warmup_s = time.perf_counter() - started
    graphs = unique_graphs()
    times = []
    for index in range(args.steps):
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            loss = step(index)
            end.record()
            times.append((begin, end))
        else:
            began = time.perf_counter()
            loss = step(index)
            times.append(time.perf_counter() - began)
    synchronize(device)
    seconds = [b.elapsed_time(e) / 1000 for b, e in times] if device.type == "cuda" else times
    step_s = statistics.median(seconds)
    if args.profile:
        profile(step, case, side, args.profile, device)
    flops = preset_flops(kind, preset.config, case)
    tokens_per_s = micro * case.seq_len / step_s
    peak = args.peak_tflops
    row = {
        "case": case_label(case),
        "preset": case.preset,
        "side": side,
        "compile": case.compile if args.compile else "off",
        "micro_batch": micro,
        "seq_len": case.seq_len,
        "tokens_per_s": tokens_per_s,
        "seq_per_s": micro / step_s,
        "tflops": tokens_per_s * flops / 1e12,
        "mfu": tokens_per_s * flops / (peak * 1e12) if peak else None,
        "step_ms": 1000 * step_s,
        "warmup_s": warmup_s,
        "recompiles": unique_graphs() - graphs,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30
        if device.type == "cuda"
        else None,
        "loss": float(loss),
    }
    return row


def blocks_of(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The repeated transformer blocks: ours, GPT2LMHeadModel's, BertForPreTraining's."""
    if hasattr(model, "blocks"):
        return model.blocks
    if hasattr(model, "transformer"):
        return model.transformer.h
    return model.bert.encoder.layer


def preset_flops(kind: str, config, case: Case) -> float:
    from train.models import bert, gpt

    if kind == "gpt":
        return gpt.flops_per_token(config, case.seq_len)
    return bert.flops_per_token(config, case.seq_len, case.max_predictions / case.seq_len)


def case_label(case: Case) -> str:
    return f"{case.preset} seq {case.seq_len} {case.precision}"


def profile(step, case: Case, side: str, directory: str, device) -> None:
    """Three profiled steps: the kernels by device time, written to ``directory``."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with torch_profile(activities=activities) as prof:
        for index in range(3):
            step(index)
        synchronize(device)
    sort = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    name = f"{case.preset}-{case.seq_len}-{case.precision}-{side}.txt"
    with open(os.path.join(directory, name), "a") as f:
        f.write(prof.key_averages().table(sort_by=sort, row_limit=40, max_name_column_width=70))


def matmul_ceiling(device, size: int = 8192, repeats: int = 20) -> dict:
    """bf16 dense matmul TFLOP/s on random data (the practical ceiling of the GPU)."""
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    synchronize(device)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(repeats):
        a @ b
    end.record()
    synchronize(device)
    seconds = begin.elapsed_time(end) / 1000 / repeats
    return {"tflops": 2 * size**3 / seconds / 1e12}


HEADER = [
    "| case | side | compile | micro x seq | tokens/s | seq/s | TFLOP/s | MFU | vs HF | "
    "vs ceiling | step | warm-up | recompiles | peak memory |",
    "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]


def format_row(row: dict, hf_row: dict | None, ceiling: float | None) -> str:
    if "failed" in row:
        return f"| {row['case']} | {row['side']} | failed: {row['failed']} |" + " |" * 11
    mfu = f"{100 * row['mfu']:.1f}%" if row["mfu"] is not None else "n/a"
    vs_hf = (
        f"{row['tokens_per_s'] / hf_row['tokens_per_s']:.2f}x"
        if hf_row and "failed" not in hf_row and row["side"] == "ours"
        else ""
    )
    vs_ceiling = f"{100 * row['tflops'] / ceiling:.0f}%" if ceiling else "n/a"
    memory = f"{row['peak_mem_gib']:.1f} GiB" if row["peak_mem_gib"] is not None else "n/a"
    return (
        f"| {row['case']} | {row['side']} | {row['compile']} | "
        f"{row['micro_batch']} x {row['seq_len']} | "
        f"{row['tokens_per_s']:,.0f} | {row['seq_per_s']:,.0f} | {row['tflops']:.1f} | {mfu} | "
        f"{vs_hf} | {vs_ceiling} | {row['step_ms']:.1f} ms | {row['warmup_s']:.0f} s | "
        f"{row['recompiles']} | {memory} |"
    )


def mfu_section(rows: list[dict], device_name: str) -> list[str]:
    """Our models' MFU under the preset's name, the first measured case of each preset (the
    most important: see CASES): the table recipes/make_scaling.py prices training runs with.
    HF's rows are not ours to price."""
    lines = [
        "## MFU of our models (read by recipes/make_scaling.py)",
        "",
        f"`bench/gpu.sh` on {device_name}, torch {torch.__version__}: the `ours` rows above.",
        "",
        "| preset | case | MFU |",
        "|---|---|---:|",
    ]
    priced = set()
    for row in rows:
        if row["side"] != "ours" or "failed" in row or row["preset"] in priced:
            continue
        priced.add(row["preset"])
        mfu = f"{100 * row['mfu']:.1f}%" if row["mfu"] is not None else "n/a"
        lines.append(f"| {row['preset']} | {row['case']}, compile {row['compile']} | {mfu} |")
    return lines


def has_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES))
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--no-hf", dest="hf", action="store_false")
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--side-limit", type=float, default=100.0,
                        help="seconds one side (build, compile, steps) may take; 0: no limit")  # fmt: skip
    parser.add_argument("--profile", default=None, help="write 3 profiled steps per row here")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "gpu.md"))
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny models, a few steps")
    args = parser.parse_args()
    cases = CASES
    if args.smoke:
        cases, args.cases = SMOKE_CASES, list(SMOKE_CASES)
        args.steps, args.warmup, args.compile = 2, 1, False
        device = torch.device("cpu")
    elif not torch.cuda.is_available():
        sys.exit("error: no CUDA device visible to torch (use --smoke for the CPU check)")
    else:
        device = torch.device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = True  # the few fp32 matmuls left under autocast
        torch.backends.cudnn.allow_tf32 = True
    unknown = [c for c in args.cases if c not in cases]
    if unknown:
        sys.exit(f"error: unknown case(s) {unknown}; known: {list(cases)}")
    device_name = torch.cuda.get_device_name() if device.type == "cuda" else platform.processor()
    if args.peak_tflops is None and device.type == "cuda":
        args.peak_tflops = next((v for k, v in PEAK_TFLOPS.items() if k in device_name), None)
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    hf_available = args.hf and has_transformers()

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    out = open(args.out, "w")

    def emit(line: str) -> None:
        print(line, flush=True)
        out.write(line + "\n")
        out.flush()

    emit("# Training speed on one GPU, side by side with Hugging Face transformers")
    emit("")
    emit(
        f"`bench/gpu.sh` on {device_name or 'cpu'}, torch {torch.__version__}, "
        f"transformers {_version('transformers')}, {time.strftime('%Y-%m-%d', time.gmtime())}; "
        f"compile {'per case (see below)' if args.compile else 'off'}, {args.steps} timed "
        "steps after "
        f"{args.warmup} warm-up steps, MFU against {args.peak_tflops or 'n/a'} TFLOP/s."
    )
    emit("")
    ceiling = None
    if device.type == "cuda":
        ceiling = matmul_ceiling(device)["tflops"]
        emit(f"bf16 matmul ceiling (8192^3, random data): {ceiling:.0f} TFLOP/s")
        emit("")
    for line in HEADER:
        emit(line)
    measured = []
    for name in args.cases:
        case = cases[name]
        sides = ["ours"] + (["hf"] if hf_available and case.hf else [])
        rows = {}
        for side in sides:
            try:
                with time_limit(args.side_limit):
                    rows[side] = measure(side, case, args, device)
            except Exception as e:  # a failed row is reported, the rest still runs
                message = " ".join(f"{type(e).__name__}: {e}".split())[:200]
                rows[side] = {"case": case_label(case), "side": side, "failed": message}
            release(device)
            print(json.dumps(rows[side]), flush=True)
        for side in sides:
            emit(format_row(rows[side], rows.get("hf"), ceiling))
        measured += rows.values()
        if not hf_available and case.hf:
            emit(f"| {case_label(case)} | hf | skipped: transformers not installed |" + " |" * 11)
    emit("")
    for line in mfu_section(measured, device_name or "cpu"):
        emit(line)
    emit("")
    out.close()
    print(f"wrote {args.out}")


class OverTime(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float):
    """OverTime when the block runs past ``seconds`` (0: no limit), so one side whose
    compilation runs long costs its row, not the rest of the table."""
    if not seconds:
        yield
        return

    def expire(signum, frame):  # noqa: ANN001 - signal handler signature
        raise OverTime(f"not done within the {seconds:.0f} s given to one side")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def release(device) -> None:
    """Free a measured side's graphs and memory before the next one compiles."""
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _version(package: str) -> str:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:
        return "absent"


if __name__ == "__main__":
    main()
