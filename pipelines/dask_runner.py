"""Beam's DaskRunner with the defects that make Beam 2.77's stock runner lose, duplicate or
serialise data fixed, so the preprocess pipeline runs on a `dask.distributed` cluster.

    python -m pipelines.preprocess --runner DaskRunner --dask_client_address tcp://host:8786 ...

The stock runner (apache_beam/runners/dask) translates each Beam transform into a Dask Bag
operation. This subclass keeps its overrides, option class and result type, and replaces the
translation where the stock one is wrong:

1. A multi-output ParDo's bag held every output untagged, and each consumer of any one of its
   outputs read the whole bag: every output went to every tagged collection. Here a ParDo's
   bag holds (tag, value) pairs and each consumer reads its own tag.
2. What `finish_bundle` emitted was collected before `finish_bundle` ran, so it was dropped
   (our per-bundle counts, the tokenizer's last batch). Here outputs are taken after it.
3. Receivers were one list shared by every bundle a worker ran, and the DoFn one object shared
   by its threads. Here each bundle gets fresh receivers, and each worker thread its own copy
   of the DoFn (set up once, reused bundle after bundle).
4. Only the last transform's bag was computed, so of several leaves (the shards' Finish, the
   rejects, the parquet copy) all but one never ran. Here every leaf is computed, in one graph.
5. `Create` put up to 128 elements in one partition and `Reshuffle` did nothing, so a job
   planned as a handful of elements ran on one worker. Here Create gives each element its own
   partition, and a Reshuffle's input (our read tasks: a few small elements) is computed
   first and becomes one partition per element. A Flatten or GroupByKey never makes more partitions than the last
   Reshuffle had elements. So the graph grows with the run's read tasks, not with the thread
   count or a fixed partition count (the stock one let partitions add up at every Flatten:
   9,358 graph tasks whatever the input, 77,038 with 8 threads).
6. A side input was read inside the consuming task by a nested `compute` of its bag. Here it
   is a dependency of the task (a Delayed list), computed once by the scheduler.

The launcher prints a progress line now and then (graph tasks done of all) and the workers'
own warnings (`pipelines.*` loggers: the first failures' file and offset) as they happen.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
import threading
import time
import zlib
from collections.abc import Iterable

import apache_beam as beam
import dask.bag as db
from apache_beam import coders, pvalue
from apache_beam.internal import pickler
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.runners.common import (
    DoFnContext,
    DoFnInvoker,
    DoFnSignature,
    Receiver,
    _OutputHandler,
)
from apache_beam.runners.dask import dask_runner as stock
from apache_beam.runners.dask.overrides import (
    _Create,
    _Flatten,
    _GroupAlsoByWindow,
    _GroupByKeyOnly,
    _Reshuffle,
    dask_overrides,
)
from apache_beam.runners.dask.transform_evaluator import defenestrate, get_windowed_value
from apache_beam.transforms.sideinputs import SideInputMap
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

DaskOptions = stock.DaskOptions
# Seconds between the launcher's progress lines.
PROGRESS_INTERVAL_S = 10.0
# A DoFn pickled to at most this many bytes travels inside each of its tasks (so a chain of
# ParDos fuses into one task); a larger one is one graph key, sent once to each worker.
INLINE_DOFN_BYTES = 64 << 10


class _Partition(list):
    """A partition's elements. A plain list whose first element leads (through tuples) to
    bytes, such as a dedup band key, is serialised by dask element by element when it moves
    between workers (seconds for a few MB); a subclass is pickled in one go."""

    __slots__ = ()


class _TagReceiver(Receiver):
    def __init__(self, tag: str | None, outputs: list) -> None:
        self.tag = tag
        self.outputs = outputs

    def receive(self, windowed_value) -> None:
        self.outputs.append((self.tag, defenestrate(windowed_value)))


class _Receivers(dict):
    """Tag -> receiver, made on first use; every receiver appends to one list of this bundle."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs = _Partition()

    def __missing__(self, tag):
        receiver = self[tag] = _TagReceiver(tag, self.outputs)
        return receiver


@dataclasses.dataclass(frozen=True)
class _SideInput:
    view_type: type
    view_options: dict
    window_mapping_fn: object


@dataclasses.dataclass(frozen=True)
class _Pick:
    """Which elements of a producer's partition a PCollection is: all of them, or a ParDo's
    outputs of one tag. Applied inside the consuming task, not as a task of its own."""

    tagged: bool
    tag: str | None = None

    def __call__(self, partition: Iterable) -> Iterable:
        if not self.tagged:
            return partition
        return [value for tag, value in partition if tag == self.tag]


# Each worker thread's DoFns (with their signatures), set up once and reused for every bundle
# it runs, as Beam's own workers do: a setup may load a tokenizer or a language model (a second
# or more), and a run has a bundle per task for each of ~100 steps. Never torn down (Beam
# promises teardown only as best effort; ours remove temporary files that a worker's exit
# leaves to the OS anyway).
_DOFNS = threading.local()
# A long-lived cluster runs job after job: past this many, a thread starts its cache afresh.
_MAX_DOFNS = 512


def _dofn(label: str, pickled_fn: bytes) -> tuple[beam.DoFn, DoFnSignature, bool]:
    """(this thread's DoFn for the step, its signature, whether it is new and needs its setup).
    The signature is kept with it: inspecting the DoFn's methods took ~0.7 ms a bundle."""
    cache = getattr(_DOFNS, "cache", None)
    if cache is None or len(cache) >= _MAX_DOFNS:
        cache = _DOFNS.cache = {}
    key = (label, pickled_fn)
    if key in cache:
        return *cache[key], False
    fn = pickler.loads(pickled_fn)
    cache[key] = fn, DoFnSignature(fn)
    return *cache[key], True


def _run_bundle(label: str, window_fn, args, kwargs, side_specs: list[_SideInput], pick: _Pick,
                partition: Iterable, pickled_fn: bytes, *side_values: list) -> _Partition:
    """One partition (the `pick` of it) as one bundle: start, process each, finish (setup the
    first time this thread runs the step); returns the (tag, value) outputs, finish_bundle's
    included."""
    receivers = _Receivers()
    handler = _OutputHandler(
        window_fn=window_fn,
        main_receivers=receivers[None],
        tagged_receivers=receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    side_inputs = [
        SideInputMap(spec.view_type, spec.view_options,
                     [get_windowed_value(v, spec.window_mapping_fn) for v in values])
        for spec, values in zip(side_specs, side_values)
    ]
    fn, signature, new = _dofn(label, pickled_fn)
    invoker = DoFnInvoker.create_invoker(
        signature,
        handler,
        context=DoFnContext(label, state=None),
        side_inputs=side_inputs,
        input_args=args,
        input_kwargs=kwargs,
        user_state_context=None,
        bundle_finalizer_param=beam.DoFn.BundleFinalizerParam(),
    )
    try:
        if new:
            invoker.invoke_setup()
        invoker.invoke_start_bundle()
        for item in pick(partition):
            invoker.invoke_process(get_windowed_value(item, window_fn))
        invoker.invoke_finish_bundle()
    except BaseException:
        _DOFNS.cache.pop((label, pickled_fn), None)  # a failed DoFn's state is not reused
        raise
    return receivers.outputs


def _values(values) -> _Partition:
    return _Partition(values)


def _concat_picked(picks: tuple[_Pick, ...], *partitions) -> _Partition:
    return _Partition(item for pick, partition in zip(picks, partitions) for item in pick(partition))


def _split_by_key(pick: _Pick, parts: int, key_coder, partition) -> _Partition:
    """A GroupByKey input partition -> `parts` lists of its (key, value) pairs, by a stable
    hash of the key's deterministic encoding (the same key lands in the same list on every
    worker, as Beam groups by encoded key)."""
    buckets = _Partition(_Partition() for _ in range(parts))
    for item in pick(partition):
        buckets[zlib.crc32(key_coder.encode(item[0])) % parts].append(item)
    return buckets


def _group_part(index: int, *splits: list) -> _Partition:
    """The index-th list of every split, grouped: (key, [value, ...]) (values un-windowed:
    a batch pipeline's global window, as the stock translation)."""
    groups: dict = {}
    for split in splits:
        for key, value in split[index]:
            groups.setdefault(key, []).append(defenestrate(value))
    return _Partition(groups.items())


def _nothing(partition) -> list:
    return []  # a leaf's outputs stay on the workers; only completion comes back


def _done(*leaves) -> None:
    return None


def _layer_name(kind: str, label: str, *parts) -> str:
    """'beam-<token>-<kind>:<label>'. Every layer shares the key prefix 'beam': dask's linear
    fusion names a fused chain after its prefixes, and where they differ it keeps the chain's
    last key as an alias, a task like any other (~40% of the graph was aliases)."""
    return f"beam-{tokenize(kind, label, *parts)}-{kind}:{label}"


def _bag(name: str, layer: dict, dependencies: list, partitions: int) -> db.Bag:
    return db.Bag(HighLevelGraph.from_collections(name, layer, dependencies=dependencies),
                  name, partitions)


@dataclasses.dataclass
class _BagBuilder(PipelineVisitor):
    """Every leaf transform as a Dask Bag; a ParDo's bag holds (tag, value) pairs. Each layer
    is built here (not by Bag.map/filter/groupby), so that consumers pick their tag inside
    their own task and dask fuses every linear chain of ParDos into one task."""

    bag_kwargs: dict
    # computes a Reshuffle's input: a one-partition bag -> its elements
    materialize: object
    # partitions of the last Reshuffle: the most a Flatten or GroupByKey makes
    partitions: int = 1
    bags: dict[AppliedPTransform, db.Bag | None] = dataclasses.field(default_factory=dict)
    consumed: set[AppliedPTransform] = dataclasses.field(default_factory=set)
    tagged: set[AppliedPTransform] = dataclasses.field(default_factory=set)

    def source_of(self, pcoll: pvalue.PCollection) -> tuple[db.Bag, _Pick]:
        """(the producer's bag, which of its elements are `pcoll`)."""
        self.consumed.add(pcoll.producer)
        return self.bags[pcoll.producer], _Pick(pcoll.producer in self.tagged, pcoll.tag)

    def leaves(self) -> list[db.Bag]:
        return [bag for node, bag in self.bags.items()
                if node not in self.consumed and bag is not None]

    def visit_transform(self, node: AppliedPTransform) -> None:
        transform = node.transform
        inputs = [i for i in node.inputs if not isinstance(i, pvalue.PBegin)]
        if isinstance(transform, _Create):
            bag = self._create(node)
        elif isinstance(transform, _GroupAlsoByWindow):
            # GroupByKey's grouping already gave (key, [values]), in the global window (the
            # stock translation's), which is all a batch pipeline has
            bag, _ = self.source_of(inputs[0])
        elif isinstance(transform, beam.ParDo):  # after _GroupAlsoByWindow, a ParDo
            bag = self._pardo(node)
            self.tagged.add(node)
        elif isinstance(transform, _GroupByKeyOnly):
            bag = self._group_by_key(node)
        elif isinstance(transform, _Flatten):
            bag = self._flatten(node, inputs)
        elif isinstance(transform, _Reshuffle):
            bag = self._reshuffle(node)
        elif inputs:
            bag = self._flatten(node, inputs[:1])
        else:
            bag = None
        self.bags[node] = bag

    def _create(self, node: AppliedPTransform) -> db.Bag:
        size = self.bag_kwargs.get("partition_size") or 1
        values = list(node.transform.values)
        chunks = [values[i:i + size] for i in range(0, len(values), size)] or [[]]
        name = _layer_name("create", node.full_label, node.transform.values)
        layer = {(name, i): (functools.partial(_values, chunk),) for i, chunk in enumerate(chunks)}
        return _bag(name, layer, [], len(chunks))

    def _gather(self, node: AppliedPTransform, pcolls: list, parts: int, kind: str) -> db.Bag:
        """`parts` partitions, the i-th concatenating partitions i, i + parts, ... of every
        input (one task each, partitions never adding up at a Flatten)."""
        sources = [self.source_of(pcoll) for pcoll in pcolls]
        bags = [bag for bag, _ in sources]
        name = _layer_name(kind, node.full_label, *(b.name for b in bags),
                           *(p for _, p in sources), parts)
        layer = {}
        for index in range(parts):
            picks, keys = [], []
            for bag, pick in sources:
                for j in range(index, bag.npartitions, parts):
                    picks.append(pick)
                    keys.append((bag.name, j))
            layer[(name, index)] = (functools.partial(_concat_picked, tuple(picks)), *keys)
        return _bag(name, layer, bags, parts)

    def _flatten(self, node: AppliedPTransform, pcolls: list) -> db.Bag:
        """As many partitions as its largest input, at most the last Reshuffle's count."""
        largest = max((self.bags[pcoll.producer].npartitions for pcoll in pcolls), default=1)
        return self._gather(node, pcolls, max(1, min(largest, self.partitions)), "flatten")

    def _group_by_key(self, node: AppliedPTransform) -> db.Bag:
        """A hash shuffle of one task per input partition (its split into the output's
        partitions) and one per output partition (grouping its list of every split): dask's
        tasks-based shuffle made ~100 tasks of each GroupByKey, most of them moving nothing,
        for dedup's many small ones."""
        bag, pick = self.source_of(node.inputs[0])
        parts = max(1, min(bag.npartitions, self.partitions))
        key_coder = coders.FastPrimitivesCoder().as_deterministic_coder(node.full_label)
        split = _layer_name("split", node.full_label, bag.name, pick, parts)
        layer = {(split, j): (functools.partial(_split_by_key, pick, parts, key_coder),
                              (bag.name, j))
                 for j in range(bag.npartitions)}
        name = _layer_name("group", node.full_label, split)
        layer.update({(name, index): (functools.partial(_group_part, index),
                                      *((split, j) for j in range(bag.npartitions)))
                      for index in range(parts)})
        return _bag(name, layer, [bag], parts)

    def _reshuffle(self, node: AppliedPTransform) -> db.Bag:
        """One partition per element of the input, which is computed now: the graph then has
        as many read tasks as the run planned. (What produced the input runs again for its
        other outputs, the counts: a listing and a split, cheap next to the reading.)"""
        elements = self.materialize(self._gather(node, node.inputs[:1], 1, "reshuffle"))
        self.partitions = max(1, len(elements))
        name = _layer_name("reshuffled", node.full_label, elements)
        chunks = [[element] for element in elements] or [[]]
        layer = {(name, i): (functools.partial(_values, chunk),) for i, chunk in enumerate(chunks)}
        return _bag(name, layer, [], len(chunks))

    def _pardo(self, node: AppliedPTransform) -> db.Bag:
        transform = node.transform
        bag, pick = self.source_of(node.inputs[0])
        args, kwargs = transform.raw_side_inputs
        main_input = next(iter(node.main_inputs.values()))
        window_fn = main_input.windowing.windowfn if hasattr(main_input, "windowing") else None
        specs, side_keys, dependencies = [], [], [bag]
        for side in node.side_inputs:
            specs.append(_SideInput(type(side), side._view_options(), side._window_mapping_fn))
            # a dependency of every task of the step, computed once by the scheduler
            values = self._gather(node, [side.pvalue], 1, "side")
            dependencies.append(values)
            side_keys.append((values.name, 0))
        pickled_fn = pickler.dumps(transform.fn)
        name = _layer_name("pardo", node.full_label, bag.name, pick, pickled_fn, side_keys)
        layer = {}
        fn_arg = pickled_fn
        if len(pickled_fn) > INLINE_DOFN_BYTES:
            fn_arg = f"{name}-fn"
            layer[fn_arg] = pickled_fn
        run = functools.partial(_run_bundle, transform.label, window_fn, list(args), kwargs,
                                specs, pick)
        layer.update({(name, i): (run, (bag.name, i), fn_arg, *side_keys)
                      for i in range(bag.npartitions)})
        return _bag(name, layer, dependencies, bag.npartitions)


def _materializer(client):
    def materialize(bag: db.Bag) -> list:
        return client.compute(bag).result()

    return materialize


def graph_bags(pipeline, client, bag_kwargs: dict | None = None) -> list[db.Bag]:
    """The pipeline's leaves as Dask Bags of nothing (its Reshuffles' inputs computed on
    `client`)."""
    pipeline.replace_all(dask_overrides())
    builder = _BagBuilder(dict(bag_kwargs or {}), _materializer(client))
    pipeline.visit(builder)
    bags = []
    for leaf in builder.leaves():
        name = f"{leaf.name}-done"  # the 'beam' prefix: fused into the leaf's own tasks
        layer = {(name, i): (_nothing, (leaf.name, i)) for i in range(leaf.npartitions)}
        bags.append(_bag(name, layer, [leaf], leaf.npartitions))
    return bags


def graph(pipeline, client, bag_kwargs: dict | None = None) -> Delayed:
    """One task that finishes when every leaf has (so the run is one future)."""
    leaves = graph_bags(pipeline, client, bag_kwargs)
    name = _layer_name("done", "pipeline", *(leaf.name for leaf in leaves))
    layer = {name: (_done, *((leaf.name, i) for leaf in leaves for i in range(leaf.npartitions)))}
    return Delayed(name, HighLevelGraph.from_collections(name, layer, dependencies=leaves))


def _import_pipeline_modules() -> None:
    # Beam warns through the root logger while it is imported ("apitools not found"); a worker
    # whose root logger has no handler would print that through Python's last-resort handler
    # on the cluster's terminal. Our own loggers' records reach the launcher (forward_logging).
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())
    import pipelines.transforms  # noqa: F401  (what unpickling our DoFns imports)
    import pipelines.write  # noqa: F401


class DaskRunner(stock.DaskRunner):
    """Runs a pipeline on a dask.distributed client (see the module docstring for what differs
    from Beam's own DaskRunner)."""

    def __init__(self) -> None:
        super().__init__()
        self._client = None

    def client(self, options):
        """The client of the cluster the options name (made once, shared by the calls)."""
        if self._client is None:
            import dask.distributed as ddist

            dask_options = options.view_as(DaskOptions).get_all_options(
                drop_default=True, current_only=True)
            DaskOptions._extract_bag_kwargs(dask_options)  # what is left is the client's
            self._client = ddist.Client(**dask_options)
            # The workers import Beam and our modules (seconds) now, while the launcher loads
            # the tokenizer and builds the graph, not when the first task reaches them.
            threading.Thread(
                target=self._client.run, args=(_import_pipeline_modules,), daemon=True
            ).start()
        return self._client

    def worker_threads(self, options) -> int:
        """Threads of the cluster's workers: what the launcher sizes the read tasks for."""
        return sum(self.client(options).nthreads().values()) or 1

    def run_pipeline(self, pipeline, options):
        dask_options = options.view_as(DaskOptions).get_all_options(
            drop_default=True, current_only=True)
        bag_kwargs = DaskOptions._extract_bag_kwargs(dask_options)
        client = self.client(options)
        # our loggers' records on the workers (the first failures, file and offset) are
        # printed by the launcher as they happen, not only in each worker's log
        client.forward_logging("pipelines", level=logging.WARNING)
        return DaskRunResult(client, [client.compute(graph(pipeline, client, bag_kwargs))])


class DaskRunResult(stock.DaskRunnerResult):
    """The stock result, printing a progress line every PROGRESS_INTERVAL_S while it waits."""

    def wait_until_finish(self, duration=None) -> str:
        done = threading.Event()
        threading.Thread(
            target=_report_progress, args=(self.client, self.futures, done), daemon=True
        ).start()
        try:
            return super().wait_until_finish(duration)
        finally:
            done.set()


def _pending_tasks(keys: list, dask_scheduler=None) -> tuple[int, int]:
    """(tasks of the graph under `keys` not yet run, tasks of that graph the scheduler holds);
    runs on the scheduler."""
    seen, stack, pending = set(), list(keys), 0
    while stack:
        task = dask_scheduler.tasks.get(stack.pop())
        if task is None or task.key in seen:
            continue
        seen.add(task.key)
        pending += task.state in ("waiting", "queued", "processing", "no-worker")
        stack.extend(dependency.key for dependency in task.dependencies)
    return pending, len(seen)


def _report_progress(client, futures, done: threading.Event) -> None:
    """'dask: N of M graph tasks done' on stderr every PROGRESS_INTERVAL_S until `done`."""
    keys = [future.key for future in futures]
    started = time.monotonic()
    total = None
    while not done.wait(PROGRESS_INTERVAL_S):
        try:
            pending, held = client.run_on_scheduler(_pending_tasks, keys)
        except Exception:  # a progress line is not worth failing the run over
            return
        total = total or held  # every task is held at first; finished ones are then forgotten
        print(
            f"dask: {total - pending:,} of {total:,} graph tasks done, "
            f"{time.monotonic() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
