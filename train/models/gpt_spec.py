"""The GPT family's spec: GPT-2 style decoder, causal LM batches, GPT-2 on Hugging Face.

Preset sizes come from their papers: GPT-2 (Radford et al. 2019, the four released models)
and Megatron-LM (Shoeybi et al. 2019, table 1 scaling study; vocab 50257 padded to 51200 =
multiple of 128 x 8-way tensor parallelism; the 8.3B model they trained used 24 heads). The
tiny presets are for CPU tests and smoke runs.
"""

from __future__ import annotations

from train.models import gpt, hf
from train.models.gpt import GPT, GPTConfig
from train.models.spec import CAUSAL_LM, HFMapping, ModelSpec, ParallelPlan, PlanCounts, Preset

GPT2_VOCAB_PADDED = 50304  # 50257 GPT-2 BPE tokens padded to a multiple of 128
MEGATRON_VOCAB_PADDED = 51200  # 50257 padded to a multiple of 128 * 8 (8-way TP)


def _gpt2(n_layer: int, n_head: int, n_embd: int, description: str) -> Preset:
    config = GPTConfig(vocab_size=GPT2_VOCAB_PADDED, n_layer=n_layer, n_head=n_head, n_embd=n_embd)
    return Preset("gpt", config, description)


def _megatron(n_embd: int, n_layer: int, n_head: int, description: str) -> Preset:
    # Megatron-LM trains with 0.1 hidden and attention dropout (its default arguments).
    config = GPTConfig(
        vocab_size=MEGATRON_VOCAB_PADDED,
        n_layer=n_layer,
        n_head=n_head,
        n_embd=n_embd,
        block_size=1024,
        dropout=0.1,
    )
    return Preset("gpt", config, description)


PRESETS: dict[str, Preset] = {
    "gpt2-124m": _gpt2(12, 12, 768, "GPT-2 small: 12 layers, d=768, 12 heads, context 1024"),
    "gpt2-355m": _gpt2(24, 16, 1024, "GPT-2 medium: 24 layers, d=1024, 16 heads, context 1024"),
    "gpt2-774m": _gpt2(36, 20, 1280, "GPT-2 large: 36 layers, d=1280, 20 heads, context 1024"),
    "gpt2-1.5b": _gpt2(48, 25, 1600, "GPT-2 XL: 48 layers, d=1600, 25 heads, context 1024"),
    "megatron-1.2b": _megatron(1536, 40, 16, "Megatron-LM 1.2B: d=1536, 40 layers, 16 heads"),
    "megatron-2.5b": _megatron(1920, 54, 20, "Megatron-LM 2.5B: d=1920, 54 layers, 20 heads"),
    "megatron-4.2b": _megatron(2304, 64, 24, "Megatron-LM 4.2B: d=2304, 64 layers, 24 heads"),
    "megatron-8.3b": _megatron(
        3072, 72, 32, "Megatron-LM 8.3B as in the scaling table: d=3072, 72 layers, 32 heads"
    ),
    "megatron-8.3b-24h": _megatron(
        3072, 72, 24, "Megatron-LM 8.3B as trained: d=3072, 72 layers, 24 heads"
    ),
    "gpt-tiny": Preset(
        "gpt",
        GPTConfig(n_layer=2, n_head=2, n_embd=64, block_size=128),
        "CPU test model: 2 layers, d=64, 2 heads, context 128",
    ),
    "gpt-small-cpu": Preset(
        "gpt",
        GPTConfig(n_layer=6, n_head=6, n_embd=384, block_size=256),
        "CPU smoke-run model: 6 layers, d=384, 6 heads, context 256",
    ),
}

def plan_counts(config: GPTConfig, mask_prob: float) -> PlanCounts:
    """Korthikanti et al.'s own GPT: per block, LayerNorm inputs (2), the q/k/v and MLP inputs
    (2) whole; Q, K, V, the output projection's input (4) and GELU's input and output (2 x 4)
    split; two hidden dropouts' masks. Outside: the final LayerNorm's input and output."""
    h = config.n_embd
    return PlanCounts(
        layers=config.n_layer, width=h, heads=config.n_head, vocab=config.vocab_size,
        block_params=gpt.block_params(config), whole=4 * h, split=12 * h, attention=4 * h,
        mask_bytes=2 * h if config.dropout > 0 else 0, score_dropout=config.dropout > 0,
        outside=2 * h, logits=config.vocab_size,
    )  # fmt: skip


SPEC = ModelSpec(
    name="gpt",
    config_class=GPTConfig,
    model_class=GPT,
    batch=CAUSAL_LM,
    default_preset="gpt-tiny",
    presets=PRESETS,
    count_params=gpt.count_params,
    flops_per_token=lambda config, seq_len, mask_prob: gpt.flops_per_token(config, seq_len),
    positions=lambda config: config.block_size,
    parallel=ParallelPlan(
        colwise=("attn.q_proj", "attn.k_proj", "attn.v_proj", "mlp.fc_in"),
        rowwise=("attn.out_proj", "mlp.fc_out"),
        divisible=("n_head",),
        head="lm_head",
        tied=lambda config: True,
        sequence_parallel=True,
        norms=("ln_1", "ln_2"),
        sublayers=("attn", "mlp"),
        final_norm="ln_f",
        position_table="wpe",
        parallel_loss=True,
    ),
    hf=HFMapping(
        model_type="gpt2",
        config_to_hf=hf.gpt_config_to_hf,
        state_dict_to_hf=hf.gpt_state_dict_to_hf,
        config_from_hf=hf.gpt_config_from_fields,
        state_dict_from_hf=hf.gpt_state_dict_from_hf,
        size_keys=("n_layer", "n_embd", "n_head", "vocab_size", "n_positions", "n_inner"),
    ),
    shape_fields={
        "num_layers": "n_layer",
        "hidden_size": "n_embd",
        "num_attention_heads": "n_head",
        "bias": "bias",
        "dropout": "dropout",
    },
    shape_fixed={"ffn_hidden_size": "has an MLP of 4 x --hidden-size (GPT-2's)"},
    plan_counts=plan_counts,
)
