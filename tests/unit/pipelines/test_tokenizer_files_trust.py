"""Tokenizer files as untrusted input, each hostile file a copy of a real shared vocabulary
(GPT-2's vocab.json, merges.txt and gpt2.tiktoken, BERT's vocab.txt) with one edit: every
reader checks what it reads (unique, bounded ids and ranks; merges naming known tokens; BOM
and CRLF) and refuses in one line naming the file, the line or token, and the cap, before any
record is read; a tiktoken ranks file loads in work linear in its size."""

from __future__ import annotations

import base64
import gzip
import json
import logging

import pytest

from dataset_format import tokenizer_files
from dataset_format.tokenizer import TextTokenizer, load_tokenizer
from dataset_format.tokenizer_files import MAX_TOKEN_BYTES, MAX_TOKENIZER_VOCAB
from pipelines.document import Document
from tests.conftest import BERT_VOCAB, CORPORA
from tests.conftest import GPT2_VOCAB as GPT2
from tests.helpers.tokenizer_files_trust import BOOK, gpt2_copy, tiktoken_from_vocab_json
from train.data import tokenizer_info_from_file

CAP = rf"\[0, {MAX_TOKENIZER_VOCAB:,}\) \(the vocabulary cap, MAX_TOKENIZER_VOCAB\)$"


@pytest.fixture(scope="module")
def gpt2() -> TextTokenizer:
    return load_tokenizer(str(GPT2))


def _refused(spec: str, message: str) -> str:
    with pytest.raises(ValueError, match=message) as caught:
        load_tokenizer(spec)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_two_tokens_on_one_id_are_refused_at_load_before_any_record(tmp_path, gpt2):
    """'Ġthe' given the id of 'the' loaded, then failed every record (a traceback each)."""
    spec = gpt2_copy(tmp_path, lambda v: v.__setitem__("Ġthe", v["the"]))
    _refused(spec, r"vocab.json: tokens 'Ġthe' and 'the' both have id 1169 \(an id names one")
    most = tmp_path / "most"
    most.mkdir()
    spec = gpt2_copy(most, lambda v: v.update({t: 5 for t in list(v)[:40_000]}))
    _refused(spec, r"most/vocab.json: tokens '!' and '\"' both have id 5")
    # The shared GPT-2 vocabulary itself has 50,257 ids, one token each.
    assert gpt2.vocab_size == 50257


def test_vocab_json_ids_past_the_cap_are_refused_naming_it(tmp_path):
    spec = gpt2_copy(tmp_path, lambda v: v.__setitem__("Ġthe", 2**40))
    _refused(spec, r"vocab.json: token 'Ġthe' has id 1099511627776: an id is an int in " + CAP)
    spec = gpt2_copy(tmp_path, lambda v: v.__setitem__("Ġthe", "12"))
    _refused(spec, "token 'Ġthe' has id 12: an id is an int in")


def test_merges_naming_tokens_the_vocabulary_lacks_are_refused_by_line(tmp_path):
    spec = gpt2_copy(tmp_path, merges_edit=lambda m: m.replace("\nĠ t\n", "\nĠ zzqx\n", 1))
    _refused(spec, r"merges.txt:2: the merge 'Ġ zzqx' names 'zzqx', which the vocabulary .*vocab.json lacks$")
    # The pair's parts known, their concatenation not: tokenizers cannot build that merge either.
    spec = gpt2_copy(tmp_path, lambda v: v.pop("Ġthe"))
    _refused(spec, r"merges.txt:\d+: the merge 'Ġt he' names 'Ġthe', which the vocabulary")
    # A pair listed again further down (tokenizers would rank it by its later line).
    spec = gpt2_copy(tmp_path, merges_edit=lambda m: m + "Ġ t\n")
    _refused(spec, r"merges.txt:50002: the merge 'Ġ t' is listed twice \(also line 2\)$")


def test_merges_with_crlf_line_ends_are_the_same_merges(tmp_path, gpt2):
    spec = gpt2_copy(tmp_path, merges_edit=lambda m: m.replace("\n", "\r\n"))
    assert b"\r\n" in (tmp_path / "merges.txt").read_bytes()
    crlf = load_tokenizer(spec)
    assert crlf.identity() == gpt2.identity()
    text = BOOK.read_text("utf-8")[:20_000]
    assert crlf.encode_batch([text])[0].tolist() == gpt2.encode_batch([text])[0].tolist()


def test_a_tiktoken_file_built_from_the_gpt2_vocabulary_loads_as_gpt2(tmp_path, gpt2):
    ranks = tmp_path / "gpt2.tiktoken"
    ranks.write_text("\n".join(tiktoken_from_vocab_json(GPT2 / "vocab.json")) + "\n")
    assert load_tokenizer(str(ranks)).identity() == gpt2.identity()
    # The training side reads it by the same reader: GPT-2's size and end-of-document id.
    info = tokenizer_info_from_file(str(ranks))
    assert (info.kind, info.vocab_size, info.special_ids) == ("byte_level_bpe", 50257, {"eod": 50256})


@pytest.mark.parametrize(
    "edit, message",
    [
        # "!" (line 1) given rank 1, the rank of '"' (line 2)
        (lambda lines: lines.__setitem__(0, f"{lines[0].split()[0]} 1"),
         r"gpt2.tiktoken:2: rank 1 given to two tokens \(lines 1 and 2; a rank names one token\)$"),
        (lambda lines: lines.__setitem__(300, f"{lines[300].split()[0]} {2**40}"),
         r"gpt2.tiktoken:301: rank 1099511627776: a rank is under 1,048,576 \(the vocabulary cap"),
        (lambda lines: lines.append(f"{base64.b64encode(b'x' * (MAX_TOKEN_BYTES + 1)).decode()} 50256"),
         rf"gpt2.tiktoken:50257: a token (of 1025 bytes, )?longer than the cap of {MAX_TOKEN_BYTES} "
         r"bytes \(MAX_TOKEN_BYTES\)$"),
        (lambda lines: lines.append(lines[300].split()[0] + " 50256"),
         r"gpt2.tiktoken:50257: token b' l' listed twice \(rank 300 and 50256\)$"),
    ],
)  # fmt: skip
def test_hostile_tiktoken_files_are_refused_by_line(tmp_path, edit, message):
    lines = tiktoken_from_vocab_json(GPT2 / "vocab.json")
    edit(lines)
    (tmp_path / "gpt2.tiktoken").write_text("\n".join(lines) + "\n")
    _refused(str(tmp_path / "gpt2.tiktoken"), message)


class _CountingRanks(dict):
    """A ranks dict that counts its look-ups (the unit of work of finding merges)."""

    lookups = 0

    def get(self, key, default=None):
        self.lookups += 1
        return super().get(key, default)


def _chain(n: int) -> _CountingRanks:
    """GPT-2's ranks, then the tokens "\\0" * 2 .. "\\0" * n, each the merge of the one before
    and "\\0": what a hostile file of long tokens looks like (1.5 MB at n = 1000)."""
    ranks = _CountingRanks()
    for line in (GPT2 / "gpt2.tiktoken").read_text("utf-8").splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    for length in range(2, n + 1):
        ranks[b"\0" * length] = len(ranks)
    return ranks


def test_finding_a_tiktoken_files_merges_costs_work_linear_in_its_bytes():
    """A token of n bytes costs at most 3n rank look-ups (a rescan after each merge cost n^2:
    a 1.5 MB file loaded in a minute, 2.7 MB in four)."""
    work = {}
    for n in (1, 200, 400):
        ranks = _chain(n)
        merges = tokenizer_files.merges_from_ranks(ranks, "chain.tiktoken")
        last = max(ranks, key=ranks.__getitem__)
        assert list(merges[-1]) == _bpe_parts_by_rescan(dict(ranks), last, ranks[last])
        token_bytes = sum(len(token) for token in ranks if len(token) > 1)
        assert ranks.lookups <= 3 * token_bytes
        work[n] = (ranks.lookups, token_bytes)
    # The chain's own work: twice the chain is four times its bytes, and no more than four
    # times the look-ups (a rescan made it eight).
    (base, base_bytes), (small, small_bytes), (large, large_bytes) = work.values()
    ratio = (large - base) / (small - base)
    assert ratio <= 1.05 * (large_bytes - base_bytes) / (small_bytes - base_bytes)


def _bpe_parts_by_rescan(ranks, token, below_rank):
    """tiktoken's merge order written the plain way: the lowest-ranked adjacent pair (the
    leftmost of equals) merged, and every pair looked at again."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        found = [(ranks.get(a + b, below_rank), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
        rank, index = min(found)
        if rank >= below_rank:
            break
        parts[index : index + 2] = [parts[index] + parts[index + 1]]
    return parts


def test_bpe_parts_merge_as_tiktoken_does_on_gpt2_tokens_and_book_words():
    ranks = dict(_chain(2))
    by_length = sorted(ranks.items(), key=lambda item: -len(item[0]))[:3000]
    for token, rank in by_length:  # every multi-byte GPT-2 token: its one merge
        assert tokenizer_files.bpe_parts(ranks, token, rank) == _bpe_parts_by_rescan(ranks, token, rank)
    words = set(BOOK.read_text("utf-8").split()[:3000])
    for word in words:  # a whole word, all ranks: the parts are its GPT-2 tokens
        token = word.encode("utf-8")
        assert tokenizer_files.bpe_parts(ranks, token, 1 << 30) == _bpe_parts_by_rescan(ranks, token, 1 << 30)


def test_a_bert_vocab_txt_with_a_bom_keeps_pad_at_id_0(tmp_path):
    plain = load_tokenizer(str(BERT_VOCAB))
    bom = tmp_path / "vocab.txt"
    bom.write_bytes(b"\xef\xbb\xbf" + BERT_VOCAB.read_bytes())
    loaded = load_tokenizer(str(bom))
    assert loaded.special_ids["pad"] == 0 == plain.special_ids["pad"]
    assert loaded.identity() == plain.identity()
    crlf = tmp_path / "crlf" / "vocab.txt"
    crlf.parent.mkdir()
    crlf.write_bytes(BERT_VOCAB.read_bytes().replace(b"\n", b"\r\n"))
    assert load_tokenizer(str(crlf)).identity() == plain.identity()


def test_a_vocab_txt_past_the_vocabulary_cap_is_refused_before_it_is_split(tmp_path):
    """A 10-million-line vocab.txt (99 MB, under the file cap) reached 3-5 GB and crashed."""
    huge = tmp_path / "vocab.txt"
    extra = MAX_TOKENIZER_VOCAB - 30_000
    huge.write_bytes(BERT_VOCAB.read_bytes() + b"".join(b"t%d\n" % i for i in range(extra)))
    lines = 30_522 + extra
    _refused(str(huge), rf"vocab.txt: {lines:,} lines, more than the vocabulary cap of "
                        rf"{MAX_TOKENIZER_VOCAB:,} tokens \(MAX_TOKENIZER_VOCAB\)$")  # fmt: skip
    with pytest.raises(ValueError, match=r"^--tokenizer .*vocab.txt: [\d,]+ lines, more than"):
        tokenizer_info_from_file(str(huge))
    duplicate = tmp_path / "dup" / "vocab.txt"
    duplicate.parent.mkdir()
    duplicate.write_bytes(BERT_VOCAB.read_bytes() + b"[PAD]\n")
    _refused(str(duplicate), r"vocab.txt:30523: duplicate token '\[PAD\]' \(also line 1\)$")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s["model"]["vocab"].__setitem__("Ġthe", s["model"]["vocab"]["the"]),
         "tokens 'Ġthe' and 'the' both have id 1169"),
        (lambda s: s["model"]["vocab"].__setitem__("Ġthe", 2**40), "token 'Ġthe' has id 1099511627776: an id is an int in " + CAP),
        (lambda s: s["added_tokens"][0].__setitem__("id", 2**31 - 2), "token '<|endoftext|>' has two ids, 50256 and 2147483646"),
        (lambda s: s["added_tokens"].append(dict(s["added_tokens"][0], content="<|pad|>")),
         r"tokens '<\|endoftext\|>' and '<\|pad\|>' both have id 50256"),
    ],
)  # fmt: skip
def test_a_tokenizer_json_with_ids_shared_or_past_the_cap_is_refused(tmp_path, gpt2, edit, message):
    spec = json.loads(gpt2.to_json())
    edit(spec)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec, ensure_ascii=False), "utf-8")
    _refused(str(path), "tokenizer.json: " + message)
    with pytest.raises(ValueError, match="^--tokenizer .*tokenizer.json: " + message):
        tokenizer_info_from_file(str(path))


def test_the_training_side_refuses_what_the_pipeline_refuses(tmp_path):
    """--tokenizer FILE (train.data) reads through the pipeline's readers: a vocab.json with
    two tokens on one id was taken, its vocabulary size counted from the largest id."""
    gpt2_copy(tmp_path, lambda v: v.__setitem__("Ġthe", v["the"]))
    with pytest.raises(ValueError, match=r"^--tokenizer .*vocab.json: tokens 'Ġthe' and 'the'"):
        tokenizer_info_from_file(str(tmp_path / "vocab.json"))
    bom = tmp_path / "vocab.txt"
    bom.write_bytes(b"\xef\xbb\xbf" + BERT_VOCAB.read_bytes())
    info = tokenizer_info_from_file(str(bom))
    assert (info.vocab_size, info.special_ids["pad"], info.special_ids["cls"]) == (30522, 0, 101)


def test_train_tokenizer_counts_every_skipped_record_and_logs_few(tmp_path, caplog, monkeypatch):
    """A JSONL of a book's paragraphs and 1,000 records without text: each skip counted, a
    line per doubling logged (a line each before)."""
    from pipelines.clean import CleanConfig
    from pipelines.reason_log import FIRST, ReasonLog
    from pipelines.tokenize import train_tokenizer
    from pipelines.tokenize.train_tokenizer import SampleStats, sample_texts

    monkeypatch.setattr(train_tokenizer, "_SKIPS", ReasonLog(train_tokenizer.LOG))

    paragraphs = [p for p in BOOK.read_text("utf-8-sig").split("\n\n") if p.strip()][:50]
    jsonl = tmp_path / "book.jsonl"
    jsonl.write_text("".join(json.dumps({"text": p}) + "\n" for p in paragraphs) + "{}\n" * 1000)
    stats = SampleStats()
    caplog.set_level(logging.WARNING)
    texts = list(sample_texts("jsonl", str(jsonl), sample_bytes=10**7,
                              clean_config=CleanConfig(), stats=stats))  # fmt: skip
    assert stats.failures == 1000 and len(texts) == stats.documents > 0
    logged = [r for r in caplog.records if r.name == "pipelines.tokenize.train_tokenizer"]
    assert 0 < len(logged) <= FIRST + 11


def test_pages_past_the_extraction_time_bound_are_counted_and_logged_few(monkeypatch, caplog):
    from pipelines.reason_log import FIRST, ReasonLog
    from pipelines.sources.web import htmltext

    monkeypatch.setattr(htmltext, "_TIME_BOUND_LOG", ReasonLog(htmltext.LOG))

    page = gzip.decompress(next((CORPORA / "web" / "html" / "html").glob("*.html.gz")).read_bytes())
    monkeypatch.setattr(htmltext, "run_bounded", lambda function, bound: None)  # every page too slow
    caplog.set_level(logging.WARNING)
    for _ in range(500):
        assert htmltext.main_text(page.decode("utf-8", "replace"), "trafilatura") == ""
    logged = [r for r in caplog.records if r.name == htmltext.LOG.name]
    assert 0 < len(logged) <= FIRST + 10


def test_whole_word_masking_reads_the_vocabulary_by_the_same_reader(tmp_path):
    """BERT's word-continuation flags read a tokenizer.json by the checked reader: an id of
    2^40 tried to allocate a 1 TiB array (MemoryError, a traceback)."""
    from train.data import continuation_ids_from_vocab

    spec = json.loads(load_tokenizer(str(BERT_VOCAB)).to_json())
    spec["model"]["vocab"]["##s"] = 2**40
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec, ensure_ascii=False), "utf-8")
    with pytest.raises(ValueError, match=r"tokenizer.json: token '##s' has id 1099511627776: an id is an int in " + CAP):
        continuation_ids_from_vocab(str(path))
    bom = tmp_path / "vocab.txt"
    bom.write_bytes(b"\xef\xbb\xbf" + BERT_VOCAB.read_bytes())
    flags = continuation_ids_from_vocab(str(bom))
    assert flags.size == 30522 and flags.tolist() == continuation_ids_from_vocab(str(BERT_VOCAB)).tolist()
    assert flags[2015] and not flags[0]  # "##s" (line 2016) and [PAD]


def test_a_corpus_read_twice_logs_its_repeated_ids_in_few_lines(tmp_path, gpt2, caplog, monkeypatch):
    """Every id repeated (one book's paragraphs written twice): the merge orders each pair by
    content and logs a line per doubling, not one per document."""
    from pipelines.reason_log import FIRST, ReasonLog
    from pipelines.tokenize.encode import tokenize_batch
    from pipelines.write import OutputDir, claim_output, merge, write_bucket
    from tests.shard_fixtures import spill_by_hand

    paragraphs = [p for p in BOOK.read_text("utf-8-sig").split("\n\n") if p.strip()][:300]
    docs, _ = tokenize_batch([Document(f"pg1080#{i}", "books", p) for i, p in enumerate(paragraphs)],
                             gpt2, split_sentences=False, append_eod=True)  # fmt: skip
    out = str(tmp_path / "out")
    claim_output(out).release()
    monkeypatch.setattr(merge, "_DUPLICATES", ReasonLog(merge.LOG))
    caplog.set_level(logging.WARNING)
    refs = spill_by_hand(out, [docs, docs], 1)
    infos = [info for names in refs.values() for info, _ in write_bucket(0, names, OutputDir(out), 10**6, "uint16")]
    assert sum(info.documents for info in infos) == 2 * len(docs)
    logged = [r for r in caplog.records if r.name == merge.LOG.name]
    assert 0 < len(logged) <= FIRST + 10 and len(docs) > FIRST + 10


def test_a_token_given_twice_in_a_json_vocabulary_is_refused(tmp_path, gpt2):
    """JSON keeps the last of a repeated key: "the" listed again with another id left its first
    id without a token, silently."""
    text = (GPT2 / "vocab.json").read_text("utf-8")
    (tmp_path / "vocab.json").write_text('{"the": 5, ' + text[1:], "utf-8")
    (tmp_path / "merges.txt").write_bytes((GPT2 / "merges.txt").read_bytes())
    _refused(str(tmp_path), r"vocab.json: 'the' is a key twice in one JSON object$")
    spec = gpt2.to_json()
    twice = spec.replace('"vocab":{', '"vocab":{"Ġthe":5,', 1)
    assert twice != spec
    (tmp_path / "tokenizer.json").write_text(twice, "utf-8")
    _refused(str(tmp_path / "tokenizer.json"), r"tokenizer.json: 'Ġthe' is a key twice in one JSON")
    with pytest.raises(ValueError, match=r"^--tokenizer .*tokenizer.json: 'Ġthe' is a key twice"):
        tokenizer_info_from_file(str(tmp_path / "tokenizer.json"))


def test_preprocess_refuses_a_tokenizer_with_two_tokens_on_one_id_in_one_line(tmp_path, capsys):
    from pipelines.preprocess import main

    spec = gpt2_copy(tmp_path, lambda v: v.__setitem__("Ġthe", v["the"]))
    code = main(["--source=books", f"--input={BOOK}", f"--output={tmp_path}/o",
                 f"--tokenizer={spec}", "--direct_running_mode=in_memory"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [
        f"preprocess: error: {spec}/vocab.json: tokens 'Ġthe' and 'the' both have id 1169 "
        "(an id names one token)"
    ]
