"""LAMBADA: predict the last word of a passage (Paperno et al. 2016), as GPT-2 and Megatron-LM
score it zero-shot.

Input: JSON lines with a ``text`` field (the passage, last word included), the layout of
OpenAI's ``lambada_test.jsonl`` that Megatron-LM reads.

Two accuracies, as Megatron-LM's ``--strict-lambada`` switch gives them:

* strict: the context is the text before the last word; the target is every token of
  ``" " + last_word``; an example counts when all of them are predicted greedily;
* non-strict (Megatron's default): the whole text is tokenised and only its last token is
  predicted. With BPE this is easier (the word's first pieces are given).

The last-word perplexity is ``exp(summed nll of the strict targets / examples)``: per word,
whatever the number of tokens the tokenizer splits it into.

Memory: a tokenizer takes ~100-130 bytes per character of the string it encodes (its offsets
and merge queue), so only the end of a passage that the model sees is encoded (`encode_tail`),
and a word over MAX_WORD_CHARS characters, which would be encoded whole, is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.safe_io import UnsafeInputError, parse_json, read_text_capped
from train.eval.wikitext import EVAL_DATA_CAP, safe_exp

# LAMBADA's passages are novels' prose; a "word" this long is not one (a tokenizer would take
# ~100 bytes of memory per character of it).
MAX_WORD_CHARS = 1000
_LONG_WORD = re.compile(rf"\S{{{MAX_WORD_CHARS + 1}}}")
# Tokens encoded beyond what the model sees: the first few of an encoded tail may differ from
# the whole passage's (a BOS token, the word the tail starts with), and are dropped.
TAIL_MARGIN = 16
_WORD_BOUNDARY = re.compile(r"(?<=\S)\s(?=\S)")


def read_passages(path: str) -> list[str]:
    """The ``text`` of every JSON line of ``path`` (a regular file under EVAL_DATA_CAP);
    ValueError (one line) naming the first bad line, or one holding a word longer than
    MAX_WORD_CHARS characters."""
    passages = []
    for number, line in enumerate(
        read_text_capped(path, "eval data", EVAL_DATA_CAP).splitlines(), 1
    ):
        if not line.strip():
            continue
        try:
            record = parse_json(line, f"{path}:{number}")
        except UnsafeInputError as e:
            raise ValueError(str(e)) from None
        text = record.get("text") if isinstance(record, dict) else None
        if not isinstance(text, str) or not text.split():
            raise ValueError(f"{path}:{number}: no non-empty string 'text' field")
        if _LONG_WORD.search(text):
            raise ValueError(
                f"{path}:{number}: a word of more than {MAX_WORD_CHARS:,} characters; LAMBADA "
                "passages are prose"
            )
        passages.append(text)
    if not passages:
        raise ValueError(f"{path}: no passages")
    return passages


def split_last_word(text: str) -> tuple[str, str]:
    """(context, last word): the context is the text before the last whitespace-separated
    word, stripped."""
    last = text.split()[-1]
    return text[: text.rfind(last)].strip(), last


def encode_tail(encode: Callable[[str], list[int]], text: str, tokens: int) -> list[int]:
    """The last ``tokens`` ids of ``encode(text)`` (all of them for a shorter text), encoding
    only an end of ``text`` long enough to hold them: cut where a word starts, and
    TAIL_MARGIN ids longer than needed, so the ids kept are the whole text's. What is encoded
    grows with ``tokens``, not with the passage."""
    chars = 8 * (tokens + TAIL_MARGIN)
    while True:
        boundary = _WORD_BOUNDARY.search(text, max(len(text) - chars, 0))
        start = boundary.start() if boundary and chars < len(text) else 0
        ids = encode(text[start:])
        if start == 0:
            return ids[-tokens:]
        if len(ids) >= tokens + TAIL_MARGIN:
            return ids[-tokens:]
        chars *= 4


def strict_example(
    encode: Callable[[str], list[int]], text: str, window: int
) -> tuple[list[int], list[int]]:
    """(context, target): the target every token of the last word, the context the ids before
    it that fit the model's ``window`` of positions with it."""
    context, last = split_last_word(text)
    target = encode(" " + last)
    return encode_tail(encode, context, max(window + 1 - len(target), 1)), target


def loose_example(
    encode: Callable[[str], list[int]], text: str, window: int
) -> tuple[list[int], list[int]]:
    ids = encode_tail(encode, text, window + 1)
    return ids[:-1], ids[-1:]


@dataclass(frozen=True)
class LambadaResult:
    examples: int
    strict_correct: int
    loose_correct: int
    word_nll: float

    def to_json(self) -> dict:
        return {
            "examples": self.examples,
            "accuracy_strict": self.strict_correct / self.examples,
            "accuracy": self.loose_correct / self.examples,
            "last_word_ppl": safe_exp(self.word_nll / self.examples),
        }


def examples_for(
    encode: Callable[[str], list[int]], passages: Sequence[str], window: int
) -> tuple[list[tuple[list[int], list[int]]], list[tuple[list[int], list[int]]]]:
    """(strict, non-strict) examples for a model of ``window`` positions; a passage whose
    context encodes to nothing, or whose last word's tokens do not fit the window, is
    refused."""
    strict, loose = [], []
    for number, text in enumerate(passages, 1):
        s, n = strict_example(encode, text, window), loose_example(encode, text, window)
        if len(s[1]) > window:
            raise ValueError(
                f"passage {number}: its last word is {len(s[1]):,} tokens, more than the "
                f"model's {window:,} positions"
            )
        if not s[0] or not n[0] or not s[1]:
            raise ValueError(f"passage {number}: too short to split into context and last word")
        strict.append(s)
        loose.append(n)
    return strict, loose
