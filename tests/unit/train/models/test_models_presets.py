"""Presets: names, sizes from the papers (counted from config, nothing big is built),
vocabulary padding and build_model."""

from __future__ import annotations

import pytest

from train.models import PRESETS, Preset, build_model, count_params, get_preset, pad_vocab_size
from train.models.bert import Bert, BertConfig
from train.models.gpt import GPT, GPTConfig
from train.models.llama import LlamaConfig

# Each family's presets, with its config class.
FAMILIES = {
    "gpt": (GPTConfig, ["gpt2-124m", "gpt2-355m", "gpt2-774m", "gpt2-1.5b", "megatron-1.2b",
                        "megatron-2.5b", "megatron-4.2b", "megatron-8.3b", "megatron-8.3b-24h",
                        "gpt-tiny", "gpt-small-cpu"]),
    "bert": (BertConfig, ["bert-base", "bert-large", "bert-tiny"]),
    "llama": (LlamaConfig, ["llama-tiny", "llama-small-cpu"]),
}  # fmt: skip


def test_all_presets_exist_with_their_model_kind() -> None:
    assert sorted(PRESETS) == sorted(name for _, names in FAMILIES.values() for name in names)
    for family, (config_class, names) in FAMILIES.items():
        for name in names:
            preset = PRESETS[name]
            assert isinstance(preset.config, config_class), name
            assert preset.model == family
            assert preset.description


@pytest.mark.parametrize(
    ("name", "n_embd", "n_layer", "n_head"),
    [
        ("megatron-1.2b", 1536, 40, 16),
        ("megatron-2.5b", 1920, 54, 20),
        ("megatron-4.2b", 2304, 64, 24),
        ("megatron-8.3b", 3072, 72, 32),
        ("megatron-8.3b-24h", 3072, 72, 24),
    ],
)
def test_megatron_shapes(name: str, n_embd: int, n_layer: int, n_head: int) -> None:
    config = get_preset(name).config
    assert (config.n_embd, config.n_layer, config.n_head) == (n_embd, n_layer, n_head)
    assert config.vocab_size == pad_vocab_size(50257, tensor_parallel=8) == 51200
    assert config.block_size == 1024


def test_tiny_presets_are_as_specified() -> None:
    tiny = get_preset("gpt-tiny").config
    assert (tiny.n_embd, tiny.n_layer, tiny.n_head, tiny.block_size) == (64, 2, 2, 128)
    small = get_preset("gpt-small-cpu").config
    assert (small.n_embd, small.n_layer, small.n_head, small.block_size) == (384, 6, 6, 256)
    bert = get_preset("bert-tiny").config
    shape = (bert.n_embd, bert.n_layer, bert.n_head, bert.intermediate_size)
    assert shape == (64, 2, 2, 256) and bert.max_position_embeddings == 128


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="gpt2-13b.*known presets: bert-base, bert-large"):
        get_preset("gpt2-13b")


def test_pad_vocab_size() -> None:
    assert pad_vocab_size(50257) == 50304
    assert pad_vocab_size(50257, tensor_parallel=8) == 51200
    assert pad_vocab_size(30522) == 30592
    assert pad_vocab_size(50304) == 50304  # already a multiple
    assert pad_vocab_size(1, multiple=64) == 64
    for bad in (dict(vocab_size=0), dict(vocab_size=10, multiple=0),
                dict(vocab_size=10, tensor_parallel=-2)):  # fmt: skip
        with pytest.raises(ValueError, match="must be a positive int"):
            pad_vocab_size(**bad)


def test_gpt2_124m_parameter_count() -> None:
    config = get_preset("gpt2-124m").config
    # with the unpadded GPT-2 vocabulary this is the published GPT-2 small count
    assert count_params(GPTConfig(**{**vars(config), "vocab_size": 50257})) == 124_439_808
    assert count_params(config) == 124_475_904  # padded to 50304


@pytest.mark.parametrize(
    ("name", "billions", "rel"),
    [
        ("gpt2-355m", 0.355, 0.01),
        ("gpt2-774m", 0.774, 0.01),
        ("gpt2-1.5b", 1.558, 0.01),
        ("megatron-1.2b", 1.2, 0.02),
        ("megatron-2.5b", 2.5, 0.02),
        ("megatron-4.2b", 4.2, 0.02),
        ("megatron-8.3b", 8.3, 0.01),
        ("megatron-8.3b-24h", 8.3, 0.01),
        ("bert-base", 0.110, 0.01),
        ("bert-large", 0.336, 0.01),
    ],
)
def test_published_sizes(name: str, billions: float, rel: float) -> None:
    assert count_params(get_preset(name).config) == pytest.approx(billions * 1e9, rel=rel)


@pytest.mark.parametrize("name", ["gpt-tiny", "gpt-small-cpu", "bert-tiny"])
def test_count_params_equals_built_module(name: str) -> None:
    model = build_model(name, vocab_size=384)
    assert model.num_params() == count_params(model.config)
    assert model.num_params(True) == count_params(model.config, exclude_embeddings=True)


def test_build_model_accepts_names_presets_and_configs() -> None:
    by_name = build_model("gpt-tiny")
    assert isinstance(by_name, GPT) and by_name.config == get_preset("gpt-tiny").config
    assert isinstance(build_model(get_preset("bert-tiny")), Bert)
    config = GPTConfig(vocab_size=64, n_layer=1, n_head=2, n_embd=16, block_size=8)
    model = build_model(config)
    assert model.config == config and model.config is not config
    with pytest.raises(TypeError, match=r"model config \(GPTConfig, BertConfig.*\), got dict"):
        build_model({"n_layer": 2})
    with pytest.raises(KeyError, match="unknown model preset"):
        build_model("no-such-model")


def test_build_model_vocab_override_leaves_the_preset_alone() -> None:
    before = get_preset("bert-tiny").config.vocab_size
    model = build_model("bert-tiny", vocab_size=pad_vocab_size(1000))
    assert model.config.vocab_size == 1024
    assert model.wte.weight.shape == (1024, 64)
    assert model.mlm_head.decoder.bias.shape == (1024,)
    assert get_preset("bert-tiny").config.vocab_size == before


def test_preset_is_immutable() -> None:
    preset = get_preset("gpt-tiny")
    assert isinstance(preset, Preset)
    with pytest.raises(AttributeError):
        preset.model = "bert"  # type: ignore[misc]
