"""The training side's --tokenizer FILE (train.data.tokenizer_info_from_file) as untrusted
input: only a regular file under the tokenizer cap is read, and ids must fit a vocabulary."""

from __future__ import annotations

import json
import os

import pytest

from train.data import tokenizer_info_from_file


@pytest.mark.timeout(30)
def test_devices_fifos_and_huge_ids_are_one_line(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in (("/dev/zero", "a character device"), (str(fifo), "a FIFO")):
        with pytest.raises(ValueError, match=f"--tokenizer {path} is {kind}, not a regular file"):
            tokenizer_info_from_file(path)  # /dev/zero used to read 3.4 GB, then MemoryError
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({"a": 0, "b": 10**30}))
    with pytest.raises(ValueError, match=r"vocab.json: token 'b' has id 1000000000000000000000000000000: an id is an int in \[0, 1,048,576\) \(the vocabulary cap, MAX_TOKENIZER_VOCAB\)$") as caught:
        tokenizer_info_from_file(str(vocab))
    assert "\n" not in str(caught.value)
    vocab.write_text(json.dumps({"a": 0, "b": 1}))
    assert tokenizer_info_from_file(str(vocab)).vocab_size == 2


def test_a_file_over_the_cap_is_refused_by_name(tmp_path, monkeypatch):
    from train.data import spec

    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({"a": 0, "b": 1}))
    monkeypatch.setattr(spec, "TOKENIZER_CAP", 8)
    with pytest.raises(ValueError, match="vocab.json is larger than its cap of 8 bytes"):
        tokenizer_info_from_file(str(vocab))
