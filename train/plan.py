"""Memory and time planner for a model's layout, before any GPU is reserved.

  python -m train.plan --preset megatron-8.3b --tp 8 --dp 64 --seq-len 1024 --micro-batch 8 \\
      [--activation-checkpointing none|full|selective] [--sequence-parallel] [--gpu h100-80gb]

prints the parameter count, the bytes each GPU holds (weights, gradients, optimizer state,
activations, communication buffers), FLOPs per token and per step, whether the layout fits the
GPU, and how long ``--tokens`` take at ``--mfu``.

Every family the registry lists is planned from its own spec (``ModelSpec.plan_counts``: its
parameter, FLOP and activation counts); no family is named here.

Bytes per parameter follow this trainer: fp32 master weights (4), fp32 gradients (4), AdamW's
two fp32 moments (8); FSDP (``--parallel fsdp`` or tp with dp > 1, as the trainer does) divides
all three by dp, DDP does not. Activations follow Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", section 4), per layer with s = sequence, b = micro
batch, h = hidden, a = heads, t = tp, in elements of the activation dtype (bf16: 2 bytes); the
family's spec gives the counts per token (GPT's, the paper's model, in brackets):

* tensors every layer keeps: ``whole`` [4h: LayerNorm inputs (2), the q/k/v and MLP inputs]
  and ``split`` [12h: Q, K, V, the output projection's input, GELU's input and output (4 + 4)]
  per token, and ``mask_bytes`` of dropout masks [2h with dropout]. Under tensor parallelism
  without sequence parallelism ``whole`` and the masks are replicated and ``split`` divided by
  t; with sequence parallelism everything is divided by t;
* attention scores: a s^2 b (1 element for softmax, plus 1 byte mask + 1 element dropout output
  with attention dropout), divided by t; 0 with a flash-attention kernel (``--flash-attention``,
  the default: torch's scaled_dot_product_attention keeps no scores);
* ``selective`` checkpoints the attention sub-layer: its part of ``split`` [4h] and the scores
  are recomputed; ``full`` keeps only each block's input (1 element, divided by t under
  sequence parallelism) plus one block's activations while it is recomputed;
* outside the blocks: ``outside`` [2h: the final LayerNorm's input and output] per token and
  the logits (``logits`` [V] per token / t, plus 4 bytes each of fp32 log-probabilities).

Communication buffers: FSDP's all-gathered bf16 weights of two blocks (this one and the
prefetched next) and one block's fp32 gradients for the reduce-scatter; DDP's two 25 MB buckets;
tensor parallelism's gathered activations of one sub-layer (s b h elements). All are estimates:
the planner says "fits" only with 10% of the GPU left for the allocator's fragmentation and the
CUDA context.
"""

# ruff: noqa: E402 - the stop signals' handlers go in before the imports
from __future__ import annotations

if __name__ == "__main__":
    from common.signals import exit_on_stop_signals

    exit_on_stop_signals("python -m train.plan")

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from typing import Any

from common.cli import ArgumentParser
from common.option_fields import declared
from train.config import TrainConfig
from train.models.presets import get_preset
from train.models.registry import get_spec, spec_of_config
from train.models.spec import SHAPE_SETTINGS, PlanCounts, shape_flags

GIB = 1024**3
# name: (memory in bytes, dense bf16/fp16 peak TFLOP/s)
GPUS = {
    "v100-32gb": (32 * GIB, 125.0),
    "a100-40gb": (40 * GIB, 312.0),
    "a100-80gb": (80 * GIB, 312.0),
    "h100-80gb": (80 * GIB, 989.0),
    "h200-141gb": (141 * GIB, 989.0),
}
FITS_WITH = 0.9  # of the GPU's memory
# the share of positions a masked-LM batch predicts: the trainer's default --mask-prob
MASK_PROB = TrainConfig.mask_prob


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    dp: int = 1
    seq_len: int = 1024
    micro_batch: int = 1
    activation_checkpointing: str = "none"
    sequence_parallel: bool = False
    parallel: str = "fsdp"  # how the dp dimension holds state: "fsdp" shards it, "ddp" not
    activation_bytes: int = 2  # bf16 / fp16; 4 for fp32
    flash_attention: bool = True

    def __post_init__(self) -> None:
        for name in ("tp", "dp", "seq_len", "micro_batch", "activation_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.activation_checkpointing not in ("none", "full", "selective"):
            raise ValueError(f"unknown activation checkpointing {self.activation_checkpointing!r}")
        if self.parallel not in ("fsdp", "ddp"):
            raise ValueError(f"parallel must be fsdp or ddp, got {self.parallel!r}")


def plan_counts(config: Any) -> PlanCounts:
    """The counts the model's own family gives for ``config`` (any registered family's)."""
    return spec_of_config(config).plan_counts(config, MASK_PROB)


def layer_activation_bytes(counts: PlanCounts, layout: Layout) -> float:
    """Bytes one transformer block keeps for backward (per micro-batch, per GPU)."""
    s, b, t, e = layout.seq_len, layout.micro_batch, layout.tp, layout.activation_bytes
    tokens = s * b
    sp = layout.sequence_parallel
    if layout.activation_checkpointing == "full":
        return e * tokens * counts.width / (t if sp else 1)
    replicated = e * tokens * counts.whole + tokens * counts.mask_bytes
    if layout.activation_checkpointing == "selective":  # attention's inside recomputed
        sharded, scores = e * tokens * (counts.split - counts.attention), 0.0
    else:
        sharded = e * tokens * counts.split
        per_score = e + ((1 + e) if counts.score_dropout else 0)
        scores = 0.0 if layout.flash_attention else counts.heads * s * s * b * per_score
    if sp:
        return (replicated + sharded + scores) / t
    return replicated + (sharded + scores) / t


def activation_bytes(config: Any, layout: Layout, recomputing: bool = True) -> float:
    """Peak activation bytes per GPU (one micro-batch): all activations kept at the end of the
    forward pass, plus, with full checkpointing and ``recomputing``, one block's activations
    rebuilt during backward."""
    counts = plan_counts(config)
    tokens, t = layout.seq_len * layout.micro_batch, layout.tp
    e = layout.activation_bytes
    total = counts.layers * layer_activation_bytes(counts, layout)
    if layout.activation_checkpointing == "full" and recomputing:
        # one block's activations exist again while it is recomputed in backward
        total += layer_activation_bytes(counts, _with_checkpointing(layout, "none"))
    total += e * tokens * counts.outside / (t if layout.sequence_parallel else 1)
    total += tokens * counts.logits / t * (e + 4)  # logits and fp32 log-probabilities
    return total


def _with_checkpointing(layout: Layout, mode: str) -> Layout:
    return dataclasses.replace(layout, activation_checkpointing=mode)


@dataclass(frozen=True)
class Plan:
    params: int
    weights: float
    gradients: float
    optimizer: float
    activations: float
    activations_without_checkpointing: float
    activations_without_sequence_parallel: float
    communication: float
    flops_per_token: float
    flops_per_step: float
    tokens_per_step: int

    @property
    def total(self) -> float:
        return (
            self.weights + self.gradients + self.optimizer + self.activations + self.communication
        )


def plan(config: Any, layout: Layout) -> Plan:
    """The plan of a model of ``config`` (any registered family's) laid out as ``layout``."""
    spec, counts = spec_of_config(config), plan_counts(config)
    params = spec.count_params(config, False)
    sharding = layout.tp * (layout.dp if layout.parallel == "fsdp" else 1)
    per_gpu_params = params / sharding
    e = layout.activation_bytes
    if layout.parallel == "fsdp" and layout.dp > 1:
        block = counts.block_params / layout.tp
        communication = 2 * block * e + block * 4
    else:
        communication = 2 * 25e6 if layout.dp > 1 else 0.0
    if layout.tp > 1:
        communication += e * layout.seq_len * layout.micro_batch * counts.width
    tokens_per_step = layout.seq_len * layout.micro_batch * layout.dp
    per_token = spec.flops_per_token(config, layout.seq_len, MASK_PROB)
    return Plan(
        params=params,
        weights=4 * per_gpu_params,
        gradients=4 * per_gpu_params,
        optimizer=8 * per_gpu_params,
        activations=activation_bytes(config, layout),
        activations_without_checkpointing=activation_bytes(
            config, _with_checkpointing(layout, "none")
        ),
        activations_without_sequence_parallel=activation_bytes(
            config, dataclasses.replace(layout, sequence_parallel=False)
        ),
        communication=communication,
        flops_per_token=per_token,
        flops_per_step=per_token * tokens_per_step,
        tokens_per_step=tokens_per_step,
    )


def suggest_micro_batch(config: Any, layout: Layout, gpu: str, largest: int = 1024) -> int:
    """The largest power-of-two micro-batch (at most ``largest``) whose plan fits ``gpu`` with
    this layout; 0 when not even one sequence fits. A power of two keeps the matmul shapes on
    the kernels' fast tiles."""
    memory = GPUS[gpu][0]
    best, micro = 0, 1
    while micro <= largest:
        if plan(config, dataclasses.replace(layout, micro_batch=micro)).total > FITS_WITH * memory:
            break
        best, micro = micro, micro * 2
    return best


def _gib(value: float) -> str:
    return f"{value / GIB:8.2f} GiB"


def format_duration(seconds: float) -> str:
    days, rest = divmod(seconds, 86400)
    hours = rest / 3600
    return f"{int(days)} d {hours:.1f} h" if days else f"{hours:.2f} h"


def report(name: str, config: Any, layout: Layout, gpu: str | None, tokens: float,
           mfu: float) -> str:  # fmt: skip
    result, counts = plan(config, layout), plan_counts(config)
    gpus = layout.tp * layout.dp
    lines = [
        f"{name}: {result.params / 1e9:.3f}B parameters (L={counts.layers}, h={counts.width}, "
        f"a={counts.heads}, V={counts.vocab})",
        f"layout: tp={layout.tp} x dp={layout.dp} = {gpus} GPUs ({layout.parallel} over dp), "
        f"seq {layout.seq_len}, micro-batch {layout.micro_batch}, activation checkpointing "
        f"{layout.activation_checkpointing}, sequence parallel "
        f"{'on' if layout.sequence_parallel else 'off'}",
        "bytes per GPU:",
        f"  weights (fp32 master)     {_gib(result.weights)}",
        f"  gradients (fp32)          {_gib(result.gradients)}",
        f"  optimizer (AdamW m, v)    {_gib(result.optimizer)}",
        f"  activations               {_gib(result.activations)}"
        f"   (no checkpointing: {_gib(result.activations_without_checkpointing).strip()}, "
        f"no sequence parallel: {_gib(result.activations_without_sequence_parallel).strip()})",
        f"  communication buffers     {_gib(result.communication)}",
        f"  total                     {_gib(result.total)}",
        f"FLOPs: {result.flops_per_token / 1e9:.2f} GFLOP per token, "
        f"{result.flops_per_step / 1e15:.2f} PFLOP per step of {result.tokens_per_step:,} "
        "tokens (one micro-batch per dp rank)",
    ]
    if gpu is not None:
        memory, peak = GPUS[gpu]
        fits = result.total <= FITS_WITH * memory
        lines.append(
            f"{gpu}: {'fits' if fits else 'does NOT fit'} ({result.total / memory:.0%} of "
            f"{memory / GIB:.0f} GiB; the planner wants <= {FITS_WITH:.0%})"
        )
        seconds = tokens * result.flops_per_token / (gpus * peak * 1e12 * mfu)
        lines.append(
            f"time for {tokens:.3g} tokens at {mfu:.0%} MFU ({peak:.0f} TFLOP/s peak): "
            f"{format_duration(seconds)}"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m train.plan", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", required=True, help="a preset of train.models.presets (any family)")
    # the trainer's model-shape flags, declared once on its config: they resize the preset
    for item in declared(TrainConfig):
        if item.name in SHAPE_SETTINGS:
            p.add_argument(item.flag, **item.argument(enforce_required=False))
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=None, help="default: the preset's context")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--activation-checkpointing", choices=("none", "full", "selective"),
                   default="none")  # fmt: skip
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--parallel", choices=("fsdp", "ddp"), default="fsdp")
    p.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="bf16")
    p.add_argument("--no-flash-attention", dest="flash_attention", action="store_false",
                   help="count the attention scores (a s^2 b per layer) as kept")  # fmt: skip
    p.add_argument("--gpu", choices=sorted(GPUS), default=None)
    p.add_argument("--suggest-micro-batch", action="store_true",
                   help="print only the largest power-of-two micro-batch that fits --gpu")  # fmt: skip
    p.add_argument("--tokens", type=float, default=300e9, help="tokens to train (time estimate)")
    p.add_argument("--mfu", type=float, default=0.4, help="model FLOPs utilisation to assume")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        preset = get_preset(args.preset)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 1
    shape = {name: getattr(args, name) for name in SHAPE_SETTINGS}
    spec = get_spec(preset.model)
    try:
        config = spec.reshape(preset.config, shape)
        layout = Layout(
            tp=args.tp, dp=args.dp, seq_len=args.seq_len or spec.positions(config),
            micro_batch=args.micro_batch, activation_checkpointing=args.activation_checkpointing,
            sequence_parallel=args.sequence_parallel, parallel=args.parallel,
            activation_bytes=4 if args.precision == "fp32" else 2,
            flash_attention=args.flash_attention,
        )  # fmt: skip
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not 0 < args.mfu <= 1:
        print(f"error: --mfu must be in (0, 1], got {args.mfu}", file=sys.stderr)
        return 1
    if args.suggest_micro_batch:
        if args.gpu is None:
            print("error: --suggest-micro-batch needs --gpu", file=sys.stderr)
            return 1
        micro = suggest_micro_batch(config, layout, args.gpu)
        if micro == 0:
            print(f"error: one sequence of {layout.seq_len} does not fit {args.gpu} with this "
                  "layout", file=sys.stderr)  # fmt: skip
            return 1
        print(micro)
        return 0
    name = f"{args.preset} with {shape_flags(shape)}" if shape_flags(shape) else args.preset
    print(report(name, config, layout, args.gpu, args.tokens, args.mfu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
