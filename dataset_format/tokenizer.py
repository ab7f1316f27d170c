"""Tokenizers: reading a tokenizer's files into a `TextTokenizer`, and running it. The one
reader of every tokenizer format, for preprocess (pipelines/) and for evaluation, generation,
export and --init-from (train/) alike: both build on this package.

    tokenizer = load_tokenizer("/path/gpt2")            # vocab.json + merges.txt: GPT-2 BPE
    ids = tokenizer.encode_batch(["Some text.", "More."])

Every tokenizer is held as a Hugging Face `tokenizers` JSON string: that is what is pickled to
Beam workers (a few hundred KB, no Rust object) and what is saved inside a shard set; the Rust
tokenizer is built lazily, once per process. For plain GPT-2-style byte-level BPE the ids come
from a `tiktoken.Encoding` built from the same vocabulary and merges (no download), which is
several times faster than `tokenizers` and gives identical ids
(tests/unit/pipelines/tokenize/test_tokenize.py checks this on every sample corpus).

A tokenizer's files are untrusted input: each format's reader (dataset_format.tokenizer_files)
checks what it reads, within named caps, before `tokenizers` sees it, so a tokenizer that loads
is one that encodes; one that does not is refused in one line, before any record.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Sequence

import numpy as np

from common.storage import OutputDir, parent_and_name
from dataset_format import SPECIAL_TOKEN_NAMES
from dataset_format import tokenizer_files as files
from dataset_format.tokenizer_files import (  # noqa: F401  (callers import them from here too)
    EOD_TOKEN,
    MAX_TOKENIZER_FILE_BYTES,
    gpt2_byte_to_unicode,
)

BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# GPT-2's pre-tokenizer regex, as tiktoken writes it; the same split as tokenizers' ByteLevel.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _gpt2_tokenizer_json(vocab_path: str, merges_path: str) -> str:
    """GPT-2 byte-level BPE from a token -> id JSON and a merges file: Hugging Face's
    vocab.json + merges.txt or OpenAI's original encoder.json + vocab.bpe (the same layout)."""
    vocab = files.parse_vocab_json(files.read_text(vocab_path), vocab_path)
    merges = files.parse_merges(files.read_text(merges_path), merges_path, vocab, vocab_path)
    return _byte_level_bpe_json(vocab, merges)


def _byte_level_bpe_json(vocab: dict[str, int], merges: list[tuple[str, str]]) -> str:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(EOD_TOKEN, special=True, normalized=False)])
    return tokenizer.to_str()


def _tiktoken_tokenizer_json(ranks_path: str) -> str:
    """GPT-2-style byte-level BPE from a tiktoken ranks file ("base64(token bytes) rank" per
    line). The file holds no special tokens: `<|endoftext|>` gets the id after the last rank,
    as in tiktoken's own GPT-2 encoding (50256)."""
    ranks = files.parse_tiktoken_ranks(files.read_text(ranks_path), ranks_path)
    char_of_byte = gpt2_byte_to_unicode()
    vocab = {"".join(char_of_byte[b] for b in token): rank for token, rank in ranks.items()}
    if EOD_TOKEN not in vocab:
        vocab[EOD_TOKEN] = max(ranks.values()) + 1
    vocab = files.checked_ids(vocab.items(), ranks_path)  # the end-of-document id within the cap
    merges = [
        ("".join(char_of_byte[b] for b in left), "".join(char_of_byte[b] for b in right))
        for left, right in files.merges_from_ranks(ranks, ranks_path)
    ]
    return _byte_level_bpe_json(vocab, merges)


def _wordpiece_tokenizer_json(vocab_path: str, lowercase: bool | None) -> str:
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab = files.parse_wordpiece_vocab(files.read_text(vocab_path), vocab_path)
    if "[UNK]" not in vocab:
        raise ValueError(f"{vocab_path}: a WordPiece vocab.txt needs an [UNK] line")
    if lowercase is None:
        # An uncased vocabulary has (almost) no capital letters outside its [SPECIAL] tokens:
        # bert-base-uncased has 2 ("ℝ"), bert-base-cased thousands.
        capitalised = sum(
            any(c.isupper() for c in token) for token in vocab if not token.startswith("[")
        )
        lowercase = "uncased" in vocab_path.lower() or capitalised < 0.001 * len(vocab)
    tokenizer = Tokenizer(
        models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100)
    )
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in BERT_SPECIAL_TOKENS if t in vocab]
    )
    return tokenizer.to_str()


def load_tokenizer(spec: str, *, lowercase: bool | None = None) -> TextTokenizer:
    """Load a tokenizer; never downloads anything.

    `spec` is one of
    - a Hugging Face `tokenizers` JSON file (what `python -m pipelines.tokenize.train_tokenizer` writes);
    - GPT-2 byte-level BPE: "vocab.json,merges.txt" (either order) or a directory holding both,
      or OpenAI's original names for the same two files, encoder.json + vocab.bpe, or a
      tiktoken ranks file `*.tiktoken` (`<|endoftext|>` is the end-of-document token, id 50256
      in GPT-2's vocabulary);
    - BERT WordPiece: a `vocab.txt`, or a directory holding one. `lowercase` defaults to True
      when the path says "uncased" or the vocabulary has no capital letters.
    A directory is searched in that order: tokenizer.json, vocab.json + merges.txt,
    encoder.json + vocab.bpe, one *.tiktoken, vocab.txt.
    A JSON's padding and truncation settings are switched off (`TextTokenizer.disabled`).
    """
    from tokenizers import Tokenizer

    if "," in spec:
        paths = [p.strip() for p in spec.split(",")]
        json_paths = [p for p in paths if p.endswith(".json")]
        if len(paths) != 2 or len(json_paths) != 1:
            raise ValueError(f"tokenizer spec {spec!r}: expected 'vocab.json,merges.txt'")
        merges_path = next(p for p in paths if p not in json_paths)
        return TextTokenizer(_gpt2_tokenizer_json(json_paths[0], merges_path))
    if os.path.isdir(spec):

        def present(name: str) -> str | None:
            path = os.path.join(spec, name)
            return path if os.path.isfile(path) else None

        if present("tokenizer.json"):
            return load_tokenizer(os.path.join(spec, "tokenizer.json"))
        for vocab_name, merges_name in (
            ("vocab.json", "merges.txt"),
            ("encoder.json", "vocab.bpe"),
        ):
            if present(vocab_name) and present(merges_name):
                return TextTokenizer(
                    _gpt2_tokenizer_json(
                        os.path.join(spec, vocab_name), os.path.join(spec, merges_name)
                    )
                )
        ranks_files = sorted(n for n in os.listdir(spec) if n.endswith(".tiktoken") and present(n))
        if len(ranks_files) > 1:
            raise ValueError(
                f"tokenizer directory {spec} holds {len(ranks_files)} *.tiktoken files "
                f"({', '.join(ranks_files)}): pass the one to use"
            )
        if ranks_files:
            return TextTokenizer(_tiktoken_tokenizer_json(os.path.join(spec, ranks_files[0])))
        if present("vocab.txt"):
            return TextTokenizer(
                _wordpiece_tokenizer_json(os.path.join(spec, "vocab.txt"), lowercase)
            )
        raise FileNotFoundError(
            f"tokenizer directory {spec} holds none of tokenizer.json, vocab.json + merges.txt, "
            f"encoder.json + vocab.bpe, *.tiktoken, vocab.txt"
        )
    if spec.endswith(".tiktoken"):
        return TextTokenizer(_tiktoken_tokenizer_json(spec))
    if spec.endswith(".txt"):
        return TextTokenizer(_wordpiece_tokenizer_json(spec, lowercase))
    text = files.read_text(spec)
    parsed = files.parse_json_file(text, f"tokenizer file {spec}", spec)  # one line if bad
    if not isinstance(parsed, dict) or not isinstance(parsed.get("model"), dict):
        raise ValueError(
            f"{spec}: not a Hugging Face tokenizers JSON (no 'model'); a GPT-2 vocab.json needs its "
            f"merges: pass 'vocab.json,merges.txt' or their directory"
        )
    files.tokenizer_json_ids(parsed, spec)  # ids bounded, one token to an id
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises a bare Exception for a malformed file
        raise ValueError(f"{spec}: cannot be loaded by tokenizers: {e}") from None
    return TextTokenizer(tokenizer.to_str())


def _token_ids(spec: dict) -> dict[str, int]:
    """Every token of a tokenizers JSON (model vocabulary and added tokens) -> id."""
    vocab = spec["model"].get("vocab") or {}
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...], id = position
        token_ids = {piece: index for index, (piece, _) in enumerate(vocab)}
    else:
        token_ids = dict(vocab)
    for added in spec.get("added_tokens") or []:
        token_ids[added["content"]] = int(added["id"])
    return token_ids


# A byte-fallback model (SentencePiece-style BPE, as LLaMA's) spells a character its vocabulary
# lacks as the pieces of its UTF-8 bytes, "<0xCE>" "<0xB1>": the model still sees the text, but
# as bytes, the byte-level share of a vocabulary that does not fit the text.
_BYTE_PIECES = tuple(f"<0x{byte:02X}>" for byte in range(256))


def _unknown_ids(spec: dict, token_ids: dict[str, int], special_ids: dict[str, int]) -> tuple:
    """The ids that stand for text the vocabulary has no piece for: the unknown token
    ([UNK], <unk>) and, for a byte-fallback model, its 256 byte pieces."""
    ids = [special_ids["unk"]] if "unk" in special_ids else []
    if spec["model"].get("byte_fallback"):
        ids += [token_ids[piece] for piece in _BYTE_PIECES if piece in token_ids]
    return tuple(sorted(set(ids)))


def tiktoken_ranks(spec: dict) -> tuple[dict[bytes, int], dict[str, int]] | None:
    """(mergeable_ranks, special_tokens) for a tiktoken.Encoding that gives the same ids as
    `spec`, or None when `spec` is not plain GPT-2-style byte-level BPE.

    Plain means: no normalizer; exactly one ByteLevel pre-tokenizer with GPT-2's regex and no
    prefix space; a BPE model without dropout, unknown token, byte fallback or subword
    affixes; every added token special; and merge results whose ids rise with merge order
    (tiktoken ranks a pair by the id of the merged token, tokenizers by the merge's position).
    """
    model = spec.get("model") or {}
    pre = spec.get("pre_tokenizer") or {}
    if spec.get("normalizer") is not None or model.get("type") != "BPE":
        return None
    if (
        pre.get("type") != "ByteLevel"
        or pre.get("add_prefix_space")
        or not pre.get("use_regex", True)
    ):
        return None
    if model.get("dropout") is not None or model.get("unk_token") is not None:
        return None
    if (
        model.get("byte_fallback")
        or model.get("continuing_subword_prefix")
        or model.get("end_of_word_suffix")
    ):
        return None
    added = spec.get("added_tokens") or []
    if not all(t.get("special") for t in added):
        return None
    vocab: dict[str, int] = model["vocab"]
    byte_of_char = {char: byte for byte, char in gpt2_byte_to_unicode().items()}
    if not all(char in vocab for char in byte_of_char):
        return None
    # Each character of the byte alphabet to the code point of its byte, so that a token's
    # bytes are token.translate(...).encode("latin-1"), in C (a generator per token took 60 ms
    # for GPT-2's 50k tokens, every run's start).
    # Latin-1 characters outside the alphabet (a raw space) map to one that cannot be encoded.
    to_latin1 = {code: "\uffff" for code in range(256)}
    to_latin1.update({ord(char): byte for char, byte in byte_of_char.items()})
    previous = -1
    for merge in model.get("merges", []):
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        merged_id = vocab.get(left + right)
        if merged_id is None or merged_id <= previous:
            return None
        previous = merged_id
    special_tokens = {t["content"]: int(t["id"]) for t in added}
    ranks: dict[bytes, int] = {}
    for token, token_id in vocab.items():
        if token in special_tokens:
            continue
        try:
            ranks[token.translate(to_latin1).encode("latin-1")] = token_id
        except UnicodeEncodeError:  # a character outside the byte alphabet: not byte-level
            return None
    return ranks, special_tokens


# Settings of a tokenizers JSON that change the ids of a whole text: padding fills every
# sequence up to a length with [PAD], truncation cuts every longer one. A tokenizer.json saved
# from a model's pipeline often carries both; shards must hold every token of the text and no
# padding, so both are switched off on load.
_SEQUENCE_LENGTH_SETTINGS = ("padding", "truncation")


def without_padding_and_truncation(tokenizer_json: str) -> tuple[str, dict[str, dict]]:
    """(the JSON with padding and truncation switched off, the settings switched off).

    The JSON comes back unchanged (same bytes, same sha256) when it had neither.
    """
    spec = json.loads(tokenizer_json)
    disabled = _switch_off_sequence_settings(spec)
    if not disabled:
        return tokenizer_json, {}
    return json.dumps(spec, ensure_ascii=False), disabled


def _switch_off_sequence_settings(spec: dict) -> dict[str, dict]:
    """Set `spec`'s padding and truncation to None; returns the settings it had."""
    disabled = {key: spec[key] for key in _SEQUENCE_LENGTH_SETTINGS if spec.get(key)}
    for key in disabled:
        spec[key] = None
    return disabled


class TextTokenizer:
    """A tokenizer as shipped to workers: its JSON plus a few facts, built lazily.

    `vocab_size` is one more than the largest id (the embedding rows a model needs). `kind` is "byte_level_bpe", "bpe", "wordpiece", "unigram" or "wordlevel"; `special_ids`
    maps "eod" (GPT) or "cls", "sep", "mask", "pad", "unk" (BERT) to ids, for those present.
    `disabled` holds the padding and truncation settings the given JSON had: they are
    switched off (see `without_padding_and_truncation`), and a run records that they were.
    """

    def __init__(self, tokenizer_json: str) -> None:
        # Facts only, from the JSON: the Rust tokenizer is built on first use, in the process
        # that uses it.
        # One parse: a GPT-2 tokenizer's JSON is 2 MB, and this runs in the launcher and in
        # every worker (as without_padding_and_truncation, which parses it on its own).
        spec = json.loads(tokenizer_json)
        self.disabled = _switch_off_sequence_settings(spec)
        if self.disabled:
            tokenizer_json = json.dumps(spec, ensure_ascii=False)
        self._json = tokenizer_json
        self.kind: str = files.model_kind(spec)
        token_ids = _token_ids(spec)
        self.vocab_size: int = max(token_ids.values()) + 1
        self.special_ids: dict[str, int] = {}
        for name, candidates in SPECIAL_TOKEN_NAMES.items():
            for token in candidates:
                if token in token_ids:
                    self.special_ids[name] = token_ids[token]
                    break
        self.unknown_ids: tuple[int, ...] = _unknown_ids(spec, token_ids, self.special_ids)
        self._lock = threading.Lock()
        self._hf = None
        self._fast = None
        self._fast_checked = False
        # Kept until the fast path is checked, which needs it too: parsing it again cost
        # 40 ms of every run's start.
        self._spec: dict | None = spec

    # Pickle only the JSON and the facts: workers rebuild the Rust objects on first use.
    def __getstate__(self) -> dict:
        return {
            "json": self._json,
            "kind": self.kind,
            "vocab_size": self.vocab_size,
            "special_ids": self.special_ids,
            "unknown_ids": self.unknown_ids,
            "disabled": self.disabled,
        }

    def __setstate__(self, state: dict) -> None:
        self._json = state["json"]
        self.disabled = state["disabled"]
        self.kind = state["kind"]
        self.vocab_size = state["vocab_size"]
        self.special_ids = state["special_ids"]
        self.unknown_ids = state["unknown_ids"]
        self._lock = threading.Lock()
        self._hf = None
        self._fast = None
        self._fast_checked = False
        self._spec = None

    def __repr__(self) -> str:
        return f"TextTokenizer(kind={self.kind!r}, vocab_size={self.vocab_size}, special_ids={self.special_ids})"

    def to_json(self) -> str:
        return self._json

    def _hf_tokenizer(self):
        with self._lock:
            if self._hf is None:
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_str(self._json)
                # A literal "<|endoftext|>" or "[SEP]" inside a document is text, not a
                # document boundary: encode special tokens' strings like any other text.
                tokenizer.encode_special_tokens = True
                self._hf = tokenizer
            return self._hf

    def _fast_encoding(self):
        """The tiktoken Encoding for this tokenizer, or None when it has no fast path."""
        with self._lock:
            if not self._fast_checked:
                spec, self._spec = self._spec, None
                ranks = tiktoken_ranks(spec if spec is not None else json.loads(self._json))
                if ranks is not None:
                    import tiktoken

                    mergeable_ranks, special_tokens = ranks
                    self._fast = tiktoken.Encoding(
                        "shardsmith-byte-level-bpe",
                        pat_str=GPT2_PATTERN,
                        mergeable_ranks=mergeable_ranks,
                        special_tokens=special_tokens,
                    )
                self._fast_checked = True
            return self._fast

    @property
    def uses_fast_path(self) -> bool:
        """Whether `encode_batch` runs on tiktoken (plain GPT-2-style byte-level BPE)."""
        return self._fast_encoding() is not None

    def load_encoder(self) -> None:
        """Build what `encode_batch` runs on, without encoding anything (a launcher that forks
        its workers builds it once for all of them)."""
        if self._fast_encoding() is None:
            self._hf_tokenizer()

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids (int32) of each text; no special tokens are added."""
        texts = list(texts)
        if not texts:
            return []
        fast = self._fast_encoding()
        if fast is not None:
            # tiktoken's batch call runs its own thread pool; RAYON_NUM_THREADS is the one
            # knob that sizes both it and tokenizers' pool.
            threads = int(os.environ.get("RAYON_NUM_THREADS") or os.cpu_count() or 1)
            id_lists = fast.encode_ordinary_batch(texts, num_threads=max(1, threads))
            return [np.array(ids, dtype=np.int32) for ids in id_lists]
        return self.encode_batch_hf(texts)

    def encode_batch_hf(self, texts: Sequence[str]) -> list[np.ndarray]:
        """`encode_batch` through `tokenizers` even where a fast path exists (for comparison)."""
        tokenizer = self._hf_tokenizer()
        # encode_batch_fast (tokenizers >= 0.20) skips computing character offsets.
        encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        encodings = encode(list(texts), add_special_tokens=False)
        return [np.array(e.ids, dtype=np.int32) for e in encodings]

    def decode(self, ids: Iterable[int]) -> str:
        return self._hf_tokenizer().decode([int(i) for i in ids], skip_special_tokens=False)

    def save(self, path: str) -> None:
        """Write the tokenizer JSON atomically (a local path or any URL `common.storage` serves)."""
        folder, name = parent_and_name(path)
        OutputDir(folder).write_bytes(name, self._json.encode("utf-8"))

    def identity(self) -> dict:
        """What a shard set records about its tokenizer (sha256 is of the saved JSON)."""
        return {
            "kind": self.kind,
            "vocab_size": self.vocab_size,
            "sha256": hashlib.sha256(self._json.encode("utf-8")).hexdigest(),
            "special_ids": dict(self.special_ids),
        }
