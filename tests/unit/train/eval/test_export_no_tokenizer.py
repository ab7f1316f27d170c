"""checkpoint-to-hf --no-tokenizer exports the weights alone whatever the run records: a run
whose tokenizer file is gone was refused "for want of the run's tokenizer" even with it."""

from __future__ import annotations

import dataclasses
import os

import pytest

from tests.helpers.checkpoints import save_step, trained_gpt, trainer_state
from train.export import main as export_main


@pytest.fixture
def run_whose_tokenizer_is_gone(tmp_path):
    """A real one-process GPT checkpoint that trained with a tokenizer file since deleted."""
    model, optimizer = trained_gpt()
    gone = tmp_path / "gone" / "tokenizer.json"
    config = {"seed": 1, "model": "gpt", "tokenizer": str(gone)}
    record = {"kind": "byte_level_bpe", "vocab_size": model.config.vocab_size, "sha256": "0" * 64}
    state = {**trainer_state(1), "config": config, "model_config": dataclasses.asdict(model.config),
             "tokenizer": record}
    return save_step(tmp_path / "run", 1, model, optimizer, state)


def test_no_tokenizer_exports_the_weights_of_a_run_whose_tokenizer_is_gone(
    run_whose_tokenizer_is_gone, tmp_path, capsys
):
    pytest.importorskip("transformers")
    out = tmp_path / "hf"
    assert export_main(["hf", run_whose_tokenizer_is_gone, str(out)]) == 1  # still: say so
    assert "tokenizer file is gone" in capsys.readouterr().err
    assert export_main(["hf", run_whose_tokenizer_is_gone, str(out), "--no-tokenizer"]) == 0
    written = set(os.listdir(out))
    assert {"config.json", "model.safetensors"} <= written
    assert not written & {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}


def test_no_tokenizer_and_a_tokenizer_file_are_one_or_the_other(
    run_whose_tokenizer_is_gone, tmp_path, capsys
):
    with pytest.raises(SystemExit) as exited:
        export_main(["hf", run_whose_tokenizer_is_gone, str(tmp_path / "hf"), "--no-tokenizer",
                     "--tokenizer", "t.json"])
    assert exited.value.code == 2
    assert "give --tokenizer FILE or --no-tokenizer, not both" in capsys.readouterr().err
