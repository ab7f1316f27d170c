"""What a model family declares about itself, in one place: :class:`ModelSpec`.

The trainer, the evaluation, the export and the parallelism ask a family's spec (through
:mod:`train.models.registry`) for everything that differs between families: its config class
and module, presets, the kind of batch it learns from, how tensor parallelism and activation
checkpointing cut it, its FLOPs per token and its Hugging Face mapping. A new family is a
model module plus a spec module registered in the registry; no caller names a family.

The spec holds plain data and functions of the model layer only; the layers above read it
(``train.parallel`` turns a :class:`ParallelPlan`'s names into DTensor styles,
``train.data.loader`` builds the datasets of a batch kind), so nothing here imports them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

# The kinds of batch a family learns from. Each names the samples the loader builds and the
# loss the trainer computes on them (train.data.loader, train.evaluation).
CAUSAL_LM = "causal_lm"  # next-token prediction on GPTDataset samples
MASKED_LM = "masked_lm"  # masked LM (+ next-sentence prediction) on BertDataset samples
BATCH_KINDS = (CAUSAL_LM, MASKED_LM)

# The model-shape settings a run may give on the command line (the trainer's --num-layers,
# --hidden-size, ...: Megatron's names), over a preset's values. Each family's spec maps them
# onto its config (ModelSpec.shape_fields) or says why it has no such setting (shape_fixed).
SHAPE_SETTINGS = (
    "num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "bias", "dropout"
)  # fmt: skip


# What the families whose config names its MLP width `intermediate_size` (BERT, LLaMA) share:
# their shape settings' config fields, and the config.json keys transformers gives their size.
INTERMEDIATE_SIZE_SHAPE_FIELDS = {
    "num_layers": "n_layer",
    "hidden_size": "n_embd",
    "num_attention_heads": "n_head",
    "ffn_hidden_size": "intermediate_size",
    "dropout": "dropout",
}
TRANSFORMERS_SIZE_KEYS = (
    "num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size",
    "max_position_embeddings", "intermediate_size",
)  # fmt: skip


def shape_flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def shape_flags(shape: dict[str, Any]) -> str:
    """The settings of ``shape`` that are given, as flags: "--num-layers 3 --no-bias"."""
    flags = []
    for name, value in shape.items():
        if isinstance(value, bool):
            flags.append(shape_flag(name) if value else f"--no-{shape_flag(name)[2:]}")
        elif value is not None:
            flags.append(f"{shape_flag(name)} {value}")
    return " ".join(flags)


@dataclass(frozen=True)
class Preset:
    model: str  # the family's name
    config: Any  # an instance of the family's config class
    description: str


@dataclass(frozen=True)
class ParallelPlan:
    """How tensor parallelism, sequence parallelism and activation checkpointing cut a
    family's model, by module name (relative to each of ``model.blocks``, else to the model).

    ``colwise`` Linears are split by output features (heads, MLP width), ``rowwise`` by input
    features (their outputs reduced). ``divisible``: config fields the tp degree must divide.
    ``head``: the output Linear, column-parallel by vocabulary; when ``tied`` its weight is the
    token embedding ``embedding``'s. Sequence parallelism (``sequence_parallel``) shards the
    ``norms`` and ``final_norm`` along the sequence and gathers the inputs of ``sublayers``;
    a ``position_table``'s output is cut to the same positions. ``parallel_loss``: the
    logits may stay sharded by vocabulary into the loss. ``attention``: the sub-layer that
    selective activation checkpointing recomputes.
    """

    colwise: tuple[str, ...]
    rowwise: tuple[str, ...]
    divisible: tuple[str, ...]
    head: str
    tied: Callable[[Any], bool]
    embedding: str = "wte"
    sequence_parallel: bool = False
    norms: tuple[str, ...] = ()
    sublayers: tuple[str, ...] = ()
    final_norm: str | None = None
    position_table: str | None = None
    parallel_loss: bool = False
    attention: str = "attn"


@dataclass(frozen=True)
class HFMapping:
    """The family's Hugging Face counterpart, both ways (``transformers`` is imported by
    these functions only when they run).

    ``config_to_hf(config)``: the HF config, ``architectures`` set when the HF class depends
    on the config; ``state_dict_to_hf(state_dict, config)``: HF names and layouts (tied
    entries share a tensor). ``config_from_hf(fields)``: our config for the fields of a
    config.json with this ``model_type`` (its ``architectures`` included), every field carried
    over or a ValueError naming what ours cannot compute; ``state_dict_from_hf(state_dict,
    config)``: that folder's tensors under our names (ValueError naming a missing or unused
    one). ``size_keys``: the config.json keys of its
    (layers, width, heads, vocabulary, positions, inner width), which an HF directory read from
    outside is bounded by before anything is built (``train.eval.load.check_hf_config_size``).
    """

    model_type: str
    config_to_hf: Callable[[Any], Any]
    state_dict_to_hf: Callable[[dict, Any], dict]
    config_from_hf: Callable[[dict], Any]
    state_dict_from_hf: Callable[[dict, Any], dict]
    size_keys: tuple[str, str, str, str, str, str]


@dataclass(frozen=True)
class PlanCounts:
    """What the memory planner (``train.plan``) needs of a model, in its family's own counts.

    ``layers`` blocks of ``block_params`` parameters each (what FSDP gathers at a time), of
    ``width`` (a block's input) and ``heads`` (the s x s attention scores a kernel without
    flash attention keeps); ``vocab``: the vocabulary. Activations are elements per token of
    a micro-batch, split as tensor parallelism cuts them (Korthikanti et al. 2022, section 4):

    * ``whole``: what a block keeps that every tensor-parallel rank holds whole without
      sequence parallelism: the norms' inputs, the inputs of the column-parallel Linears;
    * ``split``: what tensor parallelism divides: the per-head tensors, the MLP's inner ones;
    * ``attention``: the part of ``split`` that selective checkpointing recomputes;
    * ``mask_bytes``: a block's dropout masks, bytes per token (0 without dropout);
    * ``score_dropout``: the attention probabilities go through dropout (a mask and a copy);
    * ``outside``: what the model keeps outside its blocks (the final norm, the head's
      inputs), divided by sequence parallelism only;
    * ``logits``: logits per token (the vocabulary, times the predicted share of positions),
      divided by tp, each with 4 bytes of fp32 log-probabilities for the loss.
    """

    layers: int
    width: int
    heads: int
    vocab: int
    block_params: int
    whole: float
    split: float
    attention: float
    mask_bytes: float
    score_dropout: bool
    outside: float
    logits: float


@dataclass(frozen=True)
class ModelSpec:
    """One model family. ``flops_per_token(config, seq_len, mask_prob)``: training FLOPs per
    token, ``mask_prob`` being the share of positions a masked-LM batch predicts (causal
    families predict every position and ignore it). ``positions(config)``: the longest
    sequence the model takes. ``shape_fields``: the config field each shape setting it takes
    (SHAPE_SETTINGS) sets; ``shape_fixed``: why it takes none of the others.
    ``plan_counts(config, mask_prob)``: its :class:`PlanCounts`, for the memory planner."""

    name: str
    config_class: type
    model_class: type[nn.Module]
    batch: str
    default_preset: str
    presets: dict[str, Preset]
    count_params: Callable[[Any, bool], int]
    flops_per_token: Callable[[Any, int, float], float]
    positions: Callable[[Any], int]
    parallel: ParallelPlan
    hf: HFMapping
    shape_fields: dict[str, str]
    shape_fixed: dict[str, str]
    plan_counts: Callable[[Any, float], PlanCounts]

    def __post_init__(self) -> None:
        if set(self.shape_fields) | set(self.shape_fixed) != set(SHAPE_SETTINGS):
            raise ValueError(
                f"model family {self.name}: shape_fields and shape_fixed must cover "
                f"{', '.join(SHAPE_SETTINGS)} between them"
            )
        if self.batch not in BATCH_KINDS:
            raise ValueError(
                f"model family {self.name}: batch kind {self.batch!r} is none of {BATCH_KINDS}"
            )
        if self.default_preset not in self.presets:
            raise ValueError(
                f"model family {self.name}: default preset {self.default_preset!r} is not "
                "one of its presets"
            )
        for name, preset in self.presets.items():
            if preset.model != self.name or not isinstance(preset.config, self.config_class):
                raise ValueError(f"model family {self.name}: preset {name} is not one of its own")

    def reshape(self, config: Any, shape: dict[str, Any]) -> Any:
        """``config`` with the shape settings of ``shape`` that are not None applied; one-line
        ValueError for a setting this family has no field for, or a shape it cannot build
        (hidden size not divisible by the heads...)."""
        given = {name: value for name, value in shape.items() if value is not None}
        for name in given:
            if name not in self.shape_fields:
                reason = self.shape_fixed.get(name, "has no such shape setting")
                raise ValueError(f"{shape_flag(name)}: the {self.name} family {reason}")
        try:
            return dataclasses.replace(
                config, **{self.shape_fields[name]: value for name, value in given.items()}
            )
        except ValueError as e:
            raise ValueError(f"{shape_flags(given)}: not a {self.name} model ({e})") from None

    def build(self, config: Any) -> nn.Module:
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"model family {self.name} builds from a {self.config_class.__name__}, "
                f"got {type(config).__name__}"
            )
        return self.model_class(config)
