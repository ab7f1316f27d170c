"""The run's settings resolved against the machine and the model, and the model it trains."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from train.config import OPTIMIZER_DEFAULTS, TrainConfig, fail
from train.models.registry import get_spec
from train.runtime import Runtime


def resolve_config(config: TrainConfig, runtime: Runtime, positions_of) -> TrainConfig:
    """Fill the None defaults; ``positions_of(preset) -> (model family, max positions)``."""
    preset = config.preset or get_spec(config.model or "gpt").default_preset
    kind, positions = positions_of(preset)
    if config.model is not None and config.model != kind:
        fail(f"--preset {preset} is a {kind} model, but --model {config.model} was given")
    seq_len = config.seq_len or positions
    if seq_len > positions:
        fail(f"--seq-len {seq_len} exceeds the {preset} model's {positions} positions")
    precision = config.precision or ("bf16" if runtime.device.type == "cuda" else "fp32")
    micro_batch = config.micro_batch or max(1, config.global_batch // runtime.dp_size)
    if config.global_batch % (micro_batch * runtime.dp_size):
        fail(
            f"--global-batch {config.global_batch} is not a multiple of --micro-batch "
            f"{micro_batch} x data-parallel size {runtime.dp_size}"
        )
    warmup = config.warmup_steps if config.warmup_steps is not None else config.max_steps // 10
    decay_steps = config.decay_steps or config.max_steps
    beta2, eps, weight_decay = OPTIMIZER_DEFAULTS[config.optimizer]
    if warmup > decay_steps:
        fail(f"--warmup-steps {warmup} exceeds the decay horizon of {decay_steps} steps")
    return dataclasses.replace(
        config,
        model=kind,
        preset=preset,
        seq_len=seq_len,
        precision=precision,
        micro_batch=micro_batch,
        warmup_steps=warmup,
        decay_steps=decay_steps,
        min_lr=config.min_lr if config.min_lr is not None else config.lr / 10,
        beta2=config.beta2 if config.beta2 is not None else beta2,
        eps=config.eps if config.eps is not None else eps,
        weight_decay=config.weight_decay if config.weight_decay is not None else weight_decay,
    )


def saved_vocab_size(trainer_state: dict | None, tp: int) -> int | None:
    """The padded vocabulary of the checkpoint to resume, if this run's --tp can shard it.

    Padding is Megatron's (a multiple of ``--make-vocab-size-divisible-by`` x tp), so a run
    resumed at another tp would pad differently; keeping the saved size (vocab-parallel layers
    only need it divisible by tp) lets a checkpoint move between tensor-parallel degrees.
    """
    if trainer_state is None:
        return None
    vocab = trainer_state.get("model_config", {}).get("vocab_size")
    return vocab if isinstance(vocab, int) and vocab % tp == 0 else None


def build_training_model(
    config: TrainConfig,
    runtime: Runtime,
    vocab_size: int,
    padded: int | None = None,
    model_config: object | None = None,
) -> nn.Module:
    """The model for ``config`` (``model_config`` when given: the one of a checkpoint or HF
    folder it starts from, else its preset reshaped by its flags), its vocabulary padded from
    the tokenizer's ``vocab_size`` unless ``padded`` (a resumed checkpoint's) is given."""
    from train.models.presets import build_model, get_preset, pad_vocab_size

    if model_config is None:
        preset = get_preset(config.preset)
        try:
            model_config = get_spec(preset.model).reshape(preset.config, config.shape())
        except ValueError as e:
            fail(f"--preset {config.preset}: {e}")
    padded = padded or pad_vocab_size(
        vocab_size, multiple=config.make_vocab_size_divisible_by, tensor_parallel=runtime.tp
    )
    # On the meta device: nothing is allocated until parallelize() has sharded the model and
    # materialises each rank's pieces, initialised from --seed exactly as an unsharded model
    # would be (the same initial weights under any parallelism).
    with torch.device("meta"):
        return build_model(model_config, vocab_size=padded)


def model_positions(preset_name: str) -> tuple[str, int]:
    from train.models.presets import get_preset

    try:
        preset = get_preset(preset_name)
    except KeyError as e:
        fail(str(e.args[0]))
    return preset.model, get_spec(preset.model).positions(preset.config)
