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
- End to end: bag-of-words F1 (bench_extract's measure) of trafilatura alone (the extractor
  a user would pick instead) at the project's extractor setting (`htmltext.TRAFILATURA_OPTIONS`
  with favor_precision, the peer the targets name) and at its library defaults, of our
  extraction alone, of our extraction through the web preset's clean with `language="any"`,
  and of what reaches the shards through the real command line (`python -m
  pipelines.preprocess --source webtext --input '<set>/html/*.html.gz' --tokenizer
  ../shared/corpora/vocab/gpt2`, its defaults: language en, the source's 128-token floor,
  dedup on; and the same with `--language any`), decoded from the shard set; a dropped page
  scores 0. The last columns take the articles whose human-checked text is 128 GPT-2 tokens
  or more (the web source's floor), all of them and the English ones (the pages the default
  `--language en` asks for: their text identified as English by the clean stage's
  identifier). Every such article where what reaches the shards scores below the peer is
  listed with its cause.

The peer runs in a venv of its own (`python3 -m venv /work/benchenv-text &&
/work/benchenv-text/bin/pip install trafilatura lxml_html_clean`, then `--peer-python
/work/benchenv-text/bin/python`, the default when that file exists), so its version is the
one a user would install, not the project's pin; without one it runs in this interpreter.
"""

from __future__ import annotations

import argparse
import collections
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
from dataset_format.tokenizer import load_tokenizer  # noqa: E402
from pipelines.clean import CleanConfig, clean_document, filters  # noqa: E402
from pipelines.clean.language import identify_language  # noqa: E402
from pipelines.document import Document, Reject  # noqa: E402
from pipelines.sources import source_traits  # noqa: E402
from pipelines.sources.web import htmltext, webtext  # noqa: E402

WEB = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "web"
SETS = ("html", "aeb-dev")
PRESET = CleanConfig.for_source(source_traits("webtext"), language="any")
LIGHT = CleanConfig(language="any")
# The preset's fields that are one rule each (the length floor is the light preset's).
PEER_PYTHON = "/work/benchenv-text/bin/python"
# Reads {"pages": [html, ...], "settings": {name: extract keywords}} as JSON from the file
# argv[1], writes {"version": ..., "texts": {name: [text, ...]}} to stdout.
PEER = """
import json, sys, trafilatura
job = json.load(open(sys.argv[1], encoding="utf-8"))
texts = {
    name: [trafilatura.extract(html, **keywords) or "" for html in job["pages"]]
    for name, keywords in job["settings"].items()
}
print(json.dumps({"version": trafilatura.__version__, "texts": texts}))
"""
# trafilatura alone: at the project's extractor setting (the first page reading of
# htmltext.main_text, without its recall fallback) and at its library defaults.
PEER_SETTINGS = {
    "project": {**htmltext.TRAFILATURA_OPTIONS, "favor_precision": True},
    "defaults": {},
}
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


def peer_texts(htmls: list[str], python: str) -> tuple[dict[str, list[str]], str]:
    """trafilatura's texts for `htmls` at each of PEER_SETTINGS, and its version, run by
    `python` (this interpreter where it is "")."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as job:
        json.dump({"pages": htmls, "settings": PEER_SETTINGS}, job)
        job.flush()
        done = subprocess.run(
            [python or sys.executable, "-c", PEER, job.name],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    result = json.loads(done.stdout)
    return result["texts"], result["version"]


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


def _source_documents(pattern: str, extractor: str) -> list[Document]:
    """The documents the webtext source reads from the files `pattern` names."""
    docs: list[Document] = []
    for task in webtext.plan(pattern, {htmltext.EXTRACTOR_OPTION: extractor}):
        docs += [doc for doc in webtext.read(task) if isinstance(doc, Document)]
    return docs


def _junk_pages(extractions: list[str]) -> list[str]:
    """Pages the filters are for, built from shared text: each article page's tables (4 rows
    or more) under its first line, and under as much of its prose as stays below 50 words (a
    table with a caption); lists of 100 of web/urls' Reddit links, bare and as table rows."""
    pages = []
    for text in extractions:
        lines = text.split("\n")
        rows = [line for line in lines if filters.is_table_row(line)]
        if len(rows) < 4:
            continue
        caption: list[str] = []
        for line in (line for line in lines if not filters.is_table_row(line)):
            if len(" ".join([*caption, line]).split()) >= filters.TABLE_PROSE_MIN_WORDS:
                break
            caption.append(line)
        pages += [lines[0] + "\n" + "\n".join(rows), "\n".join(caption + rows)]
    urls = (WEB / "urls" / "RS_v2_2005-12.urls.txt").read_text(encoding="utf-8").split()
    for start in range(0, 500, 100):
        links = urls[start : start + 100]
        pages += ["\n".join(links), "\n".join(f"| {n} | {url} |" for n, url in enumerate(links))]
    return pages


def other_web_text(extractions: list[str]) -> dict[str, collections.Counter]:
    """What the web preset (language "any") does with the other shared web text: kept, or the
    rule that drops it, counted per set."""
    sets = {
        "web/text/webtext_train_10 (OpenAI WebText sample)": _source_documents(
            str(WEB / "text" / "webtext_train_10" / "*.txt"), "trafilatura"
        ),
        "web/warc (Common Crawl, warcio captures)": _source_documents(
            str(WEB / "warc" / "*.warc*"), "trafilatura"
        ),
        "the 72 article pages, `extractor=resiliparse`": [
            doc
            for name in SETS
            for doc in _source_documents(str(WEB / name / "html" / "*.html.gz"), "resiliparse")
        ],
        "junk built from shared text (tables under a caption, link lists)": [
            Document("webtext:junk", "webtext", page, meta={"extractor": "trafilatura"})
            for page in _junk_pages(extractions)
        ],
    }
    return {
        name: collections.Counter(
            r.reason if isinstance(r, Reject) else "kept"
            for r in (clean_document(doc, PRESET) for doc in docs)
        )
        for name, docs in sets.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="")
    parser.add_argument("--peer-python", default=PEER_PYTHON if os.path.exists(PEER_PYTHON) else "")
    args = parser.parse_args()
    pages = load_pages()
    htmls = [htmltext.decode_html(data)[0] for _, _, data, _ in pages]
    peers, peer_version = peer_texts(htmls, args.peer_python)
    rows = []
    extractions = [htmltext.main_text(html, "trafilatura") for html in htmls]
    for n, ((name, page_id, _, truth), ours) in enumerate(zip(pages, extractions)):
        kept = cleaned(ours, PRESET, "trafilatura")
        shard = kept.text if isinstance(kept, Document) else ""
        rows.append({
            "set": name, "id": page_id,
            "f1_peer": bag_of_words_scores(peers["project"][n], truth)[2],
            "f1_peer_defaults": bag_of_words_scores(peers["defaults"][n], truth)[2],
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
    tokens = load_tokenizer(str(VOCAB)).encode_batch([truth for *_, truth in pages])
    for row, (*_, truth), ids in zip(rows, pages, tokens):
        row["truth_tokens"] = len(ids)
        row["english"] = identify_language(truth)[0] == "en"
    report = _report(rows, peer_version, args.peer_python, other_web_text(extractions))
    print(report)
    if args.out:
        Path(args.out).write_text(report, encoding="utf-8")


# The web source's documented floor (webtext.TRAITS.min_tokens), in GPT-2 tokens.
FLOOR_TOKENS = webtext.TRAITS.min_tokens
DEFAULTS_ROW = next(iter(CLI_RUNS))


def _only(rule: str) -> CleanConfig:
    return dataclasses.replace(LIGHT, **{rule: getattr(PRESET, rule)})


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _report(
    rows: list[dict], peer_version: str, peer_python: str, others: dict[str, collections.Counter]
) -> str:
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
        *_rule_table(rows),
        *_f1_table(rows),
        *_losses(rows),
        "",
        '### The other shared web text through the web preset (`language="any"`)',
        "",
        "| set | documents | kept | dropped, by rule |",
        "|---|---:|---:|---|",
        *(
            f"| {name} | {sum(c.values())} | {c['kept']} | "
            + (", ".join(f"`{r}` {k}" for r, k in sorted(c.items()) if r != "kept") or "none")
            + " |"
            for name, c in others.items()
        ),
    ]
    return "\n".join(lines) + "\n"


def _rule_table(rows: list[dict]) -> list[str]:
    n = len(rows)
    lines = [
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
    lines += ["", f"Pages the preset drops: {len(dropped)} of {n} ({len(dropped) / n:.1%}).", ""]
    for r in dropped:
        lines.append(
            f"- `{r['id'][:12]}` ({r['set']}): `{r['dropped_by']}` {r['detail']}, "
            f"extraction F1 {r['f1_ours']:.2f}"
        )
    return lines + [""] if dropped else lines


def _f1_table(rows: list[dict]) -> list[str]:
    groups = {
        f"all pages ({len(rows)})": lambda r: True,
        **{
            f"{s} ({sum(r['set'] == s for r in rows)})": (lambda r, s=s: r["set"] == s)
            for s in SETS
        },
        f"articles of {FLOOR_TOKENS}+ tokens ({sum(_long(r) for r in rows)})": _long,
        f"English ones ({sum(_long(r) and r['english'] for r in rows)})": (
            lambda r: _long(r) and r["english"]
        ),
    }
    lines = [
        "### End to end (bag-of-words F1 against the human-checked text, mean over pages)",
        "",
        "| | " + " | ".join(groups) + " |",
        "|---|" + "---:|" * len(groups),
    ]
    for label, key in (
        ("trafilatura alone, the project's extractor setting (the peer)", "f1_peer"),
        ("trafilatura alone, library defaults", "f1_peer_defaults"),
        ("ours: extraction alone", "f1_ours"),
        (
            'ours: extraction + web preset with `language="any"` (a dropped page scores 0)',
            "f1_shard",
        ),
        *((label, label) for label in CLI_RUNS),
    ):
        cells = [_mean([r[key] for r in rows if keep(r)]) for keep in groups.values()]
        lines.append(f"| {label} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    return lines + [""]


def _long(row: dict) -> bool:
    return row["truth_tokens"] >= FLOOR_TOKENS


def _losses(rows: list[dict]) -> list[str]:
    """Each article past the floor where what reaches the shards scores below the peer."""
    lines = [
        f"Articles of {FLOOR_TOKENS}+ tokens where what reaches the shards scores below the peer:",
        "",
    ]
    for r in rows:
        for label in CLI_RUNS:
            if not _long(r) or r[label] >= r["f1_peer"] - 0.0005:
                continue
            if label == DEFAULTS_ROW and not r["english"] and r[label] == 0.0:
                continue  # not English: dropped as the default --language en asks
            cause = f"`{r['dropped_by']}` {r['detail']}" if r["dropped_by"] else "text differs"
            lines.append(
                f"- `{r['id'][:12]}` ({r['set']}), {label}: {r[label]:.3f} vs {r['f1_peer']:.3f};"
                f" extraction alone {r['f1_ours']:.3f}, in-process preset {r['f1_shard']:.3f} ({cause})"
            )
    return lines if len(lines) > 2 else lines[:1] + ["", "- none"]


if __name__ == "__main__":
    main()
