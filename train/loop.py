"""The training loop: one process, or every rank of a torchrun job.

``main(config)`` starts the process group (:mod:`train.runtime`), then a :class:`Trainer`
builds the run (data, model and its parallelism, optimizer, precision; the checkpoint it
resumes from, :mod:`train.resume`) and runs ``max_steps`` optimizer steps of
``global_batch`` samples, each as gradient-accumulated micro-batches. A step whose loss or
gradients are bad is skipped (:mod:`train.skipping`); evaluation is :mod:`train.evaluation`.

A caller may pass :class:`TrainHooks` to act at fixed points of each step: the tests inject
faults that way (tests/train_faults.py). Real runs pass none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shlex
import signal
import sys
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn

from common.signals import STOP_SIGNALS, Stopped, reported
from train import checkpoint as ckpt
from train.build import build_training_model, model_positions, resolve_config, saved_vocab_size
from train.config import TrainConfig, fail
from train.data.loader import build_data, make_loader, next_batch, to_device
from train.evaluation import Evaluator, forward_loss, uses_parallel_loss
from train.export import checked_model_config
from train.init_hf import hf_init_model
from train.metrics import (
    Console,
    MetricsLog,
    StepTimes,
    format_train_line,
    lookup_peak_tflops,
    throughput,
)
from train.models.presets import spec_of_config
from train.models.registry import get_spec
from train.models.spec import shape_flags
from train.optim import LRSchedule, build_optimizer, clip_grads_, grad_norm, scale_grads_
from train.parallel import loss_context, parallelize
from train.precision import Precision
from train.resume import (
    claim_run_directory,
    data_identity,
    find_resume_checkpoint,
    init_weights,
    read_init_state,
    read_resume_state,
    with_saved_shape,
)
from train.runtime import (
    Runtime,
    StopRequest,
    all_reduce_mean,
    init_runtime,
    launched_by_torchrun,
    seed_everything,
)
from train.skipping import SkipGuard


class TrainHooks:
    """Fixed points of every step where a caller may act on the run; these do nothing.

    Steps are numbered as in metrics.jsonl, from 1. The tests' fault injection
    (tests/train_faults.py) subclasses this and is passed to :func:`main`.
    """

    def before_update(self, step: int, rank: int, params: list[torch.Tensor]) -> None:
        """The step's gradients are complete (unscaled under fp16); their norm comes next."""

    def after_step(self, step: int, rank: int) -> None:
        """The step, its evaluation and its checkpoint (if due) are done."""


def no_sync(model: nn.Module, sync: bool):
    """Skip DDP's gradient all-reduce on all but the last micro-batch of a step.

    FSDP2 is left to reduce-scatter after every micro-batch, accumulating into the sharded
    gradients: skipping its reduction would keep every parameter's unsharded gradient (the
    full model's worth per rank) alive between micro-batches, the memory FSDP exists to save.
    """
    if not sync and hasattr(model, "no_sync"):  # DDP
        return model.no_sync()
    return contextlib.nullcontext()


class Trainer:
    """One run: ``Trainer(config, runtime).fit()``."""

    def __init__(self, config: TrainConfig, runtime: Runtime, hooks: TrainHooks | None = None):
        config, self.init_hf = hf_init_model(config)
        config = resolve_config(config, runtime, self._positions_of)
        if config.deterministic:
            if runtime.device.type == "cuda":
                os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
        self.config, self.runtime, self.hooks = config, runtime, hooks or TrainHooks()
        self.resume_path = find_resume_checkpoint(config, runtime.job_id)
        self.data = build_data(config, runtime)
        saved, self.init_path = None, None
        if self.resume_path is not None:
            saved = read_resume_state(self.resume_path, config, self.data)
            config = self.config = with_saved_shape(saved, config, self.resume_path)
        elif config.init_from is not None:
            say = print if runtime.is_main else (lambda line: None)
            self.init_path, saved = read_init_state(config, self.data, say)
        self._build_model(saved)
        self.step, self.consumed_samples = 0, 0
        self.guard = SkipGuard(config.skip_outliers, config.outlier_window)
        self._seed_streams()
        if self.resume_path is not None:
            self._resume(saved)
        self.pending: list[ckpt.PendingSave] = []  # at most one: an --async-checkpoint write
        self.saved_step, self.saved_path = None, None  # the last save started, the last committed
        self.last_step = min(config.max_steps, config.stop_at or config.max_steps)
        self.step_times = StepTimes()
        # claimed once the run is built: a run refused for its flags or data writes nothing
        self.out_folder = claim_run_directory(config, self.resume_path is not None, runtime.is_main)
        try:
            self._start_logs()
            self.evaluator = Evaluator(
                config, runtime, self.model, self.train_model, self.precision, self.metrics,
                self.console,
            )  # fmt: skip
        except BaseException:  # a refused --eval-wikitext: the folder is free for the next try
            self.release()
            raise

    def _positions_of(self, preset: str) -> tuple[str, int]:
        """(family, positions) of the model the run trains: the HF folder's when it starts
        from one, else ``preset``'s."""
        if self.init_hf is None:
            return model_positions(preset)
        spec = spec_of_config(self.init_hf)
        return spec.name, spec.positions(self.init_hf)

    def _model_config(self, saved: dict | None) -> object | None:
        """The model config the run builds when not its preset's: the checkpoint's it
        resumes (checked against its tensors: a run started from an HF folder keeps that
        folder's epsilon, heads and RoPE base), or the HF folder's it starts from. A
        checkpoint that records none is resumed as its preset and flags say."""
        if self.resume_path is not None and "model_config" in saved:
            try:
                return checked_model_config(self.resume_path, saved)[1]
            except ckpt.CheckpointError as e:
                fail(f"cannot resume: {e}")
        return self.init_hf

    def _build_model(self, saved: dict | None) -> None:
        """The model, parallelized (its padded vocabulary that of ``saved``, the trainer state
        of the checkpoint it resumes or starts from), its optimizer and its schedule."""
        config, runtime = self.config, self.runtime
        vocab = saved_vocab_size(saved, runtime.tp)
        model = build_training_model(
            config, runtime, self.data.vocab_size, vocab, self._model_config(saved)
        )
        self.model = model
        self.batch_kind = get_spec(config.model).batch
        self.next_sentence = bool(getattr(model.config, "next_sentence", False))
        self.precision = Precision(config.precision, runtime.device.type)
        self.flops_per_token = get_spec(config.model).flops_per_token(
            model.config, config.seq_len, config.mask_prob
        )
        self.num_params = model.num_params()
        self.parallel_loss = uses_parallel_loss(config, runtime)
        param_dtype = self.precision.dtype if config.parallel in ("fsdp", "tp") else None
        try:
            self.train_model = parallelize(
                model, runtime.mesh, config.parallel, runtime.device, param_dtype,
                config.compile, sequence_parallel=config.sequence_parallel,
                parallel_loss=self.parallel_loss,
                activation_checkpointing=config.activation_checkpointing,
                ac_every=config.ac_every, init_seed=config.seed,
            )  # fmt: skip
        except ValueError as e:
            fail(f"--parallel {config.parallel}: {e}")
        if self.init_path is not None:
            init_weights(model, self.init_path)
        self.optimizer = build_optimizer(
            model, config.optimizer, lr=config.lr, weight_decay=config.weight_decay,
            betas=(config.beta1, config.beta2), eps=config.eps,
            decay_embeddings=config.decay_embeddings, max_grad_norm=config.clip_grad,
            nvlamb=config.nvlamb,
        )  # fmt: skip
        self.schedule = LRSchedule(
            config.lr, config.min_lr, config.warmup_steps, config.decay_steps, config.decay
        )
        self.params = [p for group in self.optimizer.param_groups for p in group["params"]]

    def _seed_streams(self) -> None:
        """Per data-parallel rank streams (dropout); tp ranks of one dp group share theirs.

        Under sequence parallelism every dropout acts on this tp rank's own tokens or heads:
        distinct streams per tp rank too, as Megatron's model-parallel RNG tracker gives them.
        (Without it the hidden dropouts act on replicated activations and must draw alike.)
        """
        config, runtime = self.config, self.runtime
        tp_rank = runtime.mesh["tp"].get_local_rank() if runtime.mesh is not None else 0
        stream = runtime.dp_rank * (runtime.tp if config.sequence_parallel else 1)
        seed_everything(config.seed + 1 + stream + (tp_rank if config.sequence_parallel else 0))

    def _resume(self, saved: dict) -> None:
        try:
            state = ckpt.load_checkpoint(
                self.resume_path, self.model, self.optimizer, trainer_state=saved
            )
        except ckpt.CheckpointError as e:
            fail(f"cannot resume: {e}")
        self.step, self.consumed_samples = state["step"], state["consumed_samples"]
        self.precision.load_state_dict(state["precision"])
        self.guard = SkipGuard(self.config.skip_outliers, self.config.outlier_window, state)

    def _start_logs(self) -> None:
        config, runtime = self.config, self.runtime
        self.peak, device_name = config.peak_tflops, "cpu"
        if runtime.device.type == "cuda":
            device_name = torch.cuda.get_device_name(runtime.device)
            self.peak = self.peak or lookup_peak_tflops(device_name, config.precision)
        self.metrics = MetricsLog(
            os.path.join(config.out, "metrics.jsonl") if runtime.is_main else None,
            resume_step=self.step if self.resume_path is not None else None,
        )
        self.console = Console(runtime.is_main, config.max_steps, self.step, config.progress)
        self.accumulation = config.global_batch // (config.micro_batch * runtime.dp_size)
        resized = shape_flags(config.shape())
        # a run started from an HF folder trains the folder's model, not the preset's
        name = config.preset if self.init_hf is None else f"{config.model} of {config.init_from}"
        self.console.print(
            f"{name}{' with ' + resized if resized else ''}: "
            f"{self.num_params / 1e6:.2f}M parameters, vocab "
            f"{self.model.config.vocab_size}, seq {config.seq_len}, {config.precision}, "
            f"{runtime.world_size} process(es) on {device_name} ({config.parallel}, "
            f"dp={runtime.dp_size}, tp={runtime.tp}), global batch {config.global_batch} = "
            f"micro {config.micro_batch} x dp {runtime.dp_size} x accumulation "
            f"{self.accumulation}"
            + (f"; resumed from {self.resume_path} at step {self.step}" if self.resume_path else "")
            + (f"; weights from {self.init_path}" if self.init_path else "")
        )
        for note in self.data.notes:
            self.console.print(note)

    # -- the loop --------------------------------------------------------------------------

    def fit(self) -> dict:
        """Train to --max-steps (or --stop-at, or a stop signal), evaluate, save; a summary
        for callers (``stopped_by``: the signal's name when one stopped the run)."""
        config = self.config
        if self.step < self.last_step:  # a resumed run may have nothing left to train
            total_samples = config.max_steps * config.global_batch
            self.batches = iter(
                make_loader(self.data.train, total_samples, self.consumed_samples, config,
                            self.runtime)
            )  # fmt: skip
        self.train_model.train()
        last_loss, stopped_by = math.nan, None
        with StopRequest() as stop:  # a signal now finishes the step and saves
            while self.step < self.last_step and stopped_by is None:
                record = self.train_step()
                last_loss = record["loss"]
                self._stop_if_stuck(record)
                due = self.step < self.last_step  # the end of the run evaluates and saves anyway
                if due and config.eval_interval and self.step % config.eval_interval == 0:
                    self.evaluate()
                if due and config.save_interval and self.step % config.save_interval == 0:
                    self.save()
                self.hooks.after_step(self.step, self.runtime.rank)
                stopped_by = stop.agreed(self.runtime)
            if stopped_by is not None:
                self.save(final=True, announce=False)
            else:
                self._finish()
        self.metrics.close()
        self.console.close()
        return {
            "step": self.step,
            "consumed_samples": self.consumed_samples,
            "loss": last_loss,
            "skipped": self.guard.counters.skipped(),
            "loss_scale": self.precision.scale,
            "config": config.to_dict(),
            "stopped_by": signal.Signals(stopped_by).name if stopped_by else None,
            "exit_status": 128 + stopped_by if stopped_by else 0,
            "checkpoint": self.saved_path,
        }

    def _finish(self) -> None:
        """The end of the run, or of its --stop-at part: final evaluation, last checkpoint."""
        if self.step == self.config.max_steps:
            self.evaluate(final=True)
        else:
            self.console.print(
                f"stopped after step {self.step} (--stop-at); continue with --resume"
            )
        self.save(final=True)

    def train_step(self) -> dict:
        """One optimizer step of --global-batch samples, or a skipped one; its logged record."""
        config, precision = self.config, self.precision
        started, cpu_started = time.perf_counter(), time.process_time()
        lr = self.schedule.apply(self.optimizer, self.step)
        loss_mean, part_sums = self._forward_backward()
        if precision.mode == "fp16":
            scale_grads_(self.params, precision.unscale_factor)
        self.hooks.before_update(self.step + 1, self.runtime.rank, self.params)
        norm = grad_norm(self.params)
        loss = float(loss_mean)
        skip = self.guard.decide(loss, norm, fp16=precision.mode == "fp16")
        if skip is None:
            if config.optimizer != "lamb":  # LAMB normalises by the global norm itself
                clip_grads_(self.params, config.clip_grad, norm)
            self.optimizer.step()
        self.guard.record(skip, loss, norm)
        precision.update(overflow=skip == "overflow")
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.consumed_samples += config.global_batch
        elapsed = time.perf_counter() - started
        self.step_times.add(elapsed)
        record = {
            "kind": "train", "step": self.step, "loss": loss, "lr": lr, "grad_norm": norm,
            **throughput(config.global_batch * config.seq_len, elapsed, self.flops_per_token,
                         self.runtime.world_size, self.peak),
            "step_time_s": elapsed,
            "step_ms": 1000 * elapsed,
            "eta_s": self.step_times.eta(self.last_step - self.step),
            "cpu_time_s": time.process_time() - cpu_started,  # all threads: host work per step
            "consumed_samples": self.consumed_samples,
            "skipped": self.guard.counters.skipped(),
        }  # fmt: skip
        if skip is not None:
            record["skip"] = skip
        if precision.mode == "fp16":
            record["loss_scale"] = precision.scale
        for name, value in part_sums.items():
            record[name] = float(all_reduce_mean(value / self.accumulation, self.runtime))
        self._log_step(record)
        return record

    def _forward_backward(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The step's micro-batches through the model and back: the loss averaged over all
        ranks, and the sums of its named parts on this rank."""
        # float64: summing a step's micro-batch losses is then exact, so the logged loss does
        # not depend on how micro-batches are spread over ranks (1 process vs DDP: same value)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.runtime.device)
        part_sums: dict[str, torch.Tensor] = {}
        for micro in range(self.accumulation):
            batch = to_device(next_batch(self.batches), self.runtime.device)
            last = micro == self.accumulation - 1
            with no_sync(self.train_model, last), loss_context(self.parallel_loss):
                with self.precision.autocast():
                    loss, parts = forward_loss(
                        self.train_model, batch, self.batch_kind, self.next_sentence,
                        self.parallel_loss,
                    )  # fmt: skip
                self.precision.scale_loss(loss / self.accumulation).backward()
            loss_sum += loss.detach().double()
            for name, value in parts.items():
                part_sums[name] = part_sums.get(name, 0) + value.detach().double()
        return all_reduce_mean(loss_sum / self.accumulation, self.runtime), part_sums

    def _log_step(self, record: dict) -> None:
        self.metrics.write(record)
        self.console.step(record)
        step, skip = record["step"], record.get("skip")
        if step % self.config.log_interval == 0 or step == self.config.max_steps or skip:
            line = format_train_line(record, self.last_step)
            self.console.print(line + (f" | skipped: {skip}" if skip else ""))

    def _stop_if_stuck(self, record: dict) -> None:
        consecutive = self.guard.counters.consecutive
        if consecutive >= self.config.max_consecutive_skips:
            fail(
                f"{consecutive} consecutive steps had non-finite loss or gradients "
                f"(last at step {self.step}, loss {record['loss']}, grad norm "
                f"{record['grad_norm']}); stopping. Resume from the last checkpoint with a "
                "lower --lr, or use --precision bf16"
            )

    def evaluate(self, final: bool = False) -> None:
        """The valid split (and at the end the test split) and the WikiText task, if set."""
        self.evaluator.split("valid", self.data.valid, self.step)
        if final:
            self.evaluator.split("test", self.data.test, self.step)
        self.evaluator.wikitext_task(self.step)

    # -- checkpoints -------------------------------------------------------------------------

    def save(self, final: bool = False, announce: bool = True) -> None:
        """Write a checkpoint of this step unless one is (in the background with
        --async-checkpoint; the final one is always committed before returning).
        ``announce``: print a "saved" line per committed checkpoint."""
        if not self.config.save:
            return
        if self.saved_step != self.step:
            self._commit_pending(announce)
            self.pending.append(
                ckpt.save_checkpoint(
                    self.config.out, self.step, self.model, self.optimizer, self.trainer_state(),
                    self.config.keep_checkpoints, async_group=self.runtime.checkpoint_group,
                )
            )  # fmt: skip
            self.saved_step = self.step
        if final or self.runtime.checkpoint_group is None:
            self._commit_pending(announce)

    def _commit_pending(self, announce: bool = True) -> None:
        while self.pending:
            path = self.pending.pop().commit()
            if path:
                self.saved_path = path
                if announce:
                    self.console.print(f"saved {path}")

    def release(self) -> None:
        """Drop the lock on --out (rank 0's claim); the folder stays this tool's."""
        if self.out_folder is not None:
            self.out_folder.release()

    def trainer_state(self) -> dict:
        """Everything but the weights and optimizer state that a resumed run needs."""
        return {
            "step": self.step,
            "consumed_samples": self.consumed_samples,
            "precision": self.precision.state_dict(),
            "schedule": self.schedule.state_dict(),
            **self.guard.state_dict(),
            "config": self.config.to_dict(),
            "model_config": dataclasses.asdict(self.model.config),
            "data_identity": data_identity(self.config.data),
            "tokenizer": self.data.tokenizer,
            "world_size": self.runtime.world_size,
            "torch_version": str(torch.__version__),
            "run_id": self.runtime.job_id,
        }


def main(
    config: TrainConfig, hooks: TrainHooks | None = None, argv: Sequence[str] | None = None
) -> dict:
    """Run training; returns a summary (final step, last loss, counters, ``exit_status``: 0,
    or 128 + the signal that stopped it) for callers and tests. ``argv``: the command line
    (``sys.argv``) the stop line repeats as the command that resumes the run."""
    runtime = init_runtime(config)
    trainer = None
    try:
        trainer = Trainer(config, runtime, hooks)
        summary = trainer.fit()
        if dist.is_initialized():
            # Every rank past its last collective before any rank tears the group down: a rank
            # that destroyed gloo's pairs while its peer was still in the final save's agreement
            # made the peer abort ("terminate called without an active exception") under load.
            dist.barrier()
        if summary["stopped_by"] and runtime.is_main:
            print(stop_line(summary, argv), file=sys.stderr, flush=True)
        return summary
    except ckpt.CheckpointError as e:  # a save that failed (a full disk): it says where
        fail(str(e))
    except (KeyboardInterrupt, Stopped) as stop:
        # A stop signal before the first step or after the last (the loop itself handles it):
        # one line. Checkpoints are renamed into place whole, so the run directory holds only
        # complete ones for --resume.
        signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
        where = f" after step {trainer.step}" if trainer is not None else ""
        latest = ckpt.latest_checkpoint(config.out)
        print(
            f"error: {STOP_SIGNALS[signum]}{where}; "
            + (f"continue from {latest} with --resume" if latest else "no checkpoint was saved"),
            file=sys.stderr,
        )
        reported()
        raise SystemExit(128 + signum) from None
    finally:
        if trainer is not None:
            trainer.release()
        if dist.is_initialized():
            dist.destroy_process_group()


def stop_line(summary: dict, argv: Sequence[str] | None) -> str:
    """The one line a run stopped by a signal ends with: where it saved, how to resume."""
    head = f"stopped by {summary['stopped_by']} after step {summary['step']}"
    if summary["checkpoint"] is None:
        return f"{head}; no checkpoint saved (--no-save)"
    if argv is None:
        return f"{head}: saved {summary['checkpoint']}; resume with the same flags and --resume"
    args = [*argv, *([] if "--resume" in argv else ["--resume"])]
    if launched_by_torchrun():  # the launcher's own flags are not visible to a rank
        how = f"relaunch the job with --resume: torchrun [same options] {shlex.join(args)}"
    else:
        how = f"resume with: {shlex.join([sys.executable, *args])}"
    return f"{head}: saved {summary['checkpoint']}; {how}"
