"""Text from a decoder (a model of a causal-LM family): greedy, temperature, top-k and top-p
(nucleus) sampling.

The prompt runs through the model once; every next token is one forward step over the new
token alone, with the keys and values of the prefix kept in a :class:`KVCache`.
``use_cache=False`` recomputes the whole sequence per token instead; it exists so the cache
can be checked against it (both give the same tokens under greedy decoding).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from train.models.layers import KVCache


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen. ``temperature == 0`` is greedy (top-k/top-p unused)."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if not 0 <= self.temperature < math.inf:  # also refuses NaN
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def filter_logits(logits: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """[vocab] logits with everything outside the top-k and the top-p nucleus set to -inf.

    The nucleus is the smallest set of most likely tokens whose probability reaches ``top_p``
    (the token that crosses the threshold is kept, so it is never empty).
    """
    logits = logits.clone()
    if top_k is not None and top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits[logits < kth] = -torch.inf
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        # drop a token when the tokens before it already reach top_p
        drop_sorted = (cumulative - torch.softmax(sorted_logits, dim=-1)) >= top_p
        logits[order[drop_sorted]] = -torch.inf
    return logits


def next_token(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> int:
    """One token id from the [vocab] logits of the last position."""
    if sampling.temperature == 0:
        return int(torch.argmax(logits))
    filtered = filter_logits(logits.float() / sampling.temperature, sampling.top_k, sampling.top_p)
    probs = torch.softmax(filtered, dim=-1)
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))


@torch.no_grad()
def generate_tokens(
    model: nn.Module,
    prompt: list[int],
    sampling: Sampling,
    *,
    vocab_size: int | None = None,
    stop_id: int | None = None,
    use_cache: bool = True,
) -> Iterator[int]:
    """Yield up to ``sampling.max_new_tokens`` new ids after ``prompt`` (stops after
    ``stop_id``). ``vocab_size`` masks the padded embedding rows no tokenizer id maps to.

    The context is the model's ``block_size``: a longer prompt keeps only its last positions,
    and generation stops when the context is full (a cache cannot slide without recomputing).
    """
    if not prompt:
        raise ValueError("the prompt has no tokens (an empty prompt needs a start token)")
    model.eval()
    device = next(model.parameters()).device
    block_size = model.config.block_size
    context = list(prompt[-block_size:])
    generator = torch.Generator().manual_seed(sampling.seed)
    cache = KVCache() if use_cache else None
    step_input = context
    for _ in range(sampling.max_new_tokens):
        if len(context) > block_size:
            return
        ids = torch.tensor([step_input if use_cache else context], device=device)
        logits, _ = model(ids, cache=cache)
        last = logits[0, -1]
        if vocab_size is not None:
            last = last[:vocab_size]
        token = next_token(last, sampling, generator)
        yield token
        if token == stop_id:
            return
        context.append(token)
        step_input = [token]


class TextStream:
    """The text of a growing sequence of token ids, given out only as whole characters.

    A byte-level tokenizer's token may end inside a character (a Greek letter is two UTF-8
    bytes, often split across two tokens): its decoded text then ends in U+FFFD, which is held
    back until the next token completes the character. ``decode`` maps a list of ids to text.
    """

    def __init__(self, decode) -> None:
        self.decode = decode
        self.ids: list[int] = []
        self.given = 0  # characters of the decoded text already given out

    def push(self, token: int) -> str:
        """The new whole characters the text has with ``token`` added ("" while it ends
        inside a character)."""
        self.ids.append(token)
        text = self.decode(self.ids)
        whole = len(text.rstrip(REPLACEMENT))
        new, self.given = text[self.given : whole], max(self.given, whole)
        return new


REPLACEMENT = "\ufffd"  # what a decoder puts for bytes that are not (yet) a whole character
