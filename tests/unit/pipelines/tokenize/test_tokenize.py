from __future__ import annotations

import base64
import hashlib
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from dataset_format.tokenizer import (
    EOD_TOKEN,
    MAX_TOKENIZER_FILE_BYTES,
    TextTokenizer,
    gpt2_byte_to_unicode,
    load_tokenizer,
)
from pipelines.document import Document
from pipelines.sentences import split_sentences
from pipelines.tokenize.encode import tokenize_batch
from tests.conftest import BERT_VOCAB, CORPORA
from tests.conftest import GPT2_VOCAB as GPT2

BOOKS = CORPORA / "books"
WEBTEXT = CORPORA / "web" / "text" / "webtext_train_10"


@pytest.fixture(scope="module")
def gpt2() -> TextTokenizer:
    return load_tokenizer(str(GPT2))


@pytest.fixture(scope="module")
def bert() -> TextTokenizer:
    return load_tokenizer(str(BERT_VOCAB))


def _webtext() -> list[str]:
    return [p.read_text("utf-8") for p in sorted(WEBTEXT.glob("*.txt"), key=lambda p: int(p.stem))]


def _corpus_sample() -> list[str]:
    books = [p.read_text("utf-8") for p in sorted(BOOKS.glob("*.txt"))]
    wikitext = [p.read_text("utf-8") for p in sorted((CORPORA / "wikitext").glob("*/*.tokens"))]
    return books + _webtext() + wikitext


def _same_ids(left: list[np.ndarray], right: list[np.ndarray]) -> bool:
    return len(left) == len(right) and all(np.array_equal(a, b) for a, b in zip(left, right))


# --- loading -------------------------------------------------------------------------------


def test_gpt2_from_directory_or_file_pair(gpt2):
    assert gpt2.kind == "byte_level_bpe"
    assert gpt2.vocab_size == 50257
    assert gpt2.special_ids == {"eod": 50256}
    pair = load_tokenizer(f"{GPT2 / 'vocab.json'},{GPT2 / 'merges.txt'}")
    swapped = load_tokenizer(f"{GPT2 / 'merges.txt'},{GPT2 / 'vocab.json'}")
    assert pair.identity() == swapped.identity() == gpt2.identity()


@pytest.mark.parametrize(
    "files, spec",
    [
        (("encoder.json", "vocab.bpe"), "{dir}"),  # OpenAI's original GPT-2 file names
        (("encoder.json", "vocab.bpe"), "{dir}/vocab.bpe,{dir}/encoder.json"),
        (("gpt2.tiktoken",), "{dir}"),  # tiktoken's ranks file
        (("gpt2.tiktoken",), "{dir}/gpt2.tiktoken"),
    ],
)
def test_gpt2_from_openai_and_tiktoken_files(gpt2, tmp_path, files, spec):
    # Each layout alone, copied from the shared GPT-2 vocabulary (all three forms are there).
    for name in files:
        (tmp_path / name).write_bytes((GPT2 / name).read_bytes())
    tokenizer = load_tokenizer(spec.format(dir=tmp_path))
    # The same vocabulary and merges give the very same tokenizer JSON, hence the same ids.
    assert tokenizer.identity() == gpt2.identity()
    assert tokenizer.uses_fast_path
    texts = _webtext() + [(BOOKS / "pg1080.txt").read_text("utf-8")]
    assert _same_ids(tokenizer.encode_batch_hf(texts), gpt2.encode_batch(texts))


def test_bad_tiktoken_files_are_clear_errors(tmp_path):
    lines = (GPT2 / "gpt2.tiktoken").read_text("utf-8").splitlines()
    cases = {
        "garbled.tiktoken": (lines[:300] + ["not-base64!! 300"], r"garbled.tiktoken:301: expected"),
        "no_bytes.tiktoken": (lines[10:], "some of the 256 bytes have no rank"),
        # "Ġt" (rank 256) dropped: "Ġthe" can no longer be made by one merge.
        "not_bpe.tiktoken": (lines[:256] + lines[257:], "not a BPE ranks file"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_text("\n".join(content) + "\n", "utf-8")
        with pytest.raises(ValueError, match=message):
            load_tokenizer(str(tmp_path / name))
    with pytest.raises(ValueError, match="3 \\*.tiktoken files"):
        load_tokenizer(str(tmp_path))


def test_gpt2_known_ids(gpt2):
    # Published GPT-2 ids: "Hello" 15496, " world" 995; a leading space is part of the token.
    assert gpt2.encode_batch(["Hello world", " Hello"])[0].tolist() == [15496, 995]
    assert gpt2.encode_batch([" Hello"])[0].tolist() == [18435]
    assert gpt2.encode_batch([EOD_TOKEN])[0].tolist() != [50256]


def test_literal_special_token_in_text_is_text_on_both_paths(gpt2):
    text = f"a page that quotes {EOD_TOKEN} in its body"
    fast, slow = gpt2.encode_batch([text]), gpt2.encode_batch_hf([text])
    assert _same_ids(fast, slow)
    assert 50256 not in fast[0].tolist()


def test_fast_path_ranks_equal_the_published_tiktoken_file(gpt2):
    from dataset_format.tokenizer import tiktoken_ranks

    ranks, special = tiktoken_ranks(json.loads(gpt2.to_json()))
    published = {}
    for line in (GPT2 / "gpt2.tiktoken").read_text().splitlines():
        token, rank = line.split()
        published[base64.b64decode(token)] = int(rank)
    assert ranks == published
    assert special == {EOD_TOKEN: 50256}
    assert sorted(gpt2_byte_to_unicode()) == list(range(256))
    assert len(set(gpt2_byte_to_unicode().values())) == 256


def test_fast_path_ids_identical_to_tokenizers_on_web_and_book_text(gpt2):
    assert gpt2.uses_fast_path
    texts = _webtext() + [(BOOKS / "41-0.txt").read_text("utf-8")]
    assert _same_ids(gpt2.encode_batch(texts), gpt2.encode_batch_hf(texts))


@pytest.mark.slow
def test_fast_path_ids_identical_to_tokenizers_on_whole_corpus_sample(gpt2):
    texts = _corpus_sample()
    assert sum(len(t) for t in texts) > 5_000_000
    fast, slow = gpt2.encode_batch(texts), gpt2.encode_batch_hf(texts)
    assert _same_ids(fast, slow)


def test_fast_path_only_for_plain_byte_level_bpe(gpt2, bert):
    from tokenizers import Tokenizer, normalizers, pre_tokenizers

    assert not bert.uses_fast_path
    with_normalizer = Tokenizer.from_str(gpt2.to_json())
    with_normalizer.normalizer = normalizers.NFKC()
    with_prefix_space = Tokenizer.from_str(gpt2.to_json())
    with_prefix_space.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    text = ["ﬁne Ｆｕｌｌ width", "Hello world"]
    for variant in (with_normalizer, with_prefix_space):
        tokenizer = TextTokenizer(variant.to_str())
        assert tokenizer.kind == "byte_level_bpe" and not tokenizer.uses_fast_path
        # Falls back to tokenizers, which applies the change the fast path would have missed.
        assert not _same_ids(tokenizer.encode_batch(text), gpt2.encode_batch(text))


def test_bert_wordpiece_matches_transformers(bert):
    from transformers import BertTokenizer

    assert bert.kind == "wordpiece"
    assert bert.special_ids == {"cls": 101, "sep": 102, "mask": 103, "pad": 0, "unk": 100}
    reference = BertTokenizer(str(BERT_VOCAB), do_lower_case=True)
    texts = _webtext() + [(BOOKS / "Candide-fr.txt").read_text("utf-8")[20_000:40_000]]
    expected = reference(texts, add_special_tokens=False)["input_ids"]
    assert [ids.tolist() for ids in bert.encode_batch(texts)] == expected


def test_bert_lowercase_default_and_override(bert):
    # The path says "uncased": lower-casing is on; lowercase=False keeps capitals, which this
    # vocabulary has no pieces for.
    assert bert.encode_batch(["Hello"])[0].tolist() == [7592]
    cased = load_tokenizer(str(BERT_VOCAB), lowercase=False)
    assert cased.encode_batch(["Hello"])[0].tolist() != [7592]
    assert cased.encode_batch(["hello"])[0].tolist() == [7592]


def test_bert_lowercase_inferred_from_vocabulary(tmp_path):
    copy = tmp_path / "my-vocab" / "vocab.txt"
    copy.parent.mkdir()
    copy.write_bytes(BERT_VOCAB.read_bytes())
    assert load_tokenizer(str(copy)).encode_batch(["Hello"])[0].tolist() == [7592]


def test_tokenizer_pickles_as_json_and_builds_lazily(gpt2):
    gpt2.encode_batch(["warm up"])
    payload = pickle.dumps(gpt2)
    assert len(payload) < len(gpt2.to_json().encode("utf-8")) + 1000  # the JSON, no Rust objects
    clone = pickle.loads(payload)
    assert clone._hf is None and clone._fast is None
    assert clone.identity() == gpt2.identity()
    assert _same_ids(clone.encode_batch(["Hello world"]), gpt2.encode_batch(["Hello world"]))


def test_save_and_reload(gpt2, bert, tmp_path):
    for tokenizer in (gpt2, bert):
        path = tmp_path / f"{tokenizer.kind}.json"
        tokenizer.save(str(path))
        assert hashlib.sha256(path.read_bytes()).hexdigest() == tokenizer.identity()["sha256"]
        reloaded = load_tokenizer(str(path))
        assert reloaded.identity() == tokenizer.identity()
        text = ["Call me Ishmael. Some years ago—never mind how long precisely."]
        assert _same_ids(reloaded.encode_batch(text), tokenizer.encode_batch(text))


def _pipeline_saved_bert_json(tmp_path: Path) -> Path:
    """A tokenizer.json as a BERT fine-tuning pipeline saves it: the real bert-base-uncased
    WordPiece with padding to 128 and truncation at 128 switched on."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(load_tokenizer(str(BERT_VOCAB)).to_json())
    tokenizer.enable_padding(length=128)
    tokenizer.enable_truncation(128)
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def test_padding_and_truncation_of_a_saved_tokenizer_are_switched_off(bert, tmp_path):
    from pipelines.tokenize.tokenizer_ref import TokenizerRef

    path = _pipeline_saved_bert_json(tmp_path)
    tokenizer = load_tokenizer(str(path))
    assert set(tokenizer.disabled) == {"padding", "truncation"}
    assert tokenizer.disabled["truncation"]["max_length"] == 128
    # A Modest Proposal (real Gutenberg book), one sequence per sentence as for BERT.
    book = Document("pg1080", "books", (BOOKS / "pg1080.txt").read_text("utf-8-sig"))
    (result,), _ = tokenize_batch([book], tokenizer, split_sentences=True, append_eod=False)
    sentences = split_sentences(book.text)
    expected = bert.encode_batch(sentences)  # the same vocabulary, never padded or truncated
    assert sum(len(ids) > 128 for ids in expected) >= 3  # the book has sentences over 128
    assert _same_ids(list(result.sequences), expected)
    assert tokenizer.special_ids["pad"] not in np.concatenate(result.sequences).tolist()
    # The file the workers load and the shard set ships has neither setting, and the run's
    # reference to it carries what was switched off (the manifest records it).
    ref = TokenizerRef.save(tokenizer, str(tmp_path / "out" / "tokenizer.json"))
    shipped = json.loads((tmp_path / "out" / "tokenizer.json").read_text("utf-8"))
    assert shipped["padding"] is None and shipped["truncation"] is None
    assert ref.disabled == tokenizer.disabled
    # nothing left to switch off in the file workers load
    assert TextTokenizer(ref.read_json().decode("utf-8")).disabled == {}
    assert ref.load().to_json() == tokenizer.to_json()
    assert pickle.loads(pickle.dumps(tokenizer)).disabled == tokenizer.disabled


def test_a_worker_refuses_a_tokenizer_file_changed_since_the_run_started(
    gpt2, tmp_path, monkeypatch
):
    from pipelines.tokenize import tokenizer_ref
    from pipelines.tokenize.tokenizer_ref import TokenizerRef

    path = tmp_path / "out" / "tokenizer.json"
    ref = TokenizerRef.save(gpt2, str(path))
    assert ref.read_json() == gpt2.to_json().encode("utf-8")
    path.write_bytes(path.read_bytes().replace(b"<|endoftext|>", b"<|endoftxet|>"))
    with pytest.raises(RuntimeError, match="sha256 differs"):
        ref.read_json()
    # A file grown past the cap is refused after cap + 1 bytes, not read whole first.
    from pipelines.write import OutputDir

    monkeypatch.setattr(tokenizer_ref, "MAX_TOKENIZER_FILE_BYTES", 4096)
    real_read, reads = OutputDir.read_bytes, []

    def read_bytes(self, name, limit=None):
        reads.append(real_read(self, name, limit))
        return reads[-1]

    monkeypatch.setattr(OutputDir, "read_bytes", read_bytes)
    with pytest.raises(RuntimeError, match="larger than a tokenizer file's cap of 4 KiB"):
        ref.read_json()
    assert len(reads[-1]) == 4097


def test_shard_set_manifest_records_the_switched_off_settings(tmp_path):
    from pipelines.graph import plan_run, shard_set_spec
    from pipelines.options import PreprocessConfig
    from pipelines.tokenize.tokenizer_ref import TokenizerRef

    path = _pipeline_saved_bert_json(tmp_path)
    tokenizer = load_tokenizer(str(path))
    ref = TokenizerRef.save(tokenizer, str(tmp_path / "out" / "tokenizer.json"))
    config = PreprocessConfig(
        source="books", input=str(BOOKS), output=str(tmp_path / "out"), tokenizer=str(path)
    )
    spec = shard_set_spec(plan_run(config), ref)
    assert spec.pipeline["tokenizer_disabled"] == tokenizer.disabled
    json.dumps(spec.pipeline)  # the manifest is JSON


def test_tokenizer_without_padding_keeps_its_json_bytes(bert):
    assert bert.disabled == {}
    assert TextTokenizer(bert.to_json()).identity() == bert.identity()


def test_decode_round_trip(gpt2):
    for text in _webtext():
        assert gpt2.decode(gpt2.encode_batch([text])[0]) == text


def test_bad_specs_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere/vocab.txt"):
        load_tokenizer("nowhere/vocab.txt")
    with pytest.raises(ValueError, match="merges"):
        load_tokenizer(str(GPT2 / "vocab.json"))
    bad_merges = tmp_path / "merges.txt"
    bad_merges.write_text("#version: 0.2\nĠ t\nthree parts here\n")
    with pytest.raises(ValueError, match=r"merges.txt:3"):
        load_tokenizer(f"{GPT2 / 'vocab.json'},{bad_merges}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds none of"):
        load_tokenizer(str(tmp_path / "empty"))


def test_a_device_a_fifo_or_a_huge_file_is_refused_in_one_line_before_reading(tmp_path):
    """Issue 18: --tokenizer /dev/zero read 3.4 GB, then MemoryError."""
    with pytest.raises(ValueError, match=r"^tokenizer file /dev/zero is a character device, not"):
        load_tokenizer("/dev/zero")
    fifo = tmp_path / "vocab.txt"
    os.mkfifo(fifo)  # opening it would block until a writer came
    with pytest.raises(ValueError, match=r"vocab.txt is a FIFO, not a regular file"):
        load_tokenizer(str(fifo))
    huge = tmp_path / "tokenizer.json"
    with open(huge, "wb") as f:
        f.truncate(MAX_TOKENIZER_FILE_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(ValueError, match=r"tokenizer.json is larger than its cap of 256 MiB$"):
        load_tokenizer(str(huge))
    merges = tmp_path / "merges.txt"
    os.symlink("/dev/zero", merges)  # judged by what the link names
    with pytest.raises(ValueError, match="merges.txt is a character device"):
        load_tokenizer(f"{GPT2 / 'vocab.json'},{merges}")


def test_hostile_tokenizer_json_is_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"model": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(ValueError, match=r"deep.json: JSON nested 50001 deep \(at most 64"):
        load_tokenizer(str(deep))
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ValueError, match="binary.json: not UTF-8"):
        load_tokenizer(str(binary))


# --- sentences -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "Dr. Smith paid $3.50 for it. Then he left.",
            ["Dr. Smith paid $3.50 for it.", "Then he left."],
        ),
        (
            "He moved to the U.S. Navy base. It was big.",
            ["He moved to the U.S. Navy base.", "It was big."],
        ),
        (
            "Take fruit, e.g. Apples or pears. Eat them.",
            ["Take fruit, e.g. Apples or pears.", "Eat them."],
        ),
        ('She said, "Stop." Then she left.', ['She said, "Stop."', "Then she left."]),
        ('"Why?" he asked. "Because."', ['"Why?" he asked.', '"Because."']),
        ("J. R. Hartley wrote it. It sold.", ["J. R. Hartley wrote it.", "It sold."]),
        ("Wait... What happened?", ["Wait...", "What happened?"]),
        ("1. First item\n2. Second item", ["1. First item", "2. Second item"]),
        ("Pi is 3.14159 or so. Yes.", ["Pi is 3.14159 or so.", "Yes."]),
        ("第一句。第二句！", ["第一句。", "第二句！"]),
        ("One paragraph\n\nAnother one", ["One paragraph", "Another one"]),
        ("", []),
    ],
)
def test_split_sentences_rules(text, expected):
    assert split_sentences(text) == expected


def test_split_sentences_on_a_real_book():
    text = (BOOKS / "2701-0.txt").read_text("utf-8")
    start = text.index("Call me Ishmael.")
    sentences = split_sentences(text[start : start + 3000])
    assert sentences[:3] == [
        "Call me Ishmael.",
        # Four hard-wrapped lines joined into one sentence.
        "Some years ago—never mind how long precisely—having little or no money in my purse, "
        "and nothing particular to interest me on shore, I thought I would sail about a "
        "little and see the watery part of the world.",
        "It is a way I have of driving off the spleen and regulating the circulation.",
    ]
    everything = split_sentences(text)
    assert len(everything) > 8000
    assert all(s and s == s.strip() and "\n" not in s for s in everything)
    # Titles never end a sentence, even after a dash ("boat—Mr. Stubb").
    assert not [s for s in everything if s.endswith(("Mr.", "Mrs.", "Dr."))]
    assert sum("Mr. " in s for s in everything) > 50  # 58 in the book


def test_split_sentences_keeps_verse_lines_and_speakers():
    text = (BOOKS / "tinyshakespeare-input.txt").read_text("utf-8")[:400]
    sentences = split_sentences(text)
    assert sentences[:3] == [
        "First Citizen:",
        "Before we proceed any further, hear me speak.",
        "All:",
    ]


# --- the stage -----------------------------------------------------------------------------


def _docs() -> list[Document]:
    return [Document(f"webtext:{i}", "webtext", text) for i, text in enumerate(_webtext())]


def test_tokenize_batch_one_sequence_per_document_with_eod(gpt2):
    docs = _docs()
    tokenized, rejects = tokenize_batch(docs, gpt2, split_sentences=False, append_eod=True)
    assert rejects == [] and [t.id for t in tokenized] == [d.id for d in docs]
    for doc, result in zip(docs, tokenized):
        (sequence,) = result.sequences
        assert sequence.dtype == np.int32
        assert sequence[-1] == 50256 and 50256 not in sequence[:-1].tolist()
        assert np.array_equal(sequence[:-1], gpt2.encode_batch([doc.text])[0])
        assert result.text_bytes == len(doc.text.encode("utf-8"))


def test_tokenize_batch_sentences_for_bert(bert):
    docs = _docs()
    tokenized, _ = tokenize_batch(docs, bert, split_sentences=True, append_eod=False)
    for doc, result in zip(docs, tokenized):
        sentences = split_sentences(doc.text)
        assert len(result.sequences) == len(sentences)
        assert bert.decode(result.sequences[0]) == bert.decode(bert.encode_batch(sentences[:1])[0])
    with pytest.raises(ValueError, match="no end-of-document token"):
        tokenize_batch(docs, bert, split_sentences=True, append_eod=True)


def test_tokenize_batch_eod_goes_on_the_last_sentence(gpt2):
    doc = Document("books:x", "books", "First sentence here. Second one there.")
    (result,), _ = tokenize_batch([doc], gpt2, split_sentences=True, append_eod=True)
    first, second = result.sequences
    assert 50256 not in first.tolist() and second[-1] == 50256


def test_tokenize_batch_min_tokens_and_empty_documents(gpt2):
    docs = _docs()
    lengths = {d.id: len(ids) for d, ids in zip(docs, gpt2.encode_batch([d.text for d in docs]))}
    empty = Document("webtext:empty", "webtext", "")
    tokenized, rejects = tokenize_batch(
        docs + [empty], gpt2, split_sentences=False, append_eod=True, min_tokens=128
    )
    assert {t.id for t in tokenized} == {i for i, n in lengths.items() if n >= 128}
    assert {r.doc_id for r in rejects} == {i for i, n in lengths.items() if n < 128} | {empty.id}
    assert all(r.reason == "too_few_tokens" for r in rejects)
    short = next(r for r in rejects if r.doc_id == "webtext:1")
    assert short.detail == f"{lengths['webtext:1']} tokens < 128" and short.text == docs[1].text
    # Without a minimum, only the empty document goes.
    _, rejects = tokenize_batch(docs + [empty], gpt2, split_sentences=False, append_eod=False)
    assert [r.doc_id for r in rejects] == [empty.id]


def test_byte_pieces_of_a_byte_fallback_model_count_as_unknown_text():
    """A SentencePiece-style BPE (LLaMA's kind) spells what its vocabulary lacks as byte pieces:
    stats.json's unknown share counts them, as it counts [UNK] (here: the Greek words a
    vocabulary of Moby-Dick's characters has no piece for, two bytes a letter), and the ids
    travel to the workers with the pickled tokenizer."""
    from tokenizers import Tokenizer, models

    from pipelines.tokenize.encode import unknown_tokens

    book = (CORPORA / "books" / "2701-0.txt").read_text(encoding="utf-8")[20_000:40_000]
    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}}
    for char in sorted(set(book)):
        vocab.setdefault(char, len(vocab))
    model = models.BPE(vocab=vocab, merges=[], byte_fallback=True, unk_token="<unk>")
    tokenizer = TextTokenizer(Tokenizer(model).to_str())
    assert tokenizer.unknown_ids == tuple(range(257))
    text = book[:300] + " ο Ισμαήλ " + book[300:600]
    greek = sum(len(c.encode()) for c in "οΙσμαήλ")
    docs = [Document(id="books:2701-0.txt", source="books", text=text)]
    tokenized, _ = tokenize_batch(docs, pickle.loads(pickle.dumps(tokenizer)),
                                  split_sentences=False, append_eod=False)  # fmt: skip
    assert unknown_tokens(tokenized, tokenizer) == greek == 14
    plain = TextTokenizer(Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>")).to_str())
    assert plain.unknown_ids == (0,)


def test_preprocess_refuses_dev_zero_as_its_tokenizer_in_one_line(tmp_path, capsys):
    from pipelines.preprocess import main

    code = main(["--source=books", f"--input={BOOKS}/pg1080.txt", f"--output={tmp_path}/o",
                 "--tokenizer=/dev/zero", "--direct_running_mode=in_memory"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.strip().splitlines() == [
        "preprocess: error: tokenizer file /dev/zero is a character device, not a regular file"
    ]
