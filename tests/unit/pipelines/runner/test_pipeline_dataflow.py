"""Dataflow, as far as a machine without Google Cloud can go: the options validate, the whole
graph builds and serialises for DataflowRunner, the worker package (`--setup_file
pyproject.toml`) builds the way Beam's stager builds it and installs into a bare directory, and
the launch command of docs/preprocessing.md runs from a fresh venv against a local fake GCS, as a
dry run and as far as staging the job (tests/dataflow_fake_gcs.py)."""

from __future__ import annotations

import os
import socket
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

from dataset_format.tokenizer import load_tokenizer
from pipelines.graph import build_pipeline, plan_run
from pipelines.options import PreprocessConfig
from pipelines.runner.runners import resolve_runner, tokenizer_threads, unknown_arguments
from pipelines.sources.transforms import ReadSource
from pipelines.tokenize.tokenizer_ref import TokenizerRef
from pipelines.tokenize.transforms import TokenizeDoFn
from tests.helpers.pipeline_dataflow import CORPORA, GPT2, dataflow_argv

CORES = os.cpu_count() or 1


def _graph_bytes(pipeline: beam.Pipeline) -> int:
    return len(pipeline.to_runner_api().SerializeToString())


def _transform_names(pipeline: beam.Pipeline) -> list[str]:
    return sorted(t.unique_name for t in pipeline.to_runner_api().components.transforms.values())


def _launch_here(argv, capsys) -> tuple[int, list[str], float]:
    from pipelines.preprocess import main

    started = time.monotonic()
    code = main(argv)
    took = time.monotonic() - started
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if not line.startswith("INFO ")], took


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


@pytest.mark.slow
def test_dataflow_options_validate_and_the_graph_builds_without_running():
    argv = dataflow_argv()
    assert unknown_arguments(argv) == []
    options = PipelineOptions(argv)
    runner = DataflowRunner()
    assert PipelineOptionsValidator(options, runner).validate() == []
    assert resolve_runner(options, argv) == ("DataflowRunner", False)  # not replaced

    plan = plan_run(PreprocessConfig.from_options(options))
    tokenizer = TokenizerRef.describe(
        load_tokenizer(GPT2), "gs://my-bucket/shards/books/tokenizer.json"
    )
    pipeline = beam.Pipeline(runner=runner, options=options)
    build_pipeline(pipeline, plan, tokenizer)
    proto = pipeline.to_runner_api()  # every DoFn pickled, as for submission
    top_level = {t.unique_name for t in proto.components.transforms.values()}
    for stage in ("ReadSource", "Clean", "Deduplicate", "Tokenize", "WriteShards", "Finish"):
        assert stage in top_level


@pytest.mark.slow
def test_the_graph_does_not_grow_with_the_number_of_input_files(tmp_path):
    """Tasks are planned at run time: 10 or 1000 input files give the same ReadSource graph,
    and whole Dataflow graphs that differ only in the recorded file count and size."""
    sizes, whole, names = [], [], []
    pattern = str(tmp_path / "*.txt")
    # Dedup's components rounds pinned: by default they grow with the log of the input's size
    # (issue 21), which is not what this test measures.
    argv = dataflow_argv(input=pattern, **{"dedup-cc-rounds": "16"})
    options = PipelineOptions(argv)
    tokenizer = TokenizerRef.describe(load_tokenizer(GPT2), "gs://my-bucket/t/tokenizer.json")
    for count in (10, 1000):  # the same pattern, first over 10 files, then over 1000
        for i in range(count):
            (tmp_path / f"{i:04d}.txt").write_text(f"book {i}")
        read_only = beam.Pipeline(runner=DataflowRunner(), options=options)
        _ = read_only | ReadSource("books", pattern)
        sizes.append(_graph_bytes(read_only))
        names.append(_transform_names(read_only))
        plan = plan_run(PreprocessConfig.from_options(options))
        assert plan.input_files == count
        pipeline = beam.Pipeline(runner=DataflowRunner(), options=options)
        build_pipeline(pipeline, plan, tokenizer)
        whole.append(_graph_bytes(pipeline))
    # The same transforms; the bytes differ by a few because Beam's pickled Create payloads
    # (bz2 of a pickle) vary from build to build even for one file count. Before run-time
    # planning each task (a path and its options) added ~200 bytes: 990 more files, ~200 kB.
    assert names[0] == names[1]
    assert abs(sizes[0] - sizes[1]) < 100
    assert abs(whole[0] - whole[1]) < 100


def test_an_unreachable_bucket_fails_the_launch_in_one_line(monkeypatch, capsys):
    """Nothing listens on the emulator's loopback port: refused at once (no address outside
    loopback is ever contacted: the endpoint is the emulator's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    code, lines, took = _launch_here(dataflow_argv(input="gs://my-bucket/books/*.txt"), capsys)
    assert code == 2 and took < 5
    assert len(lines) == 1
    assert lines[0].startswith(
        f"preprocess: error: gs://my-bucket/books/*.txt cannot be reached: 127.0.0.1:{port}")


def test_a_bucket_that_never_answers_fails_the_launch_within_the_timeout(monkeypatch, capsys):
    """A loopback server that accepts the connection and never replies (a black hole)."""
    monkeypatch.setattr("pipelines.runner.reach.REACH_TIMEOUT_S", 0.5)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
        code, lines, took = _launch_here(dataflow_argv(), capsys)  # the output is on gs://
    assert code == 2 and took < 5
    assert lines == [
        f"preprocess: error: gs://my-bucket/shards/books cannot be reached: 127.0.0.1:{port} did "
        "not answer within 0.5 s (no network, a proxy or firewall in the way?)"
    ]


def test_a_local_dataflow_launch_names_the_missing_flag_before_writing(tmp_path, capsys):
    """Issue 26: a dry run without --temp_location claimed OUTPUT, wrote tokenizer.json there
    and then ended in Beam's "Missing GCS path option: staging_location"."""
    out = tmp_path / "out"
    argv = [*dataflow_argv(temp_location=None, output=str(out)), "--dry_run=True"]
    code, lines, _ = _launch_here(argv, capsys)
    assert (code, lines) == (2, [
        "preprocess: error: the DataflowRunner needs --temp_location gs://BUCKET/PATH (where "
        "the workers stage and spill)"])  # fmt: skip
    assert not out.exists()
    code, lines, _ = _launch_here([*dataflow_argv(output=str(out)), "--dry_run=True"], capsys)
    assert (code, lines) == (2, [
        f"preprocess: error: the DataflowRunner's workers cannot reach {CORPORA}/books/"
        "pg1080.txt on this machine: give --input and --output as gs:// URLs"])  # fmt: skip
    assert not out.exists()
