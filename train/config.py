"""Training configuration: the `TrainConfig` dataclass and the command line that builds it.

Every field is a plain type (str, int, float, bool, list[str], None) so the whole config goes
into a checkpoint as JSON-able data and loads back under ``torch.load(weights_only=True)``.
Defaults that depend on the machine or the model (precision, micro batch, sequence length,
warmup) are left as None here and resolved by :func:`train.build.resolve_config`, which knows the device
and the model.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from train.models.registry import FAMILIES as MODELS

# (beta2, eps, weight decay) unless set: GPT-2/Megatron AdamW practice, and the BERT records'
# LAMB (NVIDIA's FusedLAMB settings)
OPTIMIZER_DEFAULTS = {"adamw": (0.95, 1e-8, 0.1), "lamb": (0.999, 1e-6, 0.01)}
PRECISIONS = ("fp32", "bf16", "fp16")
PARALLEL = ("ddp", "fsdp", "tp")
ACTIVATION_CHECKPOINTING = ("none", "full", "selective")


@dataclass
class TrainConfig:
    data: list[str] = field(default_factory=list)
    tokenizer: str | None = None  # for data that records none (bare Megatron/NeMo pairs)
    vocab_size: int | None = None  # the same, when only the vocabulary size is known
    model: str | None = None  # inferred from the preset when None
    preset: str | None = None  # the family's default preset (gpt-tiny for GPT) when None
    out: str = "out/run"
    max_steps: int = 100
    global_batch: int = 8
    micro_batch: int | None = None  # None: global_batch / data-parallel size (no accumulation)
    seq_len: int | None = None  # None: the model's context length
    lr: float = 6e-4
    min_lr: float | None = None  # None: lr / 10
    warmup_steps: int | None = None  # None: max_steps // 10
    decay: str = "cosine"
    decay_steps: int | None = None  # None: max_steps
    weight_decay: float | None = None  # None: the optimizer's (OPTIMIZER_DEFAULTS)
    decay_embeddings: bool = True
    optimizer: str = "adamw"
    beta1: float = 0.9
    beta2: float | None = None
    eps: float | None = None
    nvlamb: bool = False
    clip_grad: float = 1.0
    precision: str | None = None  # None: bf16 on CUDA, fp32 on CPU
    resume: bool = False
    init_from: str | None = None  # weights of another run's checkpoint for a fresh run
    allow_config_change: bool = False
    async_checkpoint: bool = False
    dist_timeout: float = 10.0  # minutes a collective may wait before the job fails
    save_interval: int = 1000
    save: bool = True
    stop_at: int | None = None  # save and exit after this step (a job's time slice)
    keep_checkpoints: int = 3
    eval_interval: int = 100
    eval_iters: int = 10
    eval_wikitext: str | None = None  # a raw wiki.*.tokens file scored at each evaluation (GPT)
    split: str = "969,30,1"
    seed: int = 1234
    parallel: str = "ddp"
    tp: int = 1
    sequence_parallel: bool = False
    activation_checkpointing: str = "none"
    ac_every: int = 0  # selective: checkpoint every k-th block (0: attention of every block)
    compile: bool = False
    deterministic: bool = False
    peak_tflops: float | None = None
    device: str = "auto"
    skip_outliers: float = 0.0
    outlier_window: int = 128
    max_consecutive_skips: int = 20
    log_interval: int = 10
    dropout: float | None = None  # None: the preset's
    make_vocab_size_divisible_by: int = 128
    num_workers: int = 0
    mask_prob: float = 0.15
    max_predictions_per_seq: int | None = None  # None: 20 per 128 tokens (NVIDIA's)
    eod_mask_loss: bool = False
    whole_word_masking: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        validate(self)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def fail(message: str) -> None:
    """The one way the trainer reports a user error: one line, exit status 1, no traceback."""
    raise SystemExit(f"error: {message}")


def validate(config: TrainConfig) -> None:
    """One-line SystemExit for every setting that cannot work, before anything is built."""
    if config.model is not None and config.model not in MODELS:
        fail(f"--model must be one of {', '.join(MODELS)}, got {config.model!r}")
    if config.precision is not None and config.precision not in PRECISIONS:
        fail(f"--precision must be one of {', '.join(PRECISIONS)}, got {config.precision!r}")
    if config.parallel not in PARALLEL:
        fail(f"--parallel must be one of {', '.join(PARALLEL)}, got {config.parallel!r}")
    if config.decay not in ("cosine", "linear"):
        fail(f"--decay must be cosine or linear, got {config.decay!r}")
    if config.eval_wikitext is not None and not os.path.isfile(config.eval_wikitext):
        fail(f"--eval-wikitext {config.eval_wikitext}: no such file")
    if config.optimizer not in ("adamw", "lamb"):
        fail(f"--optimizer must be adamw or lamb, got {config.optimizer!r}")
    if config.device not in ("auto", "cpu", "cuda"):
        fail(f"--device must be auto, cpu or cuda, got {config.device!r}")
    positive = {
        "--max-steps": config.max_steps,
        "--global-batch": config.global_batch,
        "--tp": config.tp,
        "--log-interval": config.log_interval,
        "--keep-checkpoints": config.keep_checkpoints,
        "--outlier-window": config.outlier_window,
        "--max-consecutive-skips": config.max_consecutive_skips,
        "--make-vocab-size-divisible-by": config.make_vocab_size_divisible_by,
    }
    for optional, value in (
        ("--micro-batch", config.micro_batch),
        ("--seq-len", config.seq_len),
        ("--decay-steps", config.decay_steps),
        ("--stop-at", config.stop_at),
    ):
        if value is not None:
            positive[optional] = value
    for flag, value in positive.items():
        if value <= 0:
            fail(f"{flag} must be positive, got {value}")
    non_negative = {
        "--save-interval": config.save_interval,
        "--eval-interval": config.eval_interval,
        "--eval-iters": config.eval_iters,
        "--clip-grad": config.clip_grad,
        "--skip-outliers": config.skip_outliers,
        "--num-workers": config.num_workers,
    }
    if config.warmup_steps is not None:
        non_negative["--warmup-steps"] = config.warmup_steps
    if config.weight_decay is not None:
        non_negative["--weight-decay"] = config.weight_decay
    for flag, value in non_negative.items():
        if value < 0:
            fail(f"{flag} must be >= 0, got {value}")
    if config.lr <= 0:
        fail(f"--lr must be positive, got {config.lr}")
    if config.min_lr is not None and not 0 <= config.min_lr <= config.lr:
        fail(f"--min-lr must be in [0, --lr={config.lr}], got {config.min_lr}")
    if config.dropout is not None and not 0.0 <= config.dropout < 1.0:
        fail(f"--dropout must be in [0, 1), got {config.dropout}")
    if not 0.0 < config.mask_prob < 1.0:
        fail(f"--mask-prob must be in (0, 1), got {config.mask_prob}")
    if config.max_predictions_per_seq is not None and config.max_predictions_per_seq < 1:
        fail(f"--max-predictions-per-seq must be >= 1, got {config.max_predictions_per_seq}")
    if config.dist_timeout <= 0:
        fail(f"--dist-timeout must be positive, got {config.dist_timeout}")
    if config.peak_tflops is not None and config.peak_tflops <= 0:
        fail(f"--peak-tflops must be positive, got {config.peak_tflops}")
    if config.sequence_parallel and config.parallel != "tp":
        fail("--sequence-parallel needs --parallel tp")
    if config.activation_checkpointing not in ACTIVATION_CHECKPOINTING:
        fail(
            f"--activation-checkpointing must be one of {', '.join(ACTIVATION_CHECKPOINTING)}, "
            f"got {config.activation_checkpointing!r}"
        )
    if config.ac_every < 0:
        fail(f"--ac-every must be >= 0, got {config.ac_every}")
    if config.tp > 1 and config.parallel != "tp":
        fail(f"--tp {config.tp} needs --parallel tp")
    if config.tokenizer is not None and config.vocab_size is not None:
        fail("give --tokenizer or --vocab-size, not both (the tokenizer file sets the size)")
    if config.vocab_size is not None and config.vocab_size <= 0:
        fail(f"--vocab-size must be positive, got {config.vocab_size}")


class OptionGroup:
    """``add_argument`` for one group of the parser, an option's default TrainConfig's field of
    its name (the defaults live in the dataclass only)."""

    defaults = TrainConfig()

    def __init__(self, parser: argparse.ArgumentParser, title: str) -> None:
        self.group = parser.add_argument_group(title)

    def __call__(self, flag: str, **kwargs) -> None:
        dest = kwargs.get("dest", flag[2:].replace("-", "_"))
        if kwargs.get("action") not in ("store_true", "store_false") and "required" not in kwargs:
            kwargs.setdefault("default", getattr(self.defaults, dest))
        self.group.add_argument(flag, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python train/pretrain.py",
        description="Pretrain GPT or BERT on shard sets (one process, or under torchrun).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = OptionGroup(p, "data")
    g(
        "--data",
        nargs="+",
        required=True,
        metavar="SPEC",
        help="a shard-set directory, a bare Megatron .bin/.idx prefix, or a weighted list "
        "'W1 PATH1 W2 PATH2 ...' (weights are normalised)",
    )
    g(
        "--tokenizer",
        metavar="FILE",
        help="for data that records no tokenizer (bare Megatron/NeMo/datatrove .bin/.idx): a "
        "tokenizers JSON, a GPT-2 vocab.json or a WordPiece vocab.txt; gives the vocabulary "
        "size and special ids (checked against any set that does record one)",
    )
    g(
        "--vocab-size",
        type=int,
        metavar="N",
        help="for data that records no tokenizer: just the vocabulary size (no special ids: "
        "no --eod-mask-loss, no BERT; prefer --tokenizer)",
    )
    g("--split", help="train,valid,test document shares")
    g("--seq-len", type=int, help="tokens per sample (default: the model's context length)")
    g("--mask-prob", type=float, help="BERT: share of tokens chosen for masked-LM prediction")
    g("--max-predictions-per-seq", type=int, metavar="N",
      help="BERT: masked positions a sequence at most, the fixed size of the MLM targets "
      "(default 20 per 128 tokens: 20 at seq 128, 80 at 512)")  # fmt: skip
    g(
        "--eod-mask-loss",
        action="store_true",
        help="GPT: no loss on predicting the token after an end-of-document",
    )
    g(
        "--whole-word-masking",
        action="store_true",
        help="BERT: mask whole words (all WordPiece pieces of a chosen word)",
    )
    g("--num-workers", type=int, help="DataLoader worker processes per rank")

    g = OptionGroup(p, "model")
    g("--model", choices=MODELS, help="model family (default: the preset's)")
    g("--preset", help="model preset (default: the family's own, e.g. gpt-tiny)")
    g("--dropout", type=float, help="override the preset's dropout")
    g(
        "--make-vocab-size-divisible-by",
        type=int,
        help="pad the tokenizer's vocabulary to a multiple of this x --tp",
    )

    g = OptionGroup(p, "optimisation")
    g("--max-steps", type=int)
    g("--global-batch", type=int, help="samples per optimizer step, over all data-parallel ranks")
    g(
        "--micro-batch",
        type=int,
        help="samples per forward pass per rank; gradient accumulation is "
        "global / (micro * data-parallel size)",
    )
    g("--optimizer", choices=("adamw", "lamb"))
    g("--lr", type=float, help="peak learning rate")
    g("--min-lr", type=float, help="final lr (default lr/10)")
    g("--warmup-steps", type=int, help="linear warmup steps (default max_steps // 10)")
    g("--decay", choices=("cosine", "linear"))
    g("--decay-steps", type=int, help="step at which lr reaches --min-lr (default --max-steps)")
    g("--weight-decay", type=float, help="default 0.1 for adamw, 0.01 for lamb")
    g(
        "--no-decay-embeddings",
        dest="decay_embeddings",
        action="store_false",
        help="exclude embedding tables from weight decay (norms and biases always are)",
    )
    g("--beta1", type=float)
    g("--beta2", type=float, help="default 0.95 for adamw, 0.999 for lamb")
    g("--eps", type=float, help="default 1e-8 for adamw, 1e-6 for lamb")
    g(
        "--nvlamb",
        action="store_true",
        help="LAMB: apply the trust ratio to parameters without weight decay too (apex's "
        "use_nvlamb); by default only decayed ones get it, as FusedLAMB does",
    )
    g("--clip-grad", type=float, help="max global grad norm (0: no clipping)")
    g(
        "--skip-outliers",
        type=float,
        metavar="Z",
        help="skip updates whose loss or grad norm z-score vs a running window exceeds Z (0: off)",
    )
    g(
        "--outlier-window",
        type=int,
        help="steps in the --skip-outliers window (it must be full before skipping)",
    )
    g(
        "--max-consecutive-skips",
        type=int,
        help="stop after this many consecutive skipped (non-finite) updates",
    )
    g("--seed", type=int)

    g = OptionGroup(p, "system")
    g("--precision", choices=PRECISIONS, help="default: bf16 on CUDA, fp32 on CPU")
    g("--device", choices=("auto", "cpu", "cuda"))
    g(
        "--parallel",
        choices=PARALLEL,
        help="under torchrun: DDP, FSDP2, or tensor parallel (FSDP2 over the rest)",
    )
    g("--tp", type=int, help="tensor-parallel degree (--parallel tp)")
    g(
        "--sequence-parallel",
        action="store_true",
        help="GPT with --parallel tp: shard norms, dropouts and residuals along the sequence "
        "(Megatron's sequence parallelism); --seq-len must be divisible by --tp",
    )
    g(
        "--activation-checkpointing",
        choices=ACTIVATION_CHECKPOINTING,
        help="recompute activations in backward: every block (full), or selective: the "
        "attention of every block, or every --ac-every-th block",
    )
    g(
        "--ac-every",
        type=int,
        metavar="K",
        help="with --activation-checkpointing selective: checkpoint every K-th whole block "
        "instead of the attention of every block",
    )
    g("--compile", action="store_true", help="torch.compile the model")
    g(
        "--dist-timeout",
        type=float,
        metavar="MINUTES",
        help="how long a collective may wait for the other ranks before the job fails",
    )
    g(
        "--deterministic",
        action="store_true",
        help="torch.use_deterministic_algorithms (bitwise-repeatable runs)",
    )
    g(
        "--peak-tflops",
        type=float,
        help="per-device peak for MFU (default: looked up from the GPU's name)",
    )

    g = OptionGroup(p, "run directory")
    g("--out", metavar="RUN", help="run directory: checkpoints/ and metrics.jsonl")
    g("--resume", action="store_true", help="continue from RUN's latest checkpoint")
    g(
        "--init-from",
        metavar="CHECKPOINT",
        help="start a new run from the weights of another run's checkpoint (a run directory: "
        "its latest; any layout) with a fresh optimizer, its own warmup and schedule, from step "
        "0 (BERT phase 2 from phase 1); position embeddings the checkpoint lacks keep their "
        "initialisation. With --resume: continue RUN if it has a checkpoint, else start from these "
        "weights",
    )
    g(
        "--allow-config-change",
        action="store_true",
        help="resume even though --data, --split, --seq-len or --global-batch differ from the "
        "checkpoint's",
    )
    g(
        "--async-checkpoint",
        action="store_true",
        help="write checkpoints in a background thread while training goes on (a checkpoint "
        "counts once the next save or the end of the run commits it)",
    )
    g("--save-interval", type=int, help="steps between checkpoints (0: only at the end)")
    g(
        "--stop-at",
        type=int,
        metavar="STEP",
        help="save a checkpoint and exit after STEP (resume later with --resume); the lr "
        "schedule still spans --max-steps",
    )
    g(
        "--no-save",
        dest="save",
        action="store_false",
        help="write no checkpoints at all (benchmarks, throwaway runs)",
    )
    g("--keep-checkpoints", type=int, help="keep the last N checkpoints")
    g("--eval-interval", type=int, help="steps between validation passes (0: only at the end)")
    g("--eval-iters", type=int, help="global batches per validation pass (0: no evaluation)")
    g(
        "--eval-wikitext",
        metavar="FILE",
        help="GPT: at each evaluation also score this raw WikiText file (wiki.test.tokens) as "
        "train/evaluate.py --task wikitext103 does (context --seq-len, stride half of it); "
        "logged as split 'wikitext'",
    )
    g(
        "--log-interval",
        type=int,
        help="steps between console lines (metrics.jsonl gets every step)",
    )
    g(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="no progress bar, only log lines",
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    namespace = build_parser().parse_args(argv)
    return TrainConfig(**vars(namespace))
