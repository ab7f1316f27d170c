"""The tests of tests/unit/pipelines/dedup/test_dedup_decontaminate.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import json
import re

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from pipelines.dedup import decontaminate as dc
from pipelines.dedup.__main__ import counters as run_counters
from pipelines.document import Document
from tests.helpers.dedup_decontaminate import (
    WIKITEXT_103_VALID,
    book_paragraphs,
    detokenize,
    wikitext_paragraphs,
)


@pytest.mark.slow
def test_beam_decontamination_ignores_ngrams_frequent_in_the_corpus(tmp_path):
    eval_lines = wikitext_paragraphs(WIKITEXT_103_VALID)
    common, rare = detokenize(eval_lines[0]), detokenize(eval_lines[1])
    common_sentence = next(s for s in re.split(r"(?<=\.) ", common) if len(s.split()) >= 15)
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text("".join(json.dumps({"text": t}) + "\n" for t in (common, rare)))
    book = book_paragraphs()
    docs = [
        Document(f"books:quote{i}", "books", "\n\n".join([book[i], common_sentence, book[i + 1]]))
        for i in range(10)
    ]
    docs.append(Document("webtext:rare", "webtext", "\n\n".join([book[20], rare, book[21]])))
    docs.append(Document("webtext:all", "webtext", rare))
    config = dc.DecontaminationConfig(eval_files=(str(tmp_path / "*.jsonl"),), frequent_docs=10)
    pipeline = beam.Pipeline(options=PipelineOptions(["--runner", "DirectRunner"]))
    out = pipeline | beam.Create(docs) | dc.Decontaminate(config)
    # The sentence in 10 documents is a "common phrase" by Megatron's rule: left alone.
    unchanged = [d for d in docs[:10]]
    cut_doc = dc.decontaminate(
        docs[10], dc.eval_file_ngrams(str(eval_file), 13, 8), dc.NgramSet.merge([]), config
    )[0]
    assert isinstance(cut_doc, Document) and rare not in cut_doc.text
    assert_that(out.docs, equal_to(unchanged + [cut_doc]), label="docs")
    assert_that(
        out.rejects | beam.Map(lambda r: (r.doc_id, r.reason)),
        equal_to([("webtext:all", "contamination")]),
        label="rejects",
    )
    result = pipeline.run()
    result.wait_until_finish()
    counters = run_counters(result)
    assert counters["dedup_contamination_trimmed"] == 1
    assert counters["dedup_contamination_matches"] > 0
