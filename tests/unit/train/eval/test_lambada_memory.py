"""LAMBADA's memory goes with what the model sees, not with the passage: only the end of a
passage that fits the model's window is tokenized (a tokenizer takes ~100 bytes per character
it encodes), and a word too long to be one is refused in one line. Passages from real
WikiText-2 test text."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CORPORA
from train.eval import lambada, wikitext

WIKITEXT2_TEST = CORPORA / "wikitext" / "wikitext-2" / "wiki.test.tokens"


@pytest.fixture(scope="module")
def prose() -> str:
    """WikiText-2's test split, detokenized: 1.2 MB of real prose."""
    return wikitext.detokenize(WIKITEXT2_TEST.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def encoded(gpt2_tokenizer, prose) -> dict:
    """The whole passage's ids, and its context's and last word's, each encoded whole."""
    context, last = lambada.split_last_word(prose)
    return {
        "whole": gpt2_tokenizer.encode(prose).ids,
        "context": gpt2_tokenizer.encode(context).ids,
        "target": gpt2_tokenizer.encode(" " + last).ids,
    }


def test_a_word_over_the_cap_is_refused_in_one_line(tmp_path, prose):
    words = prose.split()
    path = tmp_path / "lambada.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"text": " ".join(words[:40])}) + "\n")
        f.write(json.dumps({"text": " ".join(words[40:80]) + " " + "".join(words)}) + "\n")
    with pytest.raises(ValueError) as refused:
        lambada.read_passages(str(path))
    assert str(refused.value) == (
        f"{path}:2: a word of more than 1,000 characters; LAMBADA passages are prose"
    )
    fine = " ".join(words[:40]) + " " + "".join(words[40:200])[: lambada.MAX_WORD_CHARS]
    path.write_text(json.dumps({"text": fine}) + "\n", encoding="utf-8")
    assert lambada.read_passages(str(path)) == [fine]


@pytest.mark.parametrize("window", [8, 64, 1024])
def test_only_the_end_a_model_sees_is_tokenized_and_it_is_the_whole_passages(
    gpt2_tokenizer, prose, encoded, window
):
    """A 1.2 MB passage: every string given to the tokenizer stays within a few characters per
    position of the window, and the examples are those of the whole passage's tokens."""
    lengths = []

    def encode(text: str) -> list[int]:
        lengths.append(len(text))
        return gpt2_tokenizer.encode(text).ids

    (strict,), (loose,) = lambada.examples_for(encode, [prose], window)
    assert max(lengths) <= 32 * (window + lambada.TAIL_MARGIN) < len(prose) // 30
    target, whole = encoded["target"], encoded["whole"]
    assert strict == (encoded["context"][-(window + 1 - len(target)) :], target)
    assert loose == (whole[-(window + 1) : -1], whole[-1:])


def test_a_last_word_longer_than_the_window_is_refused(gpt2_tokenizer, prose):
    words = prose.split()
    passage = " ".join(words[:30]) + " " + "".join(words[30:40])
    target = gpt2_tokenizer.encode(" " + "".join(words[30:40])).ids
    with pytest.raises(ValueError) as refused:
        lambada.examples_for(lambda t: gpt2_tokenizer.encode(t).ids, [passage], 8)
    assert str(refused.value) == (
        f"passage 1: its last word is {len(target)} tokens, more than the model's 8 positions"
    )
