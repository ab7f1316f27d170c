"""The per-document shortcuts of the read and write stages (Document.with_meta,
Provenance.values) give exactly what dataclasses.replace and dataclasses.astuple give, for every
field, on a real document: a field added to either class and not carried fails here."""

from __future__ import annotations

import dataclasses

from pipelines.document import PROVENANCE_FIELDS, Document, Provenance
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"


def _every_field_set(cls, base: dict):
    """An instance of `cls` whose every field holds a value of its own (not its default)."""
    values = {field.name: f"{field.name}-value" for field in dataclasses.fields(cls)}
    values.update(base)
    return cls(**values)


def test_with_meta_keeps_every_other_field():
    text = (CORPORA / "web" / "text" / "webtext_train_10" / "2.txt").read_text("utf-8")
    doc = _every_field_set(Document, {"text": text, "meta": {"a": "1"}})
    meta = {"input": "webtext_train_10/2.txt"}
    changed = doc.with_meta(meta)
    assert changed == dataclasses.replace(doc, meta=meta)
    assert changed.meta is meta and doc.meta == {"a": "1"}


def test_provenance_values_are_its_fields_in_order():
    provenance = _every_field_set(Provenance, {"language_score": 0.97})
    assert provenance.values() == list(dataclasses.astuple(provenance))
    assert len(provenance.values()) == len(PROVENANCE_FIELDS)
    assert Provenance().values() == list(dataclasses.astuple(Provenance()))
