"""The tests of tests/unit/pipelines/runner/test_dask_runner.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import apache_beam as beam
import pytest

pytest.importorskip("dask.distributed")

from pipelines.preprocess import main  # noqa: E402
from pipelines.write import MARKER_NAME  # noqa: E402
from tests.conftest import REPO
from tests.helpers.dask_runner import Tagged

CORPORA = REPO.parent / "shared" / "corpora"
GPT2 = str(CORPORA / "vocab" / "gpt2")
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


@pytest.fixture(scope="module")
def cluster():
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as local:
        yield local


def _dask(cluster) -> list[str]:
    return ["--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}"]


def _dashboard_of(cluster) -> str:
    port = cluster.scheduler_info.get("services", {}).get("dashboard")
    if port is None:
        return "no dashboard (the scheduler serves none)"
    return f"dashboard {cluster.dashboard_link}"


def _shards(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.is_file() and p.name not in ("stats.json", MARKER_NAME)}


@pytest.fixture(scope="module")
def doubled_jsonl(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("jsonl")
    texts = [p.read_text(encoding="utf-8") for p in
             sorted((CORPORA / "web" / "text" / "webtext_train_10").glob("*.txt"))]
    for copy in ("x", "y"):
        with open(root / f"{copy}.jsonl", "w", encoding="utf-8") as f:
            for text in texts:
                f.write(json.dumps({"text": text}) + "\n")
    return str(root / "*.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("inline_dofn_bytes", [64 << 10, 0])
def test_multi_output_finish_bundle_side_inputs_and_every_leaf(cluster, tmp_path, monkeypatch,
                                                              inline_dofn_bytes):
    """With the DoFns inside their tasks, and (0) each as a graph key of its own."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    from pipelines.runner.dask_runner import DaskRunner

    monkeypatch.setattr("pipelines.runner.dask_graph.INLINE_DOFN_BYTES", inline_dofn_bytes)

    options = PipelineOptions([f"--dask_client_address={cluster.scheduler_address}"])
    with beam.Pipeline(runner=DaskRunner(), options=options) as p:
        out = (p | beam.Create(range(1, 6))
               | beam.ParDo(Tagged()).with_outputs("squares", "bundles", main="numbers"))
        total = out.numbers | "Sum" >> beam.CombineGlobally(sum)
        assert_that(out.numbers, equal_to([1, 2, 3, 4, 5]), label="numbers")
        assert_that(out.squares, equal_to([1, 4, 9, 16, 25]), label="squares")
        assert_that(out.bundles | "Bundles" >> beam.CombineGlobally(sum), equal_to([5]),
                    label="bundles")
        shifted = out.squares | "Shift" >> beam.Map(lambda s, t: s + t, beam.pvalue.AsSingleton(total))
        assert_that(shifted, equal_to([16, 19, 24, 31, 40]), label="side input")
        grouped = (out.numbers | beam.Map(lambda n: (n % 2, n)) | beam.GroupByKey()
                   | beam.MapTuple(lambda k, vs: (k, sorted(vs))))
        assert_that(grouped, equal_to([(0, [2, 4]), (1, [1, 3, 5])]), label="grouped")


@pytest.mark.slow
@pytest.mark.parametrize("dedup", [True, False])
def test_dask_shards_equal_the_direct_runners(cluster, doubled_jsonl, tmp_path, capsys, dedup):
    args = [
        "--source=jsonl",
        f"--input={doubled_jsonl}",
        f"--tokenizer={GPT2}",
        "--append-eod",
        "--num-buckets=2",
        "--shard-tokens=3000",
        "--progress-interval=0",
        *([] if dedup else ["--no-dedup"]),
    ]
    assert main([*args, f"--output={tmp_path / 'direct'}", *IN_PROCESS]) == 0
    capsys.readouterr()
    code = main([*args, f"--output={tmp_path / 'dask'}", *_dask(cluster)])
    err = capsys.readouterr().err
    assert code == 0, err
    # the run's first lines say where the cluster's dashboard is
    first = err.splitlines()[0]
    assert first == (f"INFO pipelines.runner.dask_runner: dask: scheduler "
                     f"{cluster.scheduler_address}, {_dashboard_of(cluster)}")
    direct, dask = _shards(tmp_path / "direct"), _shards(tmp_path / "dask")
    assert len([name for name in direct if name.endswith(".bin")]) > 1
    assert dask == direct
    stats = json.loads((tmp_path / "dask" / "stats.json").read_text())
    assert stats["balanced"] and stats["read"] == 20
    assert stats["written"] == (10 if dedup else 20)


@pytest.mark.slow
def test_a_rerun_on_the_same_cluster_sets_its_dofns_up_again(cluster, doubled_jsonl, tmp_path,
                                                            capsys):
    """A worker keeps its DoFns set up for the bundles of one run only: a rerun into the same
    output found the stash's and the audit's work folders (made in their DoFns' setup) removed
    with the first run's work area, and failed."""
    args = [
        "--source=jsonl",
        f"--input={doubled_jsonl}",
        f"--output={tmp_path / 'set'}",
        f"--tokenizer={GPT2}",
        "--num-buckets=2",
        "--progress-interval=0",
        "--keep-rejects",
        "--overwrite",
        *_dask(cluster),
    ]
    outputs = []
    for _ in range(2):
        assert main(args) == 0, capsys.readouterr().err
        outputs.append(_shards(tmp_path / "set") | _shards(tmp_path / "set" / "rejects"))
    assert outputs[0] == outputs[1]
    assert sum(name.startswith("rejects-") for name in outputs[1]) >= 1


def _graph_size(client, pattern: str, tmp_path: Path) -> int:
    """Graph tasks of the whole preprocess pipeline (dedup on) over `pattern` on `client`."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from dataset_format.tokenizer import load_tokenizer
    from pipelines.graph import plan_run
    from pipelines.options import PreprocessConfig
    from pipelines.runner.dask_graph import graph_keys
    from pipelines.tokenize.tokenizer_ref import TokenizerRef

    argv = ["--source=jsonl", f"--input={pattern}", f"--output={tmp_path / 'out'}",
            f"--tokenizer={GPT2}", "--append-eod", "--num-buckets=2"]
    plan = plan_run(PreprocessConfig.from_options(PipelineOptions(argv)))
    tokenizer = TokenizerRef.describe(load_tokenizer(GPT2), str(tmp_path / "tokenizer.json"))
    pipeline = beam.Pipeline(options=PipelineOptions(argv))
    from pipelines.graph import build_pipeline

    build_pipeline(pipeline, plan, tokenizer)
    return len(graph_keys(pipeline, client))


@pytest.mark.slow
def test_the_graph_grows_with_the_read_tasks_not_the_thread_count(doubled_jsonl, tmp_path):
    """It had 9,358 tasks whatever the input with 2 threads, and 77,038 with 8."""
    from dask.distributed import Client, LocalCluster

    sizes = {}
    for threads in (1, 8):
        with LocalCluster(n_workers=1, threads_per_worker=threads, processes=False,
                          dashboard_address=":0") as local, Client(local) as client:
            sizes[threads] = _graph_size(client, doubled_jsonl, tmp_path)
            if threads == 1:  # one file instead of two: one read task less
                one_file = _graph_size(client, doubled_jsonl.replace("*", "x"), tmp_path)
    assert sizes[1] == sizes[8]
    assert one_file < sizes[1] < 9358


@pytest.mark.slow
def test_the_launcher_shows_progress_and_a_workers_first_failure(cluster, tmp_path, capsys,
                                                                 monkeypatch):
    """A record that cannot be read is counted on a worker; its file and offset reach the
    launcher's output as the worker logs it, and so do progress lines."""
    # short enough for a line even when a warm cluster runs the whole graph in a fraction of a
    # second (at 0.2 s a quiet machine finished before the first line)
    monkeypatch.setattr("pipelines.runner.dask_runner.PROGRESS_INTERVAL_S", 0.01)
    texts = [p.read_text(encoding="utf-8") for p in
             sorted((CORPORA / "web" / "text" / "webtext_train_10").glob("*.txt"))]
    lines = [json.dumps({"text": text}) for text in texts]
    lines.insert(3, '{"text": "no closing brace"')
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "bad.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    bad_offset = sum(len(line.encode()) + 1 for line in lines[:3])
    code = main(["--source=jsonl", f"--input={tmp_path / 'in' / 'bad.jsonl'}",
                 f"--output={tmp_path / 'out'}", f"--tokenizer={GPT2}", "--append-eod",
                 "--no-dedup", "--max-failure-rate=0.2", *_dask(cluster)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert re.search(rf"^WARNING pipelines\.\S+: skipped \S*bad\.jsonl@{bad_offset}: ", err, re.M), err
    assert re.search(r"^dask: [\d,]+ of [\d,]+ graph tasks done, \d+ s$", err, re.M), err
