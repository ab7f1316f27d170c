"""Evaluation and generation on real text: WikiText perplexity (sliding windows, adjusted to
WikiText's word count), LAMBADA-format last-word accuracy, and KV-cache generation.

Inputs: WikiText-2 test and WikiText-103 validation from ../shared/corpora/wikitext (real
files); a tiny GPT trained here for a few seconds to memorise a WikiText-2 test passage, with a
byte-level BPE tokenizer trained on WikiText-103 validation; random-weight HF GPT-2 models built from
config with the real GPT-2 vocabulary. LAMBADA's test text is not in ../shared: the
LAMBADA-format JSONL is built from WikiText-2 test sentences.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.conftest import CORPORA
from train.eval import lambada, scoring, wikitext
from train.eval.load import LoadedModel, LoadError, load_tokenizer
from train.eval.run import evaluate_lambada, evaluate_wikitext, perplexity_of_ids
from train.generate import Sampling, filter_logits, generate_tokens
from train.models.gpt import GPT, GPTConfig

WIKITEXT2_TEST = CORPORA / "wikitext" / "wikitext-2" / "wiki.test.tokens"
WIKITEXT103_VALID = CORPORA / "wikitext" / "wikitext-103" / "wiki.valid.tokens"


EVAL_CHARS = 12_000  # the passage of WikiText-2 test the tiny model learns and is scored on


@pytest.fixture(scope="module")
def wikitext_tokenizer(tmp_path_factory):
    """A 512-token byte-level BPE trained on WikiText-103 validation (detokenised)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    text = wikitext.detokenize(WIKITEXT103_VALID.read_text(encoding="utf-8")[:300_000])
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tokenizer.train_from_iterator(text.splitlines(), trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer.save(str(path))
    return str(path)


@pytest.fixture(scope="module")
def tiny_model(wikitext_tokenizer):
    """A 2-layer GPT that memorises the first EVAL_CHARS of WikiText-2 test (a few seconds).

    Memorised text is recalled only from context, so how much context a window gives each
    token shows plainly in the perplexity.
    """
    tokenizer = load_tokenizer(wikitext_tokenizer)
    text = wikitext.detokenize(WIKITEXT2_TEST.read_text(encoding="utf-8")[:EVAL_CHARS])
    ids = torch.tensor(tokenizer.encode(text).ids)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=512, n_layer=2, n_head=2, n_embd=64, block_size=32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        starts = torch.randint(0, len(ids) - 33, (16,), generator=generator)
        batch = torch.stack([ids[s : s + 33] for s in starts])
        _, loss = model(batch[:, :-1], batch[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return LoadedModel(model, "gpt", wikitext_tokenizer, 512, {}, "tiny")


@pytest.fixture(scope="module")
def hf_gpt2(tmp_path_factory):
    """A random-weight HF GPT-2 (real 50,257-token vocabulary) and ours loaded from its folder."""
    transformers = pytest.importorskip("transformers")
    from train.eval.load import load_weights_of

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=64)
    hf_model = transformers.GPT2LMHeadModel(config).eval()
    folder = tmp_path_factory.mktemp("hf-gpt2")
    hf_model.save_pretrained(folder)
    return hf_model, load_weights_of(str(folder), torch.device("cpu")).model


# -- WikiText ----------------------------------------------------------------------------------


def test_detokenize_real_wikitext_line():
    raw = WIKITEXT2_TEST.read_text(encoding="utf-8").splitlines()
    line = next(x for x in raw if "@-@" in x and " , " in x and "( " in x)
    text = wikitext.detokenize(line)
    assert "@-@" not in text and " , " not in text and "( " not in text and " )" not in text
    assert wikitext.detokenize(
        " = = Career = = \n In 2006 , he was 1 @,@ 000 m @-@ tall ( see ) ."
    ) == (" == Career ==\nIn 2006, he was 1,000 m-tall (see) .")
    assert wikitext.detokenize("Teddy 's \" Story \" ; it 's") == "Teddy's \"Story\"; it's"


def test_word_token_count_is_megatrons_split_on_single_spaces():
    # a line break between two spaces is a token of its own; the outer blanks are stripped
    assert wikitext.word_token_count(" = A = \n \n B c . \n") == 8
    assert wikitext.word_token_count("a  b") == 3  # two spaces: an empty token, as Megatron


@pytest.mark.parametrize(
    "num_tokens,context,stride", [(2, 4, 4), (10, 4, 4), (11, 4, 4), (100, 16, 5), (17, 16, 1)]
)
def test_windows_score_every_target_once(num_tokens, context, stride):
    seen = []
    for i, w in enumerate(wikitext.windows(num_tokens, context, stride)):
        assert w.end - w.start <= context and w.start <= w.score_from <= w.end
        if i > 0:  # a later window scores only its last `stride` targets (fewer at the end)
            assert w.end - w.score_from <= stride
        seen.extend(range(w.score_from, w.end))
    assert seen == list(range(num_tokens - 1))


def test_windows_refuse_bad_settings():
    with pytest.raises(ValueError, match="stride"):
        wikitext.windows(100, 8, 9)
    with pytest.raises(ValueError, match="fewer than two"):
        wikitext.windows(1, 8, 8)


def _independent_nll(model, ids, context):
    """Non-overlapping chunks, each scored in full: a plain loop, not the evaluator's code."""
    total, count = 0.0, 0
    ids = torch.tensor(ids)
    for start in range(0, len(ids) - 1, context):
        chunk = ids[start : start + context + 1]
        with torch.no_grad():
            logits, _ = model(chunk[None, :-1])
        total += F.cross_entropy(logits[0].double(), chunk[1:], reduction="sum").item()
        count += len(chunk) - 1
    return total, count


def test_perplexity_equals_exp_of_mean_token_loss(tiny_model):
    raw = WIKITEXT2_TEST.read_text(encoding="utf-8")[:EVAL_CHARS]
    result = evaluate_wikitext(tiny_model, raw, context=32, stride=None, batch_size=16)
    tokenizer = load_tokenizer(tiny_model.tokenizer_path)
    ids = tokenizer.encode(wikitext.detokenize(raw)).ids
    nll, count = _independent_nll(tiny_model.model, ids, 32)
    assert result.scored_tokens == count == len(ids) - 1
    assert result.ppl == pytest.approx(math.exp(nll / count), rel=1e-5)
    words = len(raw.strip().split(" "))
    assert result.word_tokens == words
    assert result.adjusted_ppl == pytest.approx(math.exp(nll / (words - 1)), rel=1e-5)
    # the tiny model learned the passage: far below a uniform guess over 512 tokens
    assert result.ppl < 512 / 8


def test_overlapping_windows_give_more_context_and_lower_perplexity(tiny_model):
    raw = WIKITEXT2_TEST.read_text(encoding="utf-8")[:EVAL_CHARS]
    # disjoint windows give a token 15.5 tokens of context on average (none for every 32nd);
    # stride 4 gives each at least 28
    disjoint = evaluate_wikitext(tiny_model, raw, context=32, stride=32, batch_size=32)
    sliding = evaluate_wikitext(tiny_model, raw, context=32, stride=4, batch_size=32)
    assert sliding.scored_tokens == disjoint.scored_tokens
    assert sliding.ppl < disjoint.ppl


def test_hf_gpt2_same_perplexity_through_ours_and_transformers(hf_gpt2, gpt2_tokenizer):
    hf_model, ours = hf_gpt2
    raw = WIKITEXT2_TEST.read_text(encoding="utf-8")[:6_000]
    ids = gpt2_tokenizer.encode(wikitext.detokenize(raw)).ids
    result = perplexity_of_ids(ours, ids, context=64, stride=32, batch_size=4)
    # transformers' own forward over the same windows, summed here
    total = 0.0
    for w in wikitext.windows(len(ids), 64, 32):
        with torch.no_grad():
            logits = hf_model(torch.tensor([ids[w.start : w.end]])).logits[0]
        targets = torch.tensor(ids[w.start + 1 : w.end + 1])
        nll = F.cross_entropy(logits.double(), targets, reduction="none")
        total += nll[w.score_from - w.start :].sum().item()
    assert result.scored_tokens == len(ids) - 1
    assert result.ppl == pytest.approx(math.exp(total / (len(ids) - 1)), rel=1e-4)


def test_partition_splits_items_and_pads_every_rank_to_the_same_batch_count():
    parts = [scoring.Partition(rank, 3) for rank in range(3)]
    batches = [p.batches(10, 2) for p in parts]
    assert {len(b) for b in batches} == {2}
    items = sorted(i for b in batches for batch in b for i in batch if i is not None)
    assert items == list(range(10))


# -- LAMBADA -----------------------------------------------------------------------------------


def _lambada_file(tmp_path, count=24):
    """LAMBADA-format JSONL from real WikiText-2 test sentences (12+ words each)."""
    text = wikitext.detokenize(WIKITEXT2_TEST.read_text(encoding="utf-8"))
    # 12-30 words: long enough to have context, short enough for the 64-position test model
    sentences = [s.strip() for s in text.split(". ") if 12 <= len(s.split()) <= 30 and "=" not in s]
    path = tmp_path / "lambada.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for sentence in sentences[:count]:
            f.write(json.dumps({"text": sentence.rstrip(" .")}) + "\n")
    return path


def test_lambada_examples_split_the_last_word():
    assert lambada.split_last_word("He looked at the  door") == ("He looked at the", "door")


def test_lambada_matches_an_independent_greedy_check(tmp_path, hf_gpt2, gpt2_tokenizer):
    hf_model, ours = hf_gpt2
    path = _lambada_file(tmp_path)
    passages = lambada.read_passages(str(path))
    tokenizer_file = tmp_path / "gpt2.json"
    gpt2_tokenizer.save(str(tokenizer_file))
    loaded = LoadedModel(ours, "gpt", str(tokenizer_file), 50257, {}, "hf")
    result = evaluate_lambada(loaded, passages, batch_size=5)
    strict_hits = loose_hits = 0
    word_nll = 0.0
    for text in passages:
        head, last = text[: text.rfind(text.split()[-1])].strip(), text.split()[-1]
        context, target = gpt2_tokenizer.encode(head).ids, gpt2_tokenizer.encode(" " + last).ids
        with torch.no_grad():
            logits = hf_model(torch.tensor([context + target[:-1]])).logits[0]
        predicted = logits[-len(target) :].argmax(-1).tolist()
        strict_hits += predicted == target
        word_nll += F.cross_entropy(
            logits[-len(target) :].double(), torch.tensor(target), reduction="sum"
        ).item()
        whole = gpt2_tokenizer.encode(text).ids
        with torch.no_grad():
            last_logits = hf_model(torch.tensor([whole[:-1]])).logits[0, -1]
        loose_hits += int(last_logits.argmax()) == whole[-1]
    assert result.examples == len(passages) == 24
    assert result.strict_correct == strict_hits
    assert result.loose_correct == loose_hits
    assert result.word_nll == pytest.approx(word_nll, rel=1e-4)


def test_lambada_bad_line_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "a b c"}\n{"txt": 1}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: no non-empty string 'text'"):
        lambada.read_passages(str(path))


@pytest.mark.parametrize(
    "content, fault",
    [
        (b'{"text": "a b c"}\n{"text": "caf\xe9"}\n', r"not UTF-8 \(byte 31\)"),
        (b'{"text": "a b"}\n' + b"[" * 100 + b"]" * 100 + b"\n", "bad.jsonl:2: JSON nested 100"),
        (b'{"text": "a b", "n": ' + b"7" * 5000 + b"}\n", "an integer of 5000 digits"),
    ],
)
def test_lambada_bad_bytes_are_one_line(tmp_path, content, fault):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=fault) as caught:
        lambada.read_passages(str(path))
    assert "\n" not in str(caught.value)


@pytest.mark.timeout(30)
def test_eval_data_and_tokenizers_must_be_regular_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="is a FIFO, not a regular file"):
        lambada.read_passages(str(fifo))
    for path in (str(fifo), "/dev/zero"):
        with pytest.raises(LoadError, match="not a regular file"):
            load_tokenizer(path)
    deep = tmp_path / "tokenizer.json"
    deep.write_text("[" * 50_000 + "]" * 50_000)
    with pytest.raises(LoadError, match=r"nested 50000 deep \(at most 64 allowed\)"):
        load_tokenizer(str(deep))
    (tmp_path / "gpt2").mkdir()
    os.symlink("/dev/zero", tmp_path / "gpt2" / "vocab.json")
    (tmp_path / "gpt2" / "merges.txt").write_text("#version: 0.2\n")
    with pytest.raises(LoadError, match="vocab.json is a character device"):
        load_tokenizer(f"{tmp_path / 'gpt2' / 'vocab.json'},{tmp_path / 'gpt2' / 'merges.txt'}")
    with pytest.raises(LoadError, match="holds none of tokenizer.json"):
        load_tokenizer(str(tmp_path / "gpt2"))  # a device is no vocab.json: none is found


@pytest.mark.timeout(30)
def test_output_replaces_only_an_earlier_report(tmp_path):
    """--output is written only where nothing is, or over an earlier report of ours."""
    from train.eval.run import output_fault, write_report

    report = tmp_path / "wikitext.json"
    assert output_fault(str(report)) is None
    write_report(str(report), json.dumps({"task": "wikitext103", "checkpoint": "run", "ppl": 3}))
    assert output_fault(str(report)) is None and os.listdir(tmp_path) == ["wikitext.json"]
    notes = tmp_path / "notes.txt"
    notes.write_text("a user's notes\n")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"task": "mine"}))
    os.symlink(report, tmp_path / "link.json")
    os.mkfifo(tmp_path / "fifo")
    for path, fault in [
        (notes, "not an earlier report of train/evaluate.py"),
        (other, "exists and is not a report of train/evaluate.py"),
        (tmp_path / "link.json", "is a symbolic link"),
        (tmp_path / "fifo", "is a FIFO"),
        (tmp_path, "is a directory"),
        (tmp_path / "missing" / "r.json", "no such directory"),
    ]:
        message = output_fault(str(path))
        assert message is not None and fault in message and "\n" not in message, message
    assert notes.read_text() == "a user's notes\n"


# -- generation --------------------------------------------------------------------------------


def test_greedy_generation_same_with_and_without_kv_cache(tiny_model):
    tokenizer = load_tokenizer(tiny_model.tokenizer_path)
    prompt = tokenizer.encode("The history of the city").ids
    sampling = Sampling(max_new_tokens=20, temperature=0)
    cached = list(generate_tokens(tiny_model.model, prompt, sampling))
    plain = list(generate_tokens(tiny_model.model, prompt, sampling, use_cache=False))
    assert cached == plain and len(cached) == 20
    # the window is full at block_size: generation stops there rather than sliding
    assert (
        len(list(generate_tokens(tiny_model.model, prompt, Sampling(200, 0))))
        == 32 - len(prompt) + 1
    )


def test_sampling_with_a_seed_is_reproducible_and_cache_independent(tiny_model):
    prompt = load_tokenizer(tiny_model.tokenizer_path).encode("In 1998 the band").ids
    sampling = Sampling(max_new_tokens=20, temperature=0.8, top_k=50, top_p=0.9, seed=7)
    first = list(generate_tokens(tiny_model.model, prompt, sampling))
    assert first == list(generate_tokens(tiny_model.model, prompt, sampling, use_cache=False))
    other = list(generate_tokens(tiny_model.model, prompt, Sampling(20, 0.8, 50, 0.9, seed=8)))
    assert first != other


def test_kv_cache_logits_match_full_forward(hf_gpt2):
    _, model = hf_gpt2
    from train.models.gpt import KVCache

    ids = torch.randint(0, 50257, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full, _ = model(ids)
        cache = KVCache()
        first, _ = model(ids[:, :12], cache=cache)
        rest, _ = model(ids[:, 12:15], cache=cache)  # several new tokens at once
        last, _ = model(ids[:, 15:], cache=cache)
    torch.testing.assert_close(torch.cat([first, rest, last], dim=1), full, rtol=1e-4, atol=1e-5)


def test_filter_logits_top_k_and_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.1]))
    assert torch.isfinite(filter_logits(logits, 2, None)).tolist() == [True, True, False, False]
    # 0.5 + 0.25 = 0.75 < 0.8: the nucleus needs the third token too
    assert torch.isfinite(filter_logits(logits, None, 0.8)).tolist() == [True, True, True, False]
    assert torch.isfinite(filter_logits(logits, None, 0.5)).tolist() == [True, False, False, False]
    with pytest.raises(ValueError, match="top_p"):
        Sampling(top_p=0.0)
    for temperature in (float("nan"), float("inf"), -0.5):  # issue 27.7: NaN was a traceback
        with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
            Sampling(temperature=temperature)


def test_generation_masks_padded_vocabulary_rows():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, n_layer=1, n_head=1, n_embd=8, block_size=16))
    with torch.no_grad():  # every final hidden state all ones; the padded rows win argmax
        model.ln_f.weight.zero_()
        model.ln_f.bias.fill_(1.0)
        model.lm_head.weight[12:] = 1.0
    tokens = list(generate_tokens(model, [1, 2], Sampling(5, 0), vocab_size=12))
    assert tokens and max(tokens) < 12
    assert np.all(np.array(list(generate_tokens(model, [1, 2], Sampling(5, 0)))) >= 12)


def test_generated_greek_is_printed_in_whole_characters(gpt2_tokenizer):
    """GPT-2's byte-level tokens split Greek letters (two UTF-8 bytes each): each token's text,
    or the text cut after a token that ends inside a letter, is no U+FFFD but whole letters."""
    from train.generate import TextStream

    greek = _greek_sentence()
    ids = gpt2_tokenizer.encode(greek).ids
    cut = max(n for n in range(1, len(ids)) if "\ufffd" in gpt2_tokenizer.decode(ids[:n]))
    stream = TextStream(gpt2_tokenizer.decode)
    pieces = [stream.push(token) for token in ids]
    assert "".join(pieces) == greek
    assert not any("\ufffd" in piece for piece in pieces)
    partial = TextStream(gpt2_tokenizer.decode)
    printed = "".join(partial.push(token) for token in ids[:cut])
    assert "\ufffd" not in printed and greek.startswith(printed) and printed
    assert "\ufffd" in gpt2_tokenizer.decode(ids[:cut])  # what printing the cut text gave


def _greek_sentence() -> str:
    """The first long line of Greek prose in the real Greek Wikipedia dump."""
    import bz2
    import re

    with bz2.open(CORPORA / "wikipedia" / "elwiki-pages-articles-head933.xml.bz2", "rt") as f:
        for line in f:
            if len(re.findall("[\u0370-\u03ff]", line)) > 80 and "<" not in line:
                return line.strip()[:400]
    raise AssertionError("no Greek prose line in the dump")


def test_every_tokenizer_format_of_preprocess_loads(gpt2_tokenizer):
    """A BERT vocab.txt and GPT-2's encoder.json + vocab.bpe and tiktoken ranks load as
    preprocess loads them (the real files), with the ids of their reference tokenizers."""
    from tests.conftest import BERT_VOCAB, GPT2_VOCAB
    from tests.shard_fixtures import bert_tokenizer

    text = "The Greek word for sea is thalassa."
    bert = load_tokenizer(str(BERT_VOCAB)).encode(text).ids
    assert bert == bert_tokenizer().encode(text, add_special_tokens=False).ids
    expected = gpt2_tokenizer.encode(text).ids
    openai = f"{GPT2_VOCAB / 'encoder.json'},{GPT2_VOCAB / 'vocab.bpe'}"
    for spec in (str(GPT2_VOCAB / "gpt2.tiktoken"), openai):
        assert load_tokenizer(spec).encode(text).ids == expected, spec
