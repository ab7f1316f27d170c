"""13-gram decontamination against real evaluation sets (WikiText), Megatron's cutting rules."""

from __future__ import annotations

import json
import re

import pytest

from pipelines.dedup import decontaminate as dc
from pipelines.document import Document, Reject
from tests.helpers.dedup_decontaminate import (
    CORPORA,
    WIKITEXT_103_VALID,
    book_paragraphs,
    detokenize,
    wikitext_paragraphs,
)

WIKITEXT_2_TEST = CORPORA / "wikitext" / "wikitext-2" / "wiki.test.tokens"
CONFIG = dc.DecontaminationConfig(eval_files=(str(WIKITEXT_2_TEST),))


@pytest.fixture(scope="module")
def evals() -> dc.NgramSet:
    return dc.eval_file_ngrams(str(WIKITEXT_2_TEST), 13, 8)


def test_eval_ngrams_of_wikitext(evals):
    # WikiText-2 test: 245k tokens, most lines paragraphs of > 13 words.
    assert len(evals) > 150_000
    assert evals.lengths[0] == 13 and all(8 <= n <= 13 for n in evals.lengths)
    assert (evals.hashes[1:] > evals.hashes[:-1]).all()  # sorted, unique


def test_planted_wikipedia_paragraph_is_cut_with_megatron_margins(evals):
    book = book_paragraphs()[10:16]
    planted = detokenize(wikitext_paragraphs(WIKITEXT_2_TEST)[0])
    text = "\n\n".join(book[:3] + [planted] + book[3:])
    doc = Document("books:moby:planted", "books", text)
    result, matches = dc.decontaminate(doc, evals, dc.NgramSet.merge([]), CONFIG)
    assert isinstance(result, Document) and result.id == doc.id and matches > 0
    assert "decontaminated" in result.meta
    # Nothing of the evaluation text is left, and the book text far from it is all kept.
    assert not dc.find_matches(result.text, evals, dc.NgramSet.merge([]))
    assert book[0] in result.text and book[5] in result.text
    # Megatron's margins: the kept text ends at the last sentence end at least 200 characters
    # before the first match, and resumes after a sentence end at least 200 characters after a
    # match, past every 13-gram of the evaluation text.
    matches = dc.find_matches(text, evals, dc.NgramSet.merge([]))
    planted_at = text.index(planted)
    assert planted_at <= matches[0][0] and matches[-1][1] <= planted_at + len(planted)
    cut_from = max(i for i in range(matches[0][0] - 200 + 1) if text[i] in ".!?")
    head = text[: cut_from + 1].strip() + "\n\n"
    assert result.text.startswith(head)
    resume = text.index(result.text[len(head) :])
    assert text[:resume].rstrip()[-1] in ".!?"
    assert resume >= planted_at + len(planted) - 100 and any(m[1] + 200 <= resume for m in matches)


def test_document_that_is_mostly_evaluation_text_is_rejected(evals):
    planted = " ".join(detokenize(p) for p in wikitext_paragraphs(WIKITEXT_2_TEST)[:3])
    doc = Document("webtext:copy", "webtext", "Reposted from Wikipedia. " + planted)
    result, matches = dc.decontaminate(doc, evals, dc.NgramSet.merge([]), CONFIG)
    assert isinstance(result, Reject) and result.reason == "contamination"
    assert "no piece long enough" in result.detail and result.text == doc.text and matches > 10


def test_more_than_ten_pieces_rejects_the_document(evals):
    book = [p for p in book_paragraphs() if len(p) > 1200]  # each keeps a piece between cuts
    sentences = [
        s
        for s in re.split(r"(?<=\.) ", detokenize(wikitext_paragraphs(WIKITEXT_2_TEST)[4]))
        if len(s.split()) > 14
    ]
    assert len(sentences) >= 3
    parts = []
    for i in range(12):
        parts += [book[i], sentences[i % len(sentences)]]
    parts.append(book[12])
    doc = Document("books:interleaved", "books", "\n\n".join(parts))
    result, _ = dc.decontaminate(doc, evals, dc.NgramSet.merge([]), CONFIG)
    assert isinstance(result, Reject) and "pieces > 10" in result.detail


def test_cut_matches_keeps_megatron_piece_rules():
    sentence = "Call me Ishmael. " * 30  # 510 characters of sentences
    text = sentence + "EVAL MATCH HERE" + " and then." + sentence
    start = text.index("EVAL")
    pieces = dc.cut_matches(text, [(start, start + 15, 0)], remove_chars=200, min_piece_chars=200)
    assert len(pieces) == 2
    assert pieces[0].endswith(".") and len(pieces[0]) <= start - 200 + 1
    assert text.endswith(pieces[1]) and len(text) - len(pieces[1]) >= start + 15 + 200
    assert text[len(text) - len(pieces[1]) - 1] == "."
    # Too little left on either side: nothing is kept.
    short = "Short intro. EVAL MATCH HERE and a short end."
    assert dc.cut_matches(short, [(13, 28, 0)], 200, 200) == []
    assert dc.cut_matches(short, [], 200, 200) == [short]


def test_jsonl_eval_files_and_their_errors(tmp_path):
    lines = wikitext_paragraphs(WIKITEXT_103_VALID)[:3]
    good = tmp_path / "lambada_test.jsonl"
    good.write_text("".join(json.dumps({"text": detokenize(t)}) + "\n" for t in lines) + "\n")
    ngrams = dc.eval_file_ngrams(str(good), 13, 8)
    assert len(ngrams) > 100
    # The same text in WikiText's tokenised form and as prose gives the same n-grams.
    tokens = dc.NgramSet.merge([dc.eval_ngrams(t, 13, 8) for t in lines])
    assert set(ngrams.hashes.tolist()) == set(tokens.hashes.tolist())
    short = tmp_path / "short.jsonl"
    short.write_text(json.dumps({"text": "one two three four five six seven eight nine"}) + "\n")
    assert dc.eval_file_ngrams(str(short), 13, 8).lengths == (9,)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"question": "no text"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: a JSON line needs a \"text\" string"):
        list(dc.read_eval_texts(str(bad)))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": \n')
    with pytest.raises(ValueError, match="broken.jsonl:1: not valid JSON"):
        list(dc.read_eval_texts(str(broken)))
