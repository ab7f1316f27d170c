"""BERT encoder with masked-LM and next-sentence heads (Devlin et al. 2019).

Post-LayerNorm blocks as in the paper, exact (erf) GELU, learned position and token-type
embeddings, a padding mask through ``F.scaled_dot_product_attention``, an MLM head
(dense + GELU + LayerNorm + decoder tied to the word embeddings, with its own bias) and a
pooler + NSP head. ``next_sentence=False`` drops pooler and NSP head (RoBERTa-style MLM only).

Parallel-friendly layout, same names as ``train.models.gpt``: blocks in ``self.blocks``,
attention ``q_proj``/``k_proj``/``v_proj``/``out_proj``, MLP ``fc_in``/``fc_out``, heads counted
from the projected tensor's shape so tensor-parallel shards run unchanged.

Memory: when ``mlm_labels`` are given, the MLM head runs only at the predicted positions
(label != -100, typically 15% of tokens), gathered with a boolean index, so the
[tokens, vocab] logits tensor is ~7x smaller. ``mlm_logits`` is then [n_predicted, vocab] in
row-major (batch, position) order of the predicted positions; without labels it is
[B, T, vocab]. The training path gives ``mlm_positions`` instead (a fixed number a sequence):
a gather with static shapes, so a compiled model keeps one graph (see ``forward``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from train.models.layers import MultiHeadAttention, check_config, init_normal, mean_cross_entropy


@dataclass
class BertConfig:
    """Hyper-parameters of a BERT model; ``vocab_size`` 30592 is bert-base's 30522 padded to 128."""

    vocab_size: int = 30592
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    init_std: float = 0.02
    next_sentence: bool = True

    def __post_init__(self) -> None:
        check_config(
            self,
            ("vocab_size", "n_layer", "n_head", "n_embd", "intermediate_size",
             "max_position_embeddings", "type_vocab_size"),
        )  # fmt: skip


@dataclass
class BertOutput:
    mlm_logits: torch.Tensor
    nsp_logits: torch.Tensor | None
    loss: torch.Tensor | None
    mlm_loss: torch.Tensor | None
    nsp_loss: torch.Tensor | None


class SelfAttention(MultiHeadAttention):
    def __init__(self, config: BertConfig) -> None:
        super().__init__(config.n_embd, config.n_head, config.dropout)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        """``key_mask``: bool [B, 1, 1, T], True where the key is a real token; None: no
        padding (the fused kernels without a mask)."""
        return self.merge(self.core(*self.heads(x), mask=key_mask))


class MLP(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.fc_in = nn.Linear(config.n_embd, config.intermediate_size)
        self.fc_out = nn.Linear(config.intermediate_size, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(F.gelu(self.fc_in(x)))  # exact erf GELU, as BERT


class Block(nn.Module):
    """Post-LN block: ln_1(x + attn(x)), then ln_2(x + mlp(x))."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attn = SelfAttention(config)
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.mlp = MLP(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        x = self.ln_1(x + self.dropout(self.attn(x, key_mask)))
        return self.ln_2(x + self.dropout(self.mlp(x)))


class MLMHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.n_embd, config.n_embd)
        self.ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        # weight is tied to the word embeddings by Bert; the bias is the head's own.
        self.decoder = nn.Linear(config.n_embd, config.vocab_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.ln(F.gelu(self.dense(hidden))))


class Bert(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.max_position_embeddings, config.n_embd)
        self.wtt = nn.Embedding(config.type_vocab_size, config.n_embd)
        self.ln_emb = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.mlm_head = MLMHead(config)
        if config.next_sentence:
            self.pooler = nn.Linear(config.n_embd, config.n_embd)
            self.nsp_head = nn.Linear(config.n_embd, 2)
        self.init_weights()

    def tie_weights(self) -> None:
        """The MLM decoder shares the word-embedding matrix (``to_empty()`` on a meta-device
        model unties it; ``init_weights`` calls this)."""
        self.mlm_head.decoder.weight = self.wte.weight

    @torch.no_grad()
    def init_weights(self) -> None:
        """BERT initialisation in place: weights ~ N(0, init_std), biases 0, LayerNorm 1/0.
        Ties the MLM decoder to the word embeddings first."""
        self.tie_weights()
        init_normal(self, self.config.init_std, tied=self.mlm_head.decoder)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        mlm_labels: torch.Tensor | None = None,
        nsp_labels: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
    ) -> BertOutput:
        """Run the encoder and heads.

        ``attention_mask`` [B, T]: 1 = real token, 0 = padding (padded keys are never attended
        to; a sequence must hold at least one real token). ``mlm_labels`` [B, T]: target id at
        predicted positions, -100 elsewhere. ``nsp_labels`` [B]: 0 = B follows A, 1 = random.
        ``loss`` is the sum of the losses that were requested. An MLM batch with no predicted
        position gives ``mlm_loss`` 0.

        Static shapes (what ``torch.compile`` and CUDA graphs need): ``mlm_positions`` [B, P]
        holds each sequence's predicted positions padded to a fixed P
        (``max_predictions_per_seq``), and ``mlm_labels`` is then [B, P] with -100 at the
        padding (``BertDataset``'s ``mlm_positions`` / ``mlm_targets``); the loss equals the
        dynamic one and ``mlm_logits`` is [B * P, vocab]. ``attention_mask=None`` means no
        padding: attention then runs on the fused kernels without a mask.
        """
        batch, seq_len = input_ids.shape
        if seq_len > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {seq_len} exceeds the model's max_position_embeddings "
                f"{self.config.max_position_embeddings}"
            )
        if nsp_labels is not None and not self.config.next_sentence:
            raise ValueError("nsp_labels given but the model was built with next_sentence=False")
        if mlm_positions is not None and (
            mlm_labels is None or mlm_labels.shape != mlm_positions.shape
        ):
            raise ValueError("mlm_positions needs mlm_labels of the same [B, P] shape")
        for name, tensor in (
            ("token_type_ids", token_type_ids),
            ("attention_mask", attention_mask),
            ("mlm_labels", mlm_labels if mlm_positions is None else None),
        ):
            if tensor is not None and tensor.shape != input_ids.shape:
                raise ValueError(
                    f"{name} shape {tuple(tensor.shape)} does not match input_ids "
                    f"{tuple(input_ids.shape)}"
                )

        positions = torch.arange(seq_len, device=input_ids.device)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # a single segment A
        x = self.wte(input_ids) + self.wpe(positions) + self.wtt(token_type_ids)
        x = self.drop(self.ln_emb(x))

        key_mask = None
        if attention_mask is not None:
            key_mask = attention_mask.bool().view(batch, 1, 1, seq_len)
        for block in self.blocks:
            x = block(x, key_mask)

        mlm_loss = None
        if mlm_labels is None:
            mlm_logits = self.mlm_head(x)
        elif mlm_positions is not None:
            index = mlm_positions.unsqueeze(-1).expand(-1, -1, x.size(-1))
            mlm_logits = self.mlm_head(x.gather(1, index).flatten(0, 1))
            mlm_loss = mean_cross_entropy(mlm_logits, mlm_labels.flatten())
        else:
            predicted = mlm_labels != -100
            mlm_logits = self.mlm_head(x[predicted])
            predicted_labels = mlm_labels[predicted]
            # sum / count rather than mean: an empty selection gives 0, not NaN.
            mlm_loss = mean_cross_entropy(mlm_logits, predicted_labels)

        nsp_logits = None
        nsp_loss = None
        if self.config.next_sentence:
            pooled = torch.tanh(self.pooler(x[:, 0]))
            nsp_logits = self.nsp_head(pooled)
            if nsp_labels is not None:
                if nsp_labels.numel() != batch:
                    raise ValueError(
                        f"nsp_labels holds {nsp_labels.numel()} labels for a batch of {batch}"
                    )
                nsp_loss = F.cross_entropy(nsp_logits.float(), nsp_labels.view(-1))

        if mlm_loss is not None and nsp_loss is not None:
            loss = mlm_loss + nsp_loss
        else:
            loss = mlm_loss if mlm_loss is not None else nsp_loss
        return BertOutput(mlm_logits, nsp_logits, loss, mlm_loss, nsp_loss)

    def num_params(self, exclude_embeddings: bool = False) -> int:
        """Distinct parameters (tied decoder weight counted once); optionally without the
        word, position and token-type tables."""
        total = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            total -= sum(e.weight.numel() for e in (self.wte, self.wpe, self.wtt))
        return total

    def flops_per_token(self, seq_len: int, mlm_fraction: float = 1.0) -> float:
        """Training FLOPs per token; see :func:`flops_per_token`."""
        return flops_per_token(self.config, seq_len, mlm_fraction)


def block_params(config: BertConfig) -> int:
    """Parameters of one block: attention, the MLP, two LayerNorms (all with biases)."""
    d, inter = config.n_embd, config.intermediate_size
    return 4 * (d * d + d) + (d * inter + inter) + (inter * d + d) + 2 * (2 * d)


def count_params(config: BertConfig, exclude_embeddings: bool = False) -> int:
    """Parameter count of ``Bert(config)`` from the config alone (equals ``num_params()``)."""
    d, V = config.n_embd, config.vocab_size
    layer_norm = 2 * d
    embeddings = (V + config.max_position_embeddings + config.type_vocab_size) * d
    block = block_params(config)
    mlm_head = (d * d + d) + layer_norm + V  # decoder weight is tied: only its bias is new
    nsp = (d * d + d) + (2 * d + 2) if config.next_sentence else 0
    total = embeddings + layer_norm + config.n_layer * block + mlm_head + nsp
    if exclude_embeddings:
        total -= embeddings
    return total


def flops_per_token(config: BertConfig, seq_len: int, mlm_fraction: float = 1.0) -> float:
    """Training FLOPs per token, PaLM appendix B form ``6N + 12 L H Q T`` (see
    ``train.models.gpt.flops_per_token``) adapted to what this model computes.

    The encoder's matmul parameters run at every token. The MLM head (transform + tied
    decoder) runs only at the predicted positions when labels are given: pass their share as
    ``mlm_fraction`` (0.15 for standard masking); the default 1.0 is the dense convention that
    counts the head at every token. Pooler and NSP head run once per sequence (1/seq_len).
    """
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    if not 0.0 <= mlm_fraction <= 1.0:
        raise ValueError(f"mlm_fraction must be in [0, 1], got {mlm_fraction}")
    d, V = config.n_embd, config.vocab_size
    encoder = config.n_layer * block_params(config) + 2 * d  # + the embedding LayerNorm
    mlm_head = (d * d + d) + 2 * d + (V * d + V)
    nsp = (d * d + d) + (2 * d + 2) if config.next_sentence else 0
    matmul_params = encoder + mlm_fraction * mlm_head + nsp / seq_len
    return 6.0 * matmul_params + 12.0 * config.n_layer * d * seq_len
