"""Training configuration: the `TrainConfig` dataclass, each field declaring its command-line
flag (`common.option_fields`), and the command line built from it.

Every field is a plain type (str, int, float, bool, list[str], None) so the whole config goes
into a checkpoint as JSON-able data and loads back under ``torch.load(weights_only=True)``.
Defaults that depend on the machine or the model (precision, micro batch, sequence length,
warmup) are left as None here and resolved by :func:`train.build.resolve_config`, which knows the device
and the model. The fields are in the order of `--help`, by argument group.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass

from common.cli import ArgumentParser, DefaultsHelpFormatter
from common.option_fields import (
    NON_NEGATIVE,
    POSITIVE,
    add_options,
    at_least,
    check_options,
    from_namespace,
    option,
    within,
)
from train.models.registry import FAMILIES as MODELS
from train.models.spec import SHAPE_SETTINGS

# (beta2, eps, weight decay) unless set: GPT-2/Megatron AdamW practice, and the BERT records'
# LAMB (NVIDIA's FusedLAMB settings)
OPTIMIZER_DEFAULTS = {"adamw": (0.95, 1e-8, 0.1), "lamb": (0.999, 1e-6, 0.01)}
PRECISIONS = ("fp32", "bf16", "fp16")
PARALLEL = ("ddp", "fsdp", "tp")
ACTIVATION_CHECKPOINTING = ("none", "full", "selective")
DECAYS = ("cosine", "linear")
DEVICES = ("auto", "cpu", "cuda")

# Field metadata key of the settings that make a run the same run (`identity`).
_IDENTITY = "shardsmith.train.run_identity"


def identity(declared: dataclasses.Field) -> dataclasses.Field:
    """Mark a declared field as part of a run's identity: its schedule or its data. A resume
    whose value differs is refused unless --allow-config-change (train.resume)."""
    return dataclasses.field(
        default=declared.default,
        default_factory=declared.default_factory,
        metadata={**declared.metadata, _IDENTITY: True},
    )


def run_identity_fields() -> tuple[str, ...]:
    """The TrainConfig fields marked with `identity`, in field order."""
    return tuple(f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get(_IDENTITY))


# the argument groups of --help
_data = functools.partial(option, group="data")
_model = functools.partial(option, group="model")
_optimisation = functools.partial(option, group="optimisation")
_system = functools.partial(option, group="system")
_run = functools.partial(option, group="run directory")


@dataclass
class TrainConfig:
    data: list[str] = identity(
        _data(
            nargs="+",
            metavar="SPEC",
            help="a shard-set directory, a bare Megatron .bin/.idx prefix, or a weighted list "
            "'W1 PATH1 W2 PATH2 ...' (weights are normalised)",
        )
    )
    tokenizer: str | None = _data(
        None,
        metavar="FILE",
        help="for data that records no tokenizer (bare Megatron/NeMo/datatrove .bin/.idx): a "
        "tokenizers JSON, a GPT-2 vocab.json or a WordPiece vocab.txt; gives the vocabulary "
        "size and special ids (checked against any set that does record one)",
    )
    vocab_size: int | None = _data(
        None,
        check=POSITIVE,
        metavar="N",
        help="for data that records no tokenizer: just the vocabulary size (no special ids: "
        "no --eod-mask-loss, no BERT; prefer --tokenizer)",
    )
    split: str = identity(_data("969,30,1", help="train,valid,test document shares"))
    seq_len: int | None = identity(
        _data(None, check=POSITIVE, help="tokens per sample (default: the model's context length)")
    )
    mask_prob: float = _data(
        0.15,
        check=within(0, 1, low_open=True, high_open=True),
        help="BERT: share of tokens chosen for masked-LM prediction",
    )
    max_predictions_per_seq: int | None = _data(
        None,
        check=at_least(1),
        metavar="N",
        help="BERT: masked positions a sequence at most, the fixed size of the MLM targets "
        "(default 20 per 128 tokens: 20 at seq 128, 80 at 512)",
    )
    eod_mask_loss: bool = _data(
        False, help="GPT: no loss on predicting the token after an end-of-document"
    )
    whole_word_masking: bool = _data(
        False, help="BERT: mask whole words (all WordPiece pieces of a chosen word)"
    )
    num_workers: int = _data(0, check=NON_NEGATIVE, help="DataLoader worker processes per rank")

    # model; None: the preset's
    model: str | None = _model(None, choices=MODELS, help="model family (default: the preset's)")
    preset: str | None = _model(
        None, help="model preset (default: the family's own, e.g. gpt-tiny)"
    )
    # the model's shape; None: the preset's (a resume: the checkpoint's). Megatron's names;
    # each family's spec maps them onto its config (train.models.spec.SHAPE_SETTINGS).
    num_layers: int | None = _model(None, check=POSITIVE, metavar="N", help="transformer blocks")
    hidden_size: int | None = _model(
        None, check=POSITIVE, metavar="D", help="model width (a multiple of the heads)"
    )
    num_attention_heads: int | None = _model(None, check=POSITIVE, metavar="H")
    ffn_hidden_size: int | None = _model(
        None, check=POSITIVE, metavar="F", help="MLP width (BERT, LLaMA; GPT's is 4 x hidden)"
    )
    bias: bool | None = _model(
        None,
        action=argparse.BooleanOptionalAction,
        help="biases in linear layers and norms (GPT; BERT always has them, LLaMA never)",
    )
    dropout: float | None = _model(
        None, check=within(0, 1, high_open=True), help="override the preset's dropout"
    )
    make_vocab_size_divisible_by: int = _model(
        128, check=POSITIVE, help="pad the tokenizer's vocabulary to a multiple of this x --tp"
    )

    max_steps: int = identity(_optimisation(100, check=POSITIVE))
    global_batch: int = identity(
        _optimisation(
            8, check=POSITIVE, help="samples per optimizer step, over all data-parallel ranks"
        )
    )
    micro_batch: int | None = _optimisation(
        None,
        check=POSITIVE,
        help="samples per forward pass per rank; gradient accumulation is "
        "global / (micro * data-parallel size)",
    )
    optimizer: str = _optimisation("adamw", choices=tuple(OPTIMIZER_DEFAULTS))
    lr: float = identity(_optimisation(6e-4, check=POSITIVE, help="peak learning rate"))
    min_lr: float | None = identity(_optimisation(None, help="final lr (default lr/10)"))
    warmup_steps: int | None = identity(
        _optimisation(
            None, check=NON_NEGATIVE, help="linear warmup steps (default max_steps // 10)"
        )
    )
    decay: str = identity(_optimisation("cosine", choices=DECAYS))
    decay_steps: int | None = identity(
        _optimisation(
            None, check=POSITIVE, help="step at which lr reaches --min-lr (default --max-steps)"
        )
    )
    weight_decay: float | None = _optimisation(
        None, check=NON_NEGATIVE, help="default 0.1 for adamw, 0.01 for lamb"
    )
    decay_embeddings: bool = _optimisation(
        True, help="exclude embedding tables from weight decay (norms and biases always are)"
    )
    beta1: float = _optimisation(0.9)
    beta2: float | None = _optimisation(None, help="default 0.95 for adamw, 0.999 for lamb")
    eps: float | None = _optimisation(None, help="default 1e-8 for adamw, 1e-6 for lamb")
    nvlamb: bool = _optimisation(
        False,
        help="LAMB: apply the trust ratio to parameters without weight decay too (apex's "
        "use_nvlamb); by default only decayed ones get it, as FusedLAMB does",
    )
    clip_grad: float = _optimisation(
        1.0, check=NON_NEGATIVE, help="max global grad norm (0: no clipping)"
    )
    skip_outliers: float = _optimisation(
        0.0,
        check=NON_NEGATIVE,
        metavar="Z",
        help="skip updates whose loss or grad norm z-score vs a running window exceeds Z (0: off)",
    )
    outlier_window: int = _optimisation(
        128,
        check=POSITIVE,
        help="steps in the --skip-outliers window (it must be full before skipping)",
    )
    max_consecutive_skips: int = _optimisation(
        20, check=POSITIVE, help="stop after this many consecutive skipped (non-finite) updates"
    )
    seed: int = identity(
        _optimisation(1234, help="the order of the documents and the model's initialisation")
    )

    precision: str | None = _system(
        None, choices=PRECISIONS, help="default: bf16 on CUDA, fp32 on CPU"
    )
    device: str = _system("auto", choices=DEVICES)
    parallel: str = _system(
        "ddp",
        choices=PARALLEL,
        help="under torchrun: DDP, FSDP2, or tensor parallel (FSDP2 over the rest)",
    )
    tp: int = _system(1, check=POSITIVE, help="tensor-parallel degree (--parallel tp)")
    sequence_parallel: bool = _system(
        False,
        help="GPT with --parallel tp: shard norms, dropouts and residuals along the sequence "
        "(Megatron's sequence parallelism); --seq-len must be divisible by --tp",
    )
    activation_checkpointing: str = _system(
        "none",
        choices=ACTIVATION_CHECKPOINTING,
        help="recompute activations in backward: every block (full), or selective: the "
        "attention of every block, or every --ac-every-th block",
    )
    ac_every: int = _system(
        0,
        check=NON_NEGATIVE,
        metavar="K",
        help="with --activation-checkpointing selective: checkpoint every K-th whole block "
        "instead of the attention of every block",
    )
    compile: bool = _system(False, help="torch.compile the model")
    dist_timeout: float = _system(
        10.0,
        check=POSITIVE,
        metavar="MINUTES",
        help="how long a collective may wait for the other ranks before the job fails",
    )
    deterministic: bool = _system(
        False, help="torch.use_deterministic_algorithms (bitwise-repeatable runs)"
    )
    peak_tflops: float | None = _system(
        None,
        check=POSITIVE,
        help="per-device peak for MFU (default: looked up from the GPU's name)",
    )

    out: str = _run("out/run", metavar="RUN", help="run directory: checkpoints/ and metrics.jsonl")
    resume: bool = _run(False, help="continue from RUN's latest checkpoint")
    init_from: str | None = _run(
        None,
        metavar="CHECKPOINT",
        help="start a new run from the weights of another run's checkpoint (a run directory: "
        "its latest; any layout) with a fresh optimizer, its own warmup and schedule, from step "
        "0 (BERT phase 2 from phase 1); position embeddings the checkpoint lacks keep their "
        "initialisation. With --resume: continue RUN if it has a checkpoint, else start from these "
        "weights",
    )
    allow_config_change: bool = _run(
        False,
        help="resume even though the schedule, the data or the seed differ from the "
        "checkpoint's: --data, --split, --seq-len, --max-steps, --global-batch, --lr, --min-lr, "
        "--warmup-steps, --decay, --decay-steps, --seed",
    )
    async_checkpoint: bool = _run(
        False,
        help="write checkpoints in a background thread while training goes on (a checkpoint "
        "counts once the next save or the end of the run commits it)",
    )
    save_interval: int = _run(
        1000, check=NON_NEGATIVE, help="steps between checkpoints (0: only at the end)"
    )
    stop_at: int | None = _run(
        None,
        check=POSITIVE,
        metavar="STEP",
        help="save a checkpoint and exit after STEP (resume later with --resume); the lr "
        "schedule still spans --max-steps",
    )
    save: bool = _run(True, help="write no checkpoints at all (benchmarks, throwaway runs)")
    keep_checkpoints: int = _run(3, check=POSITIVE, help="keep the last N checkpoints")
    eval_interval: int = _run(
        100, check=NON_NEGATIVE, help="steps between validation passes (0: only at the end)"
    )
    eval_iters: int = _run(
        10, check=NON_NEGATIVE, help="global batches per validation pass (0: no evaluation)"
    )
    eval_wikitext: str | None = _run(
        None,
        metavar="FILE",
        help="GPT: at each evaluation also score this raw WikiText file (wiki.test.tokens) as "
        "train/evaluate.py --task wikitext103 does (context --seq-len, stride half of it); "
        "logged as split 'wikitext'",
    )
    log_interval: int = _run(
        10, check=POSITIVE, help="steps between console lines (metrics.jsonl gets every step)"
    )
    progress: bool = _run(True, help="no progress bar, only log lines")

    def __post_init__(self) -> None:
        validate(self)

    def shape(self) -> dict:
        """The model-shape settings given (None: the preset's), by SHAPE_SETTINGS name."""
        return {name: getattr(self, name) for name in SHAPE_SETTINGS}

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
    """One-line SystemExit for every setting that cannot work, before anything is built: each
    field's own choices and check (declared with it), then the rules between fields."""
    try:
        check_options(config)
    except ValueError as e:
        fail(str(e))
    if config.eval_wikitext is not None and not os.path.isfile(config.eval_wikitext):
        fail(f"--eval-wikitext {config.eval_wikitext}: no such file")
    if config.min_lr is not None and not 0 <= config.min_lr <= config.lr:
        fail(f"--min-lr must be in [0, --lr={config.lr}], got {config.min_lr}")
    if config.sequence_parallel and config.parallel != "tp":
        fail("--sequence-parallel needs --parallel tp")
    if config.tp > 1 and config.parallel != "tp":
        fail(f"--tp {config.tp} needs --parallel tp")
    if config.tokenizer is not None and config.vocab_size is not None:
        fail("give --tokenizer or --vocab-size, not both (the tokenizer file sets the size)")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python train/pretrain.py",
        description="Pretrain GPT or BERT on shard sets (one process, or under torchrun).",
        formatter_class=DefaultsHelpFormatter,
    )
    add_options(parser, TrainConfig)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    return from_namespace(TrainConfig, build_parser().parse_args(argv))
