"""The training loop: one process, or every rank of a torchrun job.

``main(config)`` sets up the process group (from torchrun's environment), the device mesh, the
data, the model and its parallelism, the optimizer and precision, resumes from a checkpoint if
asked (or if torchrun restarted this job after a failure), then runs ``max_steps`` optimizer
steps of ``global_batch`` samples, each as gradient-accumulated micro-batches.

A step whose loss or gradients are not finite (or, with ``--skip-outliers``, are z-score
outliers) is skipped: gradients dropped, nothing updated, the data consumed, a counter bumped.
Every rank takes the same decision because it is made from values reduced over all ranks.

Test-only hooks (environment variables, read once per run; never set them in real jobs):
``SHARDSMITH_TEST_GRAD_FAULT=N:inf`` fills one gradient with inf at step N (an injected fp16
overflow; ``N-M:inf`` for a run of steps, ``N:x1000`` scales the gradients instead, an outlier;
``N:inf@R`` on rank R only);
``SHARDSMITH_TEST_KILL_AT_STEP=N`` with ``SHARDSMITH_TEST_KILL_MARKER=PATH`` makes
rank ``SHARDSMITH_TEST_KILL_RANK`` (default 1) SIGKILL itself after step N, once: it creates
PATH first and never fires while PATH exists (so the restarted job runs through).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import math
import os
import random
import signal
import socket
import statistics
import time
import uuid
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from dataset_format import FormatError
from train import checkpoint as ckpt
from train.config import DEFAULT_PRESETS, OPTIMIZER_DEFAULTS, TrainConfig
from train.metrics import Console, MetricsLog, format_train_line, lookup_peak_tflops, throughput
from train.optim import LRSchedule, build_optimizer, clip_grads_, grad_norm, scale_grads_
from train.parallel import build_mesh, loss_context, parallelize
from train.precision import Precision


def fail(message: str) -> None:
    """The one way the trainer reports a user error: one line, exit status 1, no traceback."""
    raise SystemExit(f"error: {message}")


# -- runtime ---------------------------------------------------------------------------------


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


# -- configuration resolved against the machine, the data and the model ---------------------------


def resolve_config(config: TrainConfig, runtime: Runtime, positions_of) -> TrainConfig:
    """Fill the None defaults; ``positions_of(preset) -> (model kind, max positions)``."""
    preset = config.preset or DEFAULT_PRESETS[config.model or "gpt"]
    kind, positions = positions_of(preset)
    if config.model is not None and config.model != kind:
        fail(f"--preset {preset} is a {kind} model, but --model {config.model} was given")
    seq_len = config.seq_len or positions
    if seq_len > positions:
        fail(f"--seq-len {seq_len} exceeds the {preset} model's {positions} positions")
    precision = config.precision or ("bf16" if runtime.device.type == "cuda" else "fp32")
    micro_batch = config.micro_batch or max(1, config.global_batch // runtime.dp_size)
    if config.global_batch % (micro_batch * runtime.dp_size):
        fail(
            f"--global-batch {config.global_batch} is not a multiple of --micro-batch "
            f"{micro_batch} x data-parallel size {runtime.dp_size}"
        )
    warmup = config.warmup_steps if config.warmup_steps is not None else config.max_steps // 10
    decay_steps = config.decay_steps or config.max_steps
    beta2, eps, weight_decay = OPTIMIZER_DEFAULTS[config.optimizer]
    if warmup > decay_steps:
        fail(f"--warmup-steps {warmup} exceeds the decay horizon of {decay_steps} steps")
    return dataclasses.replace(
        config,
        model=kind,
        preset=preset,
        seq_len=seq_len,
        precision=precision,
        micro_batch=micro_batch,
        warmup_steps=warmup,
        decay_steps=decay_steps,
        min_lr=config.min_lr if config.min_lr is not None else config.lr / 10,
        beta2=config.beta2 if config.beta2 is not None else beta2,
        eps=config.eps if config.eps is not None else eps,
        weight_decay=config.weight_decay if config.weight_decay is not None else weight_decay,
    )


# -- data ------------------------------------------------------------------------------------------


@dataclass
class Data:
    train: object
    valid: object | None
    test: object | None
    tokenizer: dict | None  # TokenizerInfo.to_json() of the sets, None if none recorded
    vocab_size: int  # the tokenizer's (unpadded)


def build_data(config: TrainConfig, runtime: Runtime) -> Data:
    from train import data as data_lib

    try:
        sources = data_lib.parse_data_spec(config.data)
        tokenizer = data_lib.resolve_tokenizer(
            sources, tokenizer_file=config.tokenizer, vocab_size=config.vocab_size
        )
    except (ValueError, FormatError, OSError) as e:
        fail(f"--data {' '.join(config.data)}: {e}")
    samples_per_eval = config.eval_iters * config.global_batch
    shares = split_shares(config.split)
    num_samples = {
        "train": config.max_steps * config.global_batch,
        # no samples asked of a split the --split string leaves out
        "valid": samples_per_eval if shares[1] > 0 else 0,
        "test": samples_per_eval if shares[2] > 0 else 0,
    }
    try:
        if config.model == "gpt":
            eod = tokenizer.special_ids.get("eod")
            if config.eod_mask_loss and eod is None:
                fail("--eod-mask-loss: the data's tokenizer records no 'eod' id")
            datasets = data_lib.build_gpt_datasets(
                sources,
                seq_len=config.seq_len,
                split=config.split,
                seed=config.seed,
                num_samples=num_samples,
                eod_mask_id=eod if config.eod_mask_loss else None,
                eod_id=eod,
                vocab_size=tokenizer.vocab_size,
            )
        else:
            masking = data_lib.MaskingConfig(
                mask_prob=config.mask_prob, whole_word=config.whole_word_masking
            )
            datasets = data_lib.build_bert_datasets(
                sources,
                max_seq_length=config.seq_len,
                split=config.split,
                seed=config.seed,
                num_samples=num_samples,
                masking=masking,
                special_ids=tokenizer.special_ids,
                vocab_size=tokenizer.vocab_size,
            )
    except (ValueError, FormatError, OSError, RuntimeError) as e:
        # RuntimeError: on the ranks that waited while local rank 0 failed to build an index
        fail(f"--data {' '.join(config.data)}: {e}")
    train = datasets.get("train")
    if train is None or len(train) == 0:
        fail(f"--data {' '.join(config.data)}: the train split (--split {config.split}) is empty")
    return Data(
        train=train,
        valid=datasets.get("valid") or None,
        test=datasets.get("test") or None,
        tokenizer=tokenizer.to_json(),
        vocab_size=tokenizer.vocab_size,
    )


def split_shares(split: str) -> list[float]:
    """The train/valid/test shares of a --split string ("969,30,1" or "969/30/1")."""
    from train.data.spec import split_documents

    # A share is non-zero exactly when a huge set would give that split documents.
    ranges = split_documents(10**12, split)
    return [float(end - start) for start, end in ranges.values()]


def make_loader(dataset, total_samples: int, consumed_samples: int, config, runtime) -> DataLoader:
    from train.data import PretrainingSampler, collate

    sampler = PretrainingSampler(
        total_samples=total_samples,
        consumed_samples=consumed_samples,
        micro_batch_size=config.micro_batch,
        data_parallel_rank=runtime.dp_rank,
        data_parallel_size=runtime.dp_size,
    )
    # Its own generator: creating the loader must not draw from the global torch RNG, or a
    # resumed run's dropout stream would differ from an uninterrupted one.
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=collate,
        num_workers=config.num_workers,
        pin_memory=runtime.device.type == "cuda",
        generator=torch.Generator().manual_seed(config.seed),
        persistent_workers=config.num_workers > 0,
    )


def next_batch(batches) -> dict:
    """The next batch; a fault found in the data while reading it is a one-line error."""
    try:
        return next(batches)
    except FormatError as e:
        # From a DataLoader worker the message carries the worker's traceback; its last line
        # is "module.FormatError: <the message>".
        last = str(e).strip().splitlines()[-1]
        fail(last.removeprefix(f"{type(e).__module__}.{type(e).__name__}: "))


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: torch.as_tensor(v).to(device, non_blocking=True) for k, v in batch.items()}


# -- model -----------------------------------------------------------------------------------------


def saved_vocab_size(trainer_state: dict | None, tp: int) -> int | None:
    """The padded vocabulary of the checkpoint to resume, if this run's --tp can shard it.

    Padding is Megatron's (a multiple of ``--make-vocab-size-divisible-by`` x tp), so a run
    resumed at another tp would pad differently; keeping the saved size (vocab-parallel layers
    only need it divisible by tp) lets a checkpoint move between tensor-parallel degrees.
    """
    if trainer_state is None:
        return None
    vocab = trainer_state.get("model_config", {}).get("vocab_size")
    return vocab if isinstance(vocab, int) and vocab % tp == 0 else None


def build_training_model(
    config: TrainConfig, runtime: Runtime, vocab_size: int, padded: int | None = None
) -> nn.Module:
    """The model for ``config``, its vocabulary padded from the tokenizer's ``vocab_size``
    unless ``padded`` (a resumed checkpoint's) is given."""
    from train.models.presets import build_model, get_preset, pad_vocab_size

    preset = get_preset(config.preset)
    model_config = preset.config
    if config.dropout is not None:
        model_config = dataclasses.replace(model_config, dropout=config.dropout)
    padded = padded or pad_vocab_size(
        vocab_size, multiple=config.make_vocab_size_divisible_by, tensor_parallel=runtime.tp
    )
    # On the meta device: nothing is allocated until parallelize() has sharded the model and
    # materialises each rank's pieces, initialised from --seed exactly as an unsharded model
    # would be (the same initial weights under any parallelism).
    with torch.device("meta"):
        return build_model(model_config, vocab_size=padded)


def model_positions(preset_name: str) -> tuple[str, int]:
    from train.models.presets import get_preset

    try:
        preset = get_preset(preset_name)
    except KeyError as e:
        fail(str(e.args[0]))
    config = preset.config
    positions = getattr(config, "block_size", None) or config.max_position_embeddings
    return preset.model, positions


def forward_loss(
    model: nn.Module, batch: dict, kind: str, next_sentence: bool, parallel_loss: bool = False
):
    """The model's loss on one micro-batch, and named parts of it for the metrics.

    ``parallel_loss``: the model's logits come out sharded by vocabulary (GPT under tensor
    parallelism); its loss function runs on the shards (call inside ``loss_context``).
    """
    if kind == "gpt":
        if parallel_loss:
            from train.models.gpt import masked_cross_entropy
            from train.parallel import vocab_parallel_loss

            logits, _ = model(batch["input_ids"])
            loss = vocab_parallel_loss(
                masked_cross_entropy, logits, batch["labels"], batch["loss_mask"]
            )
            return loss, {}
        _, loss = model(batch["input_ids"], batch["labels"], batch["loss_mask"])
        return loss, {}
    out = model(
        batch["input_ids"],
        batch["token_type_ids"],
        batch["attention_mask"],
        batch["mlm_labels"],
        batch["nsp_label"] if next_sentence else None,
    )
    parts = {"mlm_loss": out.mlm_loss}
    if out.nsp_loss is not None:
        parts["nsp_loss"] = out.nsp_loss
    if not model.training:  # evaluation: how many masked tokens / sentence pairs it gets right
        labels = batch["mlm_labels"]
        target = labels[labels != -100]  # the order of the model's gathered MLM logits
        parts["mlm_counts"] = _right_and_total(out.mlm_logits, target)
        if out.nsp_logits is not None and next_sentence:
            parts["nsp_counts"] = _right_and_total(out.nsp_logits, batch["nsp_label"].view(-1))
    return out.loss, parts


def _right_and_total(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """[predictions equal to target, predictions] as float64, on the logits' device."""
    return torch.stack(
        [
            (logits.argmax(-1) == target).sum(),
            torch.tensor(target.numel(), device=target.device),  # same device for stack
        ]
    ).double()


def uses_parallel_loss(config: TrainConfig, runtime: Runtime) -> bool:
    """GPT under tensor parallelism keeps its logits sharded by vocabulary into the loss."""
    return config.model == "gpt" and config.parallel == "tp" and runtime.tp > 1


def no_sync(model: nn.Module, sync: bool):
    """Skip DDP's gradient all-reduce on all but the last micro-batch of a step.

    FSDP2 is left to reduce-scatter after every micro-batch, accumulating into the sharded
    gradients: skipping its reduction would keep every parameter's unsharded gradient (the
    full model's worth per rank) alive between micro-batches, the memory FSDP exists to save.
    """
    if not sync and hasattr(model, "no_sync"):  # DDP
        return model.no_sync()
    return contextlib.nullcontext()


# -- skipping ------------------------------------------------------------------------------------


class OutlierDetector:
    """Running window of recent values; z-score of a new one against it (llm.c's detector).

    Only a full window gives a z-score, so the first steps of a run are never skipped. Values
    of skipped steps are not added: one spike must not inflate the spread that judges the next.
    """

    def __init__(self, window: int, values: list[float] | None = None) -> None:
        self.values: collections.deque[float] = collections.deque(values or [], maxlen=window)

    def zscore(self, value: float) -> float | None:
        if len(self.values) < (self.values.maxlen or 0):
            return None
        std = statistics.pstdev(self.values)
        if std == 0:
            return None
        return (value - statistics.fmean(self.values)) / std

    def add(self, value: float) -> None:
        self.values.append(value)


@dataclass
class Counters:
    nonfinite: int = 0  # loss or gradients inf/nan (bf16/fp32), or a non-finite fp16 loss
    overflow: int = 0  # fp16 gradients overflowed at the current loss scale
    outlier_loss: int = 0
    outlier_grad_norm: int = 0
    consecutive: int = 0  # current run of non-finite / overflow skips

    def skipped(self) -> dict[str, int]:
        return {
            "nonfinite": self.nonfinite,
            "overflow": self.overflow,
            "outlier_loss": self.outlier_loss,
            "outlier_grad_norm": self.outlier_grad_norm,
        }


@dataclass(frozen=True)
class GradFault:
    """Test hook SHARDSMITH_TEST_GRAD_FAULT="STEP[-LAST]:ACTION[@RANK]": before the update of
    steps STEP..LAST (numbered as in metrics.jsonl, from 1), ACTION "inf" fills one gradient
    with inf, "xF" multiplies all gradients by F; only on rank RANK if given, else on all."""

    first: int
    last: int
    factor: float  # inf: fill with inf
    rank: int | None

    def applies(self, step: int, rank: int) -> bool:
        return self.first <= step <= self.last and self.rank in (None, rank)

    def apply(self, params: list[torch.Tensor]) -> None:
        if self.factor == math.inf:
            params[0].grad.fill_(math.inf)
        else:
            scale_grads_(params, self.factor)


def parse_grad_fault(spec: str | None) -> GradFault | None:
    if not spec:
        return None
    try:
        spec_steps, action = spec.split(":")
        action, _, rank = action.partition("@")
        first, _, last = spec_steps.partition("-")
        factor = math.inf if action == "inf" else float(action.removeprefix("x"))
        return GradFault(int(first), int(last or first), factor, int(rank) if rank else None)
    except ValueError:
        fail(
            f"SHARDSMITH_TEST_GRAD_FAULT={spec!r}: expected STEP[-LAST]:inf or "
            "STEP[-LAST]:xF, optionally @RANK"
        )


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


# -- the loop --------------------------------------------------------------------------------------


def all_reduce_mean(value: torch.Tensor, runtime: Runtime) -> torch.Tensor:
    if runtime.mesh is not None and runtime.dp_size > 1:
        dist.all_reduce(value, op=dist.ReduceOp.SUM, group=runtime.dp_group)
        value = value / runtime.dp_size
    return value


@torch.no_grad()
def evaluate(model, loader, config, runtime, precision, next_sentence) -> dict[str, float]:
    """Mean loss over the split's first ``eval_iters`` global batches (``loader``, built once
    per split: the same samples at every evaluation and under any parallelism, so the figures
    are comparable), and ``ppl``: the exponential of the language-model loss.

    For BERT the loss is MLM + NSP, so ``ppl`` is exp(MLM loss) alone; ``mlm_loss``,
    ``mlm_accuracy`` (over all predicted tokens) and, with a next-sentence head, ``nsp_loss``
    and ``nsp_accuracy`` (over all pairs) are reported apart.
    """
    model.eval()
    sums: dict[str, torch.Tensor] = {}
    batches = 0
    for batch in loader:
        with precision.autocast(), loss_context(uses_parallel_loss(config, runtime)):
            loss, parts = forward_loss(
                model, to_device(batch, runtime.device), config.model, next_sentence,
                uses_parallel_loss(config, runtime),
            )  # fmt: skip
        for name, value in {"loss": loss, **parts}.items():
            value = value.detach().double().to(runtime.device)
            sums[name] = sums[name] + value if name in sums else value
        batches += 1
    model.train()
    result = {}
    for name, value in sums.items():
        value = all_reduce_mean(value / max(batches, 1), runtime)
        if name.endswith("_counts"):  # [right, total]: the means' ratio is the counts' ratio
            right, total = value.tolist()
            result[name.replace("_counts", "_accuracy")] = right / total if total else math.nan
        else:
            result[name] = float(value)
    lm_loss = result.get("mlm_loss", result.get("loss", math.nan))
    result["ppl"] = math.exp(lm_loss) if lm_loss < 50 else math.inf
    return result


def wikitext_eval_data(config: TrainConfig) -> tuple[list[int], int] | None:
    """--eval-wikitext: the file's ids under the data's tokenizer and its WikiText token count,
    made once before training."""
    if config.eval_wikitext is None:
        return None
    if config.model != "gpt":
        fail("--eval-wikitext scores a language model: GPT only")
    from train.eval.load import LoadError, run_tokenizer_path
    from train.eval.run import wikitext_ids

    tokenizer_path = run_tokenizer_path(config.to_dict())
    try:
        with open(config.eval_wikitext, encoding="utf-8") as f:
            return wikitext_ids(f.read(), tokenizer_path)
    except (LoadError, OSError, UnicodeDecodeError) as e:
        fail(f"--eval-wikitext {config.eval_wikitext}: {e}")


def main(config: TrainConfig) -> dict:
    """Run training; returns a summary (final step, last loss, counters) for callers/tests."""
    runtime = init_runtime(config)
    try:
        return _train(config, runtime)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _train(config: TrainConfig, runtime: Runtime) -> dict:
    config = resolve_config(config, runtime, model_positions)
    if config.deterministic:
        if runtime.device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    run_dir = config.out
    run_id = runtime.job_id
    resume_path = ckpt.latest_checkpoint(run_dir)
    # A checkpoint written by this very torchrun job means torchrun restarted it after a
    # failure: resume by itself. (Every rank reads the same file, so all decide alike;
    # TORCHELASTIC_RESTART_COUNT would not do: it counts only the restarts of its own node.)
    restarted = resume_path is not None and run_id is not None
    restarted = restarted and ckpt.saved_run_id(resume_path) == run_id
    if config.resume and resume_path is None:
        fail(f"--resume: no checkpoint in {ckpt.checkpoints_dir(run_dir)}")
    if resume_path is not None and not (config.resume or restarted):
        fail(
            f"{run_dir} already holds checkpoints (latest {resume_path}); pass --resume to "
            "continue that run, or choose another --out"
        )

    data = build_data(config, runtime)
    saved_state = None
    if resume_path is not None:
        try:
            ckpt.verify_checkpoint(resume_path)
            saved_state = ckpt.read_trainer_state(resume_path)
        except ckpt.CheckpointError as e:
            fail(f"cannot resume: {e}")
        check_resumable(saved_state, config, data, resume_path)
    model = build_training_model(
        config, runtime, data.vocab_size, saved_vocab_size(saved_state, runtime.tp)
    )
    next_sentence = bool(getattr(model.config, "next_sentence", False))
    precision = Precision(config.precision, runtime.device.type)
    flops_per_token = (
        model.flops_per_token(config.seq_len)
        if config.model == "gpt"
        else model.flops_per_token(config.seq_len, mlm_fraction=config.mask_prob)
    )
    num_params = model.num_params()
    param_dtype = precision.dtype if config.parallel in ("fsdp", "tp") else None
    try:
        train_model = parallelize(
            model, runtime.mesh, config.parallel, runtime.device, param_dtype, config.compile,
            sequence_parallel=config.sequence_parallel,
            parallel_loss=uses_parallel_loss(config, runtime),
            activation_checkpointing=config.activation_checkpointing,
            ac_every=config.ac_every,
            init_seed=config.seed,
        )  # fmt: skip
    except ValueError as e:
        fail(f"--parallel {config.parallel}: {e}")
    optimizer = build_optimizer(
        model,
        config.optimizer,
        lr=config.lr,
        weight_decay=config.weight_decay,
        betas=(config.beta1, config.beta2),
        eps=config.eps,
        decay_embeddings=config.decay_embeddings,
        max_grad_norm=config.clip_grad,
        nvlamb=config.nvlamb,
    )
    schedule = LRSchedule(
        config.lr, config.min_lr, config.warmup_steps, config.decay_steps, config.decay
    )
    params = [p for group in optimizer.param_groups for p in group["params"]]

    step, consumed_samples = 0, 0
    counters = Counters()
    loss_window = OutlierDetector(config.outlier_window)
    grad_window = OutlierDetector(config.outlier_window)
    # Per data-parallel rank streams (dropout); tp ranks of one dp group share theirs.
    # Under sequence parallelism every dropout acts on this tp rank's own tokens or heads:
    # distinct streams per tp rank too, as Megatron's model-parallel RNG tracker gives them.
    # (Without it the hidden dropouts act on replicated activations and must draw alike.)
    tp_rank = runtime.mesh["tp"].get_local_rank() if runtime.mesh is not None else 0
    stream = runtime.dp_rank * (runtime.tp if config.sequence_parallel else 1)
    seed_everything(config.seed + 1 + stream + (tp_rank if config.sequence_parallel else 0))
    if resume_path is not None:
        try:
            state = ckpt.load_checkpoint(resume_path, model, optimizer, trainer_state=saved_state)
        except ckpt.CheckpointError as e:
            fail(f"cannot resume: {e}")
        step, consumed_samples = state["step"], state["consumed_samples"]
        precision.load_state_dict(state["precision"])
        counters = Counters(**state["counters"])
        loss_window = OutlierDetector(config.outlier_window, state["outlier"]["loss"])
        grad_window = OutlierDetector(config.outlier_window, state["outlier"]["grad_norm"])

    peak = config.peak_tflops
    device_name = "cpu"
    if runtime.device.type == "cuda":
        device_name = torch.cuda.get_device_name(runtime.device)
        peak = peak or lookup_peak_tflops(device_name, config.precision)
    metrics = MetricsLog(
        os.path.join(run_dir, "metrics.jsonl") if runtime.is_main else None,
        resume_step=step if resume_path is not None else None,
    )
    console = Console(runtime.is_main, config.max_steps, step, config.progress)
    accumulation = config.global_batch // (config.micro_batch * runtime.dp_size)
    console.print(
        f"{config.preset}: {num_params / 1e6:.2f}M parameters, vocab {model.config.vocab_size}, "
        f"seq {config.seq_len}, {config.precision}, {runtime.world_size} process(es) on "
        f"{device_name} ({config.parallel}, dp={runtime.dp_size}, tp={runtime.tp}), global batch "
        f"{config.global_batch} = micro {config.micro_batch} x dp {runtime.dp_size} x "
        f"accumulation {accumulation}"
        + (f"; resumed from {resume_path} at step {step}" if resume_path else "")
    )

    def trainer_state() -> dict:
        return {
            "step": step,
            "consumed_samples": consumed_samples,
            "precision": precision.state_dict(),
            "schedule": schedule.state_dict(),
            "counters": dataclasses.asdict(counters),
            "outlier": {"loss": list(loss_window.values), "grad_norm": list(grad_window.values)},
            "config": config.to_dict(),
            "model_config": dataclasses.asdict(model.config),
            "data_identity": data_identity(config.data),
            "tokenizer": data.tokenizer,
            "world_size": runtime.world_size,
            "torch_version": str(torch.__version__),
            "run_id": run_id,
        }

    pending: list[ckpt.PendingSave] = []  # at most one: an --async-checkpoint write in flight

    def commit_pending() -> None:
        while pending:
            path = pending.pop().commit()
            if path:
                console.print(f"saved {path}")

    def save(final: bool = False) -> None:
        if not config.save:
            return
        commit_pending()
        pending.append(
            ckpt.save_checkpoint(
                run_dir, step, model, optimizer, trainer_state(), config.keep_checkpoints,
                async_group=runtime.checkpoint_group,
            )
        )  # fmt: skip
        if final or runtime.checkpoint_group is None:
            commit_pending()

    eval_loaders: dict[str, DataLoader] = {}  # built at first use, reused by every evaluation

    wikitext = wikitext_eval_data(config)

    def run_wikitext_eval() -> None:
        """The WikiText task of train/evaluate.py on the model being trained, every rank of
        a data-parallel group scoring its share of the windows."""
        if wikitext is None:
            return
        from train.eval.run import perplexity_of_ids
        from train.eval.scoring import Partition

        ids, word_tokens = wikitext
        group = runtime.mesh["dp"].get_group() if runtime.mesh is not None else None

        def loss_of(inputs, targets):
            batch = {"input_ids": inputs, "labels": targets, "loss_mask": targets != -100}
            with precision.autocast(), loss_context(parallel_loss):
                return forward_loss(train_model, batch, "gpt", False, parallel_loss)[0]

        result = perplexity_of_ids(
            model,
            ids,
            context=config.seq_len,
            stride=max(1, config.seq_len // 2),
            batch_size=config.micro_batch,
            partition=Partition(runtime.dp_rank, runtime.dp_size, group),
            word_tokens=word_tokens,
            loss_of=loss_of,
        )
        train_model.train()
        record = {"kind": "eval", "split": "wikitext", "step": step, **result.to_json()}
        metrics.write(record)
        console.print(
            f"step {step} | wikitext loss {result.loss:.4f} | ppl {result.ppl:.2f} | "
            f"adjusted ppl {result.adjusted_ppl:.2f}"
        )

    def run_eval(split: str, dataset) -> None:
        if dataset is None or config.eval_iters == 0:
            return
        if split not in eval_loaders:
            eval_loaders[split] = make_loader(
                dataset, config.eval_iters * config.global_batch, 0, config, runtime
            )
        result = evaluate(
            train_model, eval_loaders[split], config, runtime, precision, next_sentence
        )
        record = {"kind": "eval", "split": split, "step": step, **result}
        metrics.write(record)
        console.print(format_eval_line(split, record))

    parallel_loss = uses_parallel_loss(config, runtime)
    grad_fault = parse_grad_fault(os.environ.get("SHARDSMITH_TEST_GRAD_FAULT"))
    kill_step = _env_int("SHARDSMITH_TEST_KILL_AT_STEP")
    kill_rank = _env_int("SHARDSMITH_TEST_KILL_RANK") or 1
    kill_marker = os.environ.get("SHARDSMITH_TEST_KILL_MARKER")

    total_samples = config.max_steps * config.global_batch
    last_step = min(config.max_steps, config.stop_at or config.max_steps)
    if step < last_step:  # a resumed run may have nothing left to train
        batches = iter(make_loader(data.train, total_samples, consumed_samples, config, runtime))
    train_model.train()
    last_loss = math.nan
    while step < last_step:
        started, cpu_started = time.perf_counter(), time.process_time()
        lr = schedule.apply(optimizer, step)
        # float64: summing a step's micro-batch losses is then exact, so the logged loss does
        # not depend on how micro-batches are spread over ranks (1 process vs DDP: same value)
        loss_sum = torch.zeros((), dtype=torch.float64, device=runtime.device)
        part_sums: dict[str, torch.Tensor] = {}
        for micro in range(accumulation):
            batch = to_device(next_batch(batches), runtime.device)
            with no_sync(train_model, micro == accumulation - 1), loss_context(parallel_loss):
                with precision.autocast():
                    loss, parts = forward_loss(
                        train_model, batch, config.model, next_sentence, parallel_loss
                    )
                precision.scale_loss(loss / accumulation).backward()
            loss_sum += loss.detach().double()
            for name, value in parts.items():
                part_sums[name] = part_sums.get(name, 0) + value.detach().double()
        loss_mean = all_reduce_mean(loss_sum / accumulation, runtime)
        if precision.mode == "fp16":
            scale_grads_(params, precision.unscale_factor)
        if grad_fault is not None and grad_fault.applies(step + 1, runtime.rank):
            grad_fault.apply(params)
        norm = grad_norm(params)
        loss_value = float(loss_mean)

        skip = None
        if not math.isfinite(loss_value):
            skip = "nonfinite"
        elif not math.isfinite(norm):
            skip = "overflow" if precision.mode == "fp16" else "nonfinite"
        elif config.skip_outliers > 0:
            z_loss, z_grad = loss_window.zscore(loss_value), grad_window.zscore(norm)
            if z_loss is not None and z_loss > config.skip_outliers:
                skip = "outlier_loss"
            elif z_grad is not None and z_grad > config.skip_outliers:
                skip = "outlier_grad_norm"
        if skip is None:
            if config.optimizer != "lamb":  # LAMB normalises by the global norm itself
                clip_grads_(params, config.clip_grad, norm)
            optimizer.step()
            counters.consecutive = 0
            loss_window.add(loss_value)
            grad_window.add(norm)
        else:
            setattr(counters, skip, getattr(counters, skip) + 1)
            if skip in ("nonfinite", "overflow"):
                counters.consecutive += 1
        precision.update(overflow=skip == "overflow")
        optimizer.zero_grad(set_to_none=True)
        loss_scale = precision.scale if precision.mode == "fp16" else None
        step += 1
        consumed_samples += config.global_batch
        last_loss = loss_value
        elapsed = time.perf_counter() - started
        cpu_time = time.process_time() - cpu_started  # all threads: host work per step

        speed = throughput(
            config.global_batch * config.seq_len, elapsed, flops_per_token, runtime.world_size, peak
        )
        record = {
            "kind": "train",
            "step": step,
            "loss": loss_value,
            "lr": lr,
            "grad_norm": norm,
            **speed,
            "step_time_s": elapsed,
            "cpu_time_s": cpu_time,
            "consumed_samples": consumed_samples,
            "skipped": counters.skipped(),
        }
        if skip is not None:
            record["skip"] = skip
        if loss_scale is not None:
            record["loss_scale"] = loss_scale
        for name, value in part_sums.items():
            record[name] = float(all_reduce_mean(value / accumulation, runtime))
        metrics.write(record)
        console.step(record)
        if step % config.log_interval == 0 or step == config.max_steps or skip is not None:
            console.print(format_train_line(record) + (f" | skipped: {skip}" if skip else ""))

        if counters.consecutive >= config.max_consecutive_skips:
            fail(
                f"{counters.consecutive} consecutive steps had non-finite loss or gradients "
                f"(last at step {step}, loss {loss_value}, grad norm {norm}); stopping. "
                f"Resume from the last checkpoint with a lower --lr, or use --precision bf16"
            )
        if config.eval_interval and step % config.eval_interval == 0 and step < last_step:
            run_eval("valid", data.valid)
            run_wikitext_eval()
        if config.save_interval and step % config.save_interval == 0 and step < last_step:
            save()
        if kill_step is not None and step == kill_step and runtime.rank == kill_rank:
            if kill_marker and not os.path.exists(kill_marker):
                with open(kill_marker, "w") as f:
                    f.write(f"rank {runtime.rank} killed itself after step {step}\n")
                os.kill(os.getpid(), signal.SIGKILL)

    if step == config.max_steps:
        run_eval("valid", data.valid)
        run_eval("test", data.test)
        run_wikitext_eval()
    else:
        console.print(f"stopped after step {step} (--stop-at); continue with --resume")
    save(final=True)
    metrics.close()
    console.close()
    return {
        "step": step,
        "consumed_samples": consumed_samples,
        "loss": last_loss,
        "skipped": counters.skipped(),
        "loss_scale": precision.scale,
        "config": config.to_dict(),
    }


def data_identity(specs: list[str]) -> list[str]:
    """--data with local paths made absolute: the same sets named from another directory
    compare equal."""
    return [os.path.abspath(s) if os.path.exists(s) else s for s in specs]


# What makes a run the same run: resuming with other values mixes two data streams or batch
# sizes in one checkpoint lineage, so it needs --allow-config-change.
RUN_IDENTITY = ("split", "seq_len", "global_batch")


def format_eval_line(split: str, record: dict) -> str:
    line = f"step {record['step']} | {split} loss {record['loss']:.4f}"
    if "mlm_loss" in record:
        line += f" | mlm loss {record['mlm_loss']:.4f} | mlm ppl {record['ppl']:.2f}"
        line += f" | mlm accuracy {record['mlm_accuracy']:.3f}"
        if "nsp_accuracy" in record:
            line += f" | nsp loss {record['nsp_loss']:.4f}"
            line += f" | nsp accuracy {record['nsp_accuracy']:.3f}"
        return line
    return line + f" | ppl {record['ppl']:.2f}"


def check_resumable(state: dict, config: TrainConfig, data: Data, path: str) -> None:
    """One clear error for a checkpoint that does not belong to this run's data and model."""
    saved = state["config"]
    for key in ("model", "preset", "optimizer"):
        if saved.get(key) != getattr(config, key):
            fail(
                f"cannot resume from {path}: it was saved with --{key} {saved.get(key)}, "
                f"this run has --{key} {getattr(config, key)}"
            )
    saved_tok, tok = state.get("tokenizer"), data.tokenizer
    if saved_tok and tok:
        for key in ("kind", "vocab_size", "sha256", "special_ids"):
            if saved_tok.get(key) != tok.get(key):
                fail(
                    f"cannot resume from {path}: --data {' '.join(config.data)} was made with "
                    f"another tokenizer than the checkpoint ({key}: {tok.get(key)!r} in the data, "
                    f"{saved_tok.get(key)!r} in the checkpoint)"
                )
    if not config.allow_config_change:
        changed = [
            (f"--{key.replace('_', '-')}", saved.get(key), getattr(config, key))
            for key in RUN_IDENTITY
            if saved.get(key) != getattr(config, key)
        ]
        if state.get("data_identity") != data_identity(config.data):
            changed.insert(0, ("--data", " ".join(saved.get("data", [])), " ".join(config.data)))
        if changed:
            flag, before, now = changed[0]
            fail(
                f"cannot resume from {path}: it was saved with {flag} {before}, this run has "
                f"{flag} {now}; pass --allow-config-change to continue it anyway, or choose "
                "another --out"
            )
