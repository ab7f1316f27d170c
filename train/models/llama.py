"""LLaMA-style decoder-only language model (Touvron et al. 2023).

Pre-norm blocks with RMSNorm, rotary position embeddings (RoPE) on queries and keys instead of
a position table, a SwiGLU MLP (``down(silu(gate(x)) * up(x))``), grouped-query attention
(``n_kv_head`` key/value heads shared by groups of the ``n_head`` query heads), no biases
anywhere, and an output head that is its own matrix or, with ``tie_embeddings``, the token
embedding's.

RoPE rotates the two halves of each head's vector (dimension i with i + head_dim / 2), the
layout Hugging Face's ``LlamaForCausalLM`` uses, so its weights map one to one.

The layout follows ``train.models.gpt`` so parallelism applies from outside by name (see the
family's plan in ``train.models.llama_spec``): blocks in ``self.blocks``, attention
``q_proj``/``k_proj``/``v_proj`` (column-parallel: a rank holds ``n_head / tp`` query and
``n_kv_head / tp`` key/value heads, whose groups stay aligned) and ``out_proj``
(row-parallel), MLP ``gate_proj``/``up_proj`` (column) and ``down_proj`` (row). Head counts
are read from the projected tensors' shapes, so a shard runs the same code. Generation keeps
the un-repeated keys and values in a :class:`~train.models.layers.KVCache`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from train.models.layers import (
    CausalDecoder,
    DotProductAttention,
    KVCache,
    check_config,
    init_normal,
    init_residual,
    pre_norm_blocks,
)


@dataclass
class LlamaConfig:
    """Hyper-parameters of a LLaMA model. ``block_size`` is the longest sequence (RoPE has
    no table; it bounds generation and the data's samples). ``dropout`` acts on the attention
    probabilities only, as Hugging Face's ``attention_dropout``."""

    vocab_size: int = 32000
    n_layer: int = 32
    n_head: int = 32
    n_kv_head: int = 32
    n_embd: int = 4096
    intermediate_size: int = 11008
    block_size: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    dropout: float = 0.0
    init_std: float = 0.02

    def __post_init__(self) -> None:
        check_config(
            self,
            ("vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd", "intermediate_size",
             "block_size"),
        )  # fmt: skip
        if self.n_head % self.n_kv_head:
            raise ValueError(
                f"LlamaConfig.n_head ({self.n_head}) must be a multiple of n_kv_head "
                f"({self.n_kv_head})"
            )
        if (self.n_embd // self.n_head) % 2:
            raise ValueError(
                f"LlamaConfig: head size {self.n_embd // self.n_head} must be even (RoPE "
                "rotates pairs of dimensions)"
            )
        for name in ("rope_theta", "norm_eps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"LlamaConfig.{name} must be positive, got {getattr(self, name)}")


def rotary_tables(
    start: int, length: int, head_dim: int, theta: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [length, head_dim] of positions ``start`` .. ``start + length - 1``:
    frequency ``theta ** (-2i / head_dim)`` for pair i, repeated for the two halves. fp32:
    positions in the thousands times the frequencies lose their phase in bf16."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim
    )
    positions = torch.arange(start, start + length, dtype=torch.float32, device=device)
    angles = positions[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate [B, heads, T, head_dim] ``x``: each pair (i, i + head_dim / 2) by its angle."""
    first, second = x.chunk(2, dim=-1)
    rotated = torch.cat([-second, first], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        d, self.head_dim = config.n_embd, config.n_embd // config.n_head
        kv_width = config.n_kv_head * self.head_dim
        self.rope_theta = config.rope_theta
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, kv_width, bias=False)
        self.v_proj = nn.Linear(d, kv_width, bias=False)
        self.out_proj = nn.Linear(d, d, bias=False)
        self.core = DotProductAttention(config.dropout)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        batch, seq_len, _ = x.shape
        q, k, v = (
            proj(x).view(batch, seq_len, -1, self.head_dim).transpose(1, 2)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        past = cache.length if cache is not None else 0
        cos, sin = rotary_tables(past, seq_len, self.head_dim, self.rope_theta, x.device)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        mask = None
        if cache is not None:
            mask = cache.mask(seq_len, x.device)
            k, v = cache.extend(self, k, v)
        group = q.shape[1] // k.shape[1]  # query heads per key/value head
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        y = self.core(q, k, v, mask=mask, is_causal=mask is None)
        return self.out_proj(y.transpose(1, 2).reshape(batch, seq_len, -1))


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Llama(CausalDecoder):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        norm = functools.partial(nn.RMSNorm, config.n_embd, eps=config.norm_eps)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.blocks = pre_norm_blocks(config, norm, Attention, MLP)
        self.ln_f = norm()
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.init_weights()

    def tie_weights(self) -> None:
        """With ``tie_embeddings`` the head is the token embedding's parameter (``to_empty()``
        on a meta-device model unties it; ``init_weights`` calls this)."""
        if self.config.tie_embeddings:
            self.lm_head.weight = self.wte.weight

    @torch.no_grad()
    def init_weights(self) -> None:
        """In place: Linear and embedding weights ~ N(0, init_std), RMSNorm weights 1; the
        projections writing into the residual stream (``out_proj``, ``down_proj``) use
        ``init_std / sqrt(2 * n_layer)`` as GPT-2 does, so the residual variance does not grow
        with depth. Ties the head first when the config says so."""
        self.tie_weights()
        tied = self.lm_head if self.config.tie_embeddings else None
        init_normal(self, self.config.init_std, tied=tied)
        for module in self.modules():
            if isinstance(module, nn.RMSNorm):
                nn.init.ones_(module.weight)
        init_residual(self.blocks, self.config.init_std, self.config.n_layer, "down_proj")

    def embed(self, input_ids: torch.Tensor, past: int) -> torch.Tensor:
        """The token embeddings alone: RoPE places positions inside attention."""
        return self.wte(input_ids)

    def num_params(self, exclude_embeddings: bool = False) -> int:
        """Distinct parameters (a tied head counts once); optionally without the token
        table. A DTensor reports its global numel."""
        total = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            total -= self.wte.weight.numel()
        return total

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token; see :func:`flops_per_token`."""
        return flops_per_token(self.config, seq_len)


def block_params(config: LlamaConfig) -> int:
    """Parameters of one block: attention (narrower K and V with fewer KV heads), SwiGLU,
    two RMSNorm weights."""
    d, inter = config.n_embd, config.intermediate_size
    kv_width = config.n_kv_head * (d // config.n_head)
    return 2 * d * d + 2 * d * kv_width + 3 * d * inter + 2 * d


def count_params(config: LlamaConfig, exclude_embeddings: bool = False) -> int:
    """Parameter count of ``Llama(config)`` from the config alone (equals ``num_params()``)."""
    d, V = config.n_embd, config.vocab_size
    embeddings = V * d
    head = 0 if config.tie_embeddings else V * d
    total = embeddings + config.n_layer * block_params(config) + d + head
    if exclude_embeddings:
        total -= embeddings
    return total


def flops_per_token(config: LlamaConfig, seq_len: int) -> float:
    """Training FLOPs per token, PaLM appendix B ``6N + 12 L H Q T`` as for GPT
    (``train.models.gpt.flops_per_token``): ``N`` counts the parameters of per-token matmuls,
    every parameter but the untied token table, which is a lookup (a tied table counts once,
    as the head's matmul). RoPE's rotations are elementwise and not counted."""
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    lookup = 0 if config.tie_embeddings else config.vocab_size * config.n_embd
    matmul_params = count_params(config) - lookup
    return 6.0 * matmul_params + 12.0 * config.n_layer * config.n_embd * seq_len
