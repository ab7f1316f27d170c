"""Reading a tokenizer's files: one reader per format, each checking what it reads.

A tokenizer's files are untrusted input. Every reader here reads in time and memory linear in
the file, within these caps, and refuses anything else in one line that names the file, the
line or token, and the cap:

- MAX_TOKENIZER_FILE_BYTES: a file is read whole, so only a regular file of at most this size
  is read (common.safe_io refuses a FIFO or a device before opening it);
- MAX_TOKENIZER_VOCAB: every id is an int in [0, MAX_TOKENIZER_VOCAB), and one id names one token.
  `tokenizers` sizes its tables by the largest id (an id near 2^31 has it allocate gigabytes
  and abort) and holds a few hundred bytes a token, so a vocabulary is checked before
  `tokenizers` sees it;
- MAX_TOKEN_BYTES: a tiktoken token's length, which bounds the work of finding its merge.

Merges name only tokens the vocabulary holds. A leading UTF-8 byte-order mark is not part of a
file's text (it would glue itself to vocab.txt's first token, [PAD]), and a CRLF line end is a
line end.
"""

from __future__ import annotations

import base64
import binascii
import functools
import heapq
import json
import os
from collections.abc import Iterable

from common.safe_io import (
    TOKENIZER_CAP,
    UnsafeInputError,
    format_bytes,
    parse_json,
    read_bytes_capped,
)
from common.storage import is_remote, local_path

# The largest tokenizer files in use are tens of MB (a 256k-token tokenizer.json is ~35 MB).
MAX_TOKENIZER_FILE_BYTES = TOKENIZER_CAP
# Past the largest vocabularies in use (XLM-V's 901,629 tokens; Gemma's 262,144) and far
# below 2^31: a million-token tokenizer costs `tokenizers` about half a GB.
MAX_TOKENIZER_VOCAB = 1 << 20
# GPT-2's longest token is 128 bytes; the cap bounds the bytes a merge's look-up hashes.
MAX_TOKEN_BYTES = 1024

EOD_TOKEN = "<|endoftext|>"


@functools.cache
def gpt2_byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters: printable
    Latin-1 bytes map to themselves, the rest to code points from U+0100 on, in byte order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapping = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(0x100 + extra)
            extra += 1
    return mapping


class TokenizerFileError(UnsafeInputError):
    """A tokenizer file refused: one line naming the file, the line or token, and the cap."""


def _show(token: str | bytes) -> str:
    """A token for a message: its repr, cut to a readable length."""
    return repr(token[:40]) + ("..." if len(token) > 40 else "")


def read_text(path: str) -> str:
    """A tokenizer file's text, without a leading byte-order mark: a regular file (a FIFO or
    /dev/zero is refused before it is opened) of at most MAX_TOKENIZER_FILE_BYTES."""
    if is_remote(path):
        import fsspec  # remote files as remote shard sets are read (dataset_format.shardset)

        try:
            with fsspec.open(path, "rb") as f:
                data = f.read(MAX_TOKENIZER_FILE_BYTES + 1)
        except FileNotFoundError:
            raise FileNotFoundError(f"tokenizer file not found: {path}") from None
        if len(data) > MAX_TOKENIZER_FILE_BYTES:
            raise TokenizerFileError(
                f"tokenizer file {path} is larger than its cap of "
                f"{format_bytes(MAX_TOKENIZER_FILE_BYTES)}"
            )
    else:
        local = local_path(path)
        if not os.path.lexists(local):
            raise FileNotFoundError(f"tokenizer file not found: {path}")
        data = read_bytes_capped(local, "tokenizer file", MAX_TOKENIZER_FILE_BYTES)
    return decode_text(data, path)


def decode_text(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TokenizerFileError(f"{path}: not UTF-8 text ({e})") from None


def _lines(text: str) -> list[str]:
    """The lines of `text`, LF or CRLF ended."""
    lines = text.split("\n")
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def checked_ids(pairs: Iterable[tuple[object, object]], path: str) -> dict[str, int]:
    """token -> id from (token, id) pairs: each token a string, each id an int in
    [0, MAX_TOKENIZER_VOCAB), one token to an id and one id to a token (a token listed twice with
    its one id is the same entry, as an added token that is also in the model's vocabulary)."""
    token_ids: dict[str, int] = {}
    token_of_id: dict[int, str] = {}
    for token, token_id in pairs:
        if not isinstance(token, str):
            raise TokenizerFileError(f"{path}: a token is {type(token).__name__}, not a string")
        if type(token_id) is not int or not 0 <= token_id < MAX_TOKENIZER_VOCAB:
            raise TokenizerFileError(
                f"{path}: token {_show(token)} has id {str(token_id)[:40]}: an id is an int in "
                f"[0, {MAX_TOKENIZER_VOCAB:,}) (the vocabulary cap, MAX_TOKENIZER_VOCAB)"
            )
        other = token_of_id.setdefault(token_id, token)
        if other != token:
            raise TokenizerFileError(
                f"{path}: tokens {_show(other)} and {_show(token)} both have id {token_id} "
                "(an id names one token)"
            )
        known = token_ids.setdefault(token, token_id)
        if known != token_id:
            raise TokenizerFileError(
                f"{path}: token {_show(token)} has two ids, {known} and {token_id}"
            )
    return token_ids


def parse_json_file(text: str, what: str, path: str) -> object:
    """A tokenizer file's JSON, within safe_io's bounds (depth, integer size: one line each),
    each object's keys once: JSON keeps the last of a key given twice, which would drop a
    token of a vocabulary silently."""
    parse_json(text, what)

    def unique_keys(pairs: list[tuple[str, object]]) -> dict:
        found = dict(pairs)
        if len(found) < len(pairs):  # a key twice: name the first one repeated
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise TokenizerFileError(
                        f"{path}: {_show(key)} is a key twice in one JSON object"
                    )
                seen.add(key)
        return found

    return json.loads(text, object_pairs_hook=unique_keys)


def parse_vocab_json(text: str, path: str) -> dict[str, int]:
    """GPT-2's vocab.json / encoder.json: a JSON object token -> id, checked (checked_ids)."""
    return _vocab_ids(parse_json_file(text, f"vocabulary {path}", path), path)


def _vocab_ids(vocab: object, path: str) -> dict[str, int]:
    if not isinstance(vocab, dict) or not vocab:
        raise TokenizerFileError(f"{path}: expected a JSON object mapping token -> id")
    return checked_ids(vocab.items(), path)


def parse_merges(
    text: str, path: str, vocab: dict[str, int], vocab_path: str
) -> list[tuple[str, str]]:
    """A merges.txt / vocab.bpe: an optional '#version' line, then 'left right' a line, each
    of left, right and left + right a token of `vocab` (read from `vocab_path`), each pair
    once (tokenizers would keep a repeated pair's later rank)."""
    merges = []
    line_of_pair: dict[tuple[str, str], int] = {}
    for line_number, line in enumerate(_lines(text), 1):
        if not line or (line_number == 1 and line.startswith("#version")):
            continue
        pair = line.split(" ")
        if len(pair) != 2 or not all(pair):
            raise TokenizerFileError(
                f"{path}:{line_number}: expected 'left right', got {_show(line)}"
            )
        for token in (pair[0], pair[1], pair[0] + pair[1]):
            if token not in vocab:
                raise TokenizerFileError(
                    f"{path}:{line_number}: the merge {_show(line)} names {_show(token)}, "
                    f"which the vocabulary {vocab_path} lacks"
                )
        first = line_of_pair.setdefault((pair[0], pair[1]), line_number)
        if first != line_number:
            raise TokenizerFileError(
                f"{path}:{line_number}: the merge {_show(line)} is listed twice (also line {first})"
            )
        merges.append((pair[0], pair[1]))
    return merges


def _tiktoken_line(line: str, path: str, line_number: int) -> tuple[bytes, int]:
    """One 'base64(token bytes) rank' line, its token 1 to MAX_TOKEN_BYTES bytes long and its
    rank under MAX_TOKENIZER_VOCAB."""
    fields = line.split()
    where = f"{path}:{line_number}"
    if len(fields) != 2 or not (fields[1].isascii() and fields[1].isdigit()):
        raise TokenizerFileError(f"{where}: expected 'base64-token rank', got {_show(line)}")
    if len(fields[0]) > 4 * (MAX_TOKEN_BYTES // 3 + 1):  # base64: 4 characters for 3 bytes
        raise TokenizerFileError(
            f"{where}: a token longer than the cap of {MAX_TOKEN_BYTES} bytes (MAX_TOKEN_BYTES)"
        )
    try:
        token = base64.b64decode(fields[0], validate=True)
    except (ValueError, binascii.Error):
        raise TokenizerFileError(
            f"{where}: expected 'base64-token rank', got {_show(line)}"
        ) from None
    if not token:
        raise TokenizerFileError(f"{where}: an empty token")
    if len(token) > MAX_TOKEN_BYTES:
        raise TokenizerFileError(
            f"{where}: a token of {len(token)} bytes, longer than the cap of {MAX_TOKEN_BYTES} "
            "bytes (MAX_TOKEN_BYTES)"
        )
    rank = fields[1]
    if len(rank) > len(str(MAX_TOKENIZER_VOCAB)) or int(rank) >= MAX_TOKENIZER_VOCAB:
        raise TokenizerFileError(
            f"{where}: rank {rank[:40]}: a rank is under {MAX_TOKENIZER_VOCAB:,} "
            "(the vocabulary cap, MAX_TOKENIZER_VOCAB)"
        )
    return token, int(rank)


def parse_tiktoken_ranks(text: str, path: str) -> dict[bytes, int]:
    """A tiktoken ranks file, "base64(token bytes) rank" a line: token bytes -> rank, each
    token and each rank once, every one of the 256 bytes ranked."""
    ranks: dict[bytes, int] = {}
    line_of_rank: dict[int, int] = {}
    for line_number, line in enumerate(_lines(text), 1):
        if not line.strip():
            continue
        token, rank = _tiktoken_line(line, path, line_number)
        if token in ranks:
            raise TokenizerFileError(
                f"{path}:{line_number}: token {_show(token)} listed twice (rank {ranks[token]} "
                f"and {rank})"
            )
        first = line_of_rank.setdefault(rank, line_number)
        if first != line_number:
            raise TokenizerFileError(
                f"{path}:{line_number}: rank {rank} given to two tokens (lines {first} and "
                f"{line_number}; a rank names one token)"
            )
        ranks[token] = rank
    if not all(bytes([byte]) in ranks for byte in range(256)):
        raise TokenizerFileError(
            f"{path}: not a byte-level BPE: some of the 256 bytes have no rank"
        )
    return ranks


def bpe_parts(ranks: dict[bytes, int], token: bytes, below_rank: int) -> list[bytes]:
    """`token`'s bytes merged as tiktoken merges them (the adjacent pair whose concatenation
    ranks lowest first, the leftmost of equals), using only tokens ranked below `below_rank`.

    The parts are a linked list of start offsets and the candidate pairs a heap, so a token of
    n bytes costs at most 3n rank look-ups and O(n log n) steps, and a file work linear in its
    bytes (rescanning every pair after each merge would cost n^2 look-ups of slices up to n
    bytes long: minutes for a 1.5 MB file of long tokens).
    """
    size = len(token)
    end = list(range(1, size + 1))  # end[start]: where the part starting at `start` ends
    previous = list(range(-1, size - 1))  # previous[start]: the start of the part before it
    alive = [True] * size  # whether a part still starts at this offset
    heap: list[tuple[int, int, int, int]] = []

    def push(start: int) -> None:  # the pair of the part at `start` and the next one
        middle = end[start]
        if middle < size:
            rank = ranks.get(token[start : end[middle]])
            if rank is not None and rank < below_rank:
                heapq.heappush(heap, (rank, start, middle, end[middle]))

    for start in range(size - 1):
        push(start)
    while heap:
        _, start, middle, stop = heapq.heappop(heap)
        if not (alive[start] and alive[middle] and end[start] == middle and end[middle] == stop):
            continue  # a pair one of whose parts has merged since
        end[start], alive[middle] = stop, False
        if stop < size:
            previous[stop] = start
        if previous[start] >= 0:
            push(previous[start])
        push(start)
    parts, start = [], 0
    while start < size:
        parts.append(token[start : end[start]])
        start = end[start]
    return parts


def merges_from_ranks(ranks: dict[bytes, int], path: str) -> list[tuple[bytes, bytes]]:
    """The merge (left, right) that makes each multi-byte token, in rank order.

    A BPE ranks file is the merge list in disguise: a token of rank r is made by one merge of
    two tokens of lower rank, the two parts its bytes reach when merged with ranks below r.
    """
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        parts = bpe_parts(ranks, token, rank)
        if len(parts) != 2:
            raise TokenizerFileError(
                f"{path}: not a BPE ranks file: token {_show(token)} (rank {rank}) is not one "
                "merge of two lower-ranked tokens"
            )
        merges.append((parts[0], parts[1]))
    return merges


def parse_wordpiece_vocab(text: str, path: str) -> dict[str, int]:
    """A WordPiece vocab.txt: a token a line, its id its line's index (a blank line holds an
    id and no token); at most MAX_TOKENIZER_VOCAB lines, no token twice."""
    if text.count("\n") > MAX_TOKENIZER_VOCAB:  # counted before a line is split off
        raise TokenizerFileError(
            f"{path}: {text.count(chr(10)):,} lines, more than the vocabulary cap of "
            f"{MAX_TOKENIZER_VOCAB:,} tokens (MAX_TOKENIZER_VOCAB)"
        )
    vocab: dict[str, int] = {}
    for index, token in enumerate(_lines(text)):
        if not token:
            continue
        if vocab.setdefault(token, index) != index:
            raise TokenizerFileError(
                f"{path}:{index + 1}: duplicate token {_show(token)} (also line "
                f"{vocab[token] + 1})"
            )
    if len(vocab) and max(vocab.values()) >= MAX_TOKENIZER_VOCAB:
        raise TokenizerFileError(
            f"{path}: more than the vocabulary cap of {MAX_TOKENIZER_VOCAB:,} tokens (MAX_TOKENIZER_VOCAB)"
        )
    return vocab


def tokenizer_json_ids(spec: dict, path: str) -> dict[str, int]:
    """Every token of a tokenizers JSON (model vocabulary and added tokens) -> id, checked
    (checked_ids): ids bounded, one token to an id."""
    vocab = spec["model"].get("vocab")
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...], id = position
        pairs: Iterable = (
            (entry[0] if isinstance(entry, list) and entry else None, index)
            for index, entry in enumerate(vocab)
        )
    elif isinstance(vocab, dict):
        pairs = vocab.items()
    else:
        raise TokenizerFileError(f"{path}: the model has no vocabulary (model.vocab)")
    added = spec.get("added_tokens") or []
    if not isinstance(added, list) or not all(isinstance(t, dict) for t in added):
        raise TokenizerFileError(f"{path}: added_tokens is not a list of objects")
    added_pairs = ((t.get("content"), t.get("id")) for t in added)
    return checked_ids((*pairs, *added_pairs), path)


def model_kind(spec: dict) -> str:
    """"byte_level_bpe" for BPE under a ByteLevel pre-tokenizer, else the model's type, lower."""
    model_type = str(spec["model"].get("type", ""))
    pre = spec.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if model_type == "BPE" and any(
        isinstance(p, dict) and p.get("type") == "ByteLevel" for p in parts
    ):
        return "byte_level_bpe"
    return model_type.lower()


def token_ids_of_file(raw: bytes, path: str) -> tuple[dict[str, int], str]:
    """(token -> id, kind) of one tokenizer file's bytes, by the readers above: a tokenizers
    JSON, a GPT-2 vocab.json (token -> id, without its merges), a tiktoken ranks file (its
    tokens in GPT-2's byte alphabet, `<|endoftext|>` after the last rank) or a WordPiece
    vocab.txt."""
    text = decode_text(raw, path)
    if path.endswith(".tiktoken"):
        char_of_byte = gpt2_byte_to_unicode()
        ranks = parse_tiktoken_ranks(text, path)
        pairs = [("".join(char_of_byte[b] for b in t), rank) for t, rank in ranks.items()]
        token_ids = checked_ids(pairs, path)
        if EOD_TOKEN not in token_ids:
            token_ids.update(checked_ids([(EOD_TOKEN, max(ranks.values()) + 1)], path))
        return token_ids, "byte_level_bpe"
    if text.lstrip().startswith("{"):
        spec = parse_json_file(text, f"tokenizer file {path}", path)
        if isinstance(spec, dict) and isinstance(spec.get("model"), dict):
            return tokenizer_json_ids(spec, path), model_kind(spec)
        return _vocab_ids(spec, path), "byte_level_bpe"  # GPT-2's vocab.json
    return parse_wordpiece_vocab(text, path), "wordpiece"
