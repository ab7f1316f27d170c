"""The docs say what the code does: the flag references are what `tools/docs` writes from the
commands' own parsers, every relative link and #anchor resolves, no page tells history, every
flag that `--help` prints for preprocess, pretrain and dedup is in docs/, the README stays a
front door, and every shell block marked ```bash runnable names only commands and flags that
exist (each line parsed by its own command's parser)."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers.docs import GUIDES, load_docs_tool, pages, runnable_lines

HISTORY = (
    r"\bissue \d+", r"\(was\b", r"\bwas \d", r"\bbefore (issue|the \w+ work|the fusion|the stash)",
    r"\bused to\b", r"\bno longer\b", r"\bpreviously\b", r"\bas before\b", r"\bround \d+",
)


@pytest.fixture(scope="module")
def docs_tool():
    return load_docs_tool()


def prose(text: str) -> str:
    """The text without fenced blocks (commands and outputs are not prose or links)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


# -- generated references -----------------------------------------------------------------


def test_the_flag_references_are_current(docs_tool):
    stale = docs_tool.stale()
    assert stale == [], f"{stale} not current: run tools/docs (it rewrites docs/reference/)"


def test_a_changed_reference_page_is_found_stale(docs_tool, tmp_path):
    for path, text in docs_tool.pages().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    assert docs_tool.stale(tmp_path) == []
    page = tmp_path / "docs" / "reference" / "pretrain.md"
    page.write_text(page.read_text().replace("`--max-steps`", "`--max-step`"))
    (tmp_path / "docs" / "reference" / "gone.md").write_text("# a command that is no more\n")
    assert docs_tool.stale(tmp_path) == ["docs/reference/gone.md", "docs/reference/pretrain.md"]


@pytest.mark.parametrize("page", ["preprocess", "pretrain", "dedup"])
def test_every_help_flag_is_in_the_docs(docs_tool, page):
    (command,) = [c for c in docs_tool.COMMANDS if c.page == page]
    parser = docs_tool.parser_of(command)
    help_text = io.StringIO()
    parser.print_help(help_text)
    printed = {flag for action in parser._actions for flag in action.option_strings
               if flag.startswith("--") and flag != "--help" and flag in help_text.getvalue()}
    assert len(printed) > 5
    written = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "docs").rglob("*.md"))
    assert sorted(f for f in printed if f"`{f}" not in written) == []


# -- links and words ---------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(path.read_text(encoding="utf-8")), re.M):
        base, n = slug(heading), 0
        while (base if n == 0 else f"{base}-{n}") in found:
            n += 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(path: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", prose(path.read_text(encoding="utf-8")))
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        file_part, _, anchor = target.partition("#")
        where = (path.parent / file_part).resolve() if file_part else path
        if not where.exists():
            broken.append(target)
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_found(tmp_path):
    (tmp_path / "there.md").write_text("# A heading (`with/code`)\n\n## stats.json\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md#a-heading-withcode) [ok](there.md#statsjson) [ok](#mine)\n"
                    "[no](missing.md) [no](there.md#nowhere) `[code](is-not-a-link.md)`\n\n"
                    "## Mine\n")
    assert broken_links(page) == ["missing.md", "there.md#nowhere"]


WRITTEN = [p for p in pages() if "reference" not in p.parts]  # the references are the help's words


@pytest.mark.parametrize("page", WRITTEN, ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_tells_history(page):
    text = page.read_text(encoding="utf-8")
    told = [m.group(0) for rule in HISTORY for m in re.finditer(rule, text, re.I)]
    assert told == []


def test_the_readme_is_a_front_door():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 250 and len(text.encode()) <= 20_000

    def first(needle: str) -> int:
        return next(i for i, line in enumerate(lines, 1) if needle in line)

    assert first("python -m pipelines.preprocess") <= 120
    assert first("train/pretrain.py") <= 150
    assert first("train/evaluate.py") <= 150 and first("--data-path") <= 150
    assert "./dev demo" in text and "./dev test" in text and "raw corpora ─►" in text
    # every headline figure row names the bench table it comes from
    figures = [line for line in lines if line.startswith("| ") and "bench/results/" in line]
    assert len(figures) >= 5
    assert all(re.search(r"\]\(bench/results/\w+\.md\)", line) for line in figures)
    topics = [p for p in (REPO / "docs").glob("*.md")]
    assert len(topics) >= 5 and all((REPO / g).is_file() for g in GUIDES)


def test_the_readme_and_the_main_pages_hold_runnable_commands():
    counted = {p: len(runnable_lines((REPO / p).read_text())) for p in
               ("README.md", "docs/preprocessing.md", "docs/training.md", "docs/evaluation.md",
                "docs/migrating.md", "docs/shard-format.md")}
    assert all(n > 0 for n in counted.values()), counted


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
