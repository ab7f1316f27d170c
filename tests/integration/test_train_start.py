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

from common.output_dir import MARKER_NAME
from tests.conftest import REPO
from tests.shard_fixtures import make_bert_shards, make_gpt_shards
from train.config import parse_args
from train.loop import main


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> dict[int, str]:
    """GPT sets of the demo's shapes: its books (6 documents: the default split gives valid and
    test none) and its wiki excerpts (105: valid gets 3, test none)."""
    root = tmp_path_factory.mktemp("demo-shapes")
    return {n: make_gpt_shards(root, n, name=f"docs-{n}") for n in (6, 105)}


def records(out) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return list(map(json.loads, f))


def evals(out) -> list[tuple[str, int]]:
    return [(r["split"], r["step"]) for r in records(out) if r["kind"] == "eval"]


NO_VALID = "no validation: --split 969,30,1 gives the valid split none of the {} documents"
NO_TEST = "no test evaluation: --split 969,30,1 gives the test split none of the {} documents"


@pytest.mark.slow
def test_headline_command_on_a_six_document_set(shapes, tmp_path):
    """`python train/pretrain.py --data SET`, nothing else, from a fresh directory."""
    result = subprocess.run(
        [sys.executable, str(REPO / "train" / "pretrain.py"), "--data", shapes[6]],
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
def test_defaults_on_a_105_document_set_and_its_bare_prefix(shapes, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    summary = main(parse_args(["--data", shapes[105]]))
    assert summary["step"] == 100
    printed = capsys.readouterr().out
    assert NO_VALID.format(105) not in printed and printed.count(NO_TEST.format(105)) == 1
    assert evals(tmp_path / "out" / "run") == [("valid", 100)]
    # A bare .bin/.idx prefix (shard 0: 52 of the documents) with the tokenizer beside it
    prefix = os.path.join(shapes[105], "shard-00000")
    tokenizer = os.path.join(shapes[105], "tokenizer.json")
    summary = main(parse_args(["--data", prefix, "--tokenizer", tokenizer, "--out", "bare"]))
    assert summary["step"] == 100 and evals(tmp_path / "bare") == [("valid", 100)]
    assert capsys.readouterr().out.count(NO_TEST.format(52)) == 1


def test_a_split_one_set_of_a_blend_cannot_fill_is_one_line(shapes, tmp_path):
    with pytest.raises(SystemExit) as excinfo:
        main(parse_args(["--data", "1", shapes[6], "1", shapes[105], "--out", str(tmp_path)]))
    message = str(excinfo.value.code)
    assert message == (
        f"error: --split 969,30,1: the valid split gets none of the 6 documents of "
        f"{shapes[6]} but documents of the other sets; give it a larger share, e.g. --split "
        "969,88,1 (or 0)"
    )


def test_a_malformed_split_is_one_line_and_writes_nothing(shapes, tmp_path):
    with pytest.raises(SystemExit) as excinfo:
        main(parse_args(["--data", shapes[6], "--out", str(tmp_path / "run"), "--split", "9,x"]))
    assert (
        str(excinfo.value.code) == "error: --split '9,x': expected up to 3 numbers like '969,30,1'"
    )
    assert not (tmp_path / "run").exists()


def test_a_split_left_out_is_not_announced(shapes, tmp_path, capsys):
    main(parse_args(["--data", shapes[6], "--out", str(tmp_path), "--split", "1,0,0",
                     "--max-steps", "1", "--seq-len", "16", "--no-save"]))  # fmt: skip
    assert "no validation" not in capsys.readouterr().out


# -- --init-from -----------------------------------------------------------------------------------

PHASE = ["--model", "bert", "--seq-len", "32", "--global-batch", "4", "--split", "90,5,5",
         "--eval-iters", "2", "--no-progress", "--optimizer", "lamb", "--lr", "1e-2",
         "--dropout", "0"]  # fmt: skip


@pytest.fixture(scope="module")
def bert_sentences(tmp_path_factory) -> str:
    return make_bert_shards(tmp_path_factory.mktemp("bert-phases"), 40)


@pytest.mark.slow
def test_bert_phase_two_starts_from_phase_one(bert_sentences, tmp_path):
    """Phase 2 (--init-from) starts from phase 1's weights: on the same validation samples at
    the same seq its loss is phase 1's last, and its first training loss is at phase 1's level,
    not a fresh model's; with its own warmup (first lr = lr / warmup) and step count."""
    phase1, phase2 = tmp_path / "phase1", tmp_path / "phase2"
    main(parse_args(["--data", bert_sentences, "--out", str(phase1), *PHASE, "--max-steps", "60",
                     "--warmup-steps", "6"]))  # fmt: skip
    # lr 1e-9: its two steps leave the loaded weights as they were (to ~1e-9)
    main(parse_args(["--data", bert_sentences, "--out", str(phase2), *PHASE, "--max-steps", "2",
                     "--warmup-steps", "2", "--lr", "1e-9", "--init-from", str(phase1)]))  # fmt: skip
    one, two = records(phase1), records(phase2)
    losses = [r["loss"] for r in one if r["kind"] == "train"]
    fresh, trained = losses[0], sum(losses[-5:]) / 5
    assert fresh - trained > 0.5  # phase 1 learned something
    (valid1,), (valid2,) = ([r for r in rs if r.get("split") == "valid"] for rs in (one, two))
    assert valid2["loss"] == pytest.approx(valid1["loss"], abs=1e-4)
    first, _ = [r for r in two if r["kind"] == "train"]
    assert abs(first["loss"] - trained) < abs(first["loss"] - fresh), (fresh, trained, first)
    assert first["step"] == 1 and first["lr"] == pytest.approx(1e-9 / 2)
    # --resume --init-from: phase 2 has saved, so it continues itself (nothing left to train)
    again = main(parse_args(["--data", bert_sentences, "--out", str(phase2), *PHASE,
                             "--max-steps", "2", "--warmup-steps", "2", "--lr", "1e-9",
                             "--init-from", str(phase1), "--resume"]))  # fmt: skip
    assert again["step"] == 2 and len([r for r in records(phase2) if r["kind"] == "train"]) == 2


def test_init_from_loads_weights_and_refuses_another_model_kind(bert_sentences, tmp_path):
    gpt = make_gpt_shards(tmp_path / "gpt-data", 20)
    main(parse_args(["--data", gpt, "--out", str(tmp_path / "gpt"), "--max-steps", "1",
                     "--seq-len", "16", "--eval-iters", "0", "--no-progress"]))  # fmt: skip
    # GPT from GPT: at lr 1e-9 its first step leaves exactly-loaded weights within 1e-6
    main(parse_args(["--data", gpt, "--out", str(tmp_path / "next"), "--max-steps", "1",
                     "--seq-len", "32", "--eval-iters", "0", "--no-progress", "--lr", "1e-9",
                     "--init-from", str(tmp_path / "gpt")]))  # fmt: skip
    from train.export import consolidated_state

    before = consolidated_state(str(tmp_path / "gpt" / "checkpoints" / "step-00000001"))["model"]
    after = consolidated_state(str(tmp_path / "next" / "checkpoints" / "step-00000001"))["model"]
    assert before.keys() == after.keys()
    assert max(float((before[k] - after[k]).abs().max()) for k in before) < 1e-6
    with pytest.raises(SystemExit) as excinfo:
        main(parse_args(["--data", bert_sentences, "--out", str(tmp_path / "b"), *PHASE,
                         "--init-from", str(tmp_path / "gpt")]))  # fmt: skip
    message = str(excinfo.value.code)
    assert message.startswith(f"error: --init-from {tmp_path / 'gpt'}/checkpoints/step-00000001")
    assert "it was saved with --model gpt, this run has --model bert" in message
    with pytest.raises(SystemExit) as excinfo:
        main(parse_args(["--data", bert_sentences, "--out", str(tmp_path / "c"), *PHASE,
                         "--init-from", str(tmp_path / "nothing")]))  # fmt: skip
    assert (
        str(excinfo.value.code) == f"error: --init-from {tmp_path / 'nothing'}: no checkpoint in it"
    )


# -- Ctrl-C ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_saves_the_step_it_stops_at_with_one_line(shapes, tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "train/pretrain.py", "--data", shapes[105], "--out", str(out),
         "--max-steps", "100000", "--save-interval", "5", "--seq-len", "16", "--no-progress"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not (out / "checkpoints" / "step-00000010").exists():
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130
    assert "Traceback" not in stderr
    line = stderr.strip().splitlines()[-1]
    # the step it was in finishes and is saved: nothing since the last periodic save is lost
    with open(out / "metrics.jsonl") as f:
        last = max(r["step"] for r in map(json.loads, f) if r["kind"] == "train")
    assert line.startswith(
        f"stopped by SIGINT after step {last}: saved {out}/checkpoints/step-{last:08d}; "
        f"resume with: {sys.executable} train/pretrain.py --data"
    ) and line.endswith(" --no-progress --resume")
    assert sorted(os.listdir(out)) == [MARKER_NAME, "checkpoints", "metrics.jsonl"]
    assert all(name.startswith("step-") for name in os.listdir(out / "checkpoints"))
