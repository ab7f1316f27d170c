"""The preprocess pipeline on Beam's DaskRunner (our fixed subclass, pipelines/runner/dask_runner.py)
against a dask.distributed LocalCluster of 2 worker processes: its shards are byte-identical to
the DirectRunner's, with and without dedup. Inputs: the WebText sample documents as JSONL (every
document twice, so dedup has work) and Gutenberg books."""

from __future__ import annotations

import apache_beam as beam
import pytest

from tests.helpers.dask_runner import Tagged

pytest.importorskip("dask.distributed")


def test_dask_options_are_known_to_the_launcher():
    from pipelines.runner.runners import unknown_arguments

    assert unknown_arguments(["--runner=DaskRunner", "--dask_client_address=tcp://h:8786"]) == []


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
               | beam.ParDo(Tagged()).with_outputs("squares", "bundles", main="numbers"))
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
           | beam.ParDo(Tagged()).with_outputs("squares", "bundles", main="numbers"))
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
