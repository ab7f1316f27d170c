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
   by its threads. Here each bundle gets fresh receivers and its own copy of the DoFn.
4. Only the last transform's bag was computed, so of several leaves (the shards' Finish, the
   rejects, the parquet copy) all but one never ran. Here every leaf is computed, in one graph.
5. `Create` put up to 128 elements in one partition and `Reshuffle` did nothing, so a job
   planned as a handful of elements ran on one worker. Here Create gives each element its own
   partition and Reshuffle splits its input over many partitions (4 per worker thread); a
   Flatten or GroupByKey never makes more than that many (the stock one let partitions add up
   at every Flatten, and the graph of our dedup grew past what its scheduler handled in time).
6. A side input was read inside the consuming task by a nested `compute` of its bag. Here it
   is a dependency of the task (a Delayed list), computed once by the scheduler.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable

import apache_beam as beam
import dask
import dask.bag as db
from apache_beam import pvalue
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

DaskOptions = stock.DaskOptions
# Reshuffle's output partitions per worker thread: enough for the scheduler to balance tasks of
# uneven length, few enough that empty partitions cost nothing.
PARTITIONS_PER_THREAD = 4


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
        self.outputs: list = []

    def __missing__(self, tag):
        receiver = self[tag] = _TagReceiver(tag, self.outputs)
        return receiver


@dataclasses.dataclass(frozen=True)
class _SideInput:
    view_type: type
    view_options: dict
    window_mapping_fn: object


def _run_bundle(items: Iterable, pickled_fn: bytes, label: str, window_fn, args, kwargs,
                side_specs: list[_SideInput], *side_values: list) -> list:
    """One partition as one bundle: setup, start, process each, finish, teardown; returns the
    (tag, value) outputs, finish_bundle's included."""
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
    invoker = DoFnInvoker.create_invoker(
        DoFnSignature(pickler.loads(pickled_fn)),
        handler,
        context=DoFnContext(label, state=None),
        side_inputs=side_inputs,
        input_args=args,
        input_kwargs=kwargs,
        user_state_context=None,
        bundle_finalizer_param=beam.DoFn.BundleFinalizerParam(),
    )
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(get_windowed_value(item, window_fn))
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return receivers.outputs


def _has_tag(tag, output) -> bool:
    return output[0] == tag


def _value(output):
    return output[1]


def _key(item):
    return item[0]


def _group_values(group):
    """(key, [(key, reified value), ...]) from Bag.groupby -> (key, [value, ...])."""
    key, items = group
    return key, [defenestrate(item[1]) for item in items]


def _concat(partitions: list[list]) -> list:
    return [item for partition in partitions for item in partition]


def _nothing(partition) -> list:
    return []  # a leaf's outputs stay on the workers; only completion comes back


@dataclasses.dataclass
class _BagBuilder(PipelineVisitor):
    """Every leaf transform as a Dask Bag; a ParDo's bag holds (tag, value) pairs."""

    bag_kwargs: dict
    reshuffle_partitions: int
    bags: dict[AppliedPTransform, db.Bag | None] = dataclasses.field(default_factory=dict)
    consumed: set[AppliedPTransform] = dataclasses.field(default_factory=set)
    tagged: set[AppliedPTransform] = dataclasses.field(default_factory=set)

    def bag_of(self, pcoll: pvalue.PCollection) -> db.Bag:
        self.consumed.add(pcoll.producer)
        bag = self.bags[pcoll.producer]
        if pcoll.producer in self.tagged:
            return bag.filter(functools.partial(_has_tag, pcoll.tag)).map(_value)
        return bag

    def leaves(self) -> list[db.Bag]:
        return [bag for node, bag in self.bags.items()
                if node not in self.consumed and bag is not None]

    def visit_transform(self, node: AppliedPTransform) -> None:
        transform = node.transform
        inputs = [self.bag_of(i) for i in node.inputs if not isinstance(i, pvalue.PBegin)]
        if isinstance(transform, _Create):
            size = self.bag_kwargs.get("partition_size") or 1
            bag = db.from_sequence(transform.values, partition_size=size)
        elif isinstance(transform, _GroupAlsoByWindow):
            # GroupByKey's grouping already gave (key, [values]), in the global window (the
            # stock translation's), which is all a batch pipeline has
            bag = inputs[0]
        elif isinstance(transform, beam.ParDo):
            bag = self._pardo(node, inputs[0])
            self.tagged.add(node)
        elif isinstance(transform, _GroupByKeyOnly):
            partitions = min(inputs[0].npartitions, self.reshuffle_partitions)
            bag = inputs[0].groupby(_key, npartitions=partitions).map(_group_values)
        elif isinstance(transform, _Flatten):
            bag = db.concat(inputs) if inputs else db.from_sequence([])
            if bag.npartitions > self.reshuffle_partitions:
                # partitions add up at every Flatten, and each GroupByKey downstream kept its
                # input's count: a graph with many of them grew to thousands of tiny tasks
                bag = bag.repartition(self.reshuffle_partitions)
        elif isinstance(transform, _Reshuffle):
            bag = inputs[0].repartition(max(inputs[0].npartitions, self.reshuffle_partitions))
        elif inputs:
            bag = inputs[0]
        else:
            bag = None
        self.bags[node] = bag

    def _pardo(self, node: AppliedPTransform, input_bag: db.Bag) -> db.Bag:
        transform = node.transform
        args, kwargs = transform.raw_side_inputs
        main_input = next(iter(node.main_inputs.values()))
        window_fn = main_input.windowing.windowfn if hasattr(main_input, "windowing") else None
        specs, values = [], []
        for side in node.side_inputs:
            specs.append(_SideInput(type(side), side._view_options(), side._window_mapping_fn))
            values.append(dask.delayed(_concat)(self.bag_of(side.pvalue).to_delayed(optimize_graph=False)))
        # one graph key for the DoFn's bytes, sent once to each worker, not inlined in every task
        pickled_fn = dask.delayed(pickler.dumps(transform.fn), pure=True)
        return input_bag.map_partitions(
            _run_bundle, pickled_fn, transform.label, window_fn, list(args), kwargs, specs,
            *values)


class DaskRunner(stock.DaskRunner):
    """Runs a pipeline on a dask.distributed client (see the module docstring for what differs
    from Beam's own DaskRunner)."""

    def run_pipeline(self, pipeline, options):
        import dask.distributed as ddist

        dask_options = options.view_as(DaskOptions).get_all_options(
            drop_default=True, current_only=True)
        bag_kwargs = DaskOptions._extract_bag_kwargs(dask_options)
        client = ddist.Client(**dask_options)
        threads = sum(client.nthreads().values()) or 1
        pipeline.replace_all(dask_overrides())
        builder = _BagBuilder(bag_kwargs, PARTITIONS_PER_THREAD * threads)
        pipeline.visit(builder)
        leaves = [leaf.map_partitions(_nothing) for leaf in builder.leaves()]
        futures = client.compute(leaves)
        return stock.DaskRunnerResult(client, futures)
