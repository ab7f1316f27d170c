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

What a graph task costs (~2 ms of scheduler and worker time on 2 busy cores) and what a task
holds decide the rest, in pipelines/runner/dask_graph.py: Beam's fusion (a ParDo runs in the
task of the ParDo it reads, every reader of a multi-output ParDo included), a GroupByKey as a
split in its input's task and a group per output partition, priorities in pipeline order.

The launcher prints a progress line now and then (graph tasks done of all) and the workers'
own warnings (`pipelines.*` loggers: the first failures' file and offset) as they happen.

Without --dask_client_address (or --dask_scheduler_file) the runner starts a cluster on this
machine for the run. Its workers ignore SIGINT, so a Ctrl-C at the terminal, which reaches the
whole process group, stops the launcher alone; `close()`, which the launcher calls however the
run ends, cancels what the run left on the cluster, disconnects, shuts a cluster it started
down and removes its workers' folder.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

from apache_beam.runners.dask import dask_runner as stock

from pipelines.runner.beam_worker import import_modules
from pipelines.runner.dask_graph import graph

DaskOptions = stock.DaskOptions
LOG = logging.getLogger(__name__)
# Seconds between the launcher's progress lines.
PROGRESS_INTERVAL_S = 10.0


def _import_pipeline_modules(preload: tuple[str, ...]) -> None:
    # Beam warns through the root logger while it is imported ("apitools not found"); a worker
    # whose root logger has no handler would print that through Python's last-resort handler
    # on the cluster's terminal. Our own loggers' records reach the launcher (forward_logging).
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())
    import_modules(preload)  # what unpickling the command's DoFns imports


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

    def __init__(self, preload: Sequence[str] = ()) -> None:
        """`preload`: the modules unpickling the command's DoFns imports, imported by every
        worker as soon as the cluster is reached."""
        super().__init__()
        self._preload = tuple(preload)
        self._client = None
        self._futures: list = []  # what run_pipeline left on the cluster
        self._scratch: str | None = None  # the workers' folder of a cluster started here

    def client(self, options):
        """The client of the cluster the options name (made once, shared by the calls)."""
        if self._client is None:
            import dask.distributed as ddist

            dask_options = options.view_as(DaskOptions).get_all_options(
                drop_default=True, current_only=True)
            DaskOptions._extract_bag_kwargs(dask_options)  # what is left is the client's
            if "address" in dask_options or "scheduler_file" in dask_options:
                self._client = ddist.Client(**dask_options)
            else:
                self._client = self._start_local_cluster(ddist, dask_options)
            LOG.info("dask: scheduler %s, %s", self._client.scheduler.address,
                     _dashboard(self._client))
            # The workers import Beam and our modules (seconds) now, while the launcher loads
            # the tokenizer and builds the graph, not when the first task reaches them.
            threading.Thread(
                target=self._client.run, args=(_import_pipeline_modules, self._preload),
                daemon=True,
            ).start()
        return self._client

    def _start_local_cluster(self, ddist, dask_options: dict):
        """A client of a cluster started on this machine for the run; its workers, spawned
        with SIGINT ignored (a disposition a new process keeps), leave Ctrl-C to the launcher,
        and keep their files in a folder `close()` removes."""
        self._scratch = tempfile.mkdtemp(prefix="shardsmith-dask-")
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            import dask

            # the scheduler's and the workers' scratch folders (dask's default: in TMPDIR)
            with dask.config.set({"temporary-directory": self._scratch}):
                return ddist.Client(**dask_options)
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)

    def close(self) -> None:
        """Cancel what the run left on the cluster and disconnect; a cluster started here is
        shut down (its client closes it) and its workers' folder removed. Safe to call again."""
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):  # a cluster already gone has nothing to cancel
                client.cancel(self._futures, force=True)
            client.close()
        self._futures = []
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

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
        self._futures = [done]
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
