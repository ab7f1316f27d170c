"""A Beam pipeline as one dask graph, for our DaskRunner (pipelines/runner/dask_runner.py).

Fusion as Beam's runners do it. A *stage* is one dask task per partition: its root (a Create's
or a Reshuffle's elements, a GroupByKey's group, a Flatten's concatenation, or what another
stage hands on) and every ParDo that reads a ParDo of the stage, each as one bundle. Elements
go through the steps one at a time, each output straight into the steps that read it (a clean
step's kept documents into the dedup features and the stash, its rejects onward), so a task
holds its root and what the steps buffer, never a step's whole output. A stage's task
returns only what steps outside it read (its *exports*: a GroupByKey's split of its input, a
Flatten's or a side input's elements). When each reader of a multi-output ParDo was a task of
its own, every partition of the cleaned text was held until its last reader (a Flatten of
the rejects, with the run's last steps) ran: 3 GB a worker at 1 GB of input.

A ParDo joins its input's stage unless one of its side inputs is computed from that stage (the
task would wait on itself) or a Reshuffle has computed the stage already (below); then it roots
a stage of its own on the other's export.

- A GroupByKey is a split per input partition (a step of the input's stage: its pairs cut by a
  stable hash of the key's deterministic encoding) and a group per output partition (the root
  of the next stage), not dask's tasks-based shuffle (~100 tasks each; dedup has ~50, mostly
  tiny).
- A Reshuffle's input (our read tasks: a few small elements) is computed when the graph is
  built, and becomes one partition per element; a Flatten or GroupByKey never makes more
  partitions than the last Reshuffle had elements. So the graph grows with the run's read
  tasks, not with the thread count. The stages it computes are closed to new steps (their
  definition must not change between that graph and the run's).
- Each stage's tasks carry a scheduling priority, its place in pipeline order: a worker runs a
  later stage's ready task before it starts another partition of an earlier one, so outputs
  between stages (a group's input, a side input) are consumed as they come.
- Keys read '<kind>:<transform label>-<uuid>': the scheduler learns durations per key prefix.

What a worker runs for a stage's task is pipelines/runner/dask_stage.py.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import uuid
from collections.abc import Iterable

import apache_beam as beam
from apache_beam import coders, pvalue
from apache_beam.internal import pickler
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.runners.dask.overrides import (
    _Create,
    _Flatten,
    _GroupAlsoByWindow,
    _GroupByKeyOnly,
    _Reshuffle,
    dask_overrides,
)
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from pipelines.runner.dask_stage import (
    ALL,
    ParDoStep,
    Pick,
    SideInput,
    SplitStep,
    all_done,
    concat_exports,
    group_exports,
    run_stage,
    values_of,
)

# A DoFn pickled to at most this many bytes travels inside each of its tasks; a larger one is
# one graph key, sent once to each worker.
INLINE_DOFN_BYTES = 64 << 10


def _name(kind: str, label: str) -> str:
    """'<kind>:<label>-<uuid>': the scheduler learns task durations per key prefix (the part
    before the uuid), so a step's tasks are placed and stolen by their own durations."""
    return f"{kind}:{label}-{uuid.uuid4().hex}"


@dataclasses.dataclass(eq=False)
class _Stage:
    """One task per partition: `roots[i]` (a task nested in it, or a key) is slot 0, and each
    step reads a slot (one tag of it) and its outputs are its own slot. `exports` grow as
    steps outside read its slots; once `closed` (computed for a Reshuffle) it takes no step
    and exports every slot whole."""

    name: str
    roots: list
    reads_layers: set
    priority: int
    steps: list = dataclasses.field(default_factory=list)
    arguments: list = dataclasses.field(default_factory=list)
    exports: dict = dataclasses.field(default_factory=dict)  # an ordered set of (slot, pick)
    slots: int = 1
    closed: bool = False
    # a closed stage's tasks, made once: the Reshuffle's graph and the run's must agree
    tasks: dict | None = None

    def add(self, make_step, arguments: list, layers: Iterable[str]) -> int:
        """A step `make_step(slot, at)` filling a new slot; returns the slot."""
        slot, self.slots = self.slots, self.slots + 1
        self.steps.append(make_step(slot, len(self.arguments)))
        self.arguments += arguments
        self.reads_layers.update(layers)
        return slot

    def export(self, slot: int, pick: Pick) -> tuple[tuple, Pick]:
        """(the export key a step outside reads, the pick it applies to that export)."""
        if self.closed:
            return (slot, ALL), pick
        self.exports[slot, pick] = None
        return (slot, pick), ALL

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.exports = dict.fromkeys((slot, ALL) for slot in range(self.slots))

    def layer(self) -> dict:
        if self.tasks is not None:
            return self.tasks
        run = functools.partial(run_stage, tuple(self.steps), tuple(self.exports))
        tasks = {(self.name, i): (run, root, *self.arguments) for i, root in enumerate(self.roots)}
        if self.closed:
            self.tasks = tasks
        return tasks


@dataclasses.dataclass
class _GraphBuilder(PipelineVisitor):
    """Every leaf transform into a stage (see the module docstring); layers that are not a
    stage's (a side input's gathering, a large DoFn) are made as they are visited."""

    bag_kwargs: dict
    # computes a Reshuffle's input: its task -> its elements
    materialize: object
    # partitions of the last Reshuffle: the most a Flatten or GroupByKey makes
    partitions: int = 1
    stages: dict[str, _Stage] = dataclasses.field(default_factory=dict)
    # name -> (its tasks, the layers they read, priority), for layers other than stages
    layers: dict[str, tuple[dict, set, int]] = dataclasses.field(default_factory=dict)
    # what each transform's outputs are: (its stage, its slot there)
    where: dict[AppliedPTransform, tuple[_Stage, int]] = dataclasses.field(default_factory=dict)
    tagged: set[AppliedPTransform] = dataclasses.field(default_factory=set)
    # the stages each transform's outputs are computed from (its own included)
    upstream: dict[AppliedPTransform, frozenset] = dataclasses.field(default_factory=dict)
    order: itertools.count = dataclasses.field(default_factory=itertools.count)
    # this run's name: workers keep one run's DoFns (dask_stage._dofn)
    run: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)

    # -- the graph --------------------------------------------------------------------------

    def graph(self, names: Iterable[str]) -> HighLevelGraph:
        """The layers `names` and every layer they read."""
        layers, dependencies, stack = {}, {}, list(names)
        while stack:
            name = stack.pop()
            if name in layers:
                continue
            if name in self.stages:
                stage = self.stages[name]
                tasks, reads, priority = stage.layer(), stage.reads_layers, stage.priority
            else:
                tasks, reads, priority = self.layers[name]
            layers[name] = MaterializedLayer(tasks, annotations={"priority": priority})
            dependencies[name] = set(reads)
            stack.extend(reads)
        return HighLevelGraph(layers, dependencies)

    # -- stages and what reads them ---------------------------------------------------------

    def stage(self, kind: str, label: str, roots: list, reads_layers: Iterable[str]) -> _Stage:
        stage = _Stage(_name(kind, label), roots, set(reads_layers), next(self.order))
        self.stages[stage.name] = stage
        return stage

    def reads_of(self, pcoll: pvalue.PCollection) -> tuple[_Stage, tuple, Pick]:
        """(the stage that computes `pcoll`, the export a step outside reads, its pick)."""
        stage, slot = self.where[pcoll.producer]
        return stage, *stage.export(slot, self.pick_of(pcoll))

    def pick_of(self, pcoll: pvalue.PCollection) -> Pick:
        """Which of its producer's outputs `pcoll` is (a ParDo's are tagged)."""
        return Pick(pcoll.producer in self.tagged, pcoll.tag)

    def gathered(self, pcolls: list, parts: int) -> tuple[list, set]:
        """`parts` tasks (to nest), the i-th concatenating partitions i, i + parts, ... of
        every input; and the layers they read."""
        sources = [self.reads_of(pcoll) for pcoll in pcolls]
        tasks = []
        for index in range(parts):
            reads, keys = [], []
            for stage, export, pick in sources:
                for j in range(index, len(stage.roots), parts):
                    reads.append((export, pick))
                    keys.append((stage.name, j))
            tasks.append((functools.partial(concat_exports, tuple(reads)), *keys))
        return tasks, {stage.name for stage, _, _ in sources}

    def layer(self, kind: str, label: str, tasks: list, reads: set) -> str:
        name = _name(kind, label)
        self.layers[name] = {(name, i): t for i, t in enumerate(tasks)}, reads, next(self.order)
        return name

    def upstream_of(self, pcolls: Iterable[pvalue.PCollection]) -> frozenset:
        return frozenset().union(*(self.upstream[p.producer] for p in pcolls))

    def place(self, node: AppliedPTransform, stage: _Stage, slot: int, upstream: frozenset
              ) -> None:
        self.where[node] = stage, slot
        self.upstream[node] = upstream | {stage.name}

    # -- the visit ------------------------------------------------------------------------

    def visit_transform(self, node: AppliedPTransform) -> None:
        transform = node.transform
        inputs = [i for i in node.inputs if not isinstance(i, pvalue.PBegin)]
        if isinstance(transform, _Create):
            size = self.bag_kwargs.get("partition_size") or 1
            values = list(transform.values)
            chunks = [values[i:i + size] for i in range(0, len(values), size)] or [[]]
            self._root(node, "create", [(functools.partial(values_of, c),) for c in chunks])
        elif isinstance(transform, beam.Impulse):  # one empty bytes element, as Beam's is
            self._root(node, "impulse", [(functools.partial(values_of, [b""]),)])
        elif isinstance(transform, _GroupAlsoByWindow):
            # GroupByKey's grouping already gave (key, [values]), in the global window (the
            # stock translation's), which is all a batch pipeline has
            self.where[node] = self.where[inputs[0].producer]
            self.upstream[node] = self.upstream[inputs[0].producer]
        elif isinstance(transform, beam.ParDo):  # after _GroupAlsoByWindow, a ParDo
            self._pardo(node)
        elif isinstance(transform, _GroupByKeyOnly):
            self._group_by_key(node)
        elif isinstance(transform, _Reshuffle):
            self._reshuffle(node)
        elif isinstance(transform, _Flatten) or inputs:
            self._flatten(node, inputs if isinstance(transform, _Flatten) else inputs[:1])

    def _root(self, node: AppliedPTransform, kind: str, roots: list) -> None:
        self.place(node, self.stage(kind, node.full_label, roots, ()), 0, frozenset())

    def _flatten(self, node: AppliedPTransform, pcolls: list) -> None:
        """As many partitions as its largest input, at most the last Reshuffle's count."""
        largest = max((len(self.where[p.producer][0].roots) for p in pcolls), default=1)
        tasks, reads = self.gathered(pcolls, max(1, min(largest, self.partitions)))
        stage = self.stage("flatten", node.full_label, tasks, reads)
        self.place(node, stage, 0, self.upstream_of(pcolls))

    def _handed_on(self, pcoll: pvalue.PCollection, label: str, avoid: frozenset = frozenset()
                   ) -> tuple[_Stage, int, Pick]:
        """(stage, slot, pick) to add a step reading `pcoll` to: its own stage where that is
        still open and not one of `avoid` (stages the step's side inputs are computed from: the
        task would wait on itself), else a new one rooted on its export."""
        stage, slot = self.where[pcoll.producer]
        if not stage.closed and stage.name not in avoid:
            return stage, slot, self.pick_of(pcoll)
        tasks, reads = self.gathered([pcoll], len(stage.roots))
        return self.stage("stage", label, tasks, reads), 0, ALL

    def _pardo(self, node: AppliedPTransform) -> None:
        transform = node.transform
        main = node.inputs[0]
        sides = [side.pvalue for side in node.side_inputs]
        side_upstream = self.upstream_of(sides)
        stage, source, pick = self._handed_on(main, node.full_label, side_upstream)
        arguments, layers = [], set()
        fn = pickler.dumps(transform.fn)
        if len(fn) > INLINE_DOFN_BYTES:  # one key, sent once to each worker
            name = self.layer("dofn", node.full_label, [fn], set())
            fn = (name, 0)
            layers.add(name)
        arguments.append(fn)
        specs = []
        for side in node.side_inputs:
            specs.append(SideInput(type(side), side._view_options(), side._window_mapping_fn))
            # one task gathering every partition, computed once by the scheduler
            tasks, reads = self.gathered([side.pvalue], 1)
            name = self.layer("side", node.full_label, tasks, reads)
            arguments.append((name, 0))
            layers.add(name)
        args, kwargs = transform.raw_side_inputs
        main_input = next(iter(node.main_inputs.values()))
        window_fn = main_input.windowing.windowfn if hasattr(main_input, "windowing") else None
        slot = stage.add(
            lambda slot, at: ParDoStep(self.run, source, pick, slot, transform.label,
                                        window_fn, list(args), kwargs, tuple(specs), at),
            arguments, layers)
        self.tagged.add(node)
        self.place(node, stage, slot, self.upstream_of([main]) | side_upstream)

    def _group_by_key(self, node: AppliedPTransform) -> None:
        """A split step in the input's stage and a group per output partition: the root of
        the next stage."""
        main = node.inputs[0]
        stage, source, pick = self._handed_on(main, node.full_label)
        parts = max(1, min(len(stage.roots), self.partitions))
        key_coder = coders.FastPrimitivesCoder().as_deterministic_coder(node.full_label)
        slot = stage.add(lambda slot, at: SplitStep(source, pick, slot, parts, key_coder),
                         [], ())
        export, _ = stage.export(slot, ALL)
        keys = [(stage.name, j) for j in range(len(stage.roots))]
        roots = [(functools.partial(group_exports, index, key_coder, export), *keys)
                 for index in range(parts)]
        group = self.stage("group", node.full_label, roots, {stage.name})
        self.place(node, group, 0, self.upstream_of([main]) | {stage.name})

    def _reshuffle(self, node: AppliedPTransform) -> None:
        """One partition per element of the input, which is computed now: the graph then has
        as many read tasks as the run planned. (What produced the input runs again for its
        other outputs, the counts: a listing and a split, cheap next to the reading.)"""
        main = node.inputs[0]
        for name in self.upstream[main.producer]:
            self.stages[name].close()
        tasks, reads = self.gathered([main], 1)
        name = self.layer("reshuffle", node.full_label, tasks, reads)
        elements = self.materialize(Delayed((name, 0), self.graph([name]), layer=name))
        self.partitions = max(1, len(elements))
        chunks = [[element] for element in elements] or [[]]
        self._root(node, "read", [(functools.partial(values_of, c),) for c in chunks])

    def done(self) -> Delayed:
        """One task that finishes when every stage has (so the run is one future). It reads
        the stages no other layer reads, whose results are empty: a stage's exports are
        dropped once its readers have run, not kept for this task until the run ends."""
        read = set().union(*(stage.reads_layers for stage in self.stages.values()),
                           *(reads for _, reads, _ in self.layers.values()))
        leaves = [stage for stage in self.stages if stage not in read]
        name = _name("done", "pipeline")
        keys = [(stage, i) for stage in leaves for i in range(len(self.stages[stage].roots))]
        self.layers[name] = {name: (all_done, *keys)}, set(leaves), next(self.order)
        return Delayed(name, self.graph([name]))


def _materializer(client):
    def materialize(task: Delayed) -> list:
        return client.compute(task, optimize_graph=False).result()

    return materialize


def _builder(pipeline, client, bag_kwargs: dict | None) -> _GraphBuilder:
    pipeline.replace_all(dask_overrides())
    builder = _GraphBuilder(dict(bag_kwargs or {}), _materializer(client))
    pipeline.visit(builder)
    return builder


def graph_keys(pipeline, client, bag_kwargs: dict | None = None) -> dict:
    """The pipeline's graph as one dict of tasks (its Reshuffles' inputs computed on
    `client`): what tests count."""
    builder = _builder(pipeline, client, bag_kwargs)
    return dict(builder.graph(list(builder.stages)))


def graph(pipeline, client, bag_kwargs: dict | None = None) -> Delayed:
    """One task that finishes when every stage has (so the run is one future)."""
    return _builder(pipeline, client, bag_kwargs).done()
