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
   first and becomes one partition per element. A Flatten or GroupByKey never makes more
   partitions than the last Reshuffle had elements. So the graph grows with the run's read
   tasks, not with the thread count or a fixed partition count (the stock one let partitions
   add up at every Flatten: 9,358 graph tasks whatever the input, 77,038 with 8 threads).
6. A side input was read inside the consuming task by a nested `compute` of its bag. Here it
   is a dependency of the task (one task gathering its partitions), computed once by the
   scheduler.

What a graph task costs (~2 ms of scheduler and worker time on 2 busy cores) decided the
rest; on 200 MB of text with dedup, 2 workers, the DaskRunner went from 68% of the
DirectRunner's throughput to 89-103% (bench/bench_scale.py --dask-mb 200, load 1.5-3):

- Fusion as Beam's runners do it: a step whose input has no other consumer runs inside the
  task of the step that made it (its task is nested in its consumer's), and a consumer of
  one output of a multi-output ParDo picks its tag inside its own task. Dask's own fusion is
  off: it left an alias task at the end of every fused chain (~40% of the graph).
- A GroupByKey is one task per input partition (splitting it by a stable hash of the key's
  deterministic encoding) and one per output partition (grouping its share of every split),
  not dask's tasks-based shuffle (~100 tasks each, dedup has ~50 mostly tiny ones).
- Keys read '<kind>:<transform label>-<uuid>': the scheduler learns durations per key prefix,
  and places and steals each step's tasks by its own.
- Partitions are a list subclass, pickled in one go between workers (dask serialises a plain
  list whose first element leads to bytes, a dedup band key, element by element), and a
  GroupByKey's values move without their window (6x faster to pickle and unpickle).
- Each worker thread keeps a DoFn's signature with the DoFn (inspecting it cost ~0.7 ms a
  bundle).

The launcher prints a progress line now and then (graph tasks done of all) and the workers'
own warnings (`pipelines.*` loggers: the first failures' file and offset) as they happen.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import sys
import threading
import time
import uuid
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
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

DaskOptions = stock.DaskOptions
LOG = logging.getLogger(__name__)
# Seconds between the launcher's progress lines.
PROGRESS_INTERVAL_S = 10.0
# A DoFn pickled to at most this many bytes travels inside each of its tasks (so a chain of
# ParDos fuses into one task); a larger one is one graph key, sent once to each worker.
INLINE_DOFN_BYTES = 64 << 10


class Partition(list):
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
        self.outputs = Partition()

    def __missing__(self, tag):
        receiver = self[tag] = _TagReceiver(tag, self.outputs)
        return receiver


@dataclasses.dataclass(frozen=True)
class _SideInput:
    view_type: type
    view_options: dict
    window_mapping_fn: object


@dataclasses.dataclass(frozen=True)
class Pick:
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


def _run_bundle(label: str, window_fn, args, kwargs, side_specs: list[_SideInput], pick: Pick,
                partition: Iterable, pickled_fn: bytes, *side_values: list) -> Partition:
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


def _values(values) -> Partition:
    return Partition(values)


def _concat_picked(picks: tuple[Pick, ...], *partitions) -> Partition:
    return Partition(item for pick, partition in zip(picks, partitions) for item in pick(partition))


def split_by_key(pick: Pick, parts: int, key_coder, partition) -> Partition:
    """A GroupByKey input partition -> `parts` lists of its (key, value) pairs, by a stable
    hash of the key's deterministic encoding (the same key lands in the same list on every
    worker, as Beam groups by encoded key). Values are un-windowed here, before they move: a
    batch pipeline's global window (the stock translation's), and a windowed value took 6x
    the time of its value to pickle and unpickle."""
    buckets = Partition(Partition() for _ in range(parts))
    for key, value in pick(partition):
        buckets[zlib.crc32(key_coder.encode(key)) % parts].append((key, defenestrate(value)))
    return buckets


def group_part(index: int, key_coder, *splits: list) -> Partition:
    """The index-th list of every split, grouped by encoded key, as Beam groups (so 1 and
    1.0 stay apart wherever they land): (key, [value, ...])."""
    groups: dict = {}
    for split in splits:
        for key, value in split[index]:
            group = groups.get(encoded := key_coder.encode(key))
            if group is None:
                group = groups[encoded] = (key, [])
            group[1].append(value)
    return Partition(groups.values())


def _nothing(partition) -> list:
    return []  # a leaf's outputs stay on the workers; only completion comes back


def _done(*leaves) -> None:
    return None


def _stage_name(kind: str, label: str) -> str:
    """'<kind>:<label>-<uuid>': the scheduler learns task durations per key prefix (the part
    before the uuid), so a step's tasks are placed and stolen by their own durations."""
    return f"{kind}:{label}-{uuid.uuid4().hex}"


def _bag(name: str, layer: dict, dependencies: list, partitions: int) -> db.Bag:
    return db.Bag(HighLevelGraph.from_collections(name, layer, dependencies=dependencies),
                  name, partitions)


class _Consumers(PipelineVisitor):
    """How many transforms read each transform's outputs (main or side input)."""

    def __init__(self) -> None:
        self.counts: collections.Counter = collections.Counter()

    def visit_transform(self, node: AppliedPTransform) -> None:
        for pcoll in [*node.inputs, *(side.pvalue for side in node.side_inputs)]:
            if not isinstance(pcoll, pvalue.PBegin):
                self.counts[pcoll.producer] += 1


@dataclasses.dataclass
class _BagBuilder(PipelineVisitor):
    """Every leaf transform as a Dask Bag; a ParDo's bag holds (tag, value) pairs. The tasks
    are built here, not by Bag.map/filter/groupby: a consumer picks its tag inside its own
    task, and a step whose input has no other consumer runs in the same task as the step that
    made it (its task is nested in the consumer's: Beam's fusion), so dask has nothing left to
    fuse (its fusion left an alias task at the end of every fused chain)."""

    bag_kwargs: dict
    # computes a Reshuffle's input: a one-partition bag -> its elements
    materialize: object
    consumers: collections.Counter
    # partitions of the last Reshuffle: the most a Flatten or GroupByKey makes
    partitions: int = 1
    bags: dict[AppliedPTransform, db.Bag | None] = dataclasses.field(default_factory=dict)
    # each bag's tasks, one a partition, and the bags they depend on: to nest them in a consumer
    stages: dict[AppliedPTransform, tuple[list, list]] = dataclasses.field(default_factory=dict)
    consumed: set[AppliedPTransform] = dataclasses.field(default_factory=set)
    tagged: set[AppliedPTransform] = dataclasses.field(default_factory=set)

    def source_of(self, pcoll: pvalue.PCollection) -> tuple[db.Bag, Pick]:
        """(the producer's bag, which of its elements are `pcoll`)."""
        self.consumed.add(pcoll.producer)
        return self.bags[pcoll.producer], Pick(pcoll.producer in self.tagged, pcoll.tag)

    def inputs_of(self, pcoll: pvalue.PCollection) -> tuple[list, list, Pick]:
        """(per partition of `pcoll`'s producer: its task, to nest, where this is its only
        consumer, else its key; the bags those depend on; the pick)."""
        bag, pick = self.source_of(pcoll)
        if self.consumers[pcoll.producer] == 1 and pcoll.producer in self.stages:
            tasks, dependencies = self.stages[pcoll.producer]
            return tasks, dependencies, pick
        return [(bag.name, i) for i in range(bag.npartitions)], [bag], pick

    def stage(self, node: AppliedPTransform, kind: str, tasks: list, dependencies: list
              ) -> db.Bag:
        self.stages[node] = tasks, dependencies
        name = _stage_name(kind, node.full_label)
        layer = {(name, i): task for i, task in enumerate(tasks)}
        return _bag(name, layer, dependencies, len(tasks))

    def leaves(self) -> list[db.Bag]:
        """Every leaf's tasks, each returning nothing: only completion comes back."""
        leaves = []
        for node, bag in self.bags.items():
            if node in self.consumed or bag is None:
                continue
            tasks, dependencies = self.stages.get(node) or (
                [(bag.name, i) for i in range(bag.npartitions)], [bag])
            name = _stage_name("leaf", node.full_label)
            layer = {(name, i): (_nothing, task) for i, task in enumerate(tasks)}
            leaves.append(_bag(name, layer, dependencies, len(tasks)))
        return leaves

    def visit_transform(self, node: AppliedPTransform) -> None:
        transform = node.transform
        inputs = [i for i in node.inputs if not isinstance(i, pvalue.PBegin)]
        if isinstance(transform, _Create):
            bag = self._create(node)
        elif isinstance(transform, beam.Impulse):  # one empty bytes element, as Beam's is
            bag = self.stage(node, "impulse", [(functools.partial(_values, [b""]),)], [])
        elif isinstance(transform, _GroupAlsoByWindow):
            # GroupByKey's grouping already gave (key, [values]), in the global window (the
            # stock translation's), which is all a batch pipeline has
            bag, _ = self.source_of(inputs[0])
            if inputs[0].producer in self.stages:
                self.stages[node] = self.stages[inputs[0].producer]
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
        return self.stage(node, "create", [(functools.partial(_values, c),) for c in chunks], [])

    def _gather(self, node: AppliedPTransform, pcolls: list, parts: int, kind: str) -> db.Bag:
        """`parts` partitions, the i-th concatenating partitions i, i + parts, ... of every
        input (one task each, partitions never adding up at a Flatten)."""
        sources = [self.source_of(pcoll) for pcoll in pcolls]
        tasks = []
        for index in range(parts):
            picks, keys = [], []
            for bag, pick in sources:
                for j in range(index, bag.npartitions, parts):
                    picks.append(pick)
                    keys.append((bag.name, j))
            tasks.append((functools.partial(_concat_picked, tuple(picks)), *keys))
        bags = [bag for bag, _ in sources]
        if kind != "flatten":  # a side input's or Reshuffle's: a task never nested
            name = _stage_name(kind, node.full_label)
            return _bag(name, {(name, i): t for i, t in enumerate(tasks)}, bags, parts)
        return self.stage(node, kind, tasks, bags)

    def _flatten(self, node: AppliedPTransform, pcolls: list) -> db.Bag:
        """As many partitions as its largest input, at most the last Reshuffle's count."""
        largest = max((self.bags[pcoll.producer].npartitions for pcoll in pcolls), default=1)
        return self._gather(node, pcolls, max(1, min(largest, self.partitions)), "flatten")

    def _group_by_key(self, node: AppliedPTransform) -> db.Bag:
        """A hash shuffle of one task per input partition (its split into the output's
        partitions) and one per output partition (grouping its list of every split): dask's
        tasks-based shuffle made ~100 tasks of each GroupByKey, most of them moving nothing,
        for dedup's many small ones."""
        tasks, dependencies, pick = self.inputs_of(node.inputs[0])
        parts = max(1, min(len(tasks), self.partitions))
        key_coder = coders.FastPrimitivesCoder().as_deterministic_coder(node.full_label)
        split = _stage_name("split", node.full_label)
        layer = {(split, j): (functools.partial(split_by_key, pick, parts, key_coder), task)
                 for j, task in enumerate(tasks)}
        splits = _bag(split, layer, dependencies, len(tasks))
        return self.stage(node, "group", [
            (functools.partial(group_part, index, key_coder),
             *((split, j) for j in range(len(tasks))))
            for index in range(parts)], [splits])

    def _reshuffle(self, node: AppliedPTransform) -> db.Bag:
        """One partition per element of the input, which is computed now: the graph then has
        as many read tasks as the run planned. (What produced the input runs again for its
        other outputs, the counts: a listing and a split, cheap next to the reading.)"""
        elements = self.materialize(self._gather(node, node.inputs[:1], 1, "reshuffle"))
        self.partitions = max(1, len(elements))
        chunks = [[element] for element in elements] or [[]]
        return self.stage(node, "read", [(functools.partial(_values, c),) for c in chunks], [])

    def _pardo(self, node: AppliedPTransform) -> db.Bag:
        transform = node.transform
        tasks, dependencies, pick = self.inputs_of(node.inputs[0])
        args, kwargs = transform.raw_side_inputs
        main_input = next(iter(node.main_inputs.values()))
        window_fn = main_input.windowing.windowfn if hasattr(main_input, "windowing") else None
        specs, side_keys, dependencies = [], [], list(dependencies)
        for side in node.side_inputs:
            specs.append(_SideInput(type(side), side._view_options(), side._window_mapping_fn))
            # a dependency of every task of the step, computed once by the scheduler
            values = self._gather(node, [side.pvalue], 1, "side")
            dependencies.append(values)
            side_keys.append((values.name, 0))
        fn_arg = pickler.dumps(transform.fn)
        if len(fn_arg) > INLINE_DOFN_BYTES:  # one key, sent once to each worker
            fn_bag = _stage_name("dofn", node.full_label)
            dependencies.append(_bag(fn_bag, {(fn_bag, 0): fn_arg}, [], 1))
            fn_arg = (fn_bag, 0)
        run = functools.partial(_run_bundle, transform.label, window_fn, list(args), kwargs,
                                specs, pick)
        return self.stage(node, "pardo", [(run, task, fn_arg, *side_keys) for task in tasks],
                          dependencies)


def _materializer(client):
    def materialize(bag: db.Bag) -> list:
        return client.compute(bag, optimize_graph=False).result()

    return materialize


def graph_bags(pipeline, client, bag_kwargs: dict | None = None) -> list[db.Bag]:
    """The pipeline's leaves as Dask Bags of nothing (its Reshuffles' inputs computed on
    `client`)."""
    pipeline.replace_all(dask_overrides())
    consumers = _Consumers()
    pipeline.visit(consumers)
    builder = _BagBuilder(dict(bag_kwargs or {}), _materializer(client), consumers.counts)
    pipeline.visit(builder)
    return builder.leaves()


def graph(pipeline, client, bag_kwargs: dict | None = None) -> Delayed:
    """One task that finishes when every leaf has (so the run is one future)."""
    leaves = graph_bags(pipeline, client, bag_kwargs)
    name = _stage_name("done", "pipeline")
    layer = {name: (_done, *((leaf.name, i) for leaf in leaves for i in range(leaf.npartitions)))}
    return Delayed(name, HighLevelGraph.from_collections(name, layer, dependencies=leaves))


def _import_pipeline_modules() -> None:
    # Beam warns through the root logger while it is imported ("apitools not found"); a worker
    # whose root logger has no handler would print that through Python's last-resort handler
    # on the cluster's terminal. Our own loggers' records reach the launcher (forward_logging).
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())
    import pipelines.clean.transforms  # noqa: F401  (what unpickling our DoFns imports)
    import pipelines.sources.transforms  # noqa: F401
    import pipelines.tokenize.transforms  # noqa: F401
    import pipelines.write  # noqa: F401


def _dashboard(client) -> str:
    """Where the cluster's dashboard is (its task stream, workers' memory and CPU), as the run's
    first lines say it: a run of hours is watched there."""
    try:
        if "dashboard" in client.scheduler_info().get("services", {}):
            return f"dashboard {client.dashboard_link}"
    except Exception:  # noqa: BLE001 - a line of the log is not worth failing the run over
        pass
    return "no dashboard (the scheduler serves none)"


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
            LOG.info("dask: scheduler %s, %s", self._client.scheduler.address,
                     _dashboard(self._client))
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
        done = client.compute(graph(pipeline, client, bag_kwargs), optimize_graph=False)
        return DaskRunResult(client, [done])


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
