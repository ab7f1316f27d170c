"""Counting goes through one hook, pipelines/stage.py's CountingDoFn.stat_update: what a stage
counts reaches stats.json, the Beam metric of that name and the progress heartbeat alike, and
no stage calls the progress reporter or Beam's metrics itself."""

from __future__ import annotations

import ast
import json

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from dataset_format.tokenizer import load_tokenizer
from pipelines import progress
from pipelines.graph import build_pipeline, plan_run, prepare
from pipelines.options import PreprocessConfig
from pipelines.stats import NAMESPACE
from tests.conftest import CORPORA, REPO

GPT2 = str(CORPORA / "vocab" / "gpt2")
# Alice (~35k GPT-2 tokens) and The Yellow Wallpaper (~8k): a floor between them drops one
# book in the tokenize stage, after the tokenizer has read it.
BOOKS = (str(CORPORA / "books" / "11-0.txt"), str(CORPORA / "books" / "1952-0.txt"))
MIN_TOKENS = 20_000


def _metrics(result) -> dict[str, int]:
    found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    return {counter.key.metric.name: counter.committed for counter in found}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The preprocess graph on the two books, in this process, with a heartbeat directory:
    (stats.json, the Beam metrics, the heartbeat's totals)."""
    tmp = tmp_path_factory.mktemp("counting")
    config = PreprocessConfig(
        "books", BOOKS, str(tmp / "out"), GPT2, min_tokens=MIN_TOKENS, dedup=False
    )
    plan = plan_run(config)
    claim, tokenizer_ref = prepare(plan, load_tokenizer(GPT2), "counting")
    heartbeat = tmp / "progress"
    heartbeat.mkdir()
    try:
        pipeline = beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions([]))
        build_pipeline(pipeline, plan, tokenizer_ref, progress_dir=str(heartbeat))
        result = pipeline.run()
        result.wait_until_finish()
    finally:
        claim.release()
    stats = json.loads((tmp / "out" / "stats.json").read_text())
    return stats, _metrics(result), progress.read_totals(str(heartbeat))


def test_what_a_stage_counts_reaches_stats_metrics_and_heartbeat_alike(run):
    stats, metrics, heartbeat = run
    assert stats["documents_read"] == metrics["docs_read"] == heartbeat["docs_read"] == 2
    assert stats["bytes_read"] == metrics["bytes_read"] == heartbeat["bytes_read"] > 100_000
    assert stats["tasks_read"] == metrics["tasks_read"] == heartbeat["tasks"] == 2
    assert metrics["tasks_planned"] == heartbeat["tasks_planned"] >= 2
    assert stats["shards"] == metrics["shards_written"] == heartbeat["shards"] >= 1
    assert metrics["tokens_tokenized"] == heartbeat["tokens"] >= stats["tokens_written"] > 0


def test_the_heartbeat_counts_the_documents_tokenized_that_stats_counts(run):
    """The wallpaper falls under the floor in the tokenize stage: tokenized, then dropped. The
    display's "tokenized" is stats' docs_tokenized (kept), as every heartbeat counter is the
    stats counter it shows."""
    stats, metrics, heartbeat = run
    assert stats["written"] == 1 and sum(stats["dropped"].values()) == 1, stats["dropped"]
    assert heartbeat["docs_tokenized"] == metrics["docs_tokenized"] == 1


# The stages' Beam wrappers, and dedup and write's DoFns: they count through stage.py only
STAGE_FILES = sorted(
    [*REPO.glob("pipelines/*/transforms.py"), REPO / "pipelines/write/merge.py",
     *REPO.glob("pipelines/dedup/*.py")]
)
# What counting around the hook would import: the reporter, Beam's metrics (reading a run's
# metrics, as the dedup command does with MetricsFilter, is no counting)
AROUND_THE_HOOK = (
    "pipelines.progress",
    "pipelines.runner.progress",
    "apache_beam.metrics.Metrics",
    "apache_beam.metrics.metric.Metrics",
)


def counting_around_the_hook(source: str) -> list[str]:
    """The imports of the progress reporter or of Beam's metrics in `source`, and its calls of
    `Metrics.counter` or of a reporter's `add`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            names = [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if (owner, node.func.attr) == ("Metrics", "counter") or (
                node.func.attr == "add" and owner.endswith("progress")
            ):
                found.append(f"line {node.lineno}: {ast.unparse(node.func)}(...)")
            continue
        else:
            continue
        found += [f"line {node.lineno}: import {n}" for n in names
                  if n.startswith(AROUND_THE_HOOK) and not n.endswith("MetricsFilter")]
    return found


def test_stages_count_only_through_the_hook():
    assert len(STAGE_FILES) > 10
    found = {
        str(path.relative_to(REPO)): hits
        for path in STAGE_FILES
        if (hits := counting_around_the_hook(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_counting_around_the_hook_is_seen():
    assert counting_around_the_hook(
        "from pipelines import progress as p\n"
        "from apache_beam.metrics import Metrics\n"
        "C = Metrics.counter('pipelines', 'x')\n"
        "def f(self):\n    self.progress.add(docs_read=1)\n"
    ) == [
        "line 1: import pipelines.progress",
        "line 2: import apache_beam.metrics.Metrics",
        "line 3: Metrics.counter(...)",
        "line 5: self.progress.add(...)",
    ]
    assert counting_around_the_hook("def f(self):\n    self.stat_update('docs_read')\n") == []
