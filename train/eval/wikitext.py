"""WikiText perplexity as GPT-2 and Megatron-LM report it.

The test file is WikiText's word-level tokenisation (`` @-@ ``, `` , ``, `` 's``...). A BPE
model scores it better as the running text it came from, so the text is first detokenised
with the rules of the GPT-2 paper's invertible WikiText detokeniser, in the version
Megatron-LM's zero-shot evaluation applies (``tasks/zeroshot_gpt/detokenizer.py``).

Two perplexities come out of one pass (the same summed negative log-likelihood):

* per model token: ``exp(nll / scored_tokens)``;
* *adjusted* to WikiText's own tokens: ``exp(nll / (word_tokens - 1))``, where word_tokens is
  the number of space-separated tokens of the raw file (Megatron's count: the stripped text
  split on single spaces). This is the number comparable across tokenisers, and the one the
  GPT-2 paper (37.50 for 117M) and Megatron-LM (17.41 for 8.3B) report for WikiText-103.

Windows: every target token is scored exactly once. The first window scores all its
``context`` targets; each later window starts ``stride`` tokens on and scores only its last
``stride`` targets, so with ``stride < context`` every token after the first window is
predicted from at least ``context - stride`` tokens of context.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from common.safe_io import MIB

# Eval data is read whole: WikiText-103's test split is 1.3 MB, LAMBADA's 1.8 MB; even
# WikiText-103's training split (540 MB) is not something to score. The cap bounds a wrong path
# (--data /dev/zero read 7 GB before it failed).
EVAL_DATA_CAP = 256 * MIB

# (pattern, replacement, is_regex), applied in this order: contractions, WikiText's number
# separators, punctuation spacing, brackets and quotes, heading markers, odd leftovers.
_DETOKENIZER_RULES: tuple[tuple[str, str, bool], ...] = (
    ("s '", "s'", False),
    (r"/' [0-9]/", r"/'[0-9]/", True),
    (" @-@ ", "-", False),
    (" @,@ ", ",", False),
    (" @.@ ", ".", False),
    (" : ", ": ", False),
    (" ; ", "; ", False),
    (" . ", ". ", False),
    (" ! ", "! ", False),
    (" ? ", "? ", False),
    (" , ", ", ", False),
    (r"\(\s*([^\)]*?)\s*\)", r"(\1)", True),
    (r"\[\s*([^\]]*?)\s*\]", r"[\1]", True),
    (r"{\s*([^}]*?)\s*}", r"{\1}", True),
    (r"\"\s*([^\"]*?)\s*\"", r'"\1"', True),
    (r"'\s*([^']*?)\s*'", r"'\1'", True),
    ("= = = =", "====", False),
    ("= = =", "===", False),
    ("= =", "==", False),
    (" \N{DEGREE SIGN} ", "\N{DEGREE SIGN}", False),
    (" \n", "\n", False),
    ("\n ", "\n", False),
    (" N ", " 1 ", False),
    (" 's", "'s", False),
)
_COMPILED = tuple(
    (re.compile(pattern) if is_regex else pattern, replacement, is_regex)
    for pattern, replacement, is_regex in _DETOKENIZER_RULES
)


def detokenize(text: str) -> str:
    """WikiText's word-level tokens back to running text (`` @-@ `` -> ``-``, `` , `` -> ``,``...)."""
    for pattern, replacement, is_regex in _COMPILED:
        text = pattern.sub(replacement, text) if is_regex else text.replace(pattern, replacement)
    return text


def word_token_count(raw_text: str) -> int:
    """WikiText's own token count of the raw file, as Megatron-LM counts it (the stripped text
    split on single spaces; a newline is part of the token it touches)."""
    return len(raw_text.strip().split(" "))


@dataclass(frozen=True)
class Window:
    """Input ids ``[start, end)``. Target ``t`` is id ``t + 1``, predicted at input position
    ``t``: this window predicts targets ``[start, end)`` and scores those ``>= score_from``."""

    start: int
    end: int
    score_from: int


def windows(num_tokens: int, context: int, stride: int) -> list[Window]:
    """The evaluation windows over ``num_tokens`` ids; together they score each of the
    ``num_tokens - 1`` targets exactly once."""
    if context < 1:
        raise ValueError(f"--context must be >= 1, got {context}")
    if not 1 <= stride <= context:
        raise ValueError(f"--stride must be in [1, context={context}], got {stride}")
    targets = num_tokens - 1
    if targets < 1:
        raise ValueError("the text has fewer than two tokens: nothing to score")
    result = [Window(0, min(context, targets), 0)]
    while result[-1].end < targets:
        start = result[-1].start + stride
        end = min(start + context, targets)
        result.append(Window(start, end, result[-1].end))
    return result


@dataclass(frozen=True)
class Perplexity:
    nll: float  # summed negative log-likelihood (nats) of the scored tokens
    scored_tokens: int
    word_tokens: int | None = None  # WikiText's own count; None for other text

    @property
    def loss(self) -> float:
        return self.nll / self.scored_tokens

    @property
    def ppl(self) -> float:
        return safe_exp(self.loss)

    @property
    def adjusted_ppl(self) -> float | None:
        if self.word_tokens is None or self.word_tokens < 2:
            return None
        return safe_exp(self.nll / (self.word_tokens - 1))

    def to_json(self) -> dict:
        return {
            "loss": self.loss,
            "ppl": self.ppl,
            "adjusted_ppl": self.adjusted_ppl,
            "scored_tokens": self.scored_tokens,
            "word_tokens": self.word_tokens,
            "token_ratio": (
                self.scored_tokens / (self.word_tokens - 1)
                if self.word_tokens and self.word_tokens > 1
                else None
            ),
        }


def safe_exp(x: float) -> float:
    """exp, saturating to inf where math.exp would overflow (an untrained model's loss)."""
    return math.exp(x) if x < 700 else math.inf
