"""What the books source keeps of each shared book, and what apparatus it leaves: ours against
another checkout.

    python bench/bench_books.py [--baseline-root DIR] [--out bench/results/books.md]

For each book in ../shared/corpora/books and books-apparatus, the kept text is what reaches the
shards through the real command line (`python -m pipelines.preprocess --source books --input
'<folder>/*.txt' --tokenizer ../shared/corpora/vocab/gpt2 --language any`, decoded from the
shard set; which books the defaults write is reported beside), and the table counts:

- prose paragraphs lost: paragraphs of the Gutenberg text that `is_prose` calls running text
  and a line of which the kept text does not hold (lines compared stripped, without the
  reference marks "[1]" that go with a cut note and without a passage's brackets; chars: of
  those lines), and how many of them have all those lines in the source's audit (cut as
  apparatus: Candide's editor's preface, captions, advertisements' blurbs count here too, so
  they show); each is listed, first words, under the table, to be read;
- apparatus left in the kept text: `[Illustration` blocks, `{15}` page markers, lines of a
  table of contents (lines of the first 300 that also stand later as a line of their own,
  such as "CHAPTER 1. Loomings." before chapter 1), transcriber's note headings, page-numbered
  entry lines ("Frontispiece      iv"), advertisement lines (prices, "HODDER AND STOUGHTON",
  "By the same author"), layout marks ("/* NIND") and colophons ("Printed in Great Britain");
- the cut, by kind, as the source's `meta["parts_removed"]` reports it (the source run in
  process: the shard set keeps no such field).

The `before` column (with --baseline-root) runs the same with another checkout (its command
line run from its folder),
e.g. a `git archive` of an older commit unpacked into a folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ROOT.parent / "shared" / "corpora"
BOOKS = [CORPORA / "books", CORPORA / "books-apparatus"]

# Writes {book: {"kept": text, "removed": summary, "audit": the cut text, "body": Gutenberg
# text}} for the checkout.
RUN = """
import json, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from pipelines.sources.books.books import book_document, strip_gutenberg
out = {{}}
for path in sorted(p for folder in {books!r} for p in Path(folder).glob("*.txt")):
    data = path.read_bytes()
    (doc,) = book_document(data, path.name, str(path))
    body = strip_gutenberg(data.decode("utf-8-sig"))
    out[path.name] = {{"kept": doc.text, "removed": doc.meta.get("parts_removed", ""),
                       "audit": doc.meta.get("parts_removed_text", ""), "body": body}}
print(json.dumps(out))
"""
_PAGE_MARKER = re.compile(r"(?<![\w^_{{}}\\$])\{(?:\d{1,4}|[ivxlcdm]{1,8})\}")
_TRANSCRIBER = re.compile(r"^\W*transcriber", re.IGNORECASE | re.MULTILINE)
# Lines of apparatus of the kinds book_apparatus names, in the kept text: page-numbered entry
# lines ("Frontispiece      iv"), prices and publishers' addresses of advertisements, layout
# marks, colophons.
_ENTRY_LEFT = re.compile(
    r"^\s*\S.*?\w.*?(?:\s*\.{3,}\s*|\s{3,})(?:\d{1,4}|[ivxlc]{1,7})\s*$", re.MULTILINE
)
_ADVERT_LEFT = re.compile(
    r"\b\d+\s*s\.\s*(?:\d+\s*d\.\s*)?net\b|\b\d+/-\s*net\b|^\s*HODDER AND"
    r"|^\s*by the same author",
    re.IGNORECASE | re.MULTILINE,
)
# Editors' notes: a footnote whose last line ends in an initial set apart ("...  B."), or a
# "(Note de ...)"; a bracket opened on a line about other editions.
_EDITOR_NOTES_LEFT = re.compile(
    r"^[ \t]*\[\w{1,3}\][ \t]+\S(?:[^\n]*\n[ \t]+\S)*[^\n]*(?:[.!?_)][ \t]{2,}|\n[ \t]*)[A-Z][.,]$"
    r"|\((?:note|n\.)\s+(?:de|of|by)\s+(?!l'auteur|the author)[^()\n]{1,60}\)\.?$"
    r"|^\[[^\]\n]*\beditions?\b[^\]\n]*$",
    re.IGNORECASE | re.MULTILINE,
)
_MARKS_LEFT = re.compile(r"/\*|\*/|(?<=\n\n)[\W_]*printed\s+(?:in|by)\b", re.IGNORECASE)


def run(root: str) -> dict[str, dict[str, str]]:
    code = RUN.format(root=root, books=[str(folder) for folder in BOOKS])
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return json.loads(done.stdout)


def cli_texts(root: str, flags: list[str]) -> dict[str, str]:
    """Book file name -> the text that reaches the shards when the checkout at `root` runs
    `python -m pipelines.preprocess --source books` on every shared book (`flags` added to
    its defaults), decoded from the shard set; a dropped book is absent."""
    from tokenizers import Tokenizer

    from dataset_format import ShardSet

    texts: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for k, folder in enumerate(BOOKS):
            out = os.path.join(scratch, str(k))
            command = [sys.executable, "-m", "pipelines.preprocess", "--source", "books",
                       "--input", str(folder / "*.txt"), "--output", out, "--tokenizer",
                       str(CORPORA / "vocab" / "gpt2"), *flags]  # fmt: skip
            subprocess.run(command, check=True, capture_output=True, cwd=root)
            shards = ShardSet(out)
            tokenizer = Tokenizer.from_file(shards.tokenizer_path)
            for n in range(shards.num_documents):
                name = Path(shards.document_metadata(n)["input"]).name
                texts[name] = tokenizer.decode(
                    shards.document(n).tolist(), skip_special_tokens=True
                )
    return texts


# A note's reference mark set against a word ("Pangloss[1]"): the source cuts it with its note.
_REFERENCE_MARK = re.compile(r"(?<=\S)\[\w{1,3}\]")


def _normalised(text: str) -> str:
    """`text` as compared: without reference marks, each line without its end spaces."""
    return "\n".join(line.rstrip() for line in _REFERENCE_MARK.sub("", text).split("\n"))


def _line_keys(paragraph: str) -> list[str]:
    """A paragraph's lines as looked for in the kept text: stripped, without reference marks
    and the brackets that open or close a passage."""
    lines = (line.strip().strip("[]").strip() for line in _normalised(paragraph).split("\n"))
    return [line for line in lines if line]


def measures(book: dict[str, str]) -> dict[str, object]:
    sys.path.insert(0, str(ROOT))
    from pipelines.sources.books.book_front_matter import is_prose
    from pipelines.sources.books.book_text import paragraphs

    body, kept = book["body"], book["kept"]
    found, audit = _normalised(kept), _normalised(book["audit"])
    lost = []
    for a, b in paragraphs(body):
        missing = [line for line in _line_keys(body[a:b]) if line not in found]
        if missing and is_prose(body[a:b]):
            lost.append((body[a:b], all(line in audit for line in missing), missing))
    lines = [line.strip() for line in kept.split("\n")]
    standalone = [line for i, line in enumerate(lines) if line and i > 0 and not lines[i - 1]]
    later = set(standalone[1:])
    head = [line for line in lines[:300] if line]
    contents = sum(
        1 for i, line in enumerate(head)
        if line in later and head.count(line) == 1 and lines.count(line) > 1
    )  # fmt: skip
    return {
        "lost": f"{len(lost)} ({sum(len(x) for p in lost for x in p[2]):,} chars)" if lost else "0",
        "in the audit": sum(audited for _, audited, _ in lost),
        "illustrations": kept.count("[Illustration"),
        "page markers": len(_PAGE_MARKER.findall(kept)),
        "contents lines": contents,
        "transcriber notes": len(_TRANSCRIBER.findall(kept)),
        "entry lines": len(_ENTRY_LEFT.findall(kept)),
        "advert lines": len(_ADVERT_LEFT.findall(kept)),
        "layout marks, colophons": len(_MARKS_LEFT.findall(kept)),
        "editors' notes": len(_EDITOR_NOTES_LEFT.findall(kept)),
        "cut": book["removed"] or "-",
        "lost paragraphs": [(paragraph, audited) for paragraph, audited, _ in lost],
    }


def _lost_list(name: str, lost: list[tuple[str, bool]]) -> list[str]:
    """One line for a book's lost paragraphs: their first words, "*" before one that the
    source's audit does not hold."""
    if not lost:
        return []
    words = [("" if audited else "*") + " ".join(p.split()[:7]) + " ..." for p, audited in lost]
    return [f"- `{name}`: " + "; ".join(f"“{w}”" for w in words)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-root", default="")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    roots = {"ours": str(ROOT)}
    if args.baseline_root:
        roots["before"] = args.baseline_root
    columns, at_defaults = {}, {}
    for label, root in roots.items():
        columns[label] = run(root)
        for name, text in cli_texts(root, ["--language", "any"]).items():
            columns[label][name]["kept"] = text
        at_defaults[label] = sorted(cli_texts(root, []))
    labels = list(columns)
    keys = (
        "lost", "in the audit", "illustrations", "page markers", "contents lines",
        "transcriber notes", "entry lines", "advert lines", "layout marks, colophons",
        "editors' notes", "cut",
    )  # fmt: skip
    rows = [
        "| book | " + " | ".join(keys) + " |",
        "|---|" + "---:|" * (len(keys) - 1) + "---|",
    ]
    lost_lists = []
    for name in sorted(columns["ours"]):
        results = {label: measures(columns[label][name]) for label in labels}
        cells = [" / ".join(str(results[label][key]) for label in labels) for key in keys]
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
        lost_lists += _lost_list(name, results["ours"]["lost paragraphs"])
    report = "\n".join(
        [
            "# Books: the work kept, the apparatus cut",
            "",
            "`python bench/bench_books.py"
            + (f" --baseline-root {args.baseline_root}" if args.baseline_root else "")
            + "` on the books of ../shared/corpora/books and books-apparatus; each cell is "
            + " / ".join(columns)
            + ". The kept text is what reaches the shards through the real command line,"
            " `python -m pipelines.preprocess --source books --input '<folder>/*.txt'"
            " --tokenizer ../shared/corpora/vocab/gpt2 --language any` (its defaults but the"
            " language), read back from the shard set. lost: prose paragraphs of the book a"
            " line of which the kept text does not hold (chars: of those lines); in the audit:"
            " how many of those the source's audit of cut apparatus holds; illustrations, page"
            " markers, contents lines, transcriber notes, entry lines, advert lines, layout"
            " marks and colophons, editors' notes: apparatus left in it; cut: what the"
            " source's `meta.parts_removed` reports.",
            "",
            *rows,
            "",
            "Prose paragraphs lost (ours), each by its first words; * = not in the audit:",
            "",
            *lost_lists,
            "",
            *(
                f"At the defaults (`--language` en), {label} writes {len(names)} of "
                f"{len(columns[label])} books: {', '.join(names)}."
                for label, names in at_defaults.items()
            ),
            "",
        ]
    )
    print(report)
    if args.out:
        Path(args.out).write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
