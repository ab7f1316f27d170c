"""What a dask worker runs for our DaskRunner: one partition of a stage (pipelines/runner/dask_graph.py
says what a stage is and how the graph is made), as one bundle of each of its steps.

The root's elements go through the steps one at a time, each output straight into the steps
that read it, as Beam's fused stages run, and onto the lists the stage hands on (its exports);
a GroupByKey's split is a step too, cutting its input by a stable hash of the key's encoding.
Each worker thread keeps its DoFns set up for the bundles of one run (_dofn). Partitions and
a stage's exports are list and dict subclasses, pickled in one go between workers (dask
serialises a plain list whose first element leads to bytes, a dedup band key, element by
element), and a GroupByKey's values move without their window (6x faster).
"""

from __future__ import annotations

import dataclasses
import pickle
import threading
import zlib
from collections.abc import Iterable

import apache_beam as beam
from apache_beam.internal import pickler
from apache_beam.runners.common import (
    DoFnContext,
    DoFnInvoker,
    DoFnSignature,
    Receiver,
    _OutputHandler,
)
from apache_beam.runners.dask.transform_evaluator import defenestrate, get_windowed_value
from apache_beam.transforms.sideinputs import SideInputMap


class Partition(list):
    """A partition's elements. A plain list whose first element leads (through tuples) to
    bytes, such as a dedup band key, is serialised by dask element by element when it moves
    between workers (seconds for a few MB); a subclass is pickled in one go."""

    __slots__ = ()


class Exports(dict):
    """What one partition of a stage hands on: (slot, Pick) -> its elements packed (a list of
    packed parts for a GroupByKey's split); a dict subclass for the same reason as Partition."""

    __slots__ = ()


def pack(elements: list) -> bytes:
    """Elements handed on, as they wait in a worker for their readers: pickled, as Beam's
    runners hold what crosses a shuffle encoded. As objects they took 3-5x the room (dedup's
    exact records and candidate shingle sets, the rejects), and they waited for the last read
    task of the run: the workers' peak grew with the input (1.40x from 250 MB to 1 GB with
    dedup, 1.19x without)."""
    return pickle.dumps(elements, protocol=pickle.HIGHEST_PROTOCOL)


def unpack(packed: bytes) -> list:
    return pickle.loads(packed)


@dataclasses.dataclass(frozen=True)
class SideInput:
    view_type: type
    view_options: dict
    window_mapping_fn: object


@dataclasses.dataclass(frozen=True)
class Pick:
    """Which elements of a step's outputs a PCollection is: all of them, or a ParDo's outputs
    of one tag (a ParDo's outputs are (tag, value) pairs)."""

    tagged: bool
    tag: str | None = None

    def __call__(self, partition: Iterable) -> Iterable:
        if not self.tagged:
            return partition
        return [value for tag, value in partition if tag == self.tag]


ALL = Pick(False)

# Each worker thread's DoFns (with their signatures), set up once and reused for every bundle
# it runs of one pipeline run, as Beam's own workers do: a setup may load a tokenizer or a
# language model (a second or more), and a run has a bundle per task for each of ~100 steps.
# A thread keeps one run's DoFns: a long-lived cluster runs job after job, and a DoFn set up
# for one is not set up for the next (a rerun into the same output found its setup's work
# folders removed with the last run's). Never torn down (Beam promises teardown only as best
# effort; ours remove temporary files that a worker's exit leaves to the OS anyway).
_DOFNS = threading.local()


def _dofn(run: str, label: str, pickled_fn: bytes) -> tuple[beam.DoFn, DoFnSignature, bool]:
    """(this thread's DoFn for the step of run `run`, its signature, whether it is new and needs
    its setup). The signature is kept with it: inspecting the DoFn's methods took ~0.7 ms a
    bundle."""
    if getattr(_DOFNS, "run", None) != run:
        _DOFNS.run, _DOFNS.cache = run, {}
    cache = _DOFNS.cache
    key = (label, pickled_fn)
    if key in cache:
        return *cache[key], False
    fn = pickler.loads(pickled_fn)
    cache[key] = fn, DoFnSignature(fn)
    return *cache[key], True


def splitter(parts: int, key_coder, buckets: list):
    """A function putting a (key, value) element (windowed or not) into `parts` lists (made
    here, appended to `buckets`), by a stable hash of the key's deterministic encoding: the
    same key lands in the same list on every worker, as Beam groups by encoded key. Values
    are un-windowed before they move: a batch pipeline's global window (the stock
    translation's), and a windowed value took 6x the time of its value to pickle and
    unpickle."""
    buckets.extend(Partition() for _ in range(parts))
    encode = key_coder.encode

    def split(element) -> None:
        key, value = defenestrate(element)
        buckets[zlib.crc32(encode(key)) % parts].append((key, defenestrate(value)))

    return split


def group_part(index: int, key_coder, *splits: list) -> Partition:
    """The index-th (packed) list of every split, grouped by encoded key, as Beam groups (so 1 and
    1.0 stay apart wherever they land): (key, [value, ...])."""
    groups: dict = {}
    for split in splits:
        for key, value in unpack(split[index]):
            group = groups.get(encoded := key_coder.encode(key))
            if group is None:
                group = groups[encoded] = (key, [])
            group[1].append(value)
    return Partition(groups.values())


def group_exports(index: int, key_coder, export: tuple, *results: Exports) -> Partition:
    return group_part(index, key_coder, *(result[export] for result in results))


def values_of(values) -> Partition:
    return Partition(values)


def concat_exports(reads: tuple, *results: Exports) -> Partition:
    """The elements of one export of each result (each (export, pick)), in order."""
    return Partition(item for (export, pick), result in zip(reads, results)
                     for item in pick(unpack(result[export])))


class _Route(Receiver):
    """Where one output tag of a step goes: into the steps of the stage that read it, one
    element at a time, and onto the lists the stage hands on."""

    def __init__(self, tag: str | None, consumers: list, exports: list) -> None:
        self.tag = tag
        self.consumers = consumers  # each takes a WindowedValue
        self.exports = exports  # (list, whether it holds (tag, value) pairs)

    def receive(self, windowed_value) -> None:
        for consume in self.consumers:
            consume(windowed_value)
        if self.exports:
            value = defenestrate(windowed_value)
            for out, tagged in self.exports:
                out.append((self.tag, value) if tagged else value)


class _Routes(dict):
    """Tag -> route of one ParDo step's outputs, made on first use (a DoFn may emit any tag)."""

    def __init__(self, slot: int, plan: _Plan) -> None:
        super().__init__()
        self.slot, self.plan = slot, plan

    def __missing__(self, tag):
        pick = Pick(True, tag)
        route = self[tag] = _Route(
            # the list itself: steps after this one are wired in after it started
            tag, self.plan.consumers.setdefault((self.slot, pick), []),
            [(out, False) for out in self.plan.exports_of(self.slot, pick)]
            + [(out, True) for out in self.plan.exports_of(self.slot, ALL)])
        return route


@dataclasses.dataclass
class _Plan:
    """One task's wiring: for (slot, pick), the steps that read it and the lists handed on."""

    out: Exports
    consumers: dict = dataclasses.field(default_factory=dict)

    def exports_of(self, slot: int, pick: Pick) -> list:
        return [self.out[(slot, pick)]] if (slot, pick) in self.out else []


@dataclasses.dataclass(frozen=True, eq=False)
class ParDoStep:
    """A ParDo in a stage: reads the `pick` of slot `source`, its outputs are slot `slot`. Its
    DoFn and side inputs are the stage task's arguments [at, at + 1 + sides); `run` names the
    pipeline run (the DoFn cache's)."""

    run: str
    source: int
    pick: Pick
    slot: int
    label: str
    window_fn: object
    args: list
    kwargs: dict
    side_specs: tuple
    at: int

    def start(self, plan: _Plan, arguments: tuple, opened: list):
        """This thread's DoFn set up (the first time) and started on a bundle, its outputs
        routed by `plan`; returns what takes its input elements (WindowedValues)."""
        pickled_fn, *side_values = arguments[self.at:self.at + 1 + len(self.side_specs)]
        routes = _Routes(self.slot, plan)
        handler = _OutputHandler(
            window_fn=self.window_fn,
            main_receivers=routes[None],
            tagged_receivers=routes,
            per_element_output_counter=None,
            output_batch_converter=None,
            process_yields_batches=False,
            process_batch_yields_elements=False,
        )
        side_inputs = [
            SideInputMap(spec.view_type, spec.view_options,
                         [get_windowed_value(v, spec.window_mapping_fn) for v in values])
            for spec, values in zip(self.side_specs, side_values)
        ]
        fn, signature, new = _dofn(self.run, self.label, pickled_fn)
        opened.append((self.label, pickled_fn))  # dropped from the cache if the task fails
        invoker = DoFnInvoker.create_invoker(
            signature,
            handler,
            context=DoFnContext(self.label, state=None),
            side_inputs=side_inputs,
            input_args=self.args,
            input_kwargs=self.kwargs,
            user_state_context=None,
            bundle_finalizer_param=beam.DoFn.BundleFinalizerParam(),
        )
        if new:
            invoker.invoke_setup()
        invoker.invoke_start_bundle()
        return invoker.invoke_process, invoker.invoke_finish_bundle

    def wrap(self, value):
        return get_windowed_value(value, self.window_fn)


@dataclasses.dataclass(frozen=True, eq=False)
class SplitStep:
    """A GroupByKey's split (splitter) of the `pick` of slot `source` into `parts` lists:
    slot `slot`, handed on to the group."""

    source: int
    pick: Pick
    slot: int
    parts: int
    key_coder: object

    def start(self, plan: _Plan, arguments: tuple, opened: list):
        exports = plan.exports_of(self.slot, ALL)
        buckets = exports[0] if exports else []
        split = splitter(self.parts, self.key_coder, buckets)

        def finish() -> None:  # each part packed alone: a group unpacks only its own
            buckets[:] = [pack(part) for part in buckets]

        return split, finish

    def wrap(self, value):
        return value


def run_stage(steps: tuple, exports: tuple, root: Iterable, *arguments) -> Exports:
    """One partition of a stage, as one bundle of each step: the root's elements (slot 0) go
    through the steps one at a time, each output straight into the steps that read it (as
    Beam's fused stages run), so a task holds its root and what the steps buffer, not a list
    per step; returns the lists handed on (`exports`: (slot, pick)s)."""
    plan = _Plan(Exports({export: Partition() for export in exports}))
    opened: list = []
    try:
        finishers, roots = [], []
        for step in steps:
            process, finish = step.start(plan, arguments, opened)
            finishers.append(finish)
            if step.source == 0:
                roots.append((step, process))
            else:
                plan.consumers.setdefault((step.source, step.pick), []).append(process)
        root_exports = plan.exports_of(0, ALL)
        for item in root:  # a root is never tagged: its readers read it all
            for step, process in roots:
                process(step.wrap(item))
            for out in root_exports:
                out.append(item)
        for finish in finishers:  # in pipeline order: a step's last outputs reach open readers
            finish()
    except BaseException:
        for key in opened:  # a failed DoFn's state is not reused
            _DOFNS.cache.pop(key, None)
        raise
    splits = {step.slot for step in steps if isinstance(step, SplitStep)}
    return Exports((export, elements if export[0] in splits else pack(elements))
                   for export, elements in plan.out.items())


def all_done(*results) -> None:
    return None
