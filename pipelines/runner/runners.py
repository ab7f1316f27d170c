"""Which runner a preprocess run uses and how many workers it has: a local run on the Python
FnApiRunner (in the launcher's process for a small input, else one worker process per core),
our DaskRunner, or any other Beam runner by name; and the thread pool each worker's tokenizer
gets; and which arguments no option class takes (preprocess and dedup refuse them)."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from collections.abc import Collection, Sequence

from apache_beam.options.pipeline_options import (
    DebugOptions,
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
    WorkerOptions,
)

from common.cli import OneLineErrors, known_flags, unknown_flag_line

# Runner names that mean "run it here with the Python FnApiRunner".
LOCAL_PYTHON_RUNNERS = ("DirectRunner", "FnApiRunner", "SwitchingDirectRunner")
# A local run whose input (bytes as listed, compressed or not) is under this runs in the
# launcher's own process unless --direct_running_mode says otherwise: worker processes, even
# forked with everything loaded (beam_worker.StandbyWorkers), add ~0.3-0.4 s of wall-clock time
# (gRPC channels, a bundle processor per stage in each), more than a second core saves on a few
# MB (the clean + tokenize loop does ~9 MB/s per core, and a compressed dump expands ~5x:
# bench/results/preprocess.md).
IN_PROCESS_MAX_BYTES = 4 << 20
# glibc's mmap threshold for the processes of a local multi_processing run (where it is set)
MMAP_THRESHOLD = 64 << 10
# The folder holding the `pipelines` package (this file is pipelines/runner/runners.py): what
# worker processes put on their path, never pipelines/ itself, whose tokenize/ would shadow the
# standard library's tokenize module.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def import_runner_options(argv: Sequence[str]) -> None:
    """Import the option class of a runner Beam does not import by itself (DaskOptions), so
    that its flags are known: a run on it names it or passes one of its flags."""
    if any("DaskRunner" in arg or arg.startswith("--dask_") for arg in argv):
        try:
            import pipelines.runner.dask_runner  # noqa: F401
        except ImportError as error:
            raise ValueError(
                f"the DaskRunner needs dask: pip install 'shardsmith[dask]' ({error})"
            ) from None


def beam_parser(option_classes, **kwargs) -> argparse.ArgumentParser:
    """A parser of these PipelineOptions classes' flags, on Beam's own parser class (some option
    classes add value-provider arguments to it) with the project's one-line errors, and with
    abbreviations off: a prefix of a flag never passes for it."""
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    class BeamParser(OneLineErrors, _BeamArgumentParser):
        pass

    parser = BeamParser(allow_abbrev=False, **kwargs)
    for cls in option_classes:
        cls._add_argparse_args(parser)
    return parser


def unknown_arguments(
    argv: Sequence[str], exclude: Sequence[type] = (), prog: str | None = None
) -> list[str]:
    """What no PipelineOptions class takes: the flags none knows, else (no such flag) the words
    no flag takes. Beam drops both, an unknown flag with a warning and a word silently, which
    would turn a typo such as --shard_tokens (ours use dashes) into an ignored setting and
    `--output out extra` into a lost input. Words after an unknown flag may be its value, so
    only the flag is named then. `exclude`: option classes of another command, whose flags
    count as unknown (pipelines.dedup's). A known flag's bad value (`--shard-tokens abc`) is
    the parser's one-line error under `prog`, exit 2, before Beam's own parser would print its
    whole usage."""
    _, unknown = _every_option_parser(argv, exclude, prog).parse_known_args(list(argv))
    flags = [arg.split("=", 1)[0] for arg in unknown if arg.startswith("-")]
    return flags or unknown


def _every_option_parser(
    argv: Sequence[str], exclude: Sequence[type], prog: str | None
) -> argparse.ArgumentParser:
    """`beam_parser` of every PipelineOptions class but `exclude` (the runner's named in argv)."""
    import_runner_options(argv)
    every = {str(c): c for c in PipelineOptions.__subclasses__() if c not in exclude}.values()
    return beam_parser(every, prog=prog)


def unknown_arguments_error(
    argv: Sequence[str],
    exclude: Sequence[type] = (),
    prog: str | None = None,
    also_known: Collection[str] = (),
) -> str | None:
    """The one-line refusal of `unknown_arguments`, or None when every argument is taken; an
    unknown flag is named with the closest known one (`also_known`: the command's own flags,
    where its parser took them out of `argv`), or as another command's (one of `exclude`)."""
    unknown = unknown_arguments(argv, exclude, prog)
    if not unknown:
        return None
    if unknown[0].startswith("-"):
        known = known_flags(_every_option_parser(argv, exclude, prog)) | set(also_known)
        others = known_flags(beam_parser(exclude)) - known

        def named(flag: str) -> str:
            if flag in others:
                return f"{flag} (another command's flag, not this one's)"
            return unknown_flag_line(flag, known)

        return f"unknown option(s): {', '.join(map(named, unknown))}"
    words = ", ".join(map(repr, unknown))
    return f"unexpected argument(s) {words}: no option takes them (inputs go after --input)"


def resolve_runner(
    options: PipelineOptions,
    argv: Sequence[str],
    input_bytes: int | None = None,
    preload: Sequence[str] = (),
):
    """(runner to pass to beam.Pipeline, is it a local Python run). A local run is
    multi_processing over every core, or in this process when `input_bytes` is known and under
    IN_PROCESS_MAX_BYTES; --direct_running_mode and --direct_num_workers override both.
    `preload`: the modules the command's DoFns need, imported by our DaskRunner's workers
    before their first task."""
    standard = options.view_as(StandardOptions)
    name = standard.runner
    if name in ("DaskRunner", "apache_beam.runners.dask.dask_runner.DaskRunner"):
        # Beam 2.77 knows no short name for it, and its own loses data (pipelines/runner/dask_runner.py)
        from pipelines.runner.dask_runner import DaskRunner

        return DaskRunner(preload), False
    if name is not None and name not in LOCAL_PYTHON_RUNNERS:
        return name, name == "PrismRunner"
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.transforms.environments import SubprocessSDKEnvironment

    direct = options.view_as(DirectOptions)
    given = {arg.split("=", 1)[0] for arg in argv if arg.startswith("--")}
    if "--direct_running_mode" not in given:
        small = input_bytes is not None and input_bytes < IN_PROCESS_MAX_BYTES
        direct.direct_running_mode = "in_memory" if small else "multi_processing"
    if "--direct_num_workers" not in given:
        # 0 = one worker per core; in this process, one (more would be threads under one GIL)
        direct.direct_num_workers = 1 if direct.direct_running_mode == "in_memory" else 0
    provision = None
    if direct.direct_running_mode == "multi_processing":
        # Worker processes start with `python -m pipelines.runner.beam_worker`: they must import this
        # package from wherever it is, installed or not.
        path = os.environ.get("PYTHONPATH", "")
        if REPO_ROOT not in path.split(os.pathsep):
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, path) if p)
        # Whole documents (a book is megabytes) are allocated and freed all run long; with
        # glibc's adaptive mmap threshold they end up on the heap and fragment it, so a
        # worker's memory crept up with the corpus size. A fixed threshold keeps them in mmap
        # chunks that go back to the OS: worker memory stays flat (bench/results/preprocess.md).
        # 64 KB, not glibc's 128 KB floor: dedup's stash frames and the launcher's shuffle
        # buffers sit between the two, and at 128 KB they still grew the workers by ~100 MB
        # and the launcher by ~170 MB at 250 MB of text, at no CPU cost measured
        # (bench/results/dedup_peers.md). The launcher applies it to itself too.
        from pipelines.runner.beam_worker import apply_mmap_threshold

        os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD))
        apply_mmap_threshold()
        # This runner hands its workers no pipeline options of their own; without a log level
        # they log every gRPC channel they open at INFO.
        level = options.view_as(WorkerOptions).default_sdk_harness_log_level or "WARNING"
        provision = _provision_info({"default_sdk_harness_log_level": level})
        # Our own worker entry point (Beam's, with its start-up messages kept out of the
        # run's output). Beam replaces the environment with its own whenever the options say
        # multi_processing, so they stop saying it once the environment is chosen. Beam runs
        # the command through `sh -c`; `exec` leaves no shell in between, which a Ctrl-C would
        # kill (the worker itself ignores it) and the runner report as a failed worker.
        environment = SubprocessSDKEnvironment.from_command_string(
            f"exec {sys.executable} -m pipelines.runner.beam_worker"
        )
        direct.direct_running_mode = None
        return FnApiRunner(default_environment=environment, provision_info=provision), True
    return FnApiRunner(provision_info=provision), True


def check_dataflow_options(
    options: PipelineOptions, runner, inputs: Sequence[str], output: str
) -> None:
    """ValueError, one line naming the flags, for a DataflowRunner launch that cannot work,
    before the launcher writes anything: Beam finds a missing --temp_location only when it
    stages the job, after OUTPUT was claimed and the tokenizer written there, and says it in
    its own words ("Missing GCS path option: staging_location"). Dataflow's workers run on
    Google Cloud: they read and write gs:// only, never the launcher's disk."""
    if not (isinstance(runner, str) and runner.endswith("DataflowRunner")):
        return
    google = options.view_as(GoogleCloudOptions)
    missing = [flag for flag, value in (("--project", google.project), ("--region", google.region))
               if not value]
    if not str(google.temp_location or "").startswith("gs://"):
        missing.append("--temp_location gs://BUCKET/PATH (where the workers stage and spill)")
    if missing:
        raise ValueError(f"the DataflowRunner needs {', '.join(missing)}")
    local = [path for path in (*inputs, output) if "://" not in path]
    if local:
        raise ValueError(
            f"the DataflowRunner's workers cannot reach {local[0]} on this machine: give "
            "--input and --output as gs:// URLs"
        )


def _provision_info(worker_options: dict):
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
    from google.protobuf import struct_pb2

    struct = struct_pb2.Struct()
    struct.update(worker_options)
    return ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(
            retrieval_token="unused-retrieval-token", pipeline_options=struct
        )
    )


def worker_count(options: PipelineOptions) -> int:
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "in_memory":
        return 1
    return direct.direct_num_workers or multiprocessing.cpu_count()


def planned_workers(options: PipelineOptions, runner, local: bool) -> int | None:
    """How many workers the run's tasks are sized for (sources.task_size): a local run's
    processes, a Dask cluster's threads, Dataflow's most VMs times their vCPUs (one SDK
    process each); None when the launcher cannot know (tasks then keep their upper bound)."""
    if local:
        return worker_count(options)
    threads = getattr(runner, "worker_threads", None)  # our DaskRunner
    if threads is not None:
        return threads(options)
    workers = options.view_as(WorkerOptions)
    vms = workers.max_num_workers or workers.num_workers
    if not vms:
        return None
    vcpus = (workers.machine_type or "").rsplit("-", 1)[-1]
    return vms * (int(vcpus) if vcpus.isdigit() else 1)


def where_it_runs(running_mode: str | None, workers: int | None) -> str:
    if running_mode == "in_memory":
        return "in this process"
    return f"{workers} local worker processes"


def tokenizer_threads(options: PipelineOptions) -> int:
    """Threads for the tokenizer pool of one SDK process: the cores that process has alone.

    A tokenizer's pool defaults to every core of the machine, but most runners start one SDK
    process per core (Dataflow does, unless `no_use_multiple_sdk_containers`; our local
    multi_processing runs do): a pool per process would put cores x cores threads on the
    machine. One in-memory local process gets every core.
    """
    name = options.view_as(StandardOptions).runner
    cores = multiprocessing.cpu_count()
    if name is None or name in LOCAL_PYTHON_RUNNERS:
        return max(1, cores // worker_count(options))
    experiments = options.view_as(DebugOptions).experiments or []
    if name.endswith("DataflowRunner") and "no_use_multiple_sdk_containers" in experiments:
        # one process per VM: it may use the machine type's every vCPU (n2-standard-8: 8)
        machine = options.view_as(WorkerOptions).machine_type or ""
        vcpus = machine.rsplit("-", 1)[-1]
        return int(vcpus) if vcpus.isdigit() else 1
    return 1
