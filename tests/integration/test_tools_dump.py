"""tools/dump as a user runs it: a subprocess over a real shard set."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import numpy as np
import pytest

from dataset_format import (
    IndexedDatasetWriter,
    TokenizerInfo,
    shard_info,
    write_shard_set_manifest,
)
from tests.conftest import CORPORA, REPO

DUMP = [sys.executable, str(REPO / "tools" / "dump")]


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory, gpt2_tokenizer):
    """Two shards of Moby-Dick paragraphs, GPT-2 ids with EOD, tokenizer shipped in the set."""
    directory = tmp_path_factory.mktemp("set")
    text = (CORPORA / "books" / "2701-0.txt").read_text(encoding="utf-8")
    paragraphs = [p.strip() for p in text.split("\n\n") if len(p.strip()) > 20][:400]
    encoded = gpt2_tokenizer.encode_batch(paragraphs)
    infos = []
    for k in range(2):
        with IndexedDatasetWriter(str(directory / f"shard-{k:05d}"), np.uint16) as writer:
            for e in encoded[k * 200 : (k + 1) * 200]:
                writer.add_document([e.ids + [50256]])
        infos.append(shard_info(str(directory / f"shard-{k:05d}")))
    tokenizer_file = directory / "source-tokenizer.json"
    gpt2_tokenizer.save(str(tokenizer_file))
    write_shard_set_manifest(
        str(directory),
        infos,
        dtype="uint16",
        sequence_unit="document",
        tokenizer=TokenizerInfo(
            file="tokenizer.json",
            kind="byte-level-bpe",
            vocab_size=50257,
            special_ids={"eod": 50256},
        ),
        tokenizer_file=str(tokenizer_file),
        source={"name": "books"},
    )
    return directory, paragraphs, encoded


def dump(*args):
    return subprocess.run(DUMP + [str(a) for a in args], capture_output=True, text=True)


def test_summary_json_counts(shard_set):
    directory, paragraphs, encoded = shard_set
    out = dump(directory, "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["shards"] == 2
    assert info["documents"] == 400
    assert info["tokens"] == sum(len(e.ids) + 1 for e in encoded)
    assert info["tokenizer"]["special_ids"] == {"eod": 50256}
    lengths = sorted(len(e.ids) + 1 for e in encoded)
    assert info["document_length_percentiles"]["p100"] == lengths[-1]
    assert info["document_length_percentiles"]["p0"] == lengths[0]
    human = dump(directory)
    assert "documents   400" in human.stdout and "byte-level-bpe" in human.stdout
    assert "metadata    none (0 of 2 shards" in human.stdout and info["metadata_sidecars"] == 0


def test_doc_decodes_to_the_original_text(shard_set):
    directory, paragraphs, encoded = shard_set
    out = dump(directory, "--doc", 250, "--json", "--max-tokens", 0, "--ids")
    record = json.loads(out.stdout)
    assert record["text"] == paragraphs[250] + "<|endoftext|>"
    assert record["ids"] == encoded[250].ids + [50256] and not record["truncated"]
    assert record["metadata"] is None  # a set written without sidecars has no metadata
    seq = json.loads(dump(directory, "--seq", 250, "--json", "--max-tokens", 0, "--ids").stdout)
    assert seq["ids"] == record["ids"]
    missing = dump(directory, "--doc", 400)
    assert missing.returncode == 1 and "out of range" in missing.stderr


def test_verify_passes_then_fails_on_a_flipped_byte(shard_set, tmp_path):
    directory, _, _ = shard_set
    assert dump(directory, "--verify").returncode == 0
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in directory.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    data = bytearray((copy / "shard-00000.bin").read_bytes())
    data[100] ^= 0x01
    (copy / "shard-00000.bin").write_bytes(bytes(data))
    out = dump(copy, "--verify")
    assert out.returncode == 1
    assert "shard-00000.bin: checksum mismatch" in out.stderr
    assert "Traceback" not in out.stderr


def test_histogram_text_and_png(shard_set, tmp_path):
    directory, _, encoded = shard_set
    out = dump(directory, "--hist", "--json")
    hist = json.loads(out.stdout)
    assert sum(hist["counts"]) == 400
    png = tmp_path / "h.png"
    out = dump(directory, "--hist", "--plot", png)
    assert out.returncode == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "#" in out.stdout


def test_bad_path_is_a_clear_error(tmp_path):
    out = dump(tmp_path / "nothing")
    assert out.returncode == 1
    assert "neither a shard-set directory nor a .bin/.idx prefix" in out.stderr


# -- hostile inputs: copies of the real set above with one thing broken --------------------------


def copy_set(directory, target):
    target.mkdir()
    for f in directory.iterdir():
        (target / f.name).write_bytes(f.read_bytes())
    return target


def assert_one_line_error(out, *fragments):
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(
    "raw, fault",
    [
        (b'[{"format": "mmidx-shard-set"}]', "a JSON list, not an object"),
        ('{"format": "mmidx-shard-set", "dtype": "\u00e9"}'.encode("latin-1"), "not UTF-8"),
        (b"[" * 200_000 + b"]" * 200_000, "JSON nested 200000 deep"),
    ],
)
@pytest.mark.parametrize("mode", [[], ["--verify"]])
def test_unreadable_manifest_is_one_line(shard_set, tmp_path, raw, fault, mode):
    directory, _, _ = shard_set
    copy = copy_set(directory, tmp_path / "copy")
    (copy / "manifest.json").write_bytes(raw)
    assert_one_line_error(dump(copy, *mode), str(copy / "manifest.json"), fault)


@pytest.mark.parametrize(
    "edit, fault",
    [
        (lambda d: d["shards"][1].update(tokens="many"), "'tokens' must be int, got str"),
        (lambda d: d["tokenizer"].update(special_ids=[50256]), "'special_ids' must be dict"),
        (lambda d: d.update(shards=None), "'shards' must be list, got NoneType"),
        (lambda d: d["shards"][1].update(name="../elsewhere/shard-00000"), "not a plain file"),
        (lambda d: d["tokenizer"].update(file="/etc/hostname"), "not a plain file name"),
        (lambda d: d["shards"][1].update(name="./shard-00000"), "not a plain file name"),
    ],
)
def test_manifest_with_wrong_types_or_names_is_one_line(shard_set, tmp_path, edit, fault):
    directory, _, _ = shard_set
    # "../elsewhere/shard-00000" is a real, whole pair: without the name check --verify says OK.
    copy_set(directory, tmp_path / "elsewhere")
    copy = copy_set(directory, tmp_path / "copy")
    data = json.loads((copy / "manifest.json").read_text())
    edit(data)
    (copy / "manifest.json").write_text(json.dumps(data))
    assert_one_line_error(dump(copy, "--verify"), str(copy / "manifest.json"), fault)


def rewrite_shard_with(copy, documents):
    """Replace shard-00000 of a copied set by `documents` and record it in the manifest."""
    with IndexedDatasetWriter(str(copy / "shard-00000"), np.uint16) as writer:
        for doc in documents:
            writer.add_document([doc])
    data = json.loads((copy / "manifest.json").read_text())
    data["shards"][0] = shard_info(str(copy / "shard-00000")).to_json()
    (copy / "manifest.json").write_text(json.dumps(data))


def test_verify_finds_token_ids_beyond_the_vocabulary(shard_set, tmp_path):
    directory, _, encoded = shard_set
    copy = copy_set(directory, tmp_path / "copy")
    documents = [np.array(e.ids + [50256]) for e in encoded[:200]]
    documents[7][3] = 50257  # one past GPT-2's 50,257 ids: fits uint16, checksums agree
    rewrite_shard_with(copy, documents)
    assert dump(copy).returncode == 0  # the summary reads indexes only
    offset = sum(len(d) for d in documents[:7]) + 3
    assert_one_line_error(
        dump(copy, "--verify"),
        str(copy / "shard-00000.bin"),
        f"token id 50257 (document 7, token {offset}) is outside the vocabulary of 50257",
    )


def test_non_monotonic_document_index_is_one_line(shard_set, tmp_path):
    directory, _, _ = shard_set
    copy = copy_set(directory, tmp_path / "copy")
    idx = copy / "shard-00000.idx"
    raw = bytearray(idx.read_bytes())
    sequences = 200
    doc_index_at = 34 + 12 * sequences
    doc_index = np.frombuffer(bytes(raw[doc_index_at:]), dtype="<i8").copy()
    doc_index[5], doc_index[6] = doc_index[6] + 3, doc_index[5]  # documents 4..6 overlap
    raw[doc_index_at:] = doc_index.tobytes()
    idx.write_bytes(bytes(raw))
    for mode in ([], ["--doc", "5"], ["--verify"]):
        out = dump(copy, *mode)
        assert_one_line_error(out, str(idx), "document index decreases at document 5")


def test_reader_closing_the_pipe_is_not_an_error(shard_set):
    """`tools/dump SET --doc 0 | head` (the demo does this): exit 0, nothing on stderr. The
    reader here (`true`) is gone long before dump writes, so every write meets a closed pipe."""
    done = subprocess.run(
        ["bash", "-c", 'set -o pipefail; "$0" "$1" "$2" --doc 0 | true', *DUMP,
         str(shard_set[0])],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_seq_with_a_pointer_out_of_range_is_one_line(shard_set, tmp_path):
    """--seq reads one sequence without the O(n) pointer pass: it must still check its own
    pointer (it printed "0 tokens" and exited 0)."""
    directory, _, _ = shard_set
    copy = copy_set(directory, tmp_path / "copy")
    idx = copy / "shard-00000.idx"
    data = bytearray(idx.read_bytes())
    sequences = struct.unpack_from("<Q", data, 18)[0]
    struct.pack_into("<q", data, 34 + 4 * sequences + 8 * 3, 10**9)
    idx.write_bytes(bytes(data))
    assert dump(copy, "--seq", 2).returncode == 0
    assert_one_line_error(dump(copy, "--seq", 3), "shard-00000.idx: sequence 3 points to byte")


def test_verify_refuses_a_set_of_no_shards(shard_set, tmp_path):
    # A well-formed manifest listing no shard (what a run that wrote nothing finished before
    # such runs failed): --verify must not say OK.
    directory, _, _ = shard_set
    empty = tmp_path / "empty"
    empty.mkdir()
    write_shard_set_manifest(
        str(empty), [], dtype="uint16", sequence_unit="document",
        tokenizer=TokenizerInfo(file="tokenizer.json", kind="byte-level-bpe", vocab_size=50257,
                                special_ids={"eod": 50256}),
        tokenizer_file=str(directory / "tokenizer.json"), source={"name": "books"},
    )
    out = dump(empty, "--verify")
    assert out.returncode == 1 and "OK" not in out.stdout
    assert out.stderr == f"tools/dump: {empty}: the shard set holds no shard: nothing was written\n"
