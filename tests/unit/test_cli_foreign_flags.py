"""Every command's parser points a flag brought from Megatron-LM, nanoGPT, torchtitan or Hugging
Face to ours in one line (common/foreign_flags.py), names the closest flag for a typo, and takes
no flag by a prefix of its name."""

from __future__ import annotations

import importlib.machinery
import importlib.util

import pytest

from tests.conftest import GPT2_VOCAB, REPO


def _tool(name: str):
    """tools/NAME (a script without .py) as a module."""
    path = str(REPO / "tools" / name)
    loader = importlib.machinery.SourceFileLoader(f"tools_{name}", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _refusal(capsys, run, argv) -> str:
    """The error line of a command line the parser refuses (exit 2)."""
    with pytest.raises(SystemExit) as exited:
        run(argv)
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[1].startswith("run '"), lines  # the error, the --help hint
    return lines[0]


def _pretrain(argv):
    from train.config import build_parser

    build_parser().parse_args(argv)


def _preprocess(argv):
    from pipelines.preprocess import main

    base = ["--source=jsonl", "--input=in.jsonl", "--output=out", f"--tokenizer={GPT2_VOCAB}"]
    return main([*base, *argv])


def _dedup(argv):
    from pipelines.dedup.__main__ import main

    return main(["--input=in.parquet", "--output=out", *argv])


def _train_tokenizer(argv):
    from pipelines.tokenize.train_tokenizer import build_parser

    build_parser().parse_args(["--source=books", "--input=x", "--output=y", *argv])


@pytest.mark.parametrize(
    ("run", "argv", "line"),
    [
        (_pretrain, ["--data-path", "d", "--train-iters", "5"],
         "--data-path is Megatron-LM's flag; here it is --data"),
        (_pretrain, ["--data", "d", "--train-iters", "5"],
         "--train-iters is Megatron-LM's flag; here it is --max-steps"),
        (_pretrain, ["--data", "d", "--max_iters=5"], "--max_iters is nanoGPT's flag; here it is "
         "--max-steps"),
        (_pretrain, ["--data", "d", "--micro-batch-size", "2"],
         "--micro-batch-size is Megatron-LM's flag; here it is --micro-batch"),
        (_pretrain, ["--data", "d", "--training.steps", "5"],
         "--training.steps is torchtitan's flag; here it is --max-steps"),
        (_pretrain, ["--data", "d", "--per_device_train_batch_size", "2"],
         "--per_device_train_batch_size is Hugging Face's flag; here it is --micro-batch"),
        (_pretrain, ["--data", "d", "--max_steps", "5"],
         "--max_steps: the flag is spelled --max-steps"),
        (_pretrain, ["--data", "d", "--workers", "2"],
         "--workers is Megatron-LM's flag; here it is --num-workers"),
        (_preprocess, ["--json-keys", "content"], "--json-keys is Megatron-LM's flag; here it is "
         "--source-option json_keys=KEY[,KEY...]"),
        (_preprocess, ["--workers", "4"],
         "--workers is Megatron-LM's flag; here it is --direct_num_workers"),
        (_dedup, ["--workers", "4"],
         "--workers is Megatron-LM's flag; here it is --direct_num_workers"),
        (_train_tokenizer, ["--vocab_size", "500"], "--vocab_size: the flag is spelled --vocab-size"),
    ],
)
def test_a_foreign_flag_points_to_ours(capsys, run, argv, line):
    assert _refusal(capsys, run, argv).endswith(f"error: {line}")


def test_a_prefix_of_a_flag_is_not_taken_for_it(capsys):
    """`--max-step 3` was parsed as --max-steps 3; now it is refused, naming the flag meant."""
    line = _refusal(capsys, _pretrain, ["--data", "d", "--max-step", "3"])
    assert line.endswith("unrecognized arguments: --max-step (did you mean --max-steps?)")
    line = _refusal(capsys, lambda a: _tool("dump").main(a), ["set", "--megatron"])
    assert "--megatron (did you mean --megatron-args?)" in line
    line = _refusal(capsys, lambda a: _tool("generate").main(a), ["run", "--prompt=x", "--temp=1"])
    assert "--temp (did you mean --temperature?)" in line
    line = _refusal(capsys, _train_tokenizer, ["--vocab", "500"])
    assert "--vocab (did you mean --vocab-size?)" in line


def test_beam_commands_name_the_closest_flag(capsys):
    """preprocess and dedup refuse a flag no options class takes (Beam's parser would drop it)
    with the closest one, theirs or Beam's."""
    line = _refusal(capsys, _preprocess, ["--shard-token=5"])
    assert line.endswith("unrecognized arguments: --shard-token (did you mean --shard-tokens?)")
    assert _preprocess(["--shard-tokns=5"]) == 2  # no prefix: the unknown flags' line
    assert capsys.readouterr().err.strip() == (
        "preprocess: error: unknown option(s): --shard-tokns (did you mean --shard-tokens?)"
    )
    line = _refusal(capsys, _dedup, ["--dedup-thresh=0.5"])
    assert line.endswith("--dedup-thresh (did you mean --dedup-threshold?)")
    assert _dedup(["--dedup-treshold=0.5"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: unknown option(s): --dedup-treshold (did you mean --dedup-threshold?)"
    )


def test_every_subcommand_flag_is_known_to_its_parent(capsys):
    """A flag only a sub-command takes is not refused by the parent's look-up of foreign
    flags (tools/convert's import commands)."""
    from common.cli import known_flags
    from dataset_format.interop import _parser

    assert "--tokenizer-kind" in known_flags(_parser())
    line = _refusal(capsys, lambda a: _parser().parse_args(a),
                    ["import-nanogpt", "a.bin", "out", "--output-prefix", "x"])
    assert line.endswith("unrecognized arguments: --output-prefix")


def test_every_command_parser_is_ours_and_takes_no_abbreviation():
    """Each command's parser (those built by a function; the tools' are exercised above) is
    the project's class, so the table and the abbreviation rule reach it."""
    from common.cli import OneLineErrors
    from dataset_format.interop import _parser as convert_parser
    from pipelines.dedup.__main__ import build_parser as dedup_parser
    from pipelines.runner.runners import beam_parser
    from pipelines.tokenize.train_tokenizer import build_parser as tokenizer_parser
    from train.config import build_parser as train_parser
    from train.eval.run import build_parser as eval_parser
    from train.plan import build_parser as plan_parser

    for parser in (convert_parser(), dedup_parser(), beam_parser([]), tokenizer_parser(),
                   train_parser(), eval_parser(), plan_parser()):
        assert isinstance(parser, OneLineErrors) and parser.allow_abbrev is False, parser.prog
