"""Process-group start-up: one process, or one rank of a torchrun job (with its per-attempt
rendezvous store), the device mesh, and the seeds and reductions that depend on the rank."""

from __future__ import annotations

import datetime
import os
import random
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from common.signals import STOP_SIGNALS
from train.config import TrainConfig, fail
from train.parallel import build_mesh


@dataclass
class Runtime:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    mesh: object | None  # DeviceMesh ("dp", "tp") when distributed
    dp_rank: int
    dp_size: int
    tp: int
    job_id: str | None = None  # one id per torchrun job, the same in its restarted attempts
    checkpoint_group: object | None = None  # gloo group of --async-checkpoint's writer thread

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def dp_group(self):
        return self.mesh["dp"].get_group() if self.mesh is not None else None


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def leave_finished_rank(status: int = 0) -> None:
    """End a torchrun rank whose run finished (process group already destroyed) without
    interpreter finalization. Tearing down torch's C++ state at exit aborted a finished rank
    now and then on gloo ("terminate called without an active exception", SIGABRT; once in each
    of two whole-suite runs, never in 30 reruns of the same launches), and torchrun then failed
    a run whose work and checkpoints were complete (``status``: the run's exit status, 130 or
    143 for one stopped by a signal). Nothing is left to finalize: metrics and console are closed
    and the --out lock is released before this point; only stdio needs flushing."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def init_runtime(config: TrainConfig) -> Runtime:
    cuda = torch.cuda.is_available()
    if config.device == "cuda" and not cuda:
        fail("--device cuda, but torch sees no CUDA device")
    device_type = (
        "cuda" if (config.device == "cuda" or (config.device == "auto" and cuda)) else "cpu"
    )
    if not launched_by_torchrun():
        if config.tp > 1:
            fail(f"--tp {config.tp} needs {config.tp} processes: launch with torchrun")
        device = torch.device("cuda", 0) if device_type == "cuda" else torch.device("cpu")
        if device_type == "cuda":
            torch.cuda.set_device(device)
        return Runtime(0, 1, 0, device, None, 0, 1, 1)
    timeout = datetime.timedelta(minutes=config.dist_timeout)
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if world_size % config.tp:
        fail(f"world size {world_size} is not divisible by --tp {config.tp}")
    store, job_id = attempt_store(rank, world_size) if uses_agent_store() else (None, None)
    if device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group(
            "nccl", device_id=device, store=store, rank=rank, world_size=world_size,
            timeout=timeout,
        )  # fmt: skip
    else:
        device = torch.device("cpu")
        dist.init_process_group(
            "gloo", store=store, rank=rank, world_size=world_size, timeout=timeout
        )
    mesh = build_mesh(device_type, world_size, config.tp)
    dp_mesh = mesh["dp"]
    # The background checkpoint writer's collectives get their own group: on the training
    # group they would interleave with the step's all-reduces in a different order per rank.
    checkpoint_group = (
        dist.new_group(backend="gloo", timeout=timeout) if config.async_checkpoint else None
    )
    return Runtime(
        rank,
        world_size,
        local_rank,
        device,
        mesh,
        dp_mesh.get_local_rank(),
        dp_mesh.size(),
        config.tp,
        job_id,
        checkpoint_group,
    )


def uses_agent_store() -> bool:
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


STORE_TIMEOUT = datetime.timedelta(minutes=10)


def address_seen_by_master() -> str:
    """This host's address on the interface that routes to MASTER_ADDR (no packet is sent):
    reachable by every rank that reaches the master, unlike a hostname that may resolve to
    loopback."""
    master, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    family, _, _, _, address = socket.getaddrinfo(master, port, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect(address)
        return probe.getsockname()[0]


def attempt_store(rank: int, world_size: int) -> tuple[dist.Store, str]:
    """A key-value store of this attempt of the job only, for the process group's rendezvous,
    and the job's id.

    torchrun (torch 2.13) shares one TCPStore across all restarts of a job, so after a restart
    the process group's keys from the dead attempt are still there: a rank can read a dead
    peer's address and fail ("Connection refused") or hang in gloo/NCCL set-up. Nothing in a
    worker's environment names the attempt consistently (TORCHELASTIC_RESTART_COUNT counts
    only the restarts of the worker's own node), so rank 0 starts a fresh store on a free port
    and publishes "address port token" in the shared one; the other ranks retry until they
    reach a store holding that token (a stale entry from a dead attempt points at a closed
    port or at a store with another token). The launcher's opt-out
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 gives a fresh store per attempt as well.

    The job id comes from the same shared store: the first rank of the first attempt to ask
    sets it, every later attempt of the job finds it there, and a new torchrun job starts with
    an empty store. (TORCHELASTIC_RUN_ID would not do: it is "none" for every job launched
    without --rdzv-id, so two unrelated jobs would look like one.) Under
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 every attempt looks like a new job and must be
    restarted with --resume.
    """
    shared = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
        is_master=False, timeout=STORE_TIMEOUT,
    )  # fmt: skip
    key = "shardsmith/attempt-store"
    job_id = shared.compare_set("shardsmith/job-id", "", uuid.uuid4().hex).decode()
    if rank == 0:
        fresh = dist.TCPStore(
            "0.0.0.0", 0, world_size, is_master=True, timeout=STORE_TIMEOUT,
            wait_for_workers=False,
        )  # fmt: skip
        token = uuid.uuid4().hex
        fresh.set("token", token)
        shared.set(key, f"{address_seen_by_master()} {fresh.port} {token}")
        return fresh, job_id
    deadline = time.monotonic() + STORE_TIMEOUT.total_seconds()
    while True:
        host, port, token = shared.get(key).decode().split()
        try:
            candidate = dist.TCPStore(
                host, int(port), world_size, is_master=False,
                timeout=datetime.timedelta(seconds=5),
            )  # fmt: skip
            if candidate.get("token").decode() == token:
                candidate.set_timeout(STORE_TIMEOUT)
                return candidate, job_id
        except dist.DistError:
            pass  # a dead attempt's store: rank 0 of this attempt has not published yet
        if time.monotonic() > deadline:
            fail(f"rank {rank}: no store of this attempt published by rank 0 within 10 minutes")
        time.sleep(0.2)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def all_reduce_mean(value: torch.Tensor, runtime: Runtime) -> torch.Tensor:
    if runtime.mesh is not None and runtime.dp_size > 1:
        dist.all_reduce(value, op=dist.ReduceOp.SUM, group=runtime.dp_group)
        value = value / runtime.dp_size
    return value


class StopRequest:
    """SIGINT (Ctrl-C), SIGTERM (a scheduler's preemption; torchrun forwards it to every
    rank) and SIGHUP (the terminal closed) ask the run to stop at the end of the current step,
    save and exit 128 + the signal's number, as Megatron's --exit-signal-handler does. A signal
    the process ignores (SIGHUP under ``nohup``) stays ignored.

    The handler only records the first signal; a second one while the run finishes its step
    and saves is noted and ignored (Megatron waits too: a save cut short leaves only a
    ``.tmp`` folder the next run sweeps, but would lose every step since the last save).
    SIGKILL still ends the process at once. Signal handlers can only be set from the main
    thread; a trainer run elsewhere keeps the process's handlers.
    """

    def __init__(self) -> None:
        self.signal: int | None = None
        self.previous: dict[int, object] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                if signal.getsignal(number) is not signal.SIG_IGN:
                    self.previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)

    def _handle(self, number: int, frame) -> None:
        if self.signal is None:
            self.signal = number
        else:
            print(
                f"{signal.Signals(number).name} again: already stopping, saving a checkpoint "
                "first (SIGKILL stops without saving)",
                file=sys.stderr,
                flush=True,
            )

    def agreed(self, runtime: Runtime) -> int | None:
        """The signal every rank stops for, or None: a rank that got none stops with the
        others (torchrun's forwarded signals reach ranks at different points of a step).
        One 1-element all-reduce per step under torchrun, none in one process."""
        number = self.signal or 0
        if runtime.world_size > 1:
            flag = torch.tensor([number], dtype=torch.int32, device=runtime.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            number = int(flag.item())
        return number or None
