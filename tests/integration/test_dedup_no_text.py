"""Dedup's shuffles carry ids, hashes, shingle sets and the names of the files the text waits in
(stash.py), never a document's text: every element that enters any of its GroupByKeys (URL,
exact, LSH, candidates, verification, best match, components and apply), encoded with its
PCollection's coder, is searched for the text of every document of the planted corpus (real
books, Wikipedia and WebText with planted copies). Only decontamination, which this corpus does
not run, sends its few removed documents to apply with their text."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam import coders
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.dedup import DedupConfig, Deduplicate
from tests.helpers.dedup_corpus import planted_corpus
from tests.helpers.text_in_shuffles import FindText, snippets_of


def _checked_run(docs, work_dir: str) -> dict[str, int]:
    """Deduplicate(docs) with FindText on the input of each of its shuffles;
    {"<stage>:checked" / "<stage>:text": count}."""
    snippets = snippets_of(docs)
    pipeline = beam.Pipeline(options=PipelineOptions(["--runner", "DirectRunner"]))
    source = pipeline | beam.Create(docs)
    _ = source | "Deduplicate" >> Deduplicate(DedupConfig(), work_dir)
    entering = [("input", source)]  # the check's own control: the documents hold their text

    class Inputs(beam.pipeline.PipelineVisitor):
        def visit_transform(self, applied):
            if not applied.full_label.startswith("Deduplicate/"):
                return
            label = applied.full_label.removeprefix("Deduplicate/")
            if isinstance(applied.transform, beam.GroupByKey):
                entering.append((label, applied.inputs[0]))
            elif applied.side_inputs:
                entering.append((f"{label} side input", applied.side_inputs[0].pvalue))

    pipeline.visit(Inputs())
    for i, (stage, pcoll) in enumerate(entering):
        coder = coders.registry.get_coder(pcoll.element_type)
        _ = pcoll | f"FindText{i}" >> beam.ParDo(FindText(stage, coder, snippets))
    result = pipeline.run()
    result.wait_until_finish()
    return {
        c.key.metric.name: c.committed
        for c in result.metrics().query()["counters"]
        if c.key.metric.namespace == "no_text"
    }


@pytest.mark.slow
def test_no_dedup_shuffle_carries_text(tmp_path):
    corpus = planted_corpus()
    counts = _checked_run(corpus.docs, str(tmp_path))
    stages = {name.rsplit(":", 1)[0] for name in counts}
    # every shuffle was checked and saw elements
    assert {
        "URL/Group",
        "Exact/Group",
        "Near/Buckets",
        "Near/DistinctEdges/GroupByKey",
        "Verify/Stash",
        "Verify/Group",
        "Near/BestMatch/GroupByKey",
        "Apply/Group",
    } <= stages
    assert any(stage.startswith("Near/Components/") for stage in stages)
    assert all(counts[f"{stage}:checked"] > 0 for stage in stages)
    # the check finds text where there is text: every input document holds some
    assert counts["input:text"] == counts["input:checked"] == len(corpus.docs)
    leaks = {stage: counts.get(f"{stage}:text", 0) for stage in stages - {"input"}}
    assert leaks == dict.fromkeys(leaks, 0)
