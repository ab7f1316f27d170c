"""What finds a document's text in what enters a shuffle (dedup's and the audit writer's tests):
snippets from the middle of every paragraph, and a DoFn that counts, per stage, the encoded
elements that hold one."""

from __future__ import annotations

import apache_beam as beam

SNIPPET_CHARS = 40


def snippets_of(docs) -> list[bytes]:
    """40 characters from the middle of every paragraph of every document, as UTF-8."""
    out = []
    for doc in docs:
        for paragraph in doc.text.split("\n\n"):
            middle = len(paragraph) // 2
            if len(paragraph) >= 2 * SNIPPET_CHARS:
                out.append(paragraph[middle : middle + SNIPPET_CHARS].encode("utf-8"))
    return out


class FindText(beam.DoFn):
    """Counts, per stage, the elements checked and those whose encoding holds a snippet."""

    def __init__(self, stage: str, coder, snippets: list[bytes]) -> None:
        self._checked = beam.metrics.Metrics.counter("no_text", f"{stage}:checked")
        self._leaks = beam.metrics.Metrics.counter("no_text", f"{stage}:text")
        self._coder, self._snippets = coder, snippets

    def process(self, element):
        encoded = self._coder.encode(element)
        self._checked.inc()
        if any(snippet in encoded for snippet in self._snippets):
            self._leaks.inc()
