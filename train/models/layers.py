"""What the model families share: config checks, multi-head attention, the KV cache of
generation, the pre-norm block and forward pass of the causal decoders, initialisation, the
losses.

Attention keeps separate ``q_proj``/``k_proj``/``v_proj``/``out_proj`` Linear layers (the
tensor-parallel plans shard them by name) and counts heads from the projected tensor's shape,
so a tensor-parallel shard holding ``n_head / tp`` heads runs the same code. The fused
kernel call sits in its own parameter-free module, :class:`DotProductAttention`, so that
tensor parallelism can run it under a per-rank random stream (its dropout acts on this
rank's own heads; see ``train.parallel.rng``) without touching the dropouts around it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def check_config(config, int_fields: tuple[str, ...]) -> None:
    """ValueError naming the field unless ``int_fields`` are positive ints, n_embd divides
    into heads, dropout is in [0, 1) and init_std is positive."""
    kind = type(config).__name__
    for name in int_fields:
        value = getattr(config, name)
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{kind}.{name} must be a positive int, got {value!r}")
    if config.n_embd % config.n_head != 0:
        raise ValueError(
            f"{kind}.n_embd ({config.n_embd}) must be divisible by n_head ({config.n_head})"
        )
    if not 0.0 <= config.dropout < 1.0:
        raise ValueError(f"{kind}.dropout must be in [0, 1), got {config.dropout}")
    if config.init_std <= 0:
        raise ValueError(f"{kind}.init_std must be positive, got {config.init_std}")


class KVCache:
    """Keys and values of every position seen so far, per attention module (generation only).

    Pass the same cache to successive ``forward`` calls of a decoder: the first with the prompt, each
    next one with only the new tokens. Positions continue from ``length``.
    """

    def __init__(self) -> None:
        # per attention layer, its keys and values so far ([B, H_kv, T, D]: un-repeated heads)
        self.keys_values: dict[nn.Module, tuple[torch.Tensor, torch.Tensor]] = {}
        self.length = 0

    def extend(
        self, layer: nn.Module, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this call's [B, H, T, D] keys/values for ``layer``; return all of them."""
        if layer in self.keys_values:
            past_k, past_v = self.keys_values[layer]
            k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        self.keys_values[layer] = (k, v)
        return k, v

    def mask(self, seq_len: int, device: torch.device) -> torch.Tensor | None:
        """The attention mask of ``seq_len`` new queries after the cached positions; None
        before any (plain causal attention). Query i sits at position ``length + i``: it sees
        every cached key and the new ones up to itself (``is_causal`` would align the
        triangle to the top-left instead)."""
        if self.length == 0:
            return None
        mask = torch.ones(seq_len, self.length + seq_len, dtype=torch.bool, device=device)
        return mask.tril(diagonal=self.length)


class DotProductAttention(nn.Module):
    """``F.scaled_dot_product_attention`` with attention dropout while training: the fused
    flash / cuDNN kernels when there is no mask, the memory-efficient one with a mask."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.dropout = dropout

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0,
            is_causal=is_causal,
        )  # fmt: skip


class MultiHeadAttention(nn.Module):
    """Projections in, fused attention, projection out; the models' attention modules
    subclass it and add what is theirs (GPT's causal mask and KV cache)."""

    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool = True) -> None:
        super().__init__()
        self.head_dim = n_embd // n_head
        self.q_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.k_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.v_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.out_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.core = DotProductAttention(dropout)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as [B, heads, T, head_dim]; -1 heads: a tensor-parallel shard holds only
        this rank's heads."""
        batch, seq_len, _ = x.shape
        return tuple(
            proj(x).view(batch, seq_len, -1, self.head_dim).transpose(1, 2)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )

    def merge(self, y: torch.Tensor) -> torch.Tensor:
        """[B, heads, T, head_dim] back to [B, T, d] through the output projection."""
        batch, _, seq_len, _ = y.shape
        return self.out_proj(y.transpose(1, 2).reshape(batch, seq_len, -1))


class PreNormBlock(nn.Module):
    """Pre-norm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x)). The family gives
    its norms, attention and MLP, registered in that order (their names are the tensor-parallel
    plans' and the Hugging Face mappings')."""

    def __init__(self, ln_1: nn.Module, attn: nn.Module, ln_2: nn.Module, mlp: nn.Module) -> None:
        super().__init__()
        self.ln_1 = ln_1
        self.attn = attn
        self.ln_2 = ln_2
        self.mlp = mlp

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cache)
        return x + self.mlp(self.ln_2(x))


def pre_norm_blocks(
    config, norm: Callable[[], nn.Module], attention: type[nn.Module], mlp: type[nn.Module]
) -> nn.ModuleList:
    """``config.n_layer`` :class:`PreNormBlock` s of ``norm()``, ``attention(config)``,
    ``norm()`` and ``mlp(config)``, built in that order."""
    return nn.ModuleList(
        PreNormBlock(norm(), attention(config), norm(), mlp(config)) for _ in range(config.n_layer)
    )


class CausalDecoder(nn.Module):
    """The forward pass of the causal decoder families: embed, the blocks, the final norm, the
    LM head and the masked loss. A subclass holds ``config.block_size``, ``blocks``, ``ln_f``
    and ``lm_head``, and embeds tokens with ``embed(input_ids, past)``, ``past`` being the
    position of the first one."""

    def forward(
        self,
        input_ids: torch.Tensor,
        targets: torch.Tensor | None = None,
        loss_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Return ``(logits [B, T, vocab], loss)``.

        ``targets`` are the already-shifted next tokens ([B, T]); a target of -100 is ignored.
        ``loss_mask`` ([B, T], 1 = counts) further restricts which positions count. The loss is
        the mean cross entropy over the counted positions (0 if none count), computed in fp32
        even under autocast. ``loss`` is None when ``targets`` is None. With a ``cache``,
        ``input_ids`` continue the cached positions (see :class:`KVCache`).
        """
        _, seq_len = input_ids.shape
        past = cache.length if cache is not None else 0
        if past + seq_len > self.config.block_size:
            raise ValueError(
                f"sequence length {past + seq_len} exceeds the model's block_size "
                f"{self.config.block_size}"
            )
        x = self.embed(input_ids, past)
        for block in self.blocks:
            x = block(x, cache)
        if cache is not None:
            cache.length = past + seq_len
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            if loss_mask is not None:
                raise ValueError("loss_mask was given without targets")
            return logits, None
        return logits, masked_cross_entropy(logits, targets, loss_mask)


@torch.no_grad()
def init_normal(model: nn.Module, std: float, tied: nn.Module) -> None:
    """Linear and embedding weights ~ N(0, std), biases 0, LayerNorm 1/0, in place; ``tied``
    (the output head sharing the word embeddings) keeps the embedding's draw."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            if module is not tied:
                nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


@torch.no_grad()
def init_residual(blocks: nn.ModuleList, init_std: float, n_layer: int, mlp_out: str) -> None:
    """Re-draw the two projections of each block that write into the residual stream
    (``attn.out_proj`` and the MLP's ``mlp_out``) from N(0, init_std / sqrt(2 * n_layer)), so
    the residual variance does not grow with depth (GPT-2 paper, section 2.3: two residual
    additions per layer)."""
    residual_std = init_std / math.sqrt(2 * n_layer)
    for block in blocks:
        nn.init.normal_(block.attn.out_proj.weight, mean=0.0, std=residual_std)
        nn.init.normal_(getattr(block.mlp, mlp_out).weight, mean=0.0, std=residual_std)


def mean_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean fp32 cross entropy over labels != -100 (fp32: bf16 logits lose too much over a
    large vocabulary); 0, not NaN, when none counts. The count stays on the device: no host
    sync, one compiled graph for any number of counted positions."""
    total = F.cross_entropy(
        logits.float().flatten(0, -2), labels.flatten(), ignore_index=-100, reduction="sum"
    )
    return total / (labels != -100).sum().clamp(min=1)


def masked_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, loss_mask: torch.Tensor | None
) -> torch.Tensor:
    """Mean token cross entropy over positions with target != -100 and loss_mask != 0."""
    if targets.shape != logits.shape[:-1]:
        raise ValueError(
            f"targets shape {tuple(targets.shape)} does not match logits {tuple(logits.shape[:-1])}"
        )
    if loss_mask is not None and loss_mask.shape != targets.shape:
        raise ValueError(
            f"loss_mask shape {tuple(loss_mask.shape)} does not match targets "
            f"{tuple(targets.shape)}"
        )
    # fp32 log-softmax: bf16 logits lose too much precision over a 50k vocabulary.
    per_token = F.cross_entropy(
        logits.float().flatten(0, -2), targets.flatten(), ignore_index=-100, reduction="none"
    )
    counted = targets.flatten() != -100
    if loss_mask is not None:
        counted = counted & (loss_mask.flatten() != 0)
    counted = counted.to(per_token.dtype)
    # clamp: a batch with nothing to predict gives loss 0 (and zero gradients), not NaN.
    return (per_token * counted).sum() / counted.sum().clamp(min=1.0)
