"""The BERT family's spec: encoder with MLM + NSP heads, masked-LM batches, BERT on Hugging
Face. Preset sizes from Devlin et al. 2019; the tiny preset is for CPU tests."""

from __future__ import annotations

from train.models import bert, hf
from train.models.bert import Bert, BertConfig
from train.models.spec import (
    INTERMEDIATE_SIZE_SHAPE_FIELDS,
    MASKED_LM,
    TRANSFORMERS_SIZE_KEYS,
    HFMapping,
    ModelSpec,
    ParallelPlan,
    PlanCounts,
    Preset,
)

BERT_VOCAB_PADDED = 30592  # 30522 bert-base-uncased WordPiece tokens padded to 128

PRESETS: dict[str, Preset] = {
    "bert-base": Preset(
        "bert",
        BertConfig(vocab_size=BERT_VOCAB_PADDED),
        "BERT-base: 12 layers, d=768, 12 heads, FFN 3072, 512 positions, MLM + NSP",
    ),
    "bert-large": Preset(
        "bert",
        BertConfig(
            vocab_size=BERT_VOCAB_PADDED,
            n_layer=24,
            n_head=16,
            n_embd=1024,
            intermediate_size=4096,
        ),
        "BERT-large: 24 layers, d=1024, 16 heads, FFN 4096, 512 positions, MLM + NSP",
    ),
    "bert-tiny": Preset(
        "bert",
        BertConfig(
            n_layer=2, n_head=2, n_embd=64, intermediate_size=256, max_position_embeddings=128
        ),
        "CPU test model: 2 layers, d=64, 2 heads, FFN 256, 128 positions",
    ),
}

def plan_counts(config: BertConfig, mask_prob: float) -> PlanCounts:
    """Per post-LN block: the attention input, both LayerNorms' inputs and the MLP input (4)
    whole; Q, K, V, the output projection's input (4) and GELU's input and output (2 x the
    inner width) split; two hidden dropouts' masks. Outside: the embedding LayerNorm's input,
    and the MLM head at the predicted share of positions (its dense, GELU, LayerNorm and
    decoder inputs: 5) with its logits."""
    h, share = config.n_embd, mask_prob
    return PlanCounts(
        layers=config.n_layer, width=h, heads=config.n_head, vocab=config.vocab_size,
        block_params=bert.block_params(config), whole=4 * h,
        split=4 * h + 2 * config.intermediate_size, attention=4 * h,
        mask_bytes=2 * h if config.dropout > 0 else 0, score_dropout=config.dropout > 0,
        outside=h + 5 * h * share, logits=config.vocab_size * share,
    )  # fmt: skip


SPEC = ModelSpec(
    name="bert",
    config_class=BertConfig,
    model_class=Bert,
    batch=MASKED_LM,
    default_preset="bert-tiny",
    presets=PRESETS,
    count_params=bert.count_params,
    flops_per_token=lambda config, seq_len, mask_prob: bert.flops_per_token(
        config, seq_len, mlm_fraction=mask_prob
    ),
    positions=lambda config: config.max_position_embeddings,
    # Plain tensor parallelism only: the post-LN blocks and padding masks have no
    # sequence-parallel plan, and the MLM logits are gathered for the head's own loss.
    parallel=ParallelPlan(
        colwise=("attn.q_proj", "attn.k_proj", "attn.v_proj", "mlp.fc_in"),
        rowwise=("attn.out_proj", "mlp.fc_out"),
        divisible=("n_head",),
        head="mlm_head.decoder",
        tied=lambda config: True,
    ),
    hf=HFMapping(
        model_type="bert",
        config_to_hf=hf.bert_config_with_architecture,
        state_dict_to_hf=hf.bert_state_dict_to_hf,
        config_from_hf=hf.bert_config_from_fields,
        state_dict_from_hf=hf.bert_state_dict_from_hf,
        size_keys=TRANSFORMERS_SIZE_KEYS,
    ),
    shape_fields=INTERMEDIATE_SIZE_SHAPE_FIELDS,
    shape_fixed={"bias": "always has biases (BERT's layers)"},
    plan_counts=plan_counts,
)
