"""The tests of tests/unit/test_docs.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex

import pytest

from tests.conftest import REPO
from tests.helpers.docs import load_docs_tool, pages, runnable_lines


@pytest.fixture(scope="module")
def docs_tool():
    return load_docs_tool()


def parser_and_args(docs_tool, parsers, words):
    """The command a line runs (by how the docs invoke it) and the arguments it gives."""
    if words[0] == "torchrun":
        script = next(i for i, w in enumerate(words) if w.endswith(".py"))
        words = ["python", *words[script:]]
    for command in docs_tool.COMMANDS:
        said = command.invocation.split()
        if words[: len(said)] == said:
            args = [w for w in words[len(said):] if w != "..."]
            if command.page == "convert" and args and args[0].startswith("checkpoint-to-"):
                (command,) = [c for c in docs_tool.COMMANDS if c.page == "export"]
                args = [args[0][len("checkpoint-to-"):], *args[1:]]
            if command.page not in parsers:
                parsers[command.page] = docs_tool.parser_of(command)
            return command, parsers[command.page], args, "..." in words
    raise AssertionError(f"a runnable block runs {shlex.join(words)!r}: no command of ours")


def beam_flags() -> set[str]:
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.runner.runners import beam_parser

    every = {str(c): c for c in PipelineOptions.__subclasses__()}.values()
    return set(beam_parser(every)._option_string_actions)


def refusals(docs_tool, parsers, words) -> list[str]:
    """What is wrong with one command line: a flag its command does not take, or (a line
    without '...') the parse error its parser gives."""
    command, parser, args, elided = parser_and_args(docs_tool, parsers, words)
    subs = docs_tool.subcommands(parser)
    known = dict(parser._option_string_actions)
    if subs and args and args[0] in subs:
        known.update(subs[args[0]]._option_string_actions)
    if command.beam_options:
        known.update(dict.fromkeys(beam_flags()))
    wrong = [f"{words[0]}: {flag}" for flag in (a.split("=", 1)[0] for a in args)
             if flag.startswith("--") and flag not in known]
    if wrong or elided:
        return wrong
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            _, unknown = parser.parse_known_args(args)
    except SystemExit:
        return [err.getvalue().splitlines()[0]]
    return [f"{words[0]}: {u}" for u in unknown if not command.beam_options]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_runnable_commands_parse(docs_tool, page):
    parsers: dict[str, argparse.ArgumentParser] = {}
    lines = runnable_lines(page.read_text(encoding="utf-8"))
    assert [r for words in lines for r in refusals(docs_tool, parsers, words)] == []


def test_a_wrong_command_line_is_refused(docs_tool):
    parsers: dict[str, argparse.ArgumentParser] = {}
    block = ("```bash runnable\n"
             "python train/pretrain.py --data s --no-such-flag 1\n"
             "torchrun --nproc_per_node 2 train/pretrain.py --data s --optimizer sgd\n"
             "python -m pipelines.preprocess --source jsonl --runner DirectRunner "
             "--shard_tokens 9\n"
             "tools/convert checkpoint-to-hf RUN DIR --no-tokenizer\n"
             "tools/dump SET --doc 0 ... --pages 3\n"
             "```\n")
    found = [refusals(docs_tool, parsers, words) for words in runnable_lines(block)]
    assert found[0] == ["python: --no-such-flag"]
    assert "invalid choice: 'sgd'" in found[1][0]
    assert found[2] == ["python: --shard_tokens"]  # a Beam flag passes, a typo of ours does not
    assert found[3] == []
    assert found[4] == ["tools/dump: --pages"]
    with pytest.raises(AssertionError, match="no command of ours"):
        refusals(docs_tool, parsers, ["rm", "-rf", "shards"])
