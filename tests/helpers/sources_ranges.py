"""What the unit and the integration tests of sources_ranges share."""

from __future__ import annotations

import bz2
import dataclasses
import json
from pathlib import Path

from pipelines.document import INPUT_META, Document
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
WEBTEXT = sorted((CORPORA / "web" / "text" / "webtext_train_10").glob("*.txt"))


def _greek() -> str:
    with bz2.open(CORPORA / "wikipedia" / "elwiki-pages-articles-head933.xml.bz2", "rt",
                  encoding="utf-8") as f:
        xml = f.read(200_000)
    return xml[xml.index("<text"):][:6000]


def _texts() -> list[str]:
    """Short and long texts with 1-, 2- and 3-byte characters; one of them longer than the
    ranges the tests cut."""
    french = (CORPORA / "books" / "Candide-fr.txt").read_text(encoding="utf-8")
    greek = _greek()
    texts = [path.read_text(encoding="utf-8")[:400] for path in WEBTEXT]
    texts += [french[i * 700:(i + 1) * 700] for i in range(4)]
    texts += [greek[i * 500:(i + 1) * 500] for i in range(4)]
    texts.insert(5, greek)  # ~10 KB of 2-byte characters on one line
    return texts


def write_jsonl(path: Path, texts: list[str], bad_line: int | None = None) -> Path:
    lines = [json.dumps({"text": t, "url": f"https://example.org/{i}"}, ensure_ascii=False)
             for i, t in enumerate(texts)]
    if bad_line is not None:
        lines.insert(bad_line, '{"text": "no closing brace"')
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    return path


def as_read_stage_yields(record, path: str):
    """A source's record as the read stage passes it on: a Document with its input file."""
    if not isinstance(record, Document):
        return record
    return dataclasses.replace(record, meta={**record.meta, INPUT_META: path})


def read_all(module, pattern: str, **options: str) -> tuple[list, int]:
    tasks = [split for task in module.plan(pattern, options) for split in module.split(task)]
    return [record for task in tasks for record in module.read(task)], len(tasks)
