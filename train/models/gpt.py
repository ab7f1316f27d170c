"""GPT-2 style decoder-only language model.

A readable, single-file model in the nanoGPT tradition: pre-LayerNorm blocks, learned absolute
position embeddings, tanh-approximated GELU (as GPT-2), causal attention through
``F.scaled_dot_product_attention`` and a language-model head whose weight is tied to the token
embedding.

The module knows nothing about distribution. It is laid out so that parallelism can be applied
from outside, torchtitan style:

* transformer blocks live in ``self.blocks`` (an ``nn.ModuleList``) so FSDP2 ``fully_shard`` and
  activation checkpointing can wrap them one by one;
* attention keeps separate ``q_proj``/``k_proj``/``v_proj`` (ColwiseParallel) and ``out_proj``
  (RowwiseParallel) Linear layers, and the MLP keeps ``fc_in`` (colwise) and ``fc_out``
  (rowwise). The number of heads is read from the projected tensor's shape, so a tensor-parallel
  shard that holds ``n_head / tp`` heads runs the same code unchanged;
* ``init_weights()`` re-initialises every parameter in place, so a model built on the ``meta``
  device, sharded and moved with ``to_empty()`` can be initialised afterwards.

For generation, ``forward(..., cache=KVCache())`` keeps each block's keys and values, so a
new token attends to the prefix without recomputing it (the training path never passes one).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from train.models.layers import (
    CausalDecoder,
    KVCache,
    MultiHeadAttention,
    check_config,
    init_normal,
    init_residual,
    pre_norm_blocks,
)


@dataclass
class GPTConfig:
    """Hyper-parameters of a GPT model.

    ``vocab_size`` is the embedding-table size, normally the tokenizer's vocabulary padded with
    ``train.models.presets.pad_vocab_size`` (50257 -> 50304) so matmuls hit fast kernel shapes.
    """

    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    block_size: int = 1024
    dropout: float = 0.0
    bias: bool = True
    init_std: float = 0.02

    def __post_init__(self) -> None:
        check_config(self, ("vocab_size", "n_layer", "n_head", "n_embd", "block_size"))


class CausalSelfAttention(MultiHeadAttention):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__(config.n_embd, config.n_head, config.dropout, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        q, k, v = self.heads(x)
        mask = None
        if cache is not None:
            mask = cache.mask(x.shape[1], x.device)
            k, v = cache.extend(self, k, v)
        y = self.core(q, k, v, mask=mask, is_causal=mask is None)
        return self.resid_dropout(self.merge(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc_in = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.fc_out = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # GPT-2 uses the tanh approximation of GELU; keeping it makes HF checkpoints load exactly.
        return self.dropout(self.fc_out(F.gelu(self.fc_in(x), approximate="tanh")))


class GPT(CausalDecoder):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        norm = functools.partial(nn.LayerNorm, config.n_embd, bias=config.bias)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = pre_norm_blocks(config, norm, CausalSelfAttention, MLP)
        self.ln_f = norm()
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.init_weights()

    def tie_weights(self) -> None:
        """Weight tying (GPT-2): one parameter is both input embedding and output projection.

        ``to_empty()`` on a meta-device model allocates the two separately; ``init_weights``
        calls this to restore the tie.
        """
        self.lm_head.weight = self.wte.weight

    @torch.no_grad()
    def init_weights(self) -> None:
        """GPT-2 initialisation, in place.

        Linear and embedding weights ~ N(0, init_std), biases 0, LayerNorm 1/0. The two
        projections that write into the residual stream (``out_proj``, ``fc_out``) use
        ``init_std / sqrt(2 * n_layer)`` so the residual variance does not grow with depth
        (GPT-2 paper, section 2.3: two residual additions per layer). Ties lm_head to wte first.
        """
        self.tie_weights()
        init_normal(self, self.config.init_std, tied=self.lm_head)
        init_residual(self.blocks, self.config.init_std, self.config.n_layer, "fc_out")

    def embed(self, input_ids: torch.Tensor, past: int) -> torch.Tensor:
        """Token plus learned position embeddings (positions from ``past``), dropout."""
        positions = torch.arange(past, past + input_ids.shape[1], device=input_ids.device)
        return self.drop(self.wte(input_ids) + self.wpe(positions))

    def num_params(self, exclude_embeddings: bool = False) -> int:
        """Number of distinct parameters (the tied LM head counts once).

        With ``exclude_embeddings`` the token and position tables are left out (Kaplan et al.'s
        "non-embedding" count). Works on sharded models too: a DTensor reports its global numel.
        """
        total = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            total -= self.wte.weight.numel() + self.wpe.weight.numel()
        return total

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token; see :func:`flops_per_token`."""
        return flops_per_token(self.config, seq_len)


def block_params(config: GPTConfig) -> int:
    """Parameters of one block: two LayerNorms, attention, the 4 x d MLP."""
    d, bias = config.n_embd, 1 if config.bias else 0
    attention = 4 * (d * d + bias * d)
    mlp = (d * 4 * d + bias * 4 * d) + (4 * d * d + bias * d)
    return 2 * (d + bias * d) + attention + mlp


def count_params(config: GPTConfig, exclude_embeddings: bool = False) -> int:
    """Parameter count of ``GPT(config)`` from the config alone (equals ``num_params()``)."""
    d, L, V = config.n_embd, config.n_layer, config.vocab_size
    layer_norm = d + (d if config.bias else 0)
    embeddings = V * d + config.block_size * d
    # lm_head is tied to wte: no extra parameters
    total = embeddings + L * block_params(config) + layer_norm
    if exclude_embeddings:
        total -= embeddings
    return total


def flops_per_token(config: GPTConfig, seq_len: int) -> float:
    """Training (forward + backward) FLOPs per token, PaLM appendix B: ``6N + 12 L H Q T``.

    ``H * Q`` (heads x head size) is ``n_embd`` and ``T`` is ``seq_len``. ``N`` counts every
    parameter used in a per-token matmul: all parameters except the position table, with the
    tied token embedding counted once as the LM-head matmul (the position/token lookups cost
    no matmul FLOPs). ``12 L H Q T`` is the attention score and value matmuls, counted over the
    full T x T square as PaLM and Megatron do (causal kernels skip about half of it).

    For the GPT architecture this equals Megatron-LM's closed form
    ``72 l h^2 (1 + s/(6h) + V/(12 h l))`` (Narayanan et al. 2021, without recomputation) up to
    the bias and LayerNorm terms, which that formula drops.
    """
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    matmul_params = count_params(config) - config.block_size * config.n_embd
    return 6.0 * matmul_params + 12.0 * config.n_layer * config.n_embd * seq_len
