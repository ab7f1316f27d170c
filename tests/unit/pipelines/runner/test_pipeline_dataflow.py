"""Dataflow, as far as a machine without Google Cloud can go: the options validate, the whole
graph builds and serialises for DataflowRunner, the worker package (`--setup_file
pyproject.toml`) builds the way Beam's stager builds it and installs into a bare directory, and
the launch command of docs/preprocessing.md runs from a fresh venv against a local fake GCS, as a
dry run and as far as staging the job (tests/dataflow_fake_gcs.py)."""

from __future__ import annotations

import os

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from dataset_format.tokenizer import load_tokenizer
from pipelines.runner.runners import tokenizer_threads
from pipelines.tokenize.tokenizer_ref import TokenizerRef
from pipelines.tokenize.transforms import TokenizeDoFn
from tests.helpers.pipeline_dataflow import GPT2, dataflow_argv

CORES = os.cpu_count() or 1


@pytest.mark.parametrize(
    "argv, threads",
    [
        (dataflow_argv(), 1),  # one SDK process per vCPU: one tokenizer thread each
        (dataflow_argv() + ["--experiments=no_use_multiple_sdk_containers",
                            "--machine_type=n2-standard-8"], 8),
        (["--runner=DaskRunner"], 1),
        (["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
         max(1, CORES // 2)),
        (["--direct_running_mode=in_memory", "--direct_num_workers=1"], CORES),
    ],
)
def test_tokenizer_threads_are_sized_per_process_on_every_runner(argv, threads):
    assert tokenizer_threads(PipelineOptions(argv)) == threads


def test_the_tokenize_dofn_sizes_the_pool_before_its_first_call(monkeypatch, tmp_path):
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    ref = TokenizerRef.save(load_tokenizer(GPT2), str(tmp_path / "tokenizer.json"))
    dofn = TokenizeDoFn(ref, split_sentences=False, append_eod=False, min_tokens=0,
                        batch_docs=8, batch_bytes=1 << 20, keep_rejects=False,
                        progress_dir=None, threads=3)
    dofn.setup()
    assert os.environ["RAYON_NUM_THREADS"] == "3"


# -- a launch without reach: one line naming the location, in seconds --------------------------
def test_remote_locations_name_their_storage_service():
    from pipelines.runner.reach import endpoint

    assert endpoint("gs://b/x", {}) == "https://storage.googleapis.com"
    assert endpoint("gs://b/x", {"STORAGE_EMULATOR_HOST": "127.0.0.1:9023"}) == (
        "http://127.0.0.1:9023")
    assert endpoint("https://host/corpus.jsonl", {}) == "https://host/corpus.jsonl"
    assert endpoint("/data/corpus/*.txt", {}) is None and endpoint("memory://x", {}) is None


@pytest.mark.parametrize(
    "argv, local, workers",
    [
        (dataflow_argv(), False, None),  # autoscaling without a bound: tasks keep task_bytes
        (dataflow_argv(max_num_workers="100"), False, 100),  # n1-standard-1 by default
        (dataflow_argv(max_num_workers="10", machine_type="n2-standard-8"), False, 80),
        (["--direct_running_mode=multi_processing", "--direct_num_workers=3"], True, 3),
        (["--direct_running_mode=in_memory"], True, 1),
    ],
)
def test_tasks_are_sized_for_the_workers_the_runner_has(argv, local, workers):
    from pipelines.runner.runners import planned_workers

    assert planned_workers(PipelineOptions(argv), "DataflowRunner", local) == workers
