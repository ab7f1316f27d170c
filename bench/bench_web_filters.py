"""Quality filters calibrated on real article pages: what each web filter drops, and the F1 of
what reaches the shards against trafilatura's own extraction.

    python bench/bench_web_filters.py [--peer-python PY] [--out bench/results/web_filters.md]

Pages: the 72 real article pages with human-checked text of the scrapinghub
article-extraction benchmark stored in ../shared/corpora/web (`html/`: 12, `aeb-dev/`: 60).
Every page is an article a WebText-like corpus wants, so a filter that drops one whose text is
a clean article is miscalibrated.

- Per filter: the share of pages each rule of the web preset drops on its own (with the length
  floor of the light preset only), first on the human-checked article text itself
  (`articleBody`: the clean text), then on our extraction of the page. The preset is
  webtext's `CleanConfig.for_source` with language="any", so language identification plays
  no part.
- End to end: bag-of-words F1 (bench_extract's measure) of trafilatura with its library
  defaults (the extractor a user would pick instead), of our extraction alone, of our
  extraction through the web preset's clean with `language="any"`, and of what reaches the
  shards through the real command line (`python -m pipelines.preprocess --source webtext
  --input '<set>/html/*.html.gz' --tokenizer ../shared/corpora/vocab/gpt2`, its defaults:
  language en, the source's 128-token floor, dedup on; and the same with `--language any`),
  decoded from the shard set; a dropped page scores 0. The last column takes the articles of
  100 words or more (about the 128-token floor).

The peer runs in a venv of its own (`python3 -m venv /work/benchenv-text &&
/work/benchenv-text/bin/pip install trafilatura lxml_html_clean`, then `--peer-python
/work/benchenv-text/bin/python`, the default when that file exists), so its version is the
one a user would install, not the project's pin; without one it runs in this interpreter.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import trafilatura  # noqa: E402

from bench.bench_extract import bag_of_words_scores  # noqa: E402
from pipelines.clean import CleanConfig, clean_document  # noqa: E402
from pipelines.document import Document, Reject  # noqa: E402
from pipelines.sources import source_traits
from pipelines.sources.web import htmltext  # noqa: E402

WEB = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "web"
SETS = ("html", "aeb-dev")
PRESET = CleanConfig.for_source(source_traits("webtext"), language="any")
LIGHT = CleanConfig(language="any")
# The preset's fields that are one rule each (the length floor is the light preset's).
PEER_PYTHON = "/work/benchenv-text/bin/python"
# Reads [html, ...] as JSON from the file argv[1], writes [[text, version], ...] to stdout.
PEER = """
import json, sys, trafilatura
pages = json.load(open(sys.argv[1], encoding="utf-8"))
print(json.dumps([[trafilatura.extract(html) or "", trafilatura.__version__] for html in pages]))
"""
RULES = tuple(
    field.name
    for field in dataclasses.fields(CleanConfig)
    if getattr(PRESET, field.name) != getattr(LIGHT, field.name) and field.name != "language"
)


def load_pages() -> list[tuple[str, str, bytes, str]]:
    """(set, page id, html bytes, human-checked text) of every stored page."""
    pages = []
    for name in SETS:
        folder = WEB / name
        truth = json.loads((folder / "ground-truth.subset.json").read_text(encoding="utf-8"))
        for page_id, entry in sorted(truth.items()):
            data = gzip.decompress((folder / "html" / f"{page_id}.html.gz").read_bytes())
            pages.append((name, page_id, data, entry["articleBody"]))
    return pages


def cleaned(text: str, config: CleanConfig, extractor: str) -> Document | Reject:
    meta = {"extractor": extractor} if extractor else {}
    return clean_document(Document("webtext:page", "webtext", text, meta=meta), config)


def peer_texts(htmls: list[str], python: str) -> tuple[list[str], str]:
    """trafilatura's texts (library defaults) for `htmls`, and its version, run by `python`."""
    if not python:
        return [trafilatura.extract(h) or "" for h in htmls], trafilatura.__version__
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as pages:
        json.dump(htmls, pages)
        pages.flush()
        done = subprocess.run(
            [python, "-c", PEER, pages.name], check=True, capture_output=True, text=True
        )
    results = json.loads(done.stdout)
    return [text for text, _ in results], results[0][1] if results else "?"


VOCAB = WEB.parent / "vocab" / "gpt2"
# The real command line, at its defaults but for the flags a row names.
CLI = [
    sys.executable,
    "-m",
    "pipelines.preprocess",
    "--source",
    "webtext",
    "--tokenizer",
    str(VOCAB),
]
CLI_RUNS = {
    "ours through the real command line, defaults (`--language` en, `--min-tokens` 128)": [],
    "ours through the real command line, `--language any`": ["--language", "any"],
}


def cli_texts(flags: list[str]) -> dict[str, str]:
    """Page id -> the text that reaches the shards when `python -m pipelines.preprocess` reads
    every stored page (`--input` each set's html/*.html.gz), decoded from the shard set."""
    from tokenizers import Tokenizer

    from dataset_format import ShardSet

    texts: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in SETS:
            out = os.path.join(scratch, name)
            pattern = str(WEB / name / "html" / "*.html.gz")
            subprocess.run(
                [*CLI, "--input", pattern, "--output", out, *flags],
                check=True, capture_output=True, cwd=str(Path(__file__).resolve().parents[1]),
            )  # fmt: skip
            shards = ShardSet(out)
            tokenizer = Tokenizer.from_file(shards.tokenizer_path)
            for n in range(shards.num_documents):
                page_id = Path(shards.document_metadata(n)["input"]).name.split(".")[0]
                text = tokenizer.decode(shards.document(n).tolist(), skip_special_tokens=True)
                texts[page_id] = text
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="")
    parser.add_argument("--peer-python", default=PEER_PYTHON if os.path.exists(PEER_PYTHON) else "")
    args = parser.parse_args()
    pages = load_pages()
    htmls = [htmltext.decode_html(data)[0] for _, _, data, _ in pages]
    peers, peer_version = peer_texts(htmls, args.peer_python)
    rows = []
    for (name, page_id, _, truth), html, peer in zip(pages, htmls, peers):
        ours = htmltext.main_text(html, "trafilatura")
        kept = cleaned(ours, PRESET, "trafilatura")
        shard = kept.text if isinstance(kept, Document) else ""
        rows.append({
            "set": name, "id": page_id,
            "f1_peer": bag_of_words_scores(peer, truth)[2],
            "f1_ours": bag_of_words_scores(ours, truth)[2],
            "f1_shard": bag_of_words_scores(shard, truth)[2],
            "dropped_by": "" if isinstance(kept, Document) else kept.reason,
            "detail": "" if isinstance(kept, Document) else kept.detail,
            "clean_drops": [
                rule for rule in RULES
                if isinstance(cleaned(truth, _only(rule), "trafilatura"), Reject)
            ],
            "ours_drops": [
                rule for rule in RULES
                if isinstance(cleaned(ours, _only(rule), "trafilatura"), Reject)
            ],
        })  # fmt: skip
    for label, flags in CLI_RUNS.items():
        texts = cli_texts(flags)
        for row, (_, page_id, _, truth) in zip(rows, pages):
            row[label] = bag_of_words_scores(texts.get(page_id, ""), truth)[2]
    for row, (_, _, _, truth) in zip(rows, pages):
        row["truth_words"] = len(truth.split())
    report = _report(rows, peer_version, args.peer_python)
    print(report)
    if args.out:
        Path(args.out).write_text(report, encoding="utf-8")


# The web source's documented floor is 128 tokens; an English article of 100 words is about
# 128 GPT-2 tokens.
LONG_WORDS = 100


def _only(rule: str) -> CleanConfig:
    return dataclasses.replace(LIGHT, **{rule: getattr(PRESET, rule)})


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _report(rows: list[dict], peer_version: str, peer_python: str) -> str:
    n = len(rows)
    where = f"its own venv, {peer_python}" if peer_python else "this interpreter"
    lines = [
        "# Web quality filters on real article pages",
        "",
        f"`python bench/bench_web_filters.py` on {platform.machine()}, Python "
        f"{platform.python_version()}, trafilatura {trafilatura.__version__} (ours); peer:"
        f" trafilatura {peer_version} in {where}; {n} pages "
        f"(../shared/corpora/web/html: {sum(r['set'] == 'html' for r in rows)}, "
        f"web/aeb-dev: {sum(r['set'] == 'aeb-dev' for r in rows)}), every one an article.",
        "",
        "### Each rule of the web preset on its own: share of the pages it drops",
        "",
        "| rule (CleanConfig field) | on the human-checked text | on our extraction |",
        "|---|---:|---:|",
    ]
    for rule in RULES:
        clean = sum(rule in r["clean_drops"] for r in rows)
        ours = sum(rule in r["ours_drops"] for r in rows)
        lines.append(f"| `{rule}` | {clean / n:.1%} ({clean}) | {ours / n:.1%} ({ours}) |")
    dropped = [r for r in rows if r["dropped_by"]]
    lines += [
        "",
        "### End to end (bag-of-words F1 against the human-checked text, mean over pages)",
        "",
        f"| | all pages | html (12) | aeb-dev (60) | articles of {LONG_WORDS}+ words "
        f"({sum(r['truth_words'] >= LONG_WORDS for r in rows)}) |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, key in (
        ("trafilatura, library defaults (the peer)", "f1_peer"),
        ("ours: extraction alone", "f1_ours"),
        (
            'ours: extraction + web preset with `language="any"` (a dropped page scores 0)',
            "f1_shard",
        ),
        *((label, label) for label in CLI_RUNS),
    ):
        cells = [_mean([r[key] for r in rows if s in (None, r["set"])]) for s in (None, *SETS)]
        long = _mean([r[key] for r in rows if r["truth_words"] >= LONG_WORDS])
        lines.append(f"| {label} | " + " | ".join(f"{c:.3f}" for c in (*cells, long)) + " |")
    lines += [
        "",
        f"Pages the preset drops: {len(dropped)} of {n} ({len(dropped) / n:.1%}).",
        "",
    ]
    for r in dropped:
        lines.append(
            f"- `{r['id'][:12]}` ({r['set']}): `{r['dropped_by']}` {r['detail']}, "
            f"extraction F1 {r['f1_ours']:.2f}"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
