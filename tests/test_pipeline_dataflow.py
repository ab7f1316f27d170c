"""Dataflow, as far as a machine without Google Cloud can go: the options validate, the whole
graph builds and serialises for DataflowRunner, and the worker package (`--setup_file
pyproject.toml`) builds the way Beam's stager builds it and installs into a bare directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

from pipelines.options import PreprocessConfig
from pipelines.preprocess import (
    build_pipeline,
    plan_run,
    resolve_runner,
    tokenizer_threads,
    unknown_arguments,
)
from pipelines.tokenize import load_tokenizer
from pipelines.transforms import ReadSource, TokenizeDoFn, TokenizerRef

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO.parent / "shared" / "corpora"
GPT2 = str(CORPORA / "vocab" / "gpt2")


def dataflow_argv(**overrides: str | None) -> list[str]:
    flags = {
        "runner": "DataflowRunner",
        "project": "my-project",
        "region": "us-central1",
        "temp_location": "gs://my-bucket/tmp",
        "setup_file": str(REPO / "pyproject.toml"),
        "source": "books",
        "input": str(CORPORA / "books" / "pg1080.txt"),
        "output": "gs://my-bucket/shards/books",
        "tokenizer": GPT2,
        "num-buckets": "4",
        **overrides,
    }
    return [f"--{k}={v}" for k, v in flags.items() if v is not None] + ["--append-eod"]


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


def _graph_bytes(pipeline: beam.Pipeline) -> int:
    return len(pipeline.to_runner_api().SerializeToString())


def _transform_names(pipeline: beam.Pipeline) -> list[str]:
    return sorted(t.unique_name for t in pipeline.to_runner_api().components.transforms.values())


@pytest.mark.slow
def test_the_graph_does_not_grow_with_the_number_of_input_files(tmp_path):
    """Tasks are planned at run time: 10 or 1000 input files give the same ReadSource graph,
    and whole Dataflow graphs that differ only in the recorded file count and size."""
    sizes, whole, names = [], [], []
    pattern = str(tmp_path / "*.txt")
    argv = dataflow_argv(input=pattern)
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


def test_dataflow_validation_names_what_is_missing():
    options = PipelineOptions(dataflow_argv(temp_location="/tmp/local", region=None))
    errors = " ".join(PipelineOptionsValidator(options, DataflowRunner()).validate())
    assert "temp_location" in errors and "region" in errors


@pytest.mark.slow
def test_worker_package_builds_like_the_stager_and_installs(tmp_path):
    from apache_beam.runners.portability.stager import Stager

    tarball = Stager._build_setup_package(str(REPO / "pyproject.toml"), str(tmp_path / "stage"))
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(site),
            tarball,
        ],
        check=True,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    check = (
        "import pipelines.preprocess, pipelines.sources, dataset_format;"
        "from pipelines.sources import SOURCES;"
        "[SOURCES[n] for n in SOURCES];"
        "print(pipelines.preprocess.__file__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(site))  # imported from the package, not the repo


def _extra(name: str) -> list[str]:
    import tomllib

    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"][name]


def _build_in(python: Path, out: Path) -> subprocess.CompletedProcess:
    """Build the worker package as Beam's stager does, with `python`'s own setuptools."""
    code = (
        "import sys; from apache_beam.runners.portability.stager import Stager;"
        f"print(Stager._build_setup_package({str(REPO / 'pyproject.toml')!r}, {str(out)!r}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env)


def _pip_install(python: Path, requirement: str, *flags: str) -> None:
    """pip install from PyPI (or pip's cache); the test is skipped on a machine without either."""
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--retries", "1", "--timeout",
         "20", *flags, requirement], capture_output=True, text=True)
    if result.returncode != 0:
        if "No matching distribution" in result.stderr or "connection" in result.stderr.lower():
            pytest.skip(f"cannot fetch {requirement} (no package index here)")
        raise AssertionError(result.stderr[-2000:])


@pytest.mark.slow
def test_the_worker_package_builds_with_the_dataflow_extras_setuptools(tmp_path):
    """A fresh venv, as a new launcher machine has: its bundled setuptools cannot build the
    worker package (the stager ignores [build-system] requires); with the `dataflow` extra's
    setuptools pin installed, it can. Beam and the rest come from this venv via a .pth placed
    after the fresh venv's own site-packages, so the fresh setuptools is the one imported."""
    import site
    import sysconfig

    (pin,) = [r for r in _extra("dataflow") if r.startswith("setuptools")]
    lowest = pin.split(">=")[1]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    fresh_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in site.getsitepackages() if p.startswith(sys.prefix)] or [
        sysconfig.get_paths()["purelib"]]
    (Path(fresh_site) / "zz-launcher-env.pth").write_text("\n".join(ours) + "\n")
    _pip_install(python, "setuptools<77", "--force-reinstall")
    old = _build_in(python, tmp_path / "old")
    assert old.returncode != 0 and "license" in (old.stdout + old.stderr).lower()
    _pip_install(python, f"setuptools~={lowest}.0")
    new = _build_in(python, tmp_path / "new")
    assert new.returncode == 0, new.stderr[-2000:]
    assert Path(new.stdout.strip().splitlines()[-1]).name.startswith("shardsmith-")
