"""The LLaMA family (train/models/llama.py + llama_spec.py), the proof that a model family is
declared in one place: Hugging Face LlamaForCausalLM parity both ways (tied and untied
embeddings, grouped-query attention), KV-cache generation, a run on real shards exported
through tools/convert, DDP / FSDP2 / TP+SP on gloo against one process, and the count of
files the family touches outside its own module and spec.

HF models are built from configs (nothing is downloaded) and run eager attention, an explicit
softmax: an independent implementation of attention, RoPE, RMSNorm and SwiGLU.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.shard_fixtures import gpt_documents
from train.eval.load import load_weights_of
from train.generate import Sampling, generate_tokens
from train.models import llama_spec
from train.models.layers import KVCache
from train.models.llama import Llama, LlamaConfig, count_params, flops_per_token
from train.models.presets import build_model, get_preset
from train.models.registry import get_spec, spec_of_hf, spec_of_model
from train.parallel.activation_checkpoint import modules_to_checkpoint

transformers = pytest.importorskip("transformers")

TOL = dict(rtol=1e-5, atol=1e-5)  # the GPT and BERT parity bound (test_models_hf.py)
VOCAB = 512


def real_ids(n: int = 40, batch: int = 2) -> torch.Tensor:
    """GPT-2 ids of Moby-Dick's first paragraphs, folded into the small test vocabulary."""
    documents = [d for d in gpt_documents(8) if len(d) >= n][:batch]
    return torch.tensor([[int(t) for t in d[:n]] for d in documents]) % VOCAB


def small_config(**fields) -> LlamaConfig:
    return dataclasses.replace(get_preset("llama-tiny").config, vocab_size=VOCAB, **fields)


def randomised(config: LlamaConfig) -> Llama:
    """An eval-mode model with non-trivial values everywhere (fresh RMSNorm weights are all 1,
    which would hide a swapped or dropped norm)."""
    torch.manual_seed(0)
    model = Llama(config).eval()
    generator = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    return model


def to_hf(model: Llama):
    hf = transformers.LlamaForCausalLM(llama_spec.config_to_hf(model.config))
    hf.config._attn_implementation = "eager"
    hf.load_state_dict(llama_spec.state_dict_to_hf(model.state_dict(), model.config))
    return hf.eval()


@pytest.mark.parametrize("tied", [False, True])
def test_llama_matches_hf_llama_both_ways(tied: bool, tmp_path) -> None:
    model = randomised(small_config(tie_embeddings=tied))
    ids = real_ids()
    hf = to_hf(model)
    with torch.no_grad():
        ours, loss = model(ids[:, :-1], ids[:, 1:])
        theirs = hf(ids, labels=ids)  # HF shifts the labels itself
        torch.testing.assert_close(theirs.logits[:, :-1], ours, **TOL)
        torch.testing.assert_close(theirs.loss, loss, **TOL)
        hf.save_pretrained(tmp_path)  # loaded back as evaluation and --init-from load it
        back = load_weights_of(str(tmp_path), torch.device("cpu")).model
        torch.testing.assert_close(back(ids)[0], model(ids)[0], rtol=0, atol=0)
    assert (back.lm_head.weight is back.wte.weight) == tied
    assert model.num_params() == sum(p.numel() for p in hf.parameters())


def test_grouped_query_attention_shares_each_key_value_head_with_its_group() -> None:
    """A 4-query / 2-kv model equals the 4 / 4 model whose key and value heads repeat each of
    its heads for the two queries of its group (heads 0, 1 -> kv 0; 2, 3 -> kv 1)."""
    grouped = randomised(small_config())
    full = Llama(small_config(n_kv_head=4)).eval()
    state = grouped.state_dict()
    head_dim = grouped.config.n_embd // grouped.config.n_head
    for name, tensor in list(state.items()):
        if name.endswith(("k_proj.weight", "v_proj.weight")):
            heads = tensor.view(-1, head_dim, tensor.shape[-1])
            state[name] = heads.repeat_interleave(2, dim=0).reshape(-1, tensor.shape[-1])
    full.load_state_dict(state)
    ids = real_ids()
    with torch.no_grad():
        torch.testing.assert_close(full(ids)[0], grouped(ids)[0], **TOL)


def test_kv_cache_gives_the_full_forward_and_the_same_generation() -> None:
    model = randomised(small_config())
    ids = real_ids()
    with torch.no_grad():
        cache = KVCache()
        pieces = [model(ids[:, :25], cache=cache)[0], model(ids[:, 25:26], cache=cache)[0]]
        pieces.append(model(ids[:, 26:31], cache=cache)[0])
        torch.testing.assert_close(torch.cat(pieces, dim=1), model(ids[:, :31])[0], **TOL)
    # the cache keeps the un-repeated key/value heads: 2 of them, not 4
    assert next(iter(cache.keys_values.values()))[0].shape[1] == model.config.n_kv_head
    prompt = ids[0, :20].tolist()
    greedy = Sampling(max_new_tokens=12, temperature=0.0)
    cached = list(generate_tokens(model, prompt, greedy))
    assert cached == list(generate_tokens(model, prompt, greedy, use_cache=False))
    assert len(cached) == 12


@pytest.mark.parametrize("tied", [False, True])
def test_parameter_count_and_flops_from_the_config(tied: bool) -> None:
    config = small_config(tie_embeddings=tied)
    model = Llama(config)
    assert count_params(config) == model.num_params()
    assert count_params(config, True) == model.num_params(exclude_embeddings=True)
    # the token table is a lookup; the head is a matmul, counted once when tied
    head_matmuls = model.num_params() - (0 if tied else VOCAB * config.n_embd)
    attention = 12 * config.n_layer * config.n_embd * 64
    assert flops_per_token(config, 64) == 6 * head_matmuls + attention
    assert get_spec("llama").flops_per_token(config, 64, 0.15) == flops_per_token(config, 64)


def test_config_and_hf_config_errors() -> None:
    with pytest.raises(ValueError, match=r"n_head \(4\) must be a multiple of n_kv_head \(3\)"):
        small_config(n_kv_head=3)
    with pytest.raises(ValueError, match="head size 3 must be even"):
        small_config(n_embd=12)
    hf_config = llama_spec.config_to_hf(small_config())
    hf_config.hidden_act = "gelu"
    hf_config.mlp_bias = True
    with pytest.raises(ValueError, match="hidden_act='gelu'.*biases"):
        llama_spec.config_from_hf(hf_config)
    scaled = llama_spec.config_to_hf(small_config())
    scaled.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(ValueError, match="rope_type='linear'"):
        llama_spec.config_from_hf(scaled)


def test_state_dict_errors() -> None:
    model = randomised(small_config(tie_embeddings=True))
    hf_state = llama_spec.state_dict_to_hf(model.state_dict(), model.config)
    untied = {**hf_state, "lm_head.weight": hf_state["lm_head.weight"] + 1}
    with pytest.raises(ValueError, match="tie_word_embeddings but lm_head.weight differs"):
        llama_spec.state_dict_from_hf(untied, model.config)
    missing = {k: v for k, v in hf_state.items() if "layers.1.mlp.up_proj" not in k}
    with pytest.raises(ValueError, match=r"missing 1 key.*layers\.1\.mlp\.up_proj"):
        llama_spec.state_dict_from_hf(missing, model.config)
    headless = {k: v for k, v in hf_state.items() if k != "lm_head.weight"}
    with pytest.raises(ValueError, match="no lm_head.weight and its embeddings are untied"):
        llama_spec.state_dict_from_hf(headless, small_config())


def test_the_spec_answers_for_the_family() -> None:
    model = build_model("llama-tiny")
    spec = spec_of_model(model)
    assert spec is get_spec("llama") is spec_of_hf("llama")
    assert isinstance(model, Llama) and model.lm_head.weight is not model.wte.weight
    selective = modules_to_checkpoint(model, "selective")
    assert selective == [block.attn for block in model.blocks]
    assert get_preset("llama-small-cpu").model == "llama"
    with pytest.raises(KeyError, match="unknown model family 'mistral'; registered: gpt, bert"):
        get_spec("mistral")
    with pytest.raises(ValueError, match="Linear is no registered model family's module"):
        spec_of_model(torch.nn.Linear(2, 2))


def test_shape_flags_resize_the_llama_family_and_bias_is_refused():
    """--num-attention-heads and --ffn-hidden-size map onto LlamaConfig's fields, the rest of
    the preset unchanged; --bias is one clear error (LLaMA's layers have none)."""
    from train.models.registry import get_spec
    from train.models.spec import SHAPE_SETTINGS

    spec = get_spec("llama")
    preset = spec.presets[spec.default_preset].config
    shape = {"num_attention_heads": 8, "ffn_hidden_size": 96}
    resized = spec.reshape(preset, {**dict.fromkeys(SHAPE_SETTINGS), **shape})
    assert (resized.n_head, resized.intermediate_size) == (8, 96)
    assert dataclasses.replace(resized, n_head=preset.n_head,
                               intermediate_size=preset.intermediate_size) == preset  # fmt: skip
    with pytest.raises(ValueError) as excinfo:
        spec.reshape(preset, {"bias": True})
    assert str(excinfo.value).startswith("--bias: the llama family never has biases")
