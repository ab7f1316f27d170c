"""How a run starts: README's headline command with no other flag on small sets (the demo's
shapes: 6 and 105 documents, and a bare Megatron prefix), evaluation splits too small to
honour, --init-from (BERT phase 2 from phase 1's weights), and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from dataset_format.output_dir import MARKER_NAME
from tests.conftest import REPO
from tests.shard_fixtures import make_bert_shards, make_gpt_shards
from train.config import parse_args
from train.loop import main
from train.resume import fit_positions


@pytest.fixture(scope="module")
def books_shape(tmp_path_factory) -> str:
    """The demo's books set: 6 documents (the default split gives valid and test none)."""
    return make_gpt_shards(tmp_path_factory.mktemp("six"), 6)


@pytest.fixture(scope="module")
def wiki_shape(tmp_path_factory) -> str:
    """The demo's wiki set: 105 documents (valid gets 3, test none)."""
    return make_gpt_shards(tmp_path_factory.mktemp("wiki"), 105)


def records(out) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return list(map(json.loads, f))


def evals(out) -> list[tuple[str, int]]:
    return [(r["split"], r["step"]) for r in records(out) if r["kind"] == "eval"]


NO_VALID = "no validation: --split 969,30,1 gives the valid split none of the {} documents"
NO_TEST = "no test evaluation: --split 969,30,1 gives the test split none of the {} documents"


@pytest.mark.slow
def test_headline_command_on_a_six_document_set(books_shape, tmp_path):
    """`python train/pretrain.py --data SET`, nothing else, from a fresh directory."""
    result = subprocess.run(
        [sys.executable, str(REPO / "train" / "pretrain.py"), "--data", books_shape],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count(NO_VALID.format(6)) == 1
    assert result.stdout.count(NO_TEST.format(6)) == 1
    out = tmp_path / "out" / "run"
    assert [r["step"] for r in records(out) if r["kind"] == "train"] == list(range(1, 101))
    assert evals(out) == []
    assert (out / "checkpoints" / "step-00000100" / "meta.json").is_file()


@pytest.mark.slow
def test_defaults_on_a_105_document_set_and_its_bare_prefix(
    wiki_shape, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    summary = main(parse_args(["--data", wiki_shape]))
    assert summary["step"] == 100
    printed = capsys.readouterr().out
    assert NO_VALID.format(105) not in printed and printed.count(NO_TEST.format(105)) == 1
    assert evals(tmp_path / "out" / "run") == [("valid", 100)]
    # A bare .bin/.idx prefix (shard 0: 52 of the documents) with the tokenizer beside it
    prefix = os.path.join(wiki_shape, "shard-00000")
    tokenizer = os.path.join(wiki_shape, "tokenizer.json")
    summary = main(parse_args(["--data", prefix, "--tokenizer", tokenizer, "--out", "bare"]))
    assert summary["step"] == 100 and evals(tmp_path / "bare") == [("valid", 100)]
    assert capsys.readouterr().out.count(NO_TEST.format(52)) == 1


def test_a_split_one_set_of_a_blend_cannot_fill_is_one_line(books_shape, wiki_shape, tmp_path):
    with pytest.raises(SystemExit) as excinfo:
        main(parse_args(["--data", "1", books_shape, "1", wiki_shape, "--out", str(tmp_path)]))
    message = str(excinfo.value.code)
    assert message == (
        f"error: --split 969,30,1: the valid split gets none of the 6 documents of "
        f"{books_shape} but documents of the other sets; give it a larger share (or 0)"
    )


def test_a_split_left_out_is_not_announced(books_shape, tmp_path, capsys):
    main(parse_args(["--data", books_shape, "--out", str(tmp_path), "--split", "1,0,0",
                     "--max-steps", "1", "--seq-len", "16", "--no-save"]))  # fmt: skip
    assert "no validation" not in capsys.readouterr().out


# -- --init-from -----------------------------------------------------------------------------------

PHASE = ["--model", "bert", "--seq-len", "32", "--global-batch", "4", "--split", "90,5,5",
         "--eval-iters", "0", "--no-progress", "--optimizer", "lamb", "--lr", "1e-2",
         "--dropout", "0"]  # fmt: skip


@pytest.fixture(scope="module")
def bert_shards(tmp_path_factory) -> str:
    return make_bert_shards(tmp_path_factory.mktemp("bert-phases"), 40)


def train_losses(out) -> list[float]:
    return [r["loss"] for r in records(out) if r["kind"] == "train"]


@pytest.mark.slow
def test_bert_phase_two_starts_from_phase_one(bert_shards, tmp_path):
    """Phase 2 (--init-from) starts where phase 1's loss ended, not at a fresh model's; with
    its own warmup (its first lr is lr / warmup) and its own step count."""
    phase1, phase2 = tmp_path / "phase1", tmp_path / "phase2"
    main(parse_args(["--data", bert_shards, "--out", str(phase1), *PHASE, "--max-steps", "60",
                     "--warmup-steps", "6"]))  # fmt: skip
    first = main(parse_args(["--data", bert_shards, "--out", str(phase2), *PHASE,
                             "--max-steps", "4", "--warmup-steps", "2", "--lr", "5e-3",
                             "--init-from", str(phase1)]))  # fmt: skip
    before, after = train_losses(phase1), train_losses(phase2)
    fresh, trained = before[0], before[-1]
    assert fresh - trained > 1.0  # phase 1 learned the sentences
    # one more step's worth of noise apart, where a fresh model is 1+ nats away
    assert abs(after[0] - trained) < 0.2 * (fresh - trained), (fresh, trained, after)
    phase2_records = [r for r in records(phase2) if r["kind"] == "train"]
    assert [r["step"] for r in phase2_records] == [1, 2, 3, 4] and first["step"] == 4
    assert phase2_records[0]["lr"] == pytest.approx(5e-3 / 2)
    # --resume --init-from: phase 2 has saved, so it continues itself (nothing left to train)
    again = main(parse_args(["--data", bert_shards, "--out", str(phase2), *PHASE,
                             "--max-steps", "4", "--warmup-steps", "2", "--lr", "5e-3",
                             "--init-from", str(phase1), "--resume"]))  # fmt: skip
    assert again["step"] == 4 and len(train_losses(phase2)) == 4


def test_init_from_another_model_kind_is_one_line(bert_shards, tmp_path):
    gpt = make_gpt_shards(tmp_path / "gpt-data", 20)
    main(parse_args(["--data", gpt, "--out", str(tmp_path / "gpt"), "--max-steps", "1",
                     "--seq-len", "16", "--eval-iters", "0", "--no-progress"]))  # fmt: skip
    with pytest.raises(SystemExit) as excinfo:
        main(parse_args(["--data", bert_shards, "--out", str(tmp_path / "b"), *PHASE,
                         "--init-from", str(tmp_path / "gpt")]))  # fmt: skip
    message = str(excinfo.value.code)
    assert message.startswith(f"error: --init-from {tmp_path / 'gpt'}/checkpoints/step-00000001")
    assert "it was saved with --model gpt, this run has --model bert" in message
    with pytest.raises(SystemExit) as excinfo:
        main(parse_args(["--data", bert_shards, "--out", str(tmp_path / "c"), *PHASE,
                         "--init-from", str(tmp_path / "nothing")]))  # fmt: skip
    assert (
        str(excinfo.value.code) == f"error: --init-from {tmp_path / 'nothing'}: no checkpoint in it"
    )


def test_fit_positions_keeps_learned_rows_and_the_new_rows_initialisation():
    learned = torch.arange(12.0).reshape(4, 3)  # a phase trained with 4 positions
    fresh = torch.full((6, 3), -1.0)  # this model's table: 6 positions, initialised
    fitted = fit_positions(learned, fresh)
    assert torch.equal(fitted[:4], learned) and torch.equal(fitted[4:], fresh[4:])
    assert fit_positions(learned, torch.zeros(4, 3)) is learned  # same size: as saved


# -- Ctrl-C ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_stops_with_one_line_and_whole_checkpoints(wiki_shape, tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "train/pretrain.py", "--data", wiki_shape, "--out", str(out),
         "--max-steps", "100000", "--save-interval", "5", "--seq-len", "16", "--no-progress"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not (out / "checkpoints" / "step-00000010").exists():
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1
    assert "Traceback" not in stderr
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("error: interrupted after step ") and "with --resume" in line
    assert sorted(os.listdir(out)) == [MARKER_NAME, "checkpoints", "metrics.jsonl"]
    assert all(name.startswith("step-") for name in os.listdir(out / "checkpoints"))
