"""Leftover wiki markup in the text the Wikipedia source writes: ours against WikiExtractor.

    python bench/bench_wiki_markup.py [--baseline-root DIR] [--peer-python PY] \
        [--out bench/results/wiki_markup.md]

Runs the extraction on every dump sample in ../shared/corpora/wikipedia (English, Simple
English, Greek) and counts, per MB of output text, the strings that are markup rather than
prose: link and template brackets, the dump's own Category/File/Media namespace prefixes (from
its <siteinfo>, plus the English names), image options, references, HTML entities that were
not decoded, table cell attributes (`style=`, `colspan=`, `data-sort-value=`, ...), and
headings of closing sections (a line that is only "References", "Παραπομπές", ...). Below
the leftovers, per dump: the share of articles whose text still holds a closing-section heading
line, and the share of list items (`*`, `#`) outside the closing sections (those the title
table names, at the article's top level) whose text, as this checkout renders the item alone,
stands as a line of the output: lists are text. The columns:

- ours: what reaches the shards through the real command line of this checkout, `python -m
  pipelines.preprocess --source wikipedia --input DUMP --tokenizer ../shared/corpora/vocab/gpt2`
  at its defaults (the dump's own language), decoded from the shard set; and the same with
  `--language any`;
- before (with --baseline-root): the same command line from another checkout's folder, e.g.
  a `git archive` of an older commit unpacked into a folder, at its defaults;
- WikiExtractor 3.1.0 (what Megatron-LM's and NVIDIA's BERT data preparation run), with
  `--no-templates` as most pretraining corpora ran it, in a venv of its own, never a project
  dependency: `python3 -m venv /work/benchenv-text && /work/benchenv-text/bin/pip install
  wikiextractor==3.1.0`, then `--peer-python /work/benchenv-text/bin/python` (the default
  when that file exists); the column is left out when no such interpreter is given.

Counts are exact string counts over the output, so the numbers are reproducible run to run.
"""

from __future__ import annotations

import argparse
import bz2
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.sources.wikipedia import wiki_sections  # noqa: E402

CORPORA = ROOT.parent / "shared" / "corpora" / "wikipedia"
DUMPS = {
    "English": CORPORA / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
    "English (excerpt)": CORPORA / "enwiki-articles-partial.xml",
    "Simple English": CORPORA / "simplewiki-sample.xml.bz2",
    "Greek": CORPORA / "elwiki-pages-articles-head933.xml.bz2",
}
PEER_PYTHON = "/work/benchenv-text/bin/python"
TABLE_ATTRIBUTE = re.compile(
    r"\b(?:style|colspan|rowspan|data-[\w-]+|align|valign|class|width|height|bgcolor|scope)"
    r"\s*="
)
CLOSING = wiki_sections.closing_section_names()

ANY = ("--language", "any")
VOCAB = ROOT.parent / "shared" / "corpora" / "vocab" / "gpt2"


def our_texts(root: str, dump: Path, scratch: str, flags: tuple[str, ...] = ()) -> list[str]:
    """The texts that reach the shards when the checkout at `root` runs the real command line
    on `dump` (`python -m pipelines.preprocess --source wikipedia --input DUMP --tokenizer
    gpt2`, its defaults and `flags`), decoded from the shard set in document order."""
    from tokenizers import Tokenizer

    from dataset_format import ShardSet

    out = tempfile.mkdtemp(dir=scratch)
    command = [sys.executable, "-m", "pipelines.preprocess", "--source", "wikipedia",
               "--input", str(dump), "--output", out, "--tokenizer", str(VOCAB), *flags]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, cwd=root)
    shards = ShardSet(out)
    tokenizer = Tokenizer.from_file(shards.tokenizer_path)
    return [
        tokenizer.decode(shards.document(n).tolist(), skip_special_tokens=True)
        for n in range(shards.num_documents)
    ]


def wikiextractor_texts(dump: Path, scratch: str, python: str) -> list[str]:
    """WikiExtractor's article texts, run by the interpreter `python` of its own venv."""
    out = os.path.join(scratch, "wikiextractor", dump.name)
    command = [python, "-m", "wikiextractor.WikiExtractor", "--json", "--no-templates",
               "--processes", "1", "-q", "-o", out, str(dump)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True)
    texts = []
    for path in sorted(Path(out).rglob("wiki_*")):
        with open(path, encoding="utf-8") as lines:
            texts += [json.loads(line)["text"] for line in lines if line.strip()]
    return texts


def namespace_names(dump: Path) -> dict[int, str]:
    """The dump's own namespace names (key -> name) from its <siteinfo>."""
    opener = bz2.open if dump.suffix == ".bz2" else open
    with opener(dump, "rt", encoding="utf-8") as xml:
        head = xml.read(200_000)
    found = re.findall(r'<namespace key="(-?\d+)"[^>]*>([^<]*)</namespace>', head)
    return {int(key): name for key, name in found}


def markers(dump: Path) -> dict[str, Callable[[str], int]]:
    """Label -> a counter of that kind of leftover markup in a text."""
    names = namespace_names(dump)
    category = sorted({"Category", names.get(14, "Category")})
    media = sorted({"File", "Image", "Media", names.get(6, "File"), names.get(-2, "Media")})

    def substring(*needles: str) -> Callable[[str], int]:
        return lambda text: sum(text.count(needle) for needle in needles)

    def closing_headings(text: str) -> int:
        return sum(
            line.strip().rstrip(".:").strip().casefold() in CLOSING for line in text.split("\n")
        )

    return {
        "`[[` `]]`": substring("[[", "]]"),
        "`{{` `}}`": substring("{{", "}}"),
        "`{\\|` `\\|}` (tables)": substring("{|", "|}"),
        " ".join(f"`{n}:`" for n in category): substring(*(f"{n}:" for n in category)),
        " ".join(f"`{n}:`" for n in media): substring(*(f"{n}:" for n in media)),
        "`thumb\\|` `px\\|` (image options)": substring("thumb|", "px|", "thumbnail|"),
        "`<ref` `</ref`": substring("<ref", "</ref"),
        "`&lt;` `&gt;` `&amp;` `&quot;` `&nbsp;`": substring(
            "&lt;", "&gt;", "&amp;", "&quot;", "&nbsp;"
        ),
        "`''` (bold/italic quotes)": substring("''"),
        "table attributes (`style=` `colspan=` ...)": lambda text: len(
            TABLE_ATTRIBUTE.findall(text)
        ),
        "closing-section heading lines": closing_headings,
    }


def content_list_items(dump: Path) -> list[str]:
    """The rendered text of each list item outside the closing sections (by title, at each
    article's top heading level) of the articles the source keeps (no redirects or
    disambiguation pages), as this checkout renders the item alone; items inside templates,
    tables or references (an infobox's, a navbox's) are not the article's lists."""
    from pipelines.sources.wikipedia import wikimarkup, wikipedia
    from pipelines.sources.wikipedia.wiki_dump import WikiPage, parse_pages

    items = []
    for task in wikipedia.plan(str(dump), {}):
        for page in parse_pages(task):
            if not isinstance(page, WikiPage):
                continue
            if wikipedia.classify_page(page.ns, page.title, page.text, page.is_redirect):
                continue
            text = wikimarkup.strip_comments(page.text.replace("\r\n", "\n"))
            text = wikimarkup.strip_templates_and_tables(wikimarkup.strip_elements(text))
            items += _list_items(text)
    return items


def _list_items(text: str) -> list[str]:
    from pipelines.sources.wikipedia import wikimarkup

    levels = [len(m.group(1)) for m in re.finditer(r"^(=+)[^=\n].*?=+\s*$", text, re.M)]
    top, closing, items = min(levels, default=2), False, []
    for line in text.split("\n"):
        heading = re.match(r"^(=+)\s*(.*?)\s*=+\s*$", line)
        if heading and len(heading.group(1)) == top:
            closing = heading.group(2).rstrip(":").strip().casefold() in CLOSING
        elif line.startswith(("*", "#")) and not closing:
            item = wikimarkup.wikitext_to_text(line)
            if item and "\n" not in item:
                items.append(item)
    return items


def list_items_kept(items: list[str], texts: list[str]) -> float:
    lines = {line for text in texts for line in text.split("\n")}
    return 100 * sum(item in lines for item in items) / len(items) if items else 100.0


def closing_left(texts: list[str]) -> float:
    """Percent of texts with a line that is a closing-section heading."""
    left = sum(
        any(line.strip().rstrip(".:").strip().casefold() in CLOSING for line in t.split("\n"))
        for t in texts
    )
    return 100 * left / len(texts) if texts else 0.0


def per_mb(texts: list[str], count: Callable[[str], int]) -> float:
    size = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    return sum(count(t) for t in texts) / size if size else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-root", default="")
    parser.add_argument("--out", default="")
    parser.add_argument(
        "--peer-python", default=PEER_PYTHON if os.path.exists(PEER_PYTHON) else ""
    )
    args = parser.parse_args()
    sections = []
    with tempfile.TemporaryDirectory() as scratch:
        for language, dump in DUMPS.items():
            columns = {
                "ours": our_texts(str(ROOT), dump, scratch),
                "ours, `--language any`": our_texts(str(ROOT), dump, scratch, ANY),
            }
            if args.baseline_root:
                columns["before"] = our_texts(args.baseline_root, dump, scratch)
            if args.peer_python:
                columns["WikiExtractor"] = wikiextractor_texts(dump, scratch, args.peer_python)
            header = "| leftover markup, per MB of output | " + " | ".join(columns) + " |"
            rows = [header, "|---|" + "---:|" * len(columns)]
            for label, count in markers(dump).items():
                cells = " | ".join(f"{per_mb(texts, count):.1f}" for texts in columns.values())
                rows.append(f"| {label} | {cells} |")
            rows.append(
                "| articles with a closing-section heading left (%) | "
                + " | ".join(f"{closing_left(t):.1f}" for t in columns.values())
                + " |"
            )
            items = content_list_items(dump)
            rows.append(
                f"| list items outside closing sections kept (% of {len(items):,}) | "
                + " | ".join(f"{list_items_kept(items, t):.1f}" for t in columns.values())
                + " |"
            )
            sizes = " | ".join(
                f"{len(t):,} docs, {sum(len(x.encode()) for x in t) / 1e6:.2f} MB"
                for t in columns.values()
            )
            rows.append(f"| (output) | {sizes} |")
            sections.append(f"### {language}: `{dump.name}`\n\n" + "\n".join(rows) + "\n")
    wikiextractor_version = "no WikiExtractor"
    if args.peer_python:
        wikiextractor_version = "wikiextractor " + subprocess.run(
            [args.peer_python, "-c", "from importlib.metadata import version as v; "
             "print(v('wikiextractor'))"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
    report = "\n".join(
        [
            "# Leftover markup in Wikipedia text",
            "",
            f"`python bench/bench_wiki_markup.py` on {platform.machine()}, Python "
            f"{platform.python_version()}, {wikiextractor_version}"
            + (f"; before = {args.baseline_root}" if args.baseline_root else "")
            + ".",
            "",
            *sections,
        ]
    )
    print(report)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(report)


if __name__ == "__main__":
    main()
