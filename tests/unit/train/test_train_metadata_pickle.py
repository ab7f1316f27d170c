"""Issue 27.3 and 27.4: the unpickler of DCP ``.metadata`` (train/metadata_pickle.py) is bounded
and builds only DCP's plain metadata records. Each case takes the ``.metadata`` of a real
one-process GPT checkpoint and corrupts or crafts it; one test per refused opcode family."""

from __future__ import annotations

import os
import pickle
import struct
import tracemalloc

import pytest
import torch

from common.safe_io import UnsafeInputError
from tests.helpers.checkpoints import load_path_errors, rehash, trained_gpt
from train import checkpoint as ckpt
from train import checkpoint_io, metadata_pickle
from train.export import main as export_main


def _real(checkpoint: str) -> bytes:
    with open(os.path.join(checkpoint, ".metadata"), "rb") as f:
        return f.read()


def _opcodes_of(real: bytes) -> bytes:
    """The real pickle's opcodes after its PROTO and FRAME header (so that more can go first)."""
    assert real[:2] == b"\x80\x04" and real[2:3] == pickle.FRAME
    return real[11:]


def _refused(data: bytes) -> str:
    with pytest.raises(UnsafeInputError) as caught:
        checkpoint_io.parse_metadata(data, "m")
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400
    return message


def _unicode(text: str) -> bytes:
    raw = text.encode()
    return pickle.BINUNICODE + struct.pack("<I", len(raw)) + raw


def _layout_poison() -> bytes:
    """BUILD {"cache": {"torch.strided": torch.float32}} on torch.serialization._get_layout, then
    POP: every layout the process unpickles afterwards would come back as a dtype."""
    inner = pickle.EMPTY_DICT + _unicode("torch.strided") + b"ctorch\nfloat32\n" + pickle.SETITEM
    state = pickle.EMPTY_DICT + _unicode("cache") + inner + pickle.SETITEM
    return b"ctorch.serialization\n_get_layout\n" + state + pickle.BUILD + pickle.POP


def test_real_metadata_is_read_within_every_budget(gpt_checkpoint):
    real = _real(gpt_checkpoint)
    unpickler = metadata_pickle.MetadataUnpickler(real)
    assert unpickler.load().state_dict_metadata
    used = metadata_pickle.MEMORY_PER_BYTE * len(real) + metadata_pickle.MEMORY_SLACK
    used -= unpickler.memory_left
    assert 0 < used < 24 * len(real)  # ~19 bytes charged per byte of real metadata
    assert 0 < metadata_pickle.MAX_OPCODES - unpickler.opcodes_left < len(real)


def test_a_setattr_on_an_allowed_function_is_refused_everywhere(
    gpt_checkpoint, tmp_path, capsys
):
    """Issue 27.4: BUILD on torch.serialization._get_layout ahead of real metadata used to be
    accepted by resume, evaluation and export, and left _get_layout('torch.strided') returning
    torch.float32 for the rest of the process."""
    cache = dict(torch.serialization._get_layout.cache)
    poisoned = b"\x80\x04" + _layout_poison() + _opcodes_of(_real(gpt_checkpoint))
    with open(os.path.join(gpt_checkpoint, ".metadata"), "wb") as f:
        f.write(poisoned)
    rehash(gpt_checkpoint, ".metadata")
    try:
        for message in load_path_errors(gpt_checkpoint, tmp_path):
            assert "sets attributes on a function" in message and "\n" not in message, message
        assert export_main(["torch", gpt_checkpoint, str(tmp_path / "out.pt")]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "sets attributes on a function" in err
        assert torch.serialization._get_layout("torch.strided") is torch.strided
    finally:
        torch.serialization._get_layout.cache = cache


@pytest.mark.parametrize("build, fault", [
    (b"ctorch.distributed.checkpoint.metadata\nStorageMeta\nN}U\x01xK\x01s\x86b.",
     "sets attributes on a class"),
    (b"ctorch\nSize\n)\x85R}U\x01xK\x01sb.", "sets attributes on a Size"),
    (b"ctorch.distributed.checkpoint.metadata\nMetadataIndex\n)\x81}U\x07__ror__K\x01sb.",
     "sets a MetadataIndex field it does not have"),
])
def test_build_is_refused_on_all_but_the_metadata_records(build, fault):
    assert fault in _refused(b"\x80\x02" + build)
    assert not hasattr(torch.distributed.checkpoint.metadata.StorageMeta, "x")


@pytest.mark.parametrize("data, fault", [
    (b"\x80\x02cposix\nsystem\nU\x04trueq\x85R.", "posix.system"),  # a global not allowed
    (b"\x80\x04\x8c\x01x\x94Q.", "BINPERSID opcode"),  # BINPERSID
    (b"\x80\x02\x82\x01.", "EXT1 opcode"),  # the extension registry
    (b"(ctorch.distributed.checkpoint.metadata\nStorageMeta\no.", "OBJ opcode"),  # protocol 0
    (b"(itorch.distributed.checkpoint.metadata\nStorageMeta\n.", "INST opcode"),
    (b"\x80\x05\x97.", "NEXT_BUFFER opcode"),  # out-of-band buffers
    (b"\x80\x02I12345678901234567890\n.", "INT opcode"),  # text encodings of numbers
    (b"\x80\x02\x8b\x00\x00\x00\x00.", "LONG4 opcode"),
])
def test_each_other_opcode_family_is_refused(data, fault):
    assert fault in _refused(data)


def test_a_flood_of_empty_lists_is_refused_within_its_memory_budget():
    """Issue 27.3: one EMPTY_LIST opcode a byte used to take ~80 bytes of memory each; the
    charge is held under MEMORY_PER_BYTE x the file's size (plus the slack)."""
    flood = b"\x80\x04" + pickle.EMPTY_LIST * (512 << 10) + pickle.STOP
    tracemalloc.start()
    try:
        message = _refused(flood)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "bytes of memory per byte of file" in message
    budget = metadata_pickle.MEMORY_PER_BYTE * len(flood) + metadata_pickle.MEMORY_SLACK
    assert peak < 1.5 * budget < 80 * len(flood)


def test_the_opcode_budget_stops_a_long_pickle(gpt_checkpoint, monkeypatch):
    real = _real(gpt_checkpoint)
    checkpoint_io.parse_metadata(real, "m")
    monkeypatch.setattr(metadata_pickle, "MAX_OPCODES", 1000)
    assert "runs more than 1,000 opcodes" in _refused(real)


def test_a_long_key_is_refused_and_the_error_line_stays_short(gpt_checkpoint):
    """Issue 27.3: a 50 MB key used to give a 50 MB error line; a string past MAX_STRING is
    refused while unpickling, and a fault found after it is cut (here a 5,000-character key)."""
    real = _real(gpt_checkpoint)
    key = "model.wte.weight"
    long_key = key + "x" * (60 << 10)
    data = b"\x80\x04" + _opcodes_of(real).replace(
        pickle.SHORT_BINUNICODE + bytes([len(key)]) + key.encode(), _unicode(long_key), 1)
    assert f"holds a string of {len(long_key):,} characters" in _refused(data)
    metadata = checkpoint_io.parse_metadata(real, "m")
    entry = metadata.state_dict_metadata.pop(key)
    metadata.state_dict_metadata["k" * 5000] = entry
    entry.chunks = "not a list"
    with pytest.raises(UnsafeInputError) as caught:
        checkpoint_io.check_metadata(metadata, "m", {"__0_0.distcp": 1 << 30})
    assert len(str(caught.value)) <= 310 and "chunks are not a list" in str(caught.value)


def test_the_file_cap_refuses_a_larger_metadata_before_reading_it(gpt_checkpoint):
    path = os.path.join(gpt_checkpoint, ".metadata")
    with open(path, "ab") as f:
        f.truncate(checkpoint_io.METADATA_CAP + 1)
    rehash(gpt_checkpoint, ".metadata")
    with pytest.raises(ckpt.CheckpointError, match="checkpoint metadata"):
        ckpt.load_checkpoint(gpt_checkpoint, *trained_gpt(seed=1))
