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


def _first_batch(args: list[str]) -> dict:
    """The run's first global batch: the train split's first samples (the sampler reads them
    in order)."""
    from train.build import model_positions, resolve_config
    from train.data import collate
    from train.data.loader import build_data
    from train.runtime import Runtime

    runtime = Runtime(0, 1, 0, torch.device("cpu"), None, 0, 1, 1)
    config = resolve_config(parse_args(args), runtime, model_positions)
    data = build_data(config, runtime)
    return collate([data.train[i] for i in range(config.global_batch)])


def _first_batch_loss(hf_model, args: list[str]) -> float:
    """The HF GPT-2's loss on the run's first global batch."""
    batch = _first_batch(args)
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


def test_training_from_an_hf_bert_folder_continues_its_loss(tmp_path):
    """BertForPreTraining (MLM + NSP heads) with the real uncased vocab.txt, on real BERT
    shards: the first step's loss is the HF model's on the run's first batch."""
    from tests.shard_fixtures import BERT_VOCAB_SIZE

    data = make_bert_shards(tmp_path / "data", 80)
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=BERT_VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=256, max_position_embeddings=128, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    hf_model = transformers.BertForPreTraining(config).eval()
    hf_model.save_pretrained(tmp_path / "hf")
    shutil.copy(BERT_VOCAB, tmp_path / "hf" / "vocab.txt")
    out = tmp_path / "run"
    bert = [{"gpt-tiny": "bert-tiny"}.get(a, a) for a in SMALL]
    # the HF model's dropout (none), not bert-tiny's: the same function on the first batch
    args = ["--data", data, "--out", str(out), *bert, "--dropout", "0",
            "--init-from", str(tmp_path / "hf")]  # fmt: skip
    train_main(parse_args(args))
    with open(out / "metrics.jsonl") as f:
        losses = {r["step"]: r["loss"] for r in map(json.loads, f) if r.get("kind") == "train"}
    batch = _first_batch(args)
    labels = torch.full_like(torch.as_tensor(batch["input_ids"]), -100)
    if "mlm_positions" in batch:  # fixed-shape targets: -100 pads the positions
        positions, targets = (torch.as_tensor(batch[k]) for k in ("mlm_positions", "mlm_targets"))
        for row in range(labels.shape[0]):
            kept = targets[row] != -100
            labels[row, positions[row][kept]] = targets[row][kept]
    else:
        labels = torch.as_tensor(batch["mlm_labels"])
    with torch.no_grad():
        expected = hf_model(
            input_ids=torch.as_tensor(batch["input_ids"]),
            token_type_ids=torch.as_tensor(batch["token_type_ids"]),
            attention_mask=torch.as_tensor(batch["attention_mask"]),
            labels=labels,
            next_sentence_label=torch.as_tensor(batch["nsp_label"]).view(-1),
        ).loss
    assert losses[1] == pytest.approx(float(expected), rel=1e-4)
