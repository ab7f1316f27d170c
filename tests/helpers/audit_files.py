"""What the unit and the integration tests of audit_files share."""

from __future__ import annotations

import json

from pipelines.clean import CleanConfig, clean_document
from pipelines.document import PARTS_REMOVED, Document, ReadTask, Reject
from pipelines.sources import get_source, source_traits
from tests.conftest import CORPORA

BOOKS = CORPORA / "books"
RUSSIAN_PAGE = "https://gto-normativy.ru/skajrim-skorost-bega-kak-uvelichit/"


def parts_removed_audit(book: str) -> Reject:
    """The read stage's parts-removed record of a shared book (its title page, contents...)."""
    from pipelines.sources.transforms import ReadDoFn

    read = ReadDoFn("books", keep_failures=True, progress_dir=None)
    read.setup()
    read.start_bundle()
    out = list(read.process(ReadTask(source="books", path=str(BOOKS / book))))
    (audit,) = [o.value for o in out if getattr(o, "tag", None) == "failures"]
    assert audit.reason == PARTS_REMOVED
    return audit


def dropped_records() -> list[Reject]:
    """Real drops: Candide (French, in a books run) and a Russian web page (its URL kept)."""
    task = ReadTask(source="books", path=str(BOOKS / "Candide-fr.txt"))
    candide = next(get_source("books").read(task))
    truth = json.loads((CORPORA / "web" / "html" / "ground-truth.subset.json").read_text("utf-8"))
    (page,) = [p for p in truth.values() if p["url"] == RUSSIAN_PAGE]
    web = Document(id="webtext:ru", source="webtext", text=page["articleBody"], url=page["url"])
    drops = [
        clean_document(candide, CleanConfig.for_source(source_traits("books"))),
        clean_document(web, CleanConfig.for_source(source_traits("webtext"))),
    ]
    assert all(isinstance(d, Reject) and d.reason == "language" for d in drops), drops
    return drops
