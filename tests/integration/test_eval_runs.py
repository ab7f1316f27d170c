"""train/evaluate.py and tools/generate on real training runs (slow: they train and launch).

Runs: the tiny GPT and BERT presets trained for a few steps on real shard sets (Moby-Dick in
GPT-2 BPE / BERT WordPiece, tests/shard_fixtures.py). Evaluation text: a slice of the real
WikiText-2 test file in ../shared/corpora.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import CORPORA, REPO
from tests.shard_fixtures import make_bert_shards, make_gpt_shards
from train.config import parse_args
from train.eval.load import load_model
from train.eval.run import evaluate_wikitext
from train.loop import main as train_main

pytestmark = pytest.mark.slow

SMALL = [
    "--seq-len", "32", "--global-batch", "4", "--micro-batch", "2", "--split", "90,5,5",
    "--eval-iters", "0", "--no-progress", "--log-interval", "1000", "--lr", "3e-3",
    "--warmup-steps", "1", "--max-steps", "6",
]  # fmt: skip


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory, wikitext_slice) -> str:
    """6 steps, with the WikiText task run in training at steps 3 and 6 (--eval-wikitext)."""
    data = make_gpt_shards(tmp_path_factory.mktemp("eval-gpt-data"), 200)
    out = tmp_path_factory.mktemp("eval-gpt-run")
    train_main(
        parse_args(
            [
                "--data",
                data,
                "--out",
                str(out),
                "--preset",
                "gpt-tiny",
                *SMALL,
                "--eval-wikitext",
                wikitext_slice,
                "--eval-interval",
                "3",
            ]
        )  # fmt: skip
    )
    return str(out)


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory) -> tuple[str, str]:
    data = make_bert_shards(tmp_path_factory.mktemp("eval-bert-data"), 300)
    out = tmp_path_factory.mktemp("eval-bert-run")
    train_main(parse_args(["--data", data, "--out", str(out), "--preset", "bert-tiny", *SMALL]))
    return str(out), data


@pytest.fixture(scope="module")
def wikitext_slice(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("wikitext") / "wiki.test.tokens"
    raw = (CORPORA / "wikitext" / "wikitext-2" / "wiki.test.tokens").read_text(encoding="utf-8")
    path.write_text(raw[:8_000], encoding="utf-8")
    return str(path)


def _evaluate(*args: str, nproc: int = 1) -> dict:
    launcher = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
        if nproc > 1
        else [sys.executable]
    )
    done = subprocess.run(
        [*launcher, "train/evaluate.py", "--no-progress", "--device", "cpu", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_wikitext_cli_on_a_run_equals_the_library(gpt_run, wikitext_slice):
    report = _evaluate(
        "--checkpoint", gpt_run, "--task", "wikitext103", "--data", wikitext_slice,
        "--context", "32", "--stride", "16",
    )  # fmt: skip
    loaded = load_model(gpt_run, torch.device("cpu"))
    with open(wikitext_slice, encoding="utf-8") as f:
        expected = evaluate_wikitext(loaded, f.read(), context=32, stride=16, batch_size=4)
    assert report["scored_tokens"] == expected.scored_tokens
    assert report["ppl"] == pytest.approx(expected.ppl, rel=1e-6)
    assert report["adjusted_ppl"] == pytest.approx(expected.adjusted_ppl, rel=1e-6)
    assert report["checkpoint"].endswith("step-00000006")


def test_training_logs_the_wikitext_task_and_plots_it(gpt_run, wikitext_slice, tmp_path):
    with open(os.path.join(gpt_run, "metrics.jsonl")) as f:
        records = [r for r in map(json.loads, f) if r.get("split") == "wikitext"]
    assert [r["step"] for r in records] == [3, 6]
    # the in-training figure is the evaluator's on the final checkpoint (context = seq len 32,
    # stride 16)
    report = _evaluate(
        "--checkpoint", gpt_run, "--task", "wikitext103", "--data", wikitext_slice,
        "--context", "32", "--stride", "16",
    )  # fmt: skip
    assert records[-1]["scored_tokens"] == report["scored_tokens"]
    assert records[-1]["ppl"] == pytest.approx(report["ppl"], rel=1e-5)
    assert records[-1]["adjusted_ppl"] == pytest.approx(report["adjusted_ppl"], rel=1e-5)
    png = tmp_path / "curves.png"
    done = subprocess.run(
        [sys.executable, "tools/plot", gpt_run, "-o", str(png)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert png.stat().st_size > 0


def test_two_ranks_give_the_one_process_result(gpt_run, wikitext_slice):
    args = ("--checkpoint", gpt_run, "--task", "wikitext103", "--data", wikitext_slice,
            "--context", "32", "--stride", "8", "--batch-size", "3")  # fmt: skip
    one, two = _evaluate(*args), _evaluate(*args, nproc=2)
    assert two["processes"] == 2 and one["processes"] == 1
    assert two["scored_tokens"] == one["scored_tokens"]
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-6)


def test_exported_hf_model_scores_like_the_run(gpt_run, wikitext_slice, tmp_path):
    pytest.importorskip("transformers")
    from train import checkpoint as ckpt
    from train.export import export_hf

    hf_dir = tmp_path / "hf"
    export_hf(ckpt.latest_checkpoint(gpt_run), str(hf_dir))
    loaded = load_model(gpt_run, torch.device("cpu"))
    common = ("--task", "wikitext103", "--data", wikitext_slice, "--context", "32",
              "--tokenizer", loaded.tokenizer_path)  # fmt: skip
    ours = _evaluate("--checkpoint", gpt_run, *common)
    theirs = _evaluate("--checkpoint", str(hf_dir), *common)
    assert theirs["ppl"] == pytest.approx(ours["ppl"], rel=1e-4)


def test_generate_prints_the_prompt_and_its_continuation(gpt_run):
    def generate(*flags: str) -> str:
        done = subprocess.run(
            [sys.executable, "tools/generate", gpt_run, "--prompt", "Call me Ishmael.", *flags],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    greedy = generate("--max-new-tokens", "12")
    assert greedy.startswith("Call me Ishmael.") and len(greedy) > len("Call me Ishmael.\n")
    assert generate("--max-new-tokens", "12", "--no-cache") == greedy
    sampled = generate("--max-new-tokens", "12", "--temperature", "1.0", "--top-k", "20")
    assert sampled == generate("--max-new-tokens", "12", "--temperature", "1.0", "--top-k", "20")
    nan = subprocess.run(
        [sys.executable, "tools/generate", gpt_run, "--prompt", "Call me Ishmael.",
         "--temperature", "nan"], cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert nan.returncode == 1 and nan.stderr.count("\n") == 1
    assert nan.stderr.startswith("error: temperature must be a finite number >= 0, got nan")


def test_bert_masked_lm_is_deterministic_and_counts_masked_tokens(bert_run):
    run, data = bert_run
    args = ("--checkpoint", run, "--task", "bert-mlm", "--data", data, "--samples", "24",
            "--seq-len", "32", "--batch-size", "5")  # fmt: skip
    first = _evaluate(*args)
    assert first["samples"] == 24 and first["predicted_tokens"] > 24
    assert 0.0 <= first["mlm_accuracy"] <= 1.0 and first["mlm_ppl"] > 1.0
    again, two_ranks = _evaluate(*args), _evaluate(*args, nproc=2)
    for report in (again, two_ranks):  # the same masks: the same counts, whatever the ranks
        assert report["predicted_tokens"] == first["predicted_tokens"]
        assert report["mlm_accuracy"] == first["mlm_accuracy"]
        assert report["mlm_loss"] == pytest.approx(first["mlm_loss"], rel=1e-6)


def test_wrong_task_for_the_model_is_one_line(gpt_run, wikitext_slice):
    done = subprocess.run(
        [sys.executable, "train/evaluate.py", "--checkpoint", gpt_run, "--task", "bert-mlm",
         "--data", wikitext_slice],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "needs a BERT model" in done.stderr
    assert os.path.basename(gpt_run) in done.stderr


@pytest.mark.parametrize("task", ["wikitext103", "lambada"])
def test_eval_data_that_is_a_device_is_one_line(gpt_run, task):
    """--data /dev/zero read 7 GB before failing: a device is refused before it is opened."""
    done = subprocess.run(
        [sys.executable, "train/evaluate.py", "--checkpoint", gpt_run, "--task", task,
         "--data", "/dev/zero", "--no-progress", "--device", "cpu"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "eval data /dev/zero is a character device, not a regular file" in done.stderr


def test_progress_written_to_a_log_is_lines_not_a_bar(gpt_run, wikitext_slice):
    # stderr is a pipe here, as in a job's log: a tqdm bar's carriage returns would land in it
    done = subprocess.run(
        [sys.executable, "train/evaluate.py", "--device", "cpu", "--checkpoint", gpt_run,
         "--task", "wikitext103", "--data", wikitext_slice, "--context", "32", "--stride", "16"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "\r" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("wikitext: ")]
    done_batches, total = lines[-1].removeprefix("wikitext: ").removesuffix(" batches").split("/")
    assert done_batches == total and 1 <= len(lines) <= 10


def _refused(*command: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0 and done.stdout == "", done.stdout[-2000:]
    assert done.stderr.strip().count("\n") == 0, done.stderr
    return done


def test_a_tokenizer_of_another_vocabulary_is_refused(gpt_run, wikitext_slice):
    """A GPT-2 (50,257) run with BERT's vocab.txt: one line naming both sizes, no perplexity;
    the same for tools/generate."""
    from tests.conftest import BERT_VOCAB

    bert = str(BERT_VOCAB)
    done = _refused(
        "train/evaluate.py", "--checkpoint", gpt_run, "--task", "wikitext103", "--data",
        wikitext_slice, "--tokenizer", bert, "--no-progress", "--device", "cpu",
    )  # fmt: skip
    assert done.returncode == 2
    assert f"--tokenizer {bert}: not the tokenizer" in done.stderr
    assert "vocab_size: 30522 vs 50257" in done.stderr
    done = _refused("tools/generate", gpt_run, "--prompt", "Call me", "--tokenizer", bert)
    assert "vocab_size: 30522 vs 50257" in done.stderr


def test_a_bert_run_scores_only_its_own_shards(bert_run, tmp_path):
    """bert-mlm on shards of GPT-2 ids: refused in one line before any sample is scored."""
    run, _ = bert_run
    gpt_data = make_gpt_shards(tmp_path, 40)
    done = _refused(
        "train/evaluate.py", "--checkpoint", run, "--task", "bert-mlm", "--data", gpt_data,
        "--no-progress", "--device", "cpu", "--samples", "4",
    )  # fmt: skip
    assert f"--data {gpt_data}: a tokenizer of 50,257 tokens, more than the" in done.stderr
    assert "it is not this model's tokenizer" in done.stderr


def test_the_run_tokenizer_in_another_format_is_accepted(gpt_run, wikitext_slice):
    """GPT-2's tiktoken ranks (a format preprocess reads) score as the run's tokenizer.json."""
    from tests.conftest import GPT2_VOCAB

    common = ("--checkpoint", gpt_run, "--task", "wikitext103", "--data", wikitext_slice,
              "--context", "32")  # fmt: skip
    own = _evaluate(*common)
    ranks = _evaluate(*common, "--tokenizer", str(GPT2_VOCAB / "gpt2.tiktoken"))
    assert ranks["scored_tokens"] == own["scored_tokens"]
    assert ranks["ppl"] == pytest.approx(own["ppl"], rel=1e-9)


def _convert_to_hf(source: str, out, *flags: str) -> None:
    done = subprocess.run(
        [sys.executable, "tools/convert", "checkpoint-to-hf", source, str(out), *flags],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]


def test_exported_run_generates_through_a_transformers_pipeline(gpt_run, tmp_path):
    """A run folder exported with tools/convert loads with AutoTokenizer,
    AutoModelForCausalLM and pipeline("text-generation") with no other argument, and its
    greedy text is tools/generate's."""
    transformers = pytest.importorskip("transformers")
    from tests.shard_fixtures import gpt2_tokenizer

    hf_dir = tmp_path / "hf"
    _convert_to_hf(gpt_run, hf_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    prompt = "Call me Ishmael. Some years ago"
    assert len(tokenizer) == 50257 and tokenizer.eos_token == "<|endoftext|>"
    assert tokenizer(prompt).input_ids == gpt2_tokenizer().encode(prompt).ids
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir)
    assert model.generation_config.eos_token_id == 50256
    generator = transformers.pipeline("text-generation", model=str(hf_dir))
    text = generator(prompt, max_new_tokens=10, do_sample=False)[0]["generated_text"]
    ours = subprocess.run(
        [sys.executable, "tools/generate", gpt_run, "--prompt", prompt, "--max-new-tokens", "10"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert text.startswith(prompt) and len(text) > len(prompt)
    assert text == ours.stdout.rstrip("\n")


def test_exported_bert_step_loads_for_pretraining(bert_run, tmp_path):
    """A BERT step folder exports to a folder AutoTokenizer and AutoModelForPreTraining load
    alone: the real uncased WordPiece ids and the run's masked-LM logits."""
    transformers = pytest.importorskip("transformers")
    from tests.shard_fixtures import bert_tokenizer
    from train import checkpoint as ckpt

    run, _ = bert_run
    hf_dir = tmp_path / "hf"
    _convert_to_hf(ckpt.latest_checkpoint(run), hf_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    text = "Call me Ishmael."
    assert tokenizer(text, add_special_tokens=False).input_ids == (
        bert_tokenizer().encode(text, add_special_tokens=False).ids
    )
    assert (tokenizer.mask_token, tokenizer.mask_token_id) == ("[MASK]", 103)
    assert (tokenizer.cls_token, tokenizer.sep_token, tokenizer.pad_token) == (
        "[CLS]", "[SEP]", "[PAD]",
    )  # fmt: skip
    model = transformers.AutoModelForPreTraining.from_pretrained(hf_dir).eval()
    ours = load_model(run, torch.device("cpu")).model
    ids = torch.tensor([[101, *tokenizer(text, add_special_tokens=False).input_ids, 103, 102]])
    with torch.no_grad():
        theirs = model(ids).prediction_logits
        mine = ours(ids, torch.zeros_like(ids), torch.ones_like(ids)).mlm_logits
    torch.testing.assert_close(theirs, mine.view_as(theirs), atol=1e-4, rtol=0)


def test_export_takes_the_run_tokenizer_in_any_format_and_refuses_another(gpt_run, tmp_path):
    """checkpoint-to-hf --tokenizer: GPT-2's tiktoken ranks (the run's vocabulary) are
    written as the run's; BERT's vocab.txt is refused in one line, nothing exported."""
    transformers = pytest.importorskip("transformers")
    from tests.conftest import BERT_VOCAB, GPT2_VOCAB

    bert = str(BERT_VOCAB)
    done = _refused("tools/convert", "checkpoint-to-hf", gpt_run, str(tmp_path / "no"),
                    "--tokenizer", bert)  # fmt: skip
    assert f"tokenizer {bert} is not the one the checkpoint was trained with" in done.stderr
    assert not (tmp_path / "no" / "model.safetensors").exists()
    ranks = str(GPT2_VOCAB / "gpt2.tiktoken")
    _convert_to_hf(gpt_run, tmp_path / "hf", "--tokenizer", ranks)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tokenizer("Call me Ishmael.").input_ids == [14134, 502, 1148, 21720, 417, 13]
