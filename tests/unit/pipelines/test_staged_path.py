"""One result by either path: the staged run (preprocess --write-cleaned, python -m
pipelines.dedup, preprocess --source parquet) keeps the documents the one-pass run keeps. The
web source drops pages under 128 tokens; its cleaned documents carry that floor
(document.MIN_TOKENS_META), which the last pass applies though the parquet source's own is 0."""

from __future__ import annotations

from tests.conftest import CORPORA

# Ten real WebText pages, two of them under 128 GPT-2 tokens once cleaned.
WEB_TEXT = CORPORA / "web" / "text" / "webtext_train_10"


def test_a_documents_floor_is_the_higher_of_its_own_and_the_runs(gpt2_tokenizer):
    """tokenize_batch holds a document to the floor it carries where that is higher than the
    run's; a carried value that is no whole number carries nothing (the file is input)."""
    from pipelines.document import MIN_TOKENS_META, Document, with_min_tokens
    from pipelines.tokenize.encode import tokenize_batch

    text = (WEB_TEXT / "1.txt").read_text(encoding="utf-8")
    tokens = len(gpt2_tokenizer.encode_batch([text])[0])
    doc = Document("d", "parquet", text)
    for floor, run_floor, kept in [
        (tokens + 1, 0, False), (tokens, 0, True), (0, tokens + 1, False), (tokens + 1, 1, False),
    ]:
        docs, rejects = tokenize_batch([with_min_tokens(doc, floor)], gpt2_tokenizer,
                                       split_sentences=False, append_eod=False,
                                       min_tokens=run_floor)
        assert (len(docs), len(rejects)) == ((1, 0) if kept else (0, 1))
    for bad in ("-5", "1e9", "many", "²", "9" * 5000):
        carrying = Document("d", "parquet", text, meta={MIN_TOKENS_META: bad})
        docs, _ = tokenize_batch([carrying], gpt2_tokenizer, split_sentences=False,
                                 append_eod=False)
        assert len(docs) == 1
