"""`python -m pipelines.preprocess`: raw corpus -> cleaned, deduplicated, tokenized shard set.

    python -m pipelines.preprocess --source wikipedia --input 'dumps/*.xml.bz2' \\
        --output out/wiki --tokenizer vocab/gpt2 --append-eod

Stages: ReadSource -> Clean -> Deduplicate (unless --no-dedup) -> Tokenize -> WriteShards ->
finish (stats.json, tokenizer.json, manifest.json). Any Beam option passes through. Without
--runner the run is local on the Python FnApiRunner, multi_processing over every core (named
explicitly: Beam's "DirectRunner" would first try to fetch and start the Prism runner).
"""

# ruff: noqa: E402 - the stop signals' handlers go in before the imports (Beam's take a second)
from __future__ import annotations

import sys

if __name__ == "__main__":
    from common.signals import exit_on_stop_signals

    exit_on_stop_signals("python -m pipelines.preprocess")

import argparse
import contextlib
import dataclasses
import functools
import gc
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    TestOptions,
)

from common.signals import Stopped, reported
from pipelines.dedup.config import DedupConfig, DedupOptions
from pipelines.graph import WORKER_MODULES, build_pipeline, plan_run, prepare
from pipelines.log_setup import add_stderr_handler
from pipelines.options import PreprocessConfig, PreprocessOptions
from pipelines.progress import ProgressDisplay
from pipelines.runner.beam_worker import (
    STANDBY_DIR_ENV,
    STANDBY_PREFIX,
    VERBOSE_ENV,
    StandbyWorkers,
)
from pipelines.runner.reach import UnreachableError, check_all_reachable
from pipelines.runner.runners import (
    beam_parser,
    check_dataflow_options,
    planned_workers,
    resolve_runner,
    unknown_arguments_error,
    where_it_runs,
    worker_count,
)
from pipelines.stats import NAMESPACE, format_report
from pipelines.write import (
    STATS_NAME,
    WORK_DIR,
    OutputDir,
    OutputError,
    describe_storage_error,
    try_lock_directory,
)

LOG = logging.getLogger("pipelines.preprocess")


PROG = "python -m pipelines.preprocess"


# -- the launcher -----------------------------------------------------------------------------
def build_parser(option_classes) -> argparse.ArgumentParser:
    return beam_parser(
        option_classes,
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog="Every Beam pipeline option applies too (--runner, --direct_num_workers, "
        "--direct_running_mode, --project, --region, --temp_location, --setup_file, ...).",
    )


def _metrics_summary(result) -> dict[str, int]:
    from apache_beam.metrics.metric import MetricsFilter

    try:
        found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    except Exception:  # a runner without metrics support
        return {}
    totals: dict[str, int] = {}
    for counter in found:
        value = counter.committed if counter.committed is not None else counter.attempted
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + int(value or 0)
    return dict(sorted(totals.items()))


def _read_stats(output: str) -> dict | None:
    out = OutputDir(output)
    if out.size(STATS_NAME) is None:
        return None
    return json.loads(out.read_bytes(STATS_NAME))


RUN_TMP_PREFIX = "shardsmith-run-"
# A run's temporary directory younger than this is never swept: its owner may not have locked
# it yet.
SWEEP_MIN_AGE_S = 60.0


def make_run_tmp(parent: str | None = None) -> tuple[str, int]:
    """A temporary directory for everything one local run writes outside OUTPUT (progress
    files, workers' scratch files), and the lock that marks it as in use."""
    path = tempfile.mkdtemp(prefix=RUN_TMP_PREFIX, dir=parent)
    fd = try_lock_directory(path)
    assert fd is not None, path  # just made, nobody else knows it
    return path, fd


def sweep_stale_run_tmps(parent: str | None = None) -> list[str]:
    """Delete the temporary directories of runs that were killed (SIGKILL, a crash), their
    standby workers' socket folders included: those no live process holds the lock of.
    Returns what was deleted."""
    parent = parent or tempfile.gettempdir()
    swept = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return swept
    for entry in entries:
        if (not entry.name.startswith((RUN_TMP_PREFIX, STANDBY_PREFIX))
                or not entry.is_dir(follow_symlinks=False)):
            continue
        try:
            if time.time() - entry.stat(follow_symlinks=False).st_mtime < SWEEP_MIN_AGE_S:
                continue
            fd = try_lock_directory(entry.path)
        except OSError:
            continue
        if fd is None:
            continue  # a live run holds it
        try:
            shutil.rmtree(entry.path, ignore_errors=True)
            swept.append(entry.path)
        finally:
            os.close(fd)
    return swept


class Terminated(BaseException):
    """SIGTERM or SIGINT arrived: unwinds the launcher through its cleanup (not an Exception,
    so that no `except Exception` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, frame):
    raise Terminated(signum)


# What each stopping signal is called in the run's one line: SIGINT is a user's Ctrl-C, SIGHUP
# the terminal (or the ssh session) the run was started from going away.
_STOP_SIGNALS = {signal.SIGTERM: "terminated (SIGTERM)", signal.SIGINT: "interrupted",
                 signal.SIGHUP: "hung up (SIGHUP)"}


class _StallAlarm:
    """The progress watch's on_stall: keeps the line naming the stage, kills the run's worker
    processes (this process's children, a stopped one included) and sends SIGTERM to the main
    thread itself (a process-wide signal raised by this thread is taken by this thread, and
    the main thread, waiting inside the runner, would never wake). _run then reports the
    stall instead of the signal."""

    def __init__(self) -> None:
        self.line = ""

    def __call__(self, line: str) -> None:
        self.line = line
        for pid in _children(os.getpid()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)


def _runner_thread_error(args: threading.ExceptHookArgs) -> None:
    """threading.excepthook while a run goes: an uncaught error of one of the runner's own
    threads (Beam's worker handlers, gRPC's streams) when a worker dies or the run is stopped
    is logged at DEBUG; the main thread reports the run's end in one line. Any other thread's
    error goes to the hook that was there before."""
    frames = traceback.extract_tb(args.exc_traceback) if args.exc_traceback else []
    if frames and any(f"{os.sep}{package}{os.sep}" in frames[-1].filename
                      for package in ("apache_beam", "grpc")):
        LOG.debug("runner thread %s: %s: %s", args.thread.name if args.thread else "?",
                  args.exc_type.__name__, args.exc_value)
        return
    _PREVIOUS_EXCEPTHOOK(args)


_PREVIOUS_EXCEPTHOOK = threading.excepthook


def _children(parent: int) -> list[int]:
    """The ids of `parent`'s child processes (Linux's /proc; none elsewhere)."""
    children = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{parent}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{parent}/task/{task}/children") as f:
                children += [int(pid) for pid in f.read().split()]
    return children


def _stopped_line(signum: int) -> str:
    return f"preprocess: {_STOP_SIGNALS[signum]}; no shard set was finished"


def failure_line(error: BaseException, output: str, verbose: bool) -> str:
    """The one line a failed run prints: the storage fault in plain words when it is one, else
    the error's last line (Beam's errors carry a worker's whole traceback as their text)."""
    storage = describe_storage_error(error, output)
    if storage:
        return storage
    text = f"{type(error).__name__}: {error}"
    if verbose:
        return text
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    last = lines[-1] if lines else type(error).__name__
    more = " (--verbose shows the whole error)" if len(lines) > 1 else ""
    return f"{last}{more}"


def not_finished_line(options: PipelineOptions, output: str) -> str:
    """What a run that returned without a finished set did: Dataflow's --dry_run and
    --template_location submit nothing."""
    if str(options.view_as(TestOptions).dry_run).lower() == "true":  # a string option
        return "dry run: the job was built and nothing was submitted"
    template = options.view_as(GoogleCloudOptions).template_location
    if template:
        return f"job template written to {template}; nothing was submitted"
    return f"submitted; stats.json will appear in {output}"


def _remove_work_area(output: str) -> None:
    try:
        OutputDir(output).child(WORK_DIR).delete_tree()
    except OSError as e:
        LOG.warning("could not remove %s/%s: %s", output, WORK_DIR, e)


def _warm(plan, tokenizer) -> None:
    """Load in the launcher what every worker of the run would load again: the tokenizer's
    encoder (prepare() left the tokenizer itself in the per-process cache the workers' DoFns
    read) and, when the clean step identifies languages, the language model."""
    tokenizer.load_encoder()
    if plan.config.clean_config().language != "any":
        from pipelines.clean import identify_language

        identify_language("A sentence to load the language model with.")


def _start_standbys(count: int, verbose: bool, plan, tokenizer) -> StandbyWorkers | None:
    """Standby workers for a local multi_processing run, or None where they cannot be started
    (the runner then starts its workers itself: slower to start, the same run)."""
    try:
        return StandbyWorkers(count, verbose, warm=functools.partial(_warm, plan, tokenizer),
                              preload=WORKER_MODULES)
    except OSError as error:
        LOG.warning("no standby workers (%s); the runner starts its own", error)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv
    root, beam_logger = logging.getLogger(), logging.getLogger("apache_beam")
    levels = root.level, beam_logger.level
    handler = add_stderr_handler(verbose, logging.INFO)
    try:
        return _main(argv, verbose)
    except (KeyboardInterrupt, Stopped) as stop:  # before the run's own handlers were in place
        signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
        print(_stopped_line(signum), file=sys.stderr)
        reported()
        return 128 + signum
    finally:  # as it was: main() may be called from a program with logging of its own
        root.removeHandler(handler)
        root.setLevel(levels[0])
        beam_logger.setLevel(levels[1])


def _main(argv: list[str], verbose: bool) -> int:
    from dataset_format.tokenizer import load_tokenizer

    if "-h" in argv or "--help" in argv:
        build_parser([PreprocessOptions, DedupOptions]).print_help()
        return 0
    try:  # first: Beam's own parser would print its whole usage before a bad value's error
        refused = unknown_arguments_error(argv, prog=PROG)
    except ValueError as e:  # the DaskRunner named without dask installed
        refused = str(e)
    if refused:
        print(f"preprocess: error: {refused}", file=sys.stderr)
        return 2
    options = PipelineOptions(argv)
    run_id = uuid.uuid4().hex[:12]
    standbys = runner = None
    try:
        try:
            config = PreprocessConfig.from_options(options, DedupConfig.from_options(options))
            # a few seconds, where a listing waits minutes
            check_all_reachable((*config.input, config.output))
            plan = plan_run(config)
            runner, local = resolve_runner(options, argv, plan.input_bytes, WORKER_MODULES)
            check_dataflow_options(options, runner, config.input, config.output)
            plan = dataclasses.replace(plan, workers=planned_workers(options, runner, local))
            tokenizer = load_tokenizer(config.tokenizer, lowercase=config.lowercase)
            if config.append_eod and "eod" not in tokenizer.special_ids:
                raise ValueError(
                    f"--append-eod: the {tokenizer.kind} tokenizer has no end-of-document token"
                )
            claim, tokenizer_ref = prepare(plan, tokenizer, run_id)
        except (ValueError, FileNotFoundError, FileExistsError, OutputError, UnreachableError) as e:
            print(f"preprocess: error: {e}", file=sys.stderr)
            return 2
        except OSError as e:
            output = options.view_as(PreprocessOptions).output or ""
            print(f"preprocess: error: {failure_line(e, output, verbose)}", file=sys.stderr)
            return 2
        try:
            if local and options.view_as(DirectOptions).direct_running_mode is None:
                # multi_processing (resolve_runner chose our worker command): the workers are
                # forked from this process now, with what they would each load loaded once
                standbys = _start_standbys(worker_count(options), verbose, plan, tokenizer)
            return _run(plan, options, runner, local, tokenizer_ref, run_id, verbose, standbys)
        finally:
            claim.release()
    finally:
        if standbys:
            standbys.close()
        if hasattr(runner, "close"):  # the DaskRunner: what it started on its cluster
            runner.close()


def _run(plan, options, runner, local, tokenizer_ref, run_id, verbose, standbys=None) -> int:
    """Run the pipeline on a claimed OUTPUT; temporary files are gone when this returns, and
    so is OUTPUT's work area, whether the run succeeded, failed or was sent SIGTERM or SIGINT."""
    config = plan.config
    workers = worker_count(options) if local else None
    running_mode = None
    if local:
        # resolve_runner cleared the option once it had chosen our multi_processing workers.
        running_mode = options.view_as(DirectOptions).direct_running_mode or "multi_processing"
    run_info = {
        "run_id": run_id,
        "runner": type(runner).__name__ if not isinstance(runner, str) else runner,
        "workers": workers,
        "running_mode": running_mode,
        "started_at": time.time(),
    }
    LOG.info(
        "%s: %d files (%.1f MB) -> %s, %d buckets, %s",
        config.source,
        plan.input_files,
        plan.input_bytes / 1e6,
        config.output,
        config.num_buckets,
        where_it_runs(running_mode, workers) if local else run_info["runner"],
    )
    saved_env = {
        k: os.environ.get(k) for k in ("TMPDIR", "RAYON_NUM_THREADS", VERBOSE_ENV, STANDBY_DIR_ENV)
    }
    saved_tempdir = tempfile.tempdir
    run_tmp = lock_fd = None
    previous_handlers = {}
    display = None
    result = None
    alarm = None
    try:
        # left in place after the run: a runner thread may raise while the process exits
        threading.excepthook = _runner_thread_error
        if threading.current_thread() is threading.main_thread():
            for signum in _STOP_SIGNALS:
                previous_handlers[signum] = signal.signal(signum, _raise_terminated)
            if config.stall_timeout > 0:
                alarm = _StallAlarm()
        if local:
            sweep_stale_run_tmps()
            run_tmp, lock_fd = make_run_tmp()
            # Every temporary file of the run, in this process and in the workers it starts,
            # goes under run_tmp, which is deleted whatever way the run ends.
            os.environ["TMPDIR"] = tempfile.tempdir = run_tmp
            os.environ[VERBOSE_ENV] = "1" if verbose else "0"
            if standbys:
                os.environ.update(standbys.env())
            if workers and workers > 1:
                # Each worker process is one core's worth of work: keep tokenizers' own thread
                # pools from multiplying that.
                os.environ.setdefault("RAYON_NUM_THREADS", "1")
        progress_dir = os.path.join(run_tmp, "progress") if run_tmp else None
        if progress_dir:
            os.mkdir(progress_dir)
        p = beam.Pipeline(runner=runner, options=options)
        build_pipeline(p, plan, tokenizer_ref, progress_dir=progress_dir, run_info=run_info)
        if progress_dir and (config.progress_interval > 0 or alarm):
            display = ProgressDisplay(progress_dir, config.progress_interval,
                                      stall_timeout=config.stall_timeout if alarm else 0.0,
                                      on_stall=alarm)
            display.start()
        result = p.run()
        result.wait_until_finish()
    except (Exception, Terminated) as e:
        if display:
            display.stop()
            display = None
        _remove_work_area(config.output)
        if alarm and alarm.line:
            print(f"preprocess: FAILED: {alarm.line}; no shard set was finished", file=sys.stderr)
            return 1
        if isinstance(e, Terminated):
            print(_stopped_line(e.signum), file=sys.stderr)
            return 128 + e.signum
        stats = _read_stats(config.output)
        if stats and stats.get("status") == "failed":
            print(format_report(stats), file=sys.stderr)
        line = failure_line(e, config.output, verbose)
        if (
            stats
            and stats.get("status") == "failed"
            and not describe_storage_error(e, config.output)
        ):
            line = stats["error"]
        print(f"preprocess: FAILED: {line}", file=sys.stderr)
        return 1
    finally:
        if display:
            display.stop()
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
        tempfile.tempdir = saved_tempdir
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if run_tmp:
            shutil.rmtree(run_tmp, ignore_errors=True)
            os.close(lock_fd)
    stats = _read_stats(config.output)
    if stats is None:  # a remote runner that returned before the job finished
        print(f"preprocess: {not_finished_line(options, config.output)}", file=sys.stderr)
        return 0
    _remove_work_area(config.output)  # what is left: spill files of retried bundles
    print(format_report(stats))
    metrics = _metrics_summary(result)
    if metrics:
        print(
            "Beam metrics (namespace pipelines): "
            + ", ".join(f"{k}={v:,}" for k, v in metrics.items())
        )
    print(f"shard set: {config.output}")
    return 0


if __name__ == "__main__":
    # What is imported by now (Beam, its protos, our modules) lives as long as the process:
    # frozen, the cyclic collector stops walking it every few hundred allocations while the
    # graph is built and run (0.1 s of a small run's CPU; standby workers forked later share it).
    gc.freeze()
    code = main()
    # The interpreter's last garbage collections would walk every object Beam and the tokenizer
    # made, ~0.2 s of a small run's 1.7 s; frozen, they are skipped. Exit handlers still run,
    # and the run has closed its own files by now.
    gc.freeze()
    sys.exit(code)
