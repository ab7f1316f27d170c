"""The near-duplicate shuffles carry ids, hashes and shingle sets, never a document's text: every
element that enters the LSH, candidate, verification (roles, shingle sets, best match) and
components shuffles, encoded with its PCollection's coder, is searched for the text of every
document of the planted corpus (real books, Wikipedia and WebText with planted copies)."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam import coders
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.dedup import DedupConfig, Deduplicate
from tests.test_dedup_pipeline import planted_corpus

# Shuffles (GroupByKeys, by label under Deduplicate/) that must not carry text; Apply/Group is
# the one join where the text meets its decision, and URL/ and Exact/ carry a record each.
_NO_TEXT = ("Near/", "Verify/")
SNIPPET_CHARS = 40


def _snippets(docs) -> list[bytes]:
    """40 characters from the middle of every paragraph of every document, as UTF-8."""
    out = []
    for doc in docs:
        for paragraph in doc.text.split("\n\n"):
            middle = len(paragraph) // 2
            if len(paragraph) >= 2 * SNIPPET_CHARS:
                out.append(paragraph[middle : middle + SNIPPET_CHARS].encode("utf-8"))
    return out


class _FindText(beam.DoFn):
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


def _checked_run(docs, stages_of) -> dict[str, int]:
    """Deduplicate(docs) with _FindText on the input of each shuffle `stages_of(label)` names;
    {"<stage>:checked" / "<stage>:text": count}."""
    snippets = _snippets(docs)
    pipeline = beam.Pipeline(options=PipelineOptions(["--runner", "DirectRunner"]))
    source = pipeline | beam.Create(docs)
    _ = source | Deduplicate(DedupConfig())
    entering = [("input", source)]  # the check's own control: the documents hold their text

    class Inputs(beam.pipeline.PipelineVisitor):
        def visit_transform(self, applied):
            label = applied.full_label.removeprefix("Deduplicate/")
            if isinstance(applied.transform, beam.GroupByKey) and stages_of(label):
                entering.append((label, applied.inputs[0]))
            elif label.startswith("Verify/PairShingles") and applied.side_inputs:
                entering.append(("roles table", applied.side_inputs[0].pvalue))

    pipeline.visit(Inputs())
    for i, (stage, pcoll) in enumerate(entering):
        coder = coders.registry.get_coder(pcoll.element_type)
        _ = pcoll | f"FindText{i}" >> beam.ParDo(_FindText(stage, coder, snippets))
    result = pipeline.run()
    result.wait_until_finish()
    return {
        c.key.metric.name: c.committed
        for c in result.metrics().query()["counters"]
        if c.key.metric.namespace == "no_text"
    }


@pytest.mark.slow
def test_lsh_candidate_verification_and_components_shuffles_carry_no_text():
    corpus = planted_corpus()
    counts = _checked_run(corpus.docs, lambda label: label.startswith(_NO_TEXT))
    stages = {name.rsplit(":", 1)[0] for name in counts}
    # every shuffle of the near-duplicate step was checked and saw elements
    assert {
        "Near/Buckets",
        "Near/DistinctEdges/GroupByKey",
        "Verify/RolesTable/GroupByKey",
        "Verify/Group",
        "Near/BestMatch/GroupByKey",
        "roles table",
    } <= stages
    assert any(stage.startswith("Near/Components/") for stage in stages)
    assert all(counts[f"{stage}:checked"] > 0 for stage in stages)
    # the check finds text where there is text: every input document holds some
    assert counts["input:text"] == counts["input:checked"] == len(corpus.docs)
    leaks = {stage: counts.get(f"{stage}:text", 0) for stage in stages - {"input"}}
    assert leaks == dict.fromkeys(leaks, 0)
