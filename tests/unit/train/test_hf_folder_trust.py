"""Hugging Face folders and a checkpoint's own model_config are checked like our checkpoints'
tensors (train/model_check.py): a tensor missing, unused, of another shape or dtype, weights of
another family, a safetensors header that lies, config fields that make no model or a model
larger than the weights or the memory: one line from every loader (evaluate, generate,
--init-from, export), never a model left at its random init, never a traceback.

Folders are tiny models built here from transformers configs, saved by save_pretrained; the
checkpoints are real one-process saves with trainer.pt edited and re-hashed as an attacker
would."""

from __future__ import annotations

import dataclasses
import json
import os
import struct

import pytest
import torch

from tests.helpers.checkpoints import rehash
from tests.helpers.hf_folder_trust import gpt2, resave, tensors_of, transformers
from train import checkpoint as ckpt
from train.eval.load import LoadError, load_model
from train.export import main as export_main
from train.models.presets import build_model
from train.optim import build_optimizer

CPU = torch.device("cpu")


def _llama_config(**fields) -> dict:
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=48, max_position_embeddings=64)  # fmt: skip
    return {**config.to_dict(), **fields}


def _refused(directory) -> str:
    with pytest.raises(LoadError) as caught:
        load_model(str(directory), CPU)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_a_missing_tensor_is_named_never_left_at_random_init(tmp_path):
    hf = gpt2(tmp_path / "hf")
    tensors = tensors_of(hf)
    del tensors["transformer.h.1.mlp.c_fc.weight"]
    resave(hf, tensors)
    assert "transformer.h.1.mlp.c_fc.weight" in _refused(hf)
    resave(hf, {"transformer.wte.weight": tensors["transformer.wte.weight"]})
    assert "missing" in _refused(hf)


def test_gpt2_weights_under_a_llama_config_of_the_same_size_are_refused(tmp_path):
    hf = gpt2(tmp_path / "hf")
    (hf / "config.json").write_text(json.dumps(_llama_config(
        num_attention_heads=2, num_key_value_heads=2, head_dim=16, intermediate_size=128,
        tie_word_embeddings=True)))  # fmt: skip
    message = _refused(hf)
    assert "model.embed_tokens.weight" in message or "missing" in message


def test_a_tensor_of_another_shape_or_dtype_and_a_short_vocabulary_are_refused(tmp_path):
    hf = gpt2(tmp_path / "hf")
    tensors = tensors_of(hf)
    good = dict(tensors)
    tensors["transformer.h.0.mlp.c_fc.weight"] = torch.zeros(32, 64)
    resave(hf, tensors)
    assert "of another shape" in _refused(hf)
    resave(hf, {**good, "transformer.h.0.ln_1.weight": torch.ones(32, dtype=torch.int64)})
    assert "not floating point" in _refused(hf)
    resave(hf, good)
    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**config, "vocab_size": 100}))
    assert "transformer.wte.weight" in _refused(hf) or "wte.weight" in _refused(hf)


def _header_file(hf, header: bytes, length: int | None = None, data: bytes = b"") -> None:
    """A model.safetensors of ``header`` and ``data``, padded past what config.json's model
    takes (so that the size check before it passes and the header itself is read)."""
    n = len(header) if length is None else length
    padding = b"\0" * (1 << 17)
    (hf / "model.safetensors").write_bytes(struct.pack("<Q", n) + header + data + padding)


def test_a_safetensors_header_that_lies_is_one_line(tmp_path):
    hf = gpt2(tmp_path / "hf")
    _header_file(hf, os.urandom(256))
    assert "safetensors header" in _refused(hf)
    _header_file(hf, b"{}", length=1 << 62)
    assert "header length" in _refused(hf)
    past = {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1 << 40]}}
    _header_file(hf, json.dumps(past).encode(), data=b"\0" * 16)
    assert "outside the file" in _refused(hf)
    short = {"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 16]}}
    _header_file(hf, json.dumps(short).encode(), data=b"\0" * 16)
    assert "needs 32 bytes" in _refused(hf)
    odd = {"w": {"dtype": "Q9", "shape": [4], "data_offsets": [0, 16]}}
    _header_file(hf, json.dumps(odd).encode(), data=b"\0" * 16)
    assert "dtype" in _refused(hf)


@pytest.mark.parametrize(
    "fields, fault",
    [({"num_key_value_heads": 3}, "n_kv_head"), ({"num_key_value_heads": 0}, "n_kv_head"),
     ({"num_key_value_heads": 8}, "n_kv_head"), ({"head_dim": 15}, "head_dim")],
)  # fmt: skip
def test_llama_config_fields_that_make_no_model_are_one_line(tmp_path, fields, fault):
    hf = tmp_path / "hf"
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**_llama_config())).save_pretrained(hf)
    assert load_model(str(hf), CPU).kind == "llama"
    (hf / "config.json").write_text(json.dumps(_llama_config(**fields)))
    assert fault in _refused(hf)


def test_3000_layers_beside_a_sparse_file_are_refused_before_building(tmp_path):
    hf = gpt2(tmp_path / "hf")
    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**config, "n_layer": 3000, "n_embd": 2048,
                                                "n_head": 16}))  # fmt: skip
    with open(hf / "model.safetensors", "r+b") as f:
        f.truncate(300 << 30)  # 300 GB that take no disk
    message = _refused(hf)
    assert "memory" in message and "n_layer=3000" in message


# ---------------------------------------------------------------------------------------------
# a checkpoint's own model_config


def _checkpoint(tmp_path, preset: str) -> str:
    torch.manual_seed(0)
    model = build_model(preset, vocab_size=128)
    optimizer = build_optimizer(model, "adamw", 1e-3, 0.1, (0.9, 0.95), 1e-8)
    state = {"step": 1, "consumed_samples": 8, "counters": {},
             "config": {"seed": 1, "model": preset.split("-")[0]},
             "model_config": dataclasses.asdict(model.config)}  # fmt: skip
    return ckpt.save_checkpoint(str(tmp_path / "run"), 1, model, optimizer, state, keep=2).commit()


def _edit_model_config(path: str, family: str | None = None, **fields) -> None:
    file = os.path.join(path, "trainer.pt")
    state = torch.load(file, weights_only=True)
    state["model_config"].update(fields)
    if family:
        state["config"]["model"] = family
    torch.save(state, file)
    rehash(path, "trainer.pt")


@pytest.mark.parametrize(
    "preset, family, fields, fault",
    [("gpt-tiny", None, {"n_embd": 1_000_000}, "parameters"),
     ("gpt-tiny", None, {"n_layer": 100_000}, "parameters"),
     ("gpt-tiny", None, {"n_head": 0}, "n_head"),
     ("llama-tiny", None, {"n_kv_head": 3}, "n_kv_head"),
     ("gpt-tiny", None, {"vocab_size": "128"}, "vocab_size"),
     ("llama-tiny", "bert", {}, "the weights hold")],
)  # fmt: skip
def test_a_checkpoints_model_config_is_checked_on_every_load_path(
    tmp_path, capsys, preset, family, fields, fault
):
    path = _checkpoint(tmp_path, preset)
    _edit_model_config(path, family, **fields)
    with pytest.raises(LoadError) as caught:
        load_model(path, CPU)
    assert fault in str(caught.value) and "\n" not in str(caught.value)
    capsys.readouterr()
    assert export_main(["hf", path, str(tmp_path / "hf"), "--no-tokenizer"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fault in err
    assert not (tmp_path / "hf" / "model.safetensors").exists()
