"""train.loop in one process on real shard sets (Moby-Dick, GPT-2 BPE / BERT WordPiece).

Short runs of the tiny presets (d=64, 2 layers): resume equivalence, fp16 overflow skipping,
non-finite and outlier skips, the one-line errors, and (slow) loss going down for GPT and BERT
with the curves plotted by tools/plot.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO
from tests.train_faults import FaultHooks
from train.config import parse_args
from train.loop import main

SMALL = [
    "--seq-len", "16", "--global-batch", "2", "--micro-batch", "1", "--split", "90,5,5",
    "--eval-iters", "0", "--no-progress", "--log-interval", "1000", "--lr", "3e-3",
    "--warmup-steps", "1",
]  # fmt: skip


def run(data: str, out, *flags: str, hooks=None) -> dict:
    return main(parse_args(["--data", data, "--out", str(out), *SMALL, *flags]), hooks)


def train_records(out) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["kind"] == "train"]


def losses(out) -> list[float]:
    return [r["loss"] for r in train_records(out)]


@pytest.mark.slow
def test_resume_gives_the_uninterrupted_losses(gpt_shards, tmp_path):
    whole, split = tmp_path / "whole", tmp_path / "split"
    common = ("--max-steps", "6", "--save-interval", "3", "--deterministic")
    run(gpt_shards, whole, *common)
    run(gpt_shards, split, *common, "--stop-at", "3")
    assert [r["step"] for r in train_records(split)] == [1, 2, 3]
    summary = run(gpt_shards, split, *common, "--resume")
    assert summary["step"] == 6 and summary["consumed_samples"] == 12
    assert [r["step"] for r in train_records(split)] == [1, 2, 3, 4, 5, 6]
    assert losses(split) == losses(whole)  # bit for bit
    assert [r["lr"] for r in train_records(split)] == [r["lr"] for r in train_records(whole)]


@pytest.mark.slow
def test_fp16_scaler_skips_an_injected_overflow(gpt_shards, tmp_path):
    faults = FaultHooks(grad_fault="3:inf")
    summary = run(gpt_shards, tmp_path, "--max-steps", "5", "--precision", "fp16", hooks=faults)
    records = train_records(tmp_path)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]  # the skipped step still counts
    assert [r.get("skip") for r in records] == [None, None, "overflow", None, None]
    assert records[2]["grad_norm"] is None  # inf, written as null
    assert records[1]["loss_scale"] == 2.0**16 and records[2]["loss_scale"] == 2.0**15
    assert records[4]["skipped"]["overflow"] == 1 and records[1]["skipped"]["overflow"] == 0
    assert summary["skipped"] == {
        "nonfinite": 0, "overflow": 1, "outlier_loss": 0, "outlier_grad_norm": 0
    }  # fmt: skip
    assert summary["loss_scale"] == 2.0**15


@pytest.mark.slow
def test_skipped_update_leaves_weights_and_optimizer_alone(gpt_shards, tmp_path):
    """A run whose step 2 is skipped holds after step 2 exactly what a run holds after step 1."""
    import torch

    run(gpt_shards, tmp_path / "one", "--max-steps", "2", "--stop-at", "1")
    faults = FaultHooks(grad_fault="2:inf")
    run(gpt_shards, tmp_path / "skip", "--max-steps", "2", hooks=faults)
    assert train_records(tmp_path / "skip")[1]["skip"] == "nonfinite"
    from train.export import consolidated_state

    one = consolidated_state(str(tmp_path / "one" / "checkpoints" / "step-00000001"))
    skip = consolidated_state(str(tmp_path / "skip" / "checkpoints" / "step-00000002"))
    for name in ("model", "optimizer"):
        a, b = one[name], skip[name]
        flat_a = torch.utils._pytree.tree_flatten(a)[0]
        flat_b = torch.utils._pytree.tree_flatten(b)[0]
        assert len(flat_a) == len(flat_b)
        for x, y in zip(flat_a, flat_b):
            if isinstance(x, torch.Tensor):
                assert torch.equal(x, y)
            elif not isinstance(x, float):  # lr differs: step 2's schedule value was set
                assert x == y


@pytest.mark.slow
def test_consecutive_nonfinite_steps_stop_the_run(gpt_shards, tmp_path):
    faults = FaultHooks(grad_fault="2-9:inf")
    with pytest.raises(SystemExit) as excinfo:
        run(gpt_shards, tmp_path, "--max-steps", "10", "--max-consecutive-skips", "3", hooks=faults)
    assert "3 consecutive steps had non-finite loss or gradients (last at step 4" in str(
        excinfo.value
    )
    assert [r.get("skip") for r in train_records(tmp_path)] == [None] + ["nonfinite"] * 3


@pytest.mark.slow
def test_grad_norm_outlier_is_skipped(gpt_shards, tmp_path):
    faults = FaultHooks(grad_fault="9:x1000")
    summary = run(
        gpt_shards, tmp_path, "--max-steps", "10", "--skip-outliers", "4",
        "--outlier-window", "5", hooks=faults,
    )  # fmt: skip
    records = train_records(tmp_path)
    assert [r["step"] for r in records if r.get("skip")] == [9]
    assert records[8]["skip"] == "outlier_grad_norm"
    assert summary["skipped"]["outlier_grad_norm"] == 1


def test_bert_run_and_lamb(bert_shards, tmp_path):
    summary = run(
        bert_shards, tmp_path, "--model", "bert", "--max-steps", "3", "--optimizer", "lamb",
        "--seq-len", "48",
    )  # fmt: skip
    records = train_records(tmp_path)
    assert summary["config"]["preset"] == "bert-tiny"
    assert all("mlm_loss" in r and "nsp_loss" in r for r in records)
    for r in records:
        assert r["loss"] == pytest.approx(r["mlm_loss"] + r["nsp_loss"], rel=1e-5)


# -- one-line errors -----------------------------------------------------------------------------


def expect_error(data: str, out, *flags: str) -> str:
    with pytest.raises(SystemExit) as excinfo:
        run(data, out, *flags)
    message = str(excinfo.value.code)
    assert message.startswith("error: ") and "\n" not in message
    return message


def test_resume_with_data_of_another_tokenizer(gpt_shards, bert_shards, tmp_path):
    run(gpt_shards, tmp_path, "--max-steps", "1")
    message = expect_error(bert_shards, tmp_path, "--max-steps", "2", "--resume")
    assert "was made with another tokenizer than the checkpoint" in message
    assert "'wordpiece' in the data, 'byte-level-bpe' in the checkpoint" in message


def test_empty_train_split(gpt_shards, tmp_path):
    message = expect_error(gpt_shards, tmp_path, "--split", "0,50,50")
    assert "the train split is empty" in message


def test_seq_len_beyond_the_model(gpt_shards, tmp_path):
    message = expect_error(gpt_shards, tmp_path, "--seq-len", "512")
    assert "--seq-len 512 exceeds the gpt-tiny model's 128 positions" in message


def test_corrupt_checkpoint(gpt_shards, tmp_path):
    run(gpt_shards, tmp_path, "--max-steps", "1")
    model_file = tmp_path / "checkpoints" / "step-00000001" / "__0_0.distcp"
    with open(model_file, "r+b") as f:
        f.truncate(1000)
    message = expect_error(gpt_shards, tmp_path, "--max-steps", "2", "--resume")
    assert f"cannot resume: {model_file}: 1000 bytes, meta.json says" in message


def test_existing_run_needs_resume_and_resume_needs_a_checkpoint(gpt_shards, tmp_path):
    message = expect_error(gpt_shards, tmp_path, "--resume")
    assert "--resume: no checkpoint in" in message
    run(gpt_shards, tmp_path, "--max-steps", "1")
    assert "already holds checkpoints" in expect_error(gpt_shards, tmp_path, "--max-steps", "2")


@pytest.mark.slow
def test_command_line_error_is_one_line_without_traceback(gpt_shards, tmp_path):
    result = subprocess.run(
        [sys.executable, "train/pretrain.py", "--data", gpt_shards, "--out", str(tmp_path),
         "--seq-len", "4096"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: --seq-len 4096 exceeds")


# -- real short runs (slow) ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt", "bert"])
def test_short_real_run_learns_and_plots(model, gpt_shards, bert_shards, tmp_path):
    data = gpt_shards if model == "gpt" else bert_shards
    out = tmp_path / model
    main(
        parse_args(
            ["--data", data, "--out", str(out), "--model", model, "--max-steps", "40",
             "--global-batch", "8", "--seq-len", "64", "--lr", "3e-3", "--warmup-steps", "4",
             "--split", "90,5,5", "--eval-interval", "20", "--eval-iters", "2",
             "--no-progress", "--log-interval", "10", "--save-interval", "20"]
        )
    )  # fmt: skip
    values = losses(out)
    assert len(values) == 40
    first, last = sum(values[:5]) / 5, sum(values[-5:]) / 5
    assert last < first - 1.0, (first, last)  # from ~ln(vocab) towards the book's statistics
    with open(out / "metrics.jsonl") as f:
        evals = [r for r in map(json.loads, f) if r["kind"] == "eval"]
    assert [(r["split"], r["step"]) for r in evals] == [
        ("valid", 20), ("valid", 40), ("test", 40)
    ]  # fmt: skip
    assert evals[1]["loss"] < evals[0]["loss"]
    if model == "bert":  # masked-LM accuracy: hits, where chance (1 in 30k) gives none
        assert all(0.0 <= r["mlm_accuracy"] <= 1.0 for r in evals)
        assert evals[1]["mlm_accuracy"] > 0, evals
        # perplexity of the masked LM alone; the loss also holds the NSP term
        for r in evals:
            assert r["loss"] == pytest.approx(r["mlm_loss"] + r["nsp_loss"])
            assert r["ppl"] == pytest.approx(math.exp(r["mlm_loss"]))
            assert 0.0 <= r["nsp_accuracy"] <= 1.0
    else:
        assert all(r["ppl"] == pytest.approx(math.exp(r["loss"])) for r in evals)
        assert all("mlm_accuracy" not in r for r in evals)
    png = tmp_path / f"{model}.png"
    result = subprocess.run(
        [os.path.join(REPO, "tools", "plot"), str(out), "-o", str(png)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_resuming_a_finished_run_trains_nothing(gpt_shards, tmp_path):
    run(gpt_shards, tmp_path, "--max-steps", "1")
    summary = run(gpt_shards, tmp_path, "--max-steps", "1", "--resume")
    assert summary["step"] == 1 and len(train_records(tmp_path)) == 1


@pytest.mark.parametrize(
    "flags, named",
    [
        (("--global-batch", "4"), "saved with --global-batch 2, this run has --global-batch 4"),
        (("--seq-len", "24"), "saved with --seq-len 16, this run has --seq-len 24"),
        (("--split", "80,10,10"), "saved with --split 90,5,5, this run has --split 80,10,10"),
        (("--lr", "1e-3"), "saved with --lr 0.003, this run has --lr 0.001"),
        (("--warmup-steps", "0"), "saved with --warmup-steps 1, this run has --warmup-steps 0"),
        (("--decay", "linear"), "saved with --decay cosine, this run has --decay linear"),
    ],
)
def test_resuming_with_another_run_config_is_refused(gpt_shards, tmp_path, flags, named):
    """A job pointed at an old --out with other batch / sequence / split settings would mix
    two runs in one lineage: refused, unless --allow-config-change says so."""
    run(gpt_shards, tmp_path, "--max-steps", "2", "--stop-at", "1")
    message = expect_error(gpt_shards, tmp_path, "--max-steps", "2", "--resume", *flags)
    assert named in message and "--allow-config-change" in message
    summary = run(gpt_shards, tmp_path, "--max-steps", "2", "--resume", "--allow-config-change",
                  *flags)  # fmt: skip
    assert summary["step"] == 2


def test_resuming_with_other_data_is_refused(gpt_shards, tmp_path, tmp_path_factory):
    """The same shard set under another directory is other data as far as the run knows."""
    import shutil

    other = tmp_path_factory.mktemp("copy") / "set"
    shutil.copytree(gpt_shards, other)
    run(gpt_shards, tmp_path, "--max-steps", "2", "--stop-at", "1")
    message = expect_error(str(other), tmp_path, "--max-steps", "2", "--resume")
    assert f"saved with --data {gpt_shards}, this run has --data {other}" in message


def test_resuming_with_another_max_steps_names_every_schedule_flag_it_moves(gpt_shards, tmp_path):
    """--max-steps sets the lr curve's length (and --decay-steps' default): a resume with
    another one would bend the schedule mid-run, so it is refused naming both, one line."""
    run(gpt_shards, tmp_path, "--max-steps", "2", "--stop-at", "1")
    message = expect_error(gpt_shards, tmp_path, "--max-steps", "3", "--resume")
    assert (
        f"cannot resume from {tmp_path}/checkpoints/step-00000001: it was saved with "
        "--max-steps 2, this run has --max-steps 3; it was saved with --decay-steps 2, this "
        "run has --decay-steps 3; pass --allow-config-change" in message
    )
    summary = run(gpt_shards, tmp_path, "--max-steps", "3", "--resume", "--allow-config-change")
    assert summary["step"] == 3 and [r["step"] for r in train_records(tmp_path)] == [1, 2, 3]


# -- stopping by a signal ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name, status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_signal_finishes_the_step_saves_and_resumes_bit_for_bit(gpt_shards, tmp_path, name, status):
    """A signal after step 3 (Ctrl-C, a scheduler's preemption): the step's checkpoint, one
    line with the command that resumes, exit 128 + signal; that command ends the run with the
    losses of an uninterrupted one."""
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    common = ("--max-steps", "5", "--save-interval", "1000", "--deterministic")
    # The uninterrupted run in a process of its own too: run in pytest's, its logged loss took
    # the suite's thread settings and differed from a fresh process's in the last bit.
    reference = [sys.executable, "train/pretrain.py", "--data", gpt_shards, "--out", str(whole),
                 *SMALL, *common]  # fmt: skip
    done = subprocess.run(reference, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    flags = ["--data", gpt_shards, "--out", str(stopped), *SMALL, *common]
    result = subprocess.run(
        [sys.executable, "tests/train_with_faults.py", "--signal-at-step", "3", "--signal-name",
         name, "--", *flags],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == status, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert os.listdir(stopped / "checkpoints") == ["step-00000003"]
    assert [r["step"] for r in train_records(stopped)] == [1, 2, 3]
    command = [sys.executable, "train/pretrain.py", *flags, "--resume"]
    assert result.stderr.strip().splitlines()[-1] == (
        f"stopped by {name} after step 3: saved {stopped}/checkpoints/step-00000003; "
        f"resume with: {shlex.join(command)}"
    )
    resumed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout and "at step 3" in resumed.stdout
    assert losses(stopped) == losses(whole)


def test_log_line_and_metrics_give_step_time_and_eta(gpt_shards, tmp_path, capsys):
    from train.metrics import format_duration

    run(gpt_shards, tmp_path, "--max-steps", "4", "--log-interval", "1")
    records = train_records(tmp_path)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(lines) == len(records) == 4
    for i, (record, line) in enumerate(zip(records, lines)):
        assert record["step_ms"] == pytest.approx(1000 * record["step_time_s"])
        recent = [r["step_time_s"] for r in records[max(0, i - 9) : i + 1]]
        remaining = 4 - record["step"]
        assert record["eta_s"] == pytest.approx(remaining * sum(recent) / len(recent))
        assert line.startswith(f"step {record['step']}/4 | loss {record['loss']:.4f} |")
        assert f"| {record['step_ms']:.0f} ms/step |" in line and "tok/s" in line
        assert line.endswith(f"| ETA {format_duration(record['eta_s'])}")
    assert lines[-1].endswith("| ETA 0:00:00")


# -- model shape from flags ----------------------------------------------------------------------


def test_shape_flags_train_save_resume_and_export(gpt_shards, tmp_path, capsys):
    """gpt-tiny resized on the command line: the model, its FLOP count and its checkpoint
    follow the flags; a resume without them takes the checkpoint's shape; export reads it."""
    from train.models.gpt import GPTConfig, count_params, flops_per_token

    shape = ("--num-layers", "3", "--hidden-size", "96", "--num-attention-heads", "4")
    config = GPTConfig(vocab_size=50304, n_layer=3, n_embd=96, n_head=4, block_size=128)
    run(gpt_shards, tmp_path, "--max-steps", "3", "--stop-at", "2", *shape)
    assert f"gpt-tiny with {' '.join(shape)}: {count_params(config) / 1e6:.2f}M parameters" in (
        capsys.readouterr().out
    )
    for record in train_records(tmp_path):  # tflops = FLOPs per token x tokens/s (1 process)
        flops = record["tflops"] * 1e12 / record["tokens_per_s"]
        assert flops == pytest.approx(flops_per_token(config, 16), rel=1e-9)
    assert "--num-attention-heads 4, this run has --num-attention-heads 2" in expect_error(
        gpt_shards, tmp_path, "--max-steps", "3", "--resume", "--num-attention-heads", "2"
    )
    summary = run(gpt_shards, tmp_path, "--max-steps", "3", "--resume")
    assert summary["step"] == 3 and summary["config"]["num_layers"] == 3
    exported = tmp_path / "model.pt"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "convert"), "checkpoint-to-torch",
         str(tmp_path / "checkpoints" / "step-00000003"), str(exported)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    state = torch.load(exported, weights_only=True)
    recorded = state["trainer"]["model_config"]
    assert (recorded["n_layer"], recorded["n_embd"], recorded["n_head"]) == (3, 96, 4)
    weights = state["model"]
    assert sorted({int(name.split(".")[1]) for name in weights if name.startswith("blocks.")}) == [
        0, 1, 2
    ]  # fmt: skip
    assert weights["blocks.2.mlp.fc_in.weight"].shape == (384, 96)
    untied = sum(t.numel() for name, t in weights.items() if name != "lm_head.weight")
    assert untied == count_params(config)


def test_a_shape_flag_the_family_cannot_honour_is_one_line(gpt_shards, tmp_path):
    message = expect_error(gpt_shards, tmp_path, "--ffn-hidden-size", "100")
    assert message == (
        "error: --preset gpt-tiny: --ffn-hidden-size: the gpt family has an MLP of 4 x "
        "--hidden-size (GPT-2's)"
    )
    assert not (tmp_path / "metrics.jsonl").exists()
