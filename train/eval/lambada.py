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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.safe_io import UnsafeInputError, parse_json, read_text_capped
from train.eval.wikitext import EVAL_DATA_CAP, safe_exp


def read_passages(path: str) -> list[str]:
    """The ``text`` of every JSON line of ``path`` (a regular file under EVAL_DATA_CAP);
    ValueError (one line) naming the first bad line."""
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
        passages.append(text)
    if not passages:
        raise ValueError(f"{path}: no passages")
    return passages


def split_last_word(text: str) -> tuple[str, str]:
    """(context, last word): the context is the text before the last whitespace-separated
    word, stripped."""
    last = text.split()[-1]
    return text[: text.rfind(last)].strip(), last


def strict_example(encode: Callable[[str], list[int]], text: str) -> tuple[list[int], list[int]]:
    context, last = split_last_word(text)
    return encode(context), encode(" " + last)


def loose_example(encode: Callable[[str], list[int]], text: str) -> tuple[list[int], list[int]]:
    ids = encode(text)
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
    encode: Callable[[str], list[int]], passages: Sequence[str]
) -> tuple[list[tuple[list[int], list[int]]], list[tuple[list[int], list[int]]]]:
    """(strict, non-strict) examples; a passage whose context encodes to nothing is refused."""
    strict, loose = [], []
    for number, text in enumerate(passages, 1):
        s, n = strict_example(encode, text), loose_example(encode, text)
        if not s[0] or not n[0] or not s[1]:
            raise ValueError(f"passage {number}: too short to split into context and last word")
        strict.append(s)
        loose.append(n)
    return strict, loose
