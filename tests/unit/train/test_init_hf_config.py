"""--init-from HF_DIR trains the folder's model, not the preset's: folders built here from
transformers configs unlike any preset (a 4-head GPT-2; a LLaMA with rms_norm_eps 1e-6, one
key-value head for four query heads, an MLP of 100 and RoPE base 500,000), trained one step at
a negligible learning rate on a real shard set (Moby-Dick in GPT-2 BPE) and exported, give the
folder's logits; a shape flag that disagrees with the folder is refused naming each field, and
a folder with no tokenizer is said so in one line."""

from __future__ import annotations

import pytest
import torch

from tests.shard_fixtures import GPT2_VOCAB_SIZE, gpt2_tokenizer, make_gpt_shards
from train.config import parse_args
from train.export import checkpoint_of, export_hf
from train.loop import main as train_main

transformers = pytest.importorskip("transformers")

# one step at lr 1e-12: the weights move by ~1e-12, far under the logits' 1e-4 tolerance
ONE_STEP = [
    "--seq-len", "32", "--global-batch", "2", "--micro-batch", "2", "--split", "90,5,5",
    "--eval-iters", "0", "--no-progress", "--lr", "1e-12", "--warmup-steps", "0",
    "--max-steps", "1",
]  # fmt: skip


def _gpt2_4_heads(directory, tokenizer: bool = True):
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=GPT2_VOCAB_SIZE, n_layer=2, n_head=4, n_embd=64, n_positions=96,
    )  # fmt: skip
    return _save(transformers.GPT2LMHeadModel(config), directory, tokenizer)


def _llama(directory):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=GPT2_VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, intermediate_size=100, rms_norm_eps=1e-6,
        max_position_embeddings=96, rope_theta=500000.0, tie_word_embeddings=False,
    )  # fmt: skip
    return _save(transformers.LlamaForCausalLM(config), directory, True)


def _save(model, directory, tokenizer: bool):
    model.eval().save_pretrained(directory)
    if tokenizer:
        gpt2_tokenizer().save(str(directory / "tokenizer.json"))
    return model


def _train_and_export(tmp_path, hf_dir, *flags: str):
    data = make_gpt_shards(tmp_path / "data", 30)
    out = tmp_path / "run"
    train_main(parse_args(
        ["--data", data, "--out", str(out), *ONE_STEP, "--init-from", str(hf_dir), *flags]
    ))  # fmt: skip
    export_hf(checkpoint_of(str(out)), str(tmp_path / "exported"))
    return transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "exported").eval()


def _max_logit_difference(a, b) -> float:
    ids = torch.tensor(gpt2_tokenizer().encode("Call me Ishmael. Some years ago").ids)[None]
    with torch.no_grad():
        return float((a(ids).logits - b(ids).logits).abs().max())


def test_a_4_head_gpt2_folder_trains_and_exports_as_itself(tmp_path):
    hf_model = _gpt2_4_heads(tmp_path / "hf")
    # no --preset: the folder names the family; the preset's 2 heads would change the logits
    exported = _train_and_export(tmp_path, tmp_path / "hf")
    assert exported.config.n_head == 4 and exported.config.n_positions == 96
    assert _max_logit_difference(hf_model, exported) <= 1e-4


def test_a_llama_folder_keeps_its_epsilon_kv_heads_ffn_and_rope_base(tmp_path):
    hf_model = _llama(tmp_path / "hf")
    # --preset llama-tiny names the family only: its 2 KV heads, MLP 176 and eps 1e-5 are not
    # the folder's
    exported = _train_and_export(tmp_path, tmp_path / "hf", "--preset", "llama-tiny")
    config = exported.config
    assert (config.num_key_value_heads, config.intermediate_size) == (1, 100)
    assert config.rms_norm_eps == pytest.approx(1e-6)
    assert not config.tie_word_embeddings
    assert _max_logit_difference(hf_model, exported) <= 1e-4


def test_shape_flags_that_disagree_with_the_folder_are_refused_by_name(tmp_path):
    _llama(tmp_path / "hf")
    data = make_gpt_shards(tmp_path / "data", 30)
    args = ["--data", data, "--out", str(tmp_path / "run"), *ONE_STEP,
            "--init-from", str(tmp_path / "hf"), "--num-attention-heads", "8",
            "--ffn-hidden-size", "176", "--num-layers", "2"]  # fmt: skip
    with pytest.raises(SystemExit) as refused:
        train_main(parse_args(args))
    message = str(refused.value.code)
    assert "--num-attention-heads 8 (config.json: n_head 4)" in message
    assert "--ffn-hidden-size 176 (config.json: intermediate_size 100)" in message
    assert "--num-layers" not in message  # it agrees with the folder
    assert "\n" not in message
    assert not (tmp_path / "run").exists()


def test_a_folder_without_a_tokenizer_is_said_so_in_one_line(tmp_path, capsys):
    _gpt2_4_heads(tmp_path / "hf", tokenizer=False)
    data = make_gpt_shards(tmp_path / "data", 30)
    args = ["--data", data, "--out", str(tmp_path / "run"), *ONE_STEP, "--save-interval", "0",
            "--init-from", str(tmp_path / "hf")]  # fmt: skip
    train_main(parse_args(args))
    lines = [line for line in capsys.readouterr().out.splitlines() if "holds no tokenizer" in line]
    assert len(lines) == 1
    assert f"{GPT2_VOCAB_SIZE:,} rows" in lines[0]


def test_a_run_started_from_a_llama_folder_resumes_as_the_folders_model(tmp_path):
    """The resumed run rebuilds the checkpoint's model_config (eps 1e-6, one KV head, MLP 100),
    not llama-tiny's: its second step's export still has the folder's fields."""
    _llama(tmp_path / "hf")
    data = make_gpt_shards(tmp_path / "data", 30)
    out = tmp_path / "run"
    two = [*ONE_STEP[:-1], "2"]  # --max-steps 2
    args = ["--data", data, "--out", str(out), *two, "--init-from", str(tmp_path / "hf")]
    train_main(parse_args([*args, "--stop-at", "1"]))
    train_main(parse_args([*args, "--resume"]))
    export_hf(checkpoint_of(str(out)), str(tmp_path / "exported"))
    config = transformers.AutoConfig.from_pretrained(tmp_path / "exported")
    assert (config.num_key_value_heads, config.intermediate_size) == (1, 100)
    assert config.rms_norm_eps == pytest.approx(1e-6)
