"""The model-family registry: every caller asks a family's spec, and a family, batch kind or HF
model_type that nobody registered is a one-line error, never a silent fallback to GPT or BERT."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from train import checkpoint as ckpt
from train.config import parse_args
from train.data.loader import DATASETS
from train.eval.load import LoadError, load_model
from train.evaluation import forward_loss
from train.export import model_config_of
from train.models.gpt import GPTConfig
from train.models.registry import FAMILIES, SPECS, get_spec
from train.models.spec import BATCH_KINDS, ModelSpec, Preset


def test_every_batch_kind_has_its_datasets_and_every_family_a_known_kind() -> None:
    assert set(DATASETS) == set(BATCH_KINDS)
    assert {spec.batch for spec in SPECS.values()} <= set(BATCH_KINDS)
    assert FAMILIES == tuple(SPECS) and {"gpt", "bert"} <= set(FAMILIES)
    with pytest.raises(ValueError, match="unknown batch kind 'seq2seq'"):
        forward_loss(torch.nn.Identity(), {}, "seq2seq", False)


def test_the_model_flag_takes_the_registered_families_only(capsys) -> None:
    assert parse_args(["--data", "x", "--model", "bert"]).model == "bert"
    with pytest.raises(SystemExit):
        parse_args(["--data", "x", "--model", "mistral"])
    assert "invalid choice: 'mistral'" in capsys.readouterr().err


def test_a_checkpoint_of_an_unregistered_family_is_refused() -> None:
    """Before the registry, any kind but "gpt" was read as BERT."""
    fields = dataclasses.asdict(GPTConfig(vocab_size=64, n_layer=1, n_head=2, n_embd=16))
    spec, config = model_config_of({"config": {"model": "gpt"}, "model_config": fields})
    assert spec is get_spec("gpt") and config == GPTConfig(**fields)
    with pytest.raises(ckpt.CheckpointError, match="unknown model family 'mistral'"):
        model_config_of({"config": {"model": "mistral"}, "model_config": fields})
    with pytest.raises(ckpt.CheckpointError, match="no model family and model_config"):
        model_config_of({"config": {"model": 3}, "model_config": fields})


def test_an_hf_directory_of_an_unknown_model_type_is_refused(tmp_path) -> None:
    pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(LoadError, match=r"config.json: model_type 't5'; known: gpt2, bert"):
        load_model(str(tmp_path), torch.device("cpu"))


def test_a_spec_refuses_presets_and_batch_kinds_not_its_own() -> None:
    gpt = get_spec("gpt")
    bert_preset = get_spec("bert").presets["bert-tiny"]
    with pytest.raises(
        ValueError, match="model family gpt: preset bert-tiny is not one of its own"
    ):
        dataclasses.replace(gpt, presets={**gpt.presets, "bert-tiny": bert_preset})
    with pytest.raises(ValueError, match="batch kind 'seq2seq' is none of"):
        dataclasses.replace(gpt, batch="seq2seq")
    with pytest.raises(ValueError, match="default preset 'bert-tiny' is not one of its presets"):
        dataclasses.replace(gpt, default_preset="bert-tiny")
    with pytest.raises(TypeError, match="model family gpt builds from a GPTConfig, got BertConfig"):
        gpt.build(bert_preset.config)
    assert isinstance(gpt, ModelSpec) and isinstance(bert_preset, Preset)


@pytest.mark.parametrize(
    "family, shape, expected",
    [
        ("gpt", {"num_layers": 3, "hidden_size": 96, "num_attention_heads": 4, "bias": False},
         {"n_layer": 3, "n_embd": 96, "n_head": 4, "bias": False}),
        ("bert", {"ffn_hidden_size": 128, "dropout": 0.0},
         {"intermediate_size": 128, "dropout": 0.0}),
    ],
)  # fmt: skip
def test_shape_settings_map_onto_each_familys_config(family, shape, expected):
    """(A family added later tests its own shapes in its own test file.)"""
    from train.models.spec import SHAPE_SETTINGS

    spec = get_spec(family)
    preset = spec.presets[spec.default_preset].config
    resized = spec.reshape(preset, {**dict.fromkeys(SHAPE_SETTINGS), **shape})
    assert {name: getattr(resized, name) for name in expected} == expected
    unchanged = set(dataclasses.asdict(preset)) - set(expected)
    assert {n: getattr(resized, n) for n in unchanged} == {n: getattr(preset, n) for n in unchanged}


@pytest.mark.parametrize(
    "family, shape, message",
    [
        ("gpt", {"ffn_hidden_size": 100}, "--ffn-hidden-size: the gpt family has an MLP of 4 x"),
        ("bert", {"bias": False}, "--bias: the bert family always has biases"),
        ("gpt", {"hidden_size": 96, "num_attention_heads": 5},
         "--hidden-size 96 --num-attention-heads 5: not a gpt model (GPTConfig.n_embd (96) must "
         "be divisible by n_head (5))"),
    ],
)  # fmt: skip
def test_a_shape_a_family_cannot_take_is_one_clear_error(family, shape, message):
    spec = get_spec(family)
    with pytest.raises(ValueError) as excinfo:
        spec.reshape(spec.presets[spec.default_preset].config, shape)
    assert str(excinfo.value).startswith(message)
