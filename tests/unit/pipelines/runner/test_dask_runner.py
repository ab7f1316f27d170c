"""The preprocess pipeline on Beam's DaskRunner (our fixed subclass, pipelines/runner/dask_runner.py)
against a dask.distributed LocalCluster of 2 worker processes: its shards are byte-identical to
the DirectRunner's, with and without dedup. Inputs: the WebText sample documents as JSONL (every
document twice, so dedup has work) and Gutenberg books."""

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


class _Tagged(beam.DoFn):
    """Main and tagged outputs, and an output from finish_bundle (which the stock runner lost)."""

    def start_bundle(self):
        self.seen = 0

    def process(self, x):
        self.seen += 1
        yield x
        yield beam.pvalue.TaggedOutput("squares", x * x)

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindows

        yield beam.pvalue.TaggedOutput("bundles", GlobalWindows.windowed_value(self.seen))


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
               | beam.ParDo(_Tagged()).with_outputs("squares", "bundles", main="numbers"))
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


def test_dask_options_are_known_to_the_launcher():
    from pipelines.runner.runners import unknown_arguments

    assert unknown_arguments(["--runner=DaskRunner", "--dask_client_address=tcp://h:8786"]) == []


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


def _graph_tasks(build) -> int:
    """Graph tasks of the pipeline `build(p)` makes (no Reshuffle: no client needed)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.runner.dask_graph import graph_keys

    pipeline = beam.Pipeline(options=PipelineOptions([]))
    build(pipeline)
    return len(graph_keys(pipeline, None))


def test_a_chain_of_steps_is_one_task_per_partition():
    """Beam-style fusion: Create -> Map -> Map -> Map over 3 elements is 3 tasks (dask's own
    fusion left an alias task per chain, and each step was a task of its own before)."""
    assert _graph_tasks(lambda p: p | beam.Create([1, 2, 3]) | "A" >> beam.Map(str)
                        | "B" >> beam.Map(len) | "C" >> beam.Map(abs)) == 3

    def two_consumers(p):
        out = (p | beam.Create([1, 2, 3])
               | beam.ParDo(_Tagged()).with_outputs("squares", "bundles", main="numbers"))
        _ = out.numbers | "N" >> beam.Map(str)
        _ = out.squares | "S" >> beam.Map(str)

    # a ParDo read by two steps runs them in its own task (they were a task each, and the
    # ParDo's outputs were held until the last of them ran)
    assert _graph_tasks(two_consumers) == 3


def test_a_stage_hands_on_only_what_steps_outside_it_read():
    """A stage's task returns the GroupByKey's split of the squares, nothing else: not the
    numbers nor the squares (read inside the task), which a worker would hold until every
    consumer had run (all of the cleaned text of a run, at 1 GB 3 GB a worker)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from dask.local import get_sync

    from pipelines.runner.dask_graph import graph_keys
    from pipelines.runner.dask_stage import unpack

    pipeline = beam.Pipeline(options=PipelineOptions([]))
    out = (pipeline | beam.Create([1, 2, 3])
           | beam.ParDo(_Tagged()).with_outputs("squares", "bundles", main="numbers"))
    _ = out.numbers | "N" >> beam.Map(str)
    _ = (out.squares | "Key" >> beam.Map(lambda s: (s % 2, s)) | beam.GroupByKey()
         | "Sum" >> beam.MapTuple(lambda k, vs: (k, sum(vs))))
    tasks = graph_keys(pipeline, None)
    created = sorted(key for key in tasks if key[0].startswith("create:"))
    groups = [key for key in tasks if key[0].startswith("group:")]
    assert len(created) == 3 and len(groups) == 1
    results = get_sync(tasks, created)
    for n, exports in enumerate(results, 1):
        [(export, split)] = exports.items()  # one export: the split, one list a group
        assert len(split) == 1 and isinstance(split[0], bytes)  # each part packed
        assert unpack(split[0]) == [(n * n % 2, n * n)]
    assert get_sync(tasks, groups) == ({},)  # the sums: read by no step, handed on to none
    # the run's last task waits for the group stage only: the created stages' exports are
    # dropped once the group has read them (waiting for it too, they stayed to the end)
    from pipelines.runner.dask_graph import graph

    done = graph(pipeline, None)
    waits_for = {key[0].split("-")[0] for key in done.dask[done.key][1:]}
    assert waits_for == {"group:GroupByKey/GroupByKey"}


# what the steps of test_a_stage_streams_its_elements saw, in order (get_sync runs the graph
# in this process)
SEEN: list = []


def _emit(n):
    for i in range(n):
        SEEN.append(("emit", i))
        yield i


def _take(i):
    SEEN.append(("take", i))
    return i


def test_a_stage_streams_its_elements_through_its_steps():
    """Each output goes into the step that reads it before the next is made, as in Beam's
    fused stages: a task holds one element between steps, not a step's whole output (a read
    task's documents, then its cleaned documents, 2 x 64 MB a worker)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from dask.local import get_sync

    from pipelines.runner.dask_graph import graph_keys

    pipeline = beam.Pipeline(options=PipelineOptions([]))
    _ = (pipeline | beam.Create([3]) | "Emit" >> beam.FlatMap(_emit)
         | "Take" >> beam.Map(_take))
    tasks = graph_keys(pipeline, None)
    SEEN.clear()
    get_sync(tasks, list(tasks))
    assert SEEN == [("emit", 0), ("take", 0), ("emit", 1), ("take", 1), ("emit", 2),
                    ("take", 2)]


def test_a_group_by_key_is_a_split_per_input_and_a_group_per_output_partition():
    """3 input partitions, 1 output partition (no Reshuffle planned more): 3 splits, each
    with its Create and Map nested, and 1 group with the leaf's Map nested."""
    assert _graph_tasks(lambda p: p | beam.Create(["a", "b", "a"]) | beam.Map(lambda w: (w, 1))
                        | beam.GroupByKey() | "Sum" >> beam.MapTuple(lambda k, v: sum(v))) == 4


def test_a_key_lands_in_the_same_split_in_every_process():
    """The split hashes the key's deterministic encoding (crc32), never hash(), so a key's
    list is the same on every worker; these were computed in another process."""
    from apache_beam import coders

    from pipelines.runner.dask_stage import group_part, pack, splitter

    coder = coders.FastPrimitivesCoder().as_deterministic_coder("test")

    def split_by_key(parts, items):
        buckets = []
        put = splitter(parts, coder, buckets)
        for item in items:
            put(item)
        return buckets

    keys = [b"band-0", (3, "doc-a"), "url", 12345, (0, b"\x00\xff")]
    items = [(key, n) for n, key in enumerate(keys)] * 2
    splits = split_by_key(8, items)
    assert [next(i for i, s in enumerate(splits) if key in dict(s))
            for key in keys] == [0, 2, 7, 4, 7]
    more = split_by_key(8, [("url", 9)])
    packed = [[pack(part) for part in split] for split in (splits, more)]  # as a stage hands on
    assert dict(group_part(7, coder, *packed)) == {"url": [2, 2, 9], (0, b"\x00\xff"): [4, 4]}
    # values move un-windowed (a windowed value pickles 6x slower)
    from apache_beam.transforms.window import GlobalWindows

    assert split_by_key(1, [("k", GlobalWindows.windowed_value(5))]) == [
        [("k", 5)]]
    # grouped by encoded key, as Beam groups: equal in Python, yet two keys
    groups = group_part(0, coder, [pack([(1, "int"), (1.0, "float"), (1, "again")])])
    assert {type(key): values for key, values in groups} == {int: ["int", "again"],
                                                             float: ["float"]}


def test_a_partition_moves_between_workers_in_one_pickle():
    """dask serialises a plain list whose first element leads to bytes element by element
    (seconds for a few MB of dedup band keys); a partition is pickled whole."""
    from distributed.protocol import deserialize, serialize

    from pipelines.runner.dask_stage import Partition

    rows = [(b"band", n) for n in range(1000)]
    assert serialize(rows)[0].get("is-collection")
    header, frames = serialize(Partition(rows))
    assert header["serializer"] == "pickle"
    assert deserialize(header, frames) == rows


# Beam internals the DaskRunner builds on (module, names, keyword arguments we pass): Beam
# promises none of them, so the pin in pyproject.toml allows only the minor versions the runner
# was tested with, and this says what a new one lacks.
BEAM_INTERNALS = [
    ("apache_beam.runners.common", ["_OutputHandler", "DoFnContext", "DoFnInvoker",
                                     "DoFnSignature", "Receiver"]),
    ("apache_beam.runners.dask.overrides", ["_Create", "_Flatten", "_GroupAlsoByWindow",
                                             "_GroupByKeyOnly", "_Reshuffle", "dask_overrides"]),
    ("apache_beam.runners.dask.transform_evaluator", ["defenestrate", "get_windowed_value"]),
    ("apache_beam.runners.dask.dask_runner", ["DaskOptions", "DaskRunner", "DaskRunnerResult"]),
    ("apache_beam.transforms.sideinputs", ["SideInputMap"]),
    ("apache_beam.internal.pickler", ["dumps", "loads"]),
]
OUTPUT_HANDLER_KEYWORDS = dict(
    window_fn=None, main_receivers=None, tagged_receivers={}, per_element_output_counter=None,
    output_batch_converter=None, process_yields_batches=False,
    process_batch_yields_elements=False)
INVOKER_KEYWORDS = ["context", "side_inputs", "input_args", "input_kwargs", "user_state_context",
                    "bundle_finalizer_param"]


def test_the_installed_beam_has_every_internal_the_dask_runner_uses():
    import importlib
    import inspect

    missing = []
    for module_name, names in BEAM_INTERNALS:
        module = importlib.import_module(module_name)
        missing += [f"{module_name}.{name}" for name in names if not hasattr(module, name)]
    common = importlib.import_module("apache_beam.runners.common")
    if not missing:
        try:  # a compiled class: no signature to read, so it is built as _run_bundle builds it
            common._OutputHandler(**OUTPUT_HANDLER_KEYWORDS)
        except TypeError as error:
            missing.append(f"_OutputHandler({', '.join(OUTPUT_HANDLER_KEYWORDS)}): {error}")
        parameters = inspect.signature(common.DoFnInvoker.create_invoker).parameters
        missing += [f"DoFnInvoker.create_invoker({k}=)" for k in INVOKER_KEYWORDS
                    if k not in parameters]
    assert not missing, (
        f"apache-beam {beam.__version__} lacks what pipelines/runner/dask_runner.py uses: "
        f"{', '.join(missing)}; it is tested with the versions pyproject.toml pins"
    )


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
