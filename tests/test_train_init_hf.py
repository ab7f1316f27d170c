"""--init-from HF_DIR: training started from a Hugging Face GPT-2 folder (built and saved here
with transformers, with the real GPT-2 tokenizer) on a real shard set (Moby-Dick in GPT-2 BPE,
tests/shard_fixtures.py) continues the HF model's loss; an HF folder of another tokenizer or
model family is refused in one line."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import BERT_VOCAB
from tests.shard_fixtures import (
    GPT2_VOCAB_SIZE,
    gpt2_tokenizer,
    make_bert_shards,
    make_gpt_shards,
)
from train.config import parse_args
from train.loop import main as train_main

transformers = pytest.importorskip("transformers")

SMALL = [
    "--preset", "gpt-tiny", "--seq-len", "32", "--global-batch", "4", "--micro-batch", "4",
    "--split", "90,5,5", "--eval-iters", "0", "--no-progress", "--log-interval", "1",
    "--lr", "1e-3", "--warmup-steps", "1", "--max-steps", "3",
]  # fmt: skip


def _hf_gpt(directory, tokenizer: bool = True):
    """A random-weight HF GPT-2 of gpt-tiny's shape and GPT-2's 50,257-token vocabulary."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=GPT2_VOCAB_SIZE, n_layer=2, n_head=2, n_embd=64, n_positions=128,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(directory)
    if tokenizer:
        gpt2_tokenizer().save(str(directory / "tokenizer.json"))
    return model


def _first_batch_loss(hf_model, args: list[str]) -> float:
    """The HF model's loss on the run's first global batch (the train split's first samples:
    the sampler reads them in order)."""
    from train.build import model_positions, resolve_config
    from train.data import collate
    from train.data.loader import build_data
    from train.runtime import Runtime

    runtime = Runtime(0, 1, 0, torch.device("cpu"), None, 0, 1, 1)
    config = resolve_config(parse_args(args), runtime, model_positions)
    data = build_data(config, runtime)
    batch = collate([data.train[i] for i in range(config.global_batch)])
    with torch.no_grad():
        logits = hf_model(torch.as_tensor(batch["input_ids"])).logits
    losses = F.cross_entropy(
        logits.flatten(0, 1).double(), torch.as_tensor(batch["labels"]).flatten(), reduction="none"
    )
    mask = torch.as_tensor(batch["loss_mask"]).flatten().double()
    return float((losses * mask).sum() / mask.sum())


def test_training_from_an_hf_gpt2_folder_continues_its_loss(tmp_path):
    data = make_gpt_shards(tmp_path / "data", 60)
    hf_model = _hf_gpt(tmp_path / "hf")
    out = tmp_path / "run"
    args = ["--data", data, "--out", str(out), *SMALL, "--init-from", str(tmp_path / "hf")]
    train_main(parse_args(args))
    with open(out / "metrics.jsonl") as f:
        losses = {r["step"]: r["loss"] for r in map(json.loads, f) if r.get("kind") == "train"}
    assert losses[1] == pytest.approx(_first_batch_loss(hf_model, args), rel=1e-4)
    # a fresh model of the same shape starts near ln(50,304): far from the HF model's loss
    assert losses[3] < losses[1]


def test_an_hf_folder_of_another_tokenizer_or_family_is_refused(tmp_path):
    data = make_gpt_shards(tmp_path / "data", 40)
    hf_dir = tmp_path / "hf"
    _hf_gpt(hf_dir, tokenizer=False)
    shutil.copy(BERT_VOCAB, hf_dir / "vocab.txt")  # a BERT vocabulary beside GPT-2 weights
    args = ["--data", data, "--out", str(tmp_path / "run"), *SMALL, "--init-from", str(hf_dir)]
    with pytest.raises(SystemExit, match="its tokenizer is not the one --data was made with"):
        train_main(parse_args(args))
    bert_data = make_bert_shards(tmp_path / "bert-data", 40)
    bert = [{"gpt-tiny": "bert-tiny", data: bert_data}.get(a, a) for a in args]
    with pytest.raises(SystemExit, match=r"an HF gpt2 model \(gpt\); this run trains bert"):
        train_main(parse_args(bert))
