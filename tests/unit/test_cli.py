"""Every command's bad command line is two lines (common/cli.py): argparse's error and where the
usage is, never the 40-160 lines of usage argparse prints first, and exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
BOOK = str(CORPORA / "books" / "pg1080.txt")
GPT2 = str(CORPORA / "vocab" / "gpt2")


def _two_lines(err: str, prog: str, error: str) -> None:
    assert err.splitlines() == [f"{prog}: error: {error}", f"run '{prog} --help' for usage"]


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
    _two_lines(captured.err, prog, error)


@pytest.mark.parametrize(
    ("tool", "argv", "error"),
    [
        ("dump", [GPT2, "--doc", "first"], "argument --doc: invalid int value: 'first'"),
        ("convert", ["bin2shards"], "argument command: invalid choice: 'bin2shards' (choose "
         "from 'import-nanogpt', 'import-llmc', 'export-nanogpt', 'export-llmc', "
         "'checkpoint-to-torch', 'checkpoint-to-hf')"),
        ("generate", ["ckpt"], "the following arguments are required: --prompt"),
    ],
)  # fmt: skip
def test_the_tools_print_two_lines_too(tool, argv, error):
    done = subprocess.run([sys.executable, str(REPO / "tools" / tool), *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    _two_lines(done.stderr, f"tools/{tool}", error)


@pytest.mark.parametrize(
    ("module", "argv", "error"),
    [
        ("pipelines.tokenize.train_tokenizer", ["--kind", "bpe"],
         "argument --kind: invalid choice: 'bpe'"),
        ("pipelines.dedup", ["--dedup-threshold", "high"],
         "argument --dedup-threshold: invalid float value: 'high'"),
    ],
    ids=["train_tokenizer", "dedup"],
)  # fmt: skip
def test_a_pipeline_command_in_a_fresh_process_prints_no_beam_import_warning(module, argv, error):
    """Beam logs "apitools not found" through the root logger while it is imported; in a fresh
    interpreter that line came before every train_tokenizer and dedup command's own output
    (the demo's first step printed it)."""
    done = subprocess.run([sys.executable, "-m", module, *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert "apitools" not in done.stderr
    assert done.stderr.splitlines()[0].startswith(f"python -m {module}: error: {error}")
