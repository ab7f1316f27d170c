"""tools/dump as a user runs it: a subprocess over a real shard set."""

from __future__ import annotations

import json
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


def test_doc_decodes_to_the_original_text(shard_set):
    directory, paragraphs, _ = shard_set
    out = dump(directory, "--doc", 250, "--json")
    record = json.loads(out.stdout)
    assert record["text"] == paragraphs[250] + "<|endoftext|>"
    seq = json.loads(dump(directory, "--seq", 250, "--json").stdout)
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
