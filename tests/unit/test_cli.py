"""Every command's bad command line is two lines (common/cli.py): argparse's error and where the
usage is, never the 40-160 lines of usage argparse prints first, and exit 2."""

from __future__ import annotations

import pytest

from tests.helpers.cli import CORPORA, GPT2, two_lines

BOOK = str(CORPORA / "books" / "pg1080.txt")


def _preprocess(argv):
    from pipelines.preprocess import main

    return main(argv)


def _dedup(argv):
    from pipelines.dedup.__main__ import main

    return main(argv)


def _pretrain(argv):
    from train.config import parse_args

    return parse_args(argv)


def _evaluate(argv):
    from train.eval.run import build_parser

    return build_parser().parse_args(argv)


def _export(argv):
    from train.export import main

    return main(argv)


def _train_tokenizer(argv):
    from pipelines.tokenize.train_tokenizer import build_parser

    return build_parser().parse_args(argv)


@pytest.mark.parametrize(
    ("command", "argv", "prog", "error"),
    [
        (_preprocess, ["--source=books", f"--input={BOOK}", "--output=o", f"--tokenizer={GPT2}",
                       "--shard-tokens", "many"],
         "python -m pipelines.preprocess", "argument --shard-tokens: invalid int value: 'many'"),
        (_dedup, ["--input", BOOK, "--output", "o", "--dedup-threshold", "high"],
         "python -m pipelines.dedup", "argument --dedup-threshold: invalid float value: 'high'"),
        (_pretrain, ["--data", GPT2, "--lr", "fast"],
         "python train/pretrain.py", "argument --lr: invalid float value: 'fast'"),
        (_evaluate, ["--checkpoint", "ckpt"],
         "train/evaluate.py", "the following arguments are required: --task, --data"),
        (_export, ["hf"], "python -m train.export",
         "the following arguments are required: checkpoint, out"),
        (_train_tokenizer, ["--kind", "wordpiece", "--input", BOOK], "python -m pipelines.tokenize."
         "train_tokenizer", "the following arguments are required: --source, --vocab-size, "
         "--output"),
    ],
    ids=["preprocess", "dedup", "pretrain", "evaluate", "export", "train_tokenizer"],
)  # fmt: skip
def test_a_bad_command_line_is_its_error_and_a_hint(capsys, command, argv, prog, error):
    with pytest.raises(SystemExit) as exited:
        command(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    two_lines(captured.err, prog, error)
