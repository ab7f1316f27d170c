"""Flags users bring from Megatron-LM, nanoGPT, torchtitan and Hugging Face, and ours that do
the same: the one table every command's parser (`common.cli`) looks an unknown flag up in, so
that `--train-iters 100` says "here: --max-steps" instead of "unrecognized arguments".

A flag maps to ours in order of preference; a command points to the first one it takes (ours
for the same thing differ by command: `--workers` is Megatron's preprocess_data.py worker count,
the Beam runner's --direct_num_workers here). A foreign flag that is ours with underscores for
dashes (`--max_steps`) needs no entry: `foreign_flag_hint` finds it by that rule.
"""

from __future__ import annotations

from collections.abc import Collection

MEGATRON = "Megatron-LM"
NANOGPT = "nanoGPT"
TORCHTITAN = "torchtitan"
HF = "Hugging Face"

# foreign flag -> (whose, ours in order of preference: a flag, or a flag and how to use it)
FOREIGN_FLAGS: dict[str, tuple[str, tuple[str, ...]]] = {
    # Megatron-LM: pretrain_gpt.py / pretrain_bert.py
    "--data-path": (MEGATRON, ("--data",)),
    "--train-iters": (MEGATRON, ("--max-steps",)),
    "--micro-batch-size": (MEGATRON, ("--micro-batch",)),
    "--global-batch-size": (MEGATRON, ("--global-batch",)),
    "--seq-length": (MEGATRON, ("--seq-len",)),
    "--lr-warmup-iters": (MEGATRON, ("--warmup-steps",)),
    "--lr-decay-iters": (MEGATRON, ("--decay-steps",)),
    "--lr-decay-style": (MEGATRON, ("--decay",)),
    "--adam-beta1": (MEGATRON, ("--beta1",)),
    "--adam-beta2": (MEGATRON, ("--beta2",)),
    "--adam-eps": (MEGATRON, ("--eps",)),
    "--tensor-model-parallel-size": (MEGATRON, ("--tp",)),
    "--recompute-activations": (MEGATRON, ("--activation-checkpointing selective",)),
    "--recompute-granularity": (MEGATRON, ("--activation-checkpointing",)),
    "--bf16": (MEGATRON, ("--precision bf16",)),
    "--fp16": (MEGATRON, ("--precision fp16",)),
    "--save": (MEGATRON, ("--out",)),
    "--load": (MEGATRON, ("--out RUN --resume", "--init-from")),
    "--vocab-file": (MEGATRON, ("--tokenizer",)),
    "--merge-file": (MEGATRON, ("--tokenizer (a directory holding vocab.json and merges.txt)",)),
    "--tokenizer-type": (MEGATRON, ("--tokenizer",)),
    "--tokenizer-model": (MEGATRON, ("--tokenizer",)),
    # Megatron-LM: tools/preprocess_data.py
    "--json-keys": (MEGATRON, ("--source-option json_keys=KEY[,KEY...]",)),
    "--workers": (MEGATRON, ("--direct_num_workers", "--num-workers")),
    "--output-prefix": (MEGATRON, ("--output",)),
    # nanoGPT: train.py's configurator (--key=value)
    "--max_iters": (NANOGPT, ("--max-steps",)),
    "--batch_size": (NANOGPT, ("--micro-batch",)),
    "--block_size": (NANOGPT, ("--seq-len",)),
    "--learning_rate": (NANOGPT, ("--lr",)),
    "--n_layer": (NANOGPT, ("--num-layers",)),
    "--n_head": (NANOGPT, ("--num-attention-heads",)),
    "--n_embd": (NANOGPT, ("--hidden-size",)),
    "--out_dir": (NANOGPT, ("--out",)),
    "--warmup_iters": (NANOGPT, ("--warmup-steps",)),
    "--lr_decay_iters": (NANOGPT, ("--decay-steps",)),
    "--grad_clip": (NANOGPT, ("--clip-grad",)),
    "--dtype": (NANOGPT, ("--precision",)),
    "--gradient_accumulation_steps": (
        NANOGPT, ("--global-batch (accumulation is global / (micro * data-parallel size))",)),
    # torchtitan: its TOML sections as flags
    "--training.steps": (TORCHTITAN, ("--max-steps",)),
    "--training.local_batch_size": (TORCHTITAN, ("--micro-batch",)),
    "--training.global_batch_size": (TORCHTITAN, ("--global-batch",)),
    "--training.seq_len": (TORCHTITAN, ("--seq-len",)),
    "--training.dataset_path": (TORCHTITAN, ("--data",)),
    "--training.max_norm": (TORCHTITAN, ("--clip-grad",)),
    "--training.mixed_precision_param": (TORCHTITAN, ("--precision",)),
    "--job.dump_folder": (TORCHTITAN, ("--out",)),
    "--model.flavor": (TORCHTITAN, ("--preset",)),
    "--optimizer.lr": (TORCHTITAN, ("--lr",)),
    "--lr_scheduler.warmup_steps": (TORCHTITAN, ("--warmup-steps",)),
    "--parallelism.tensor_parallel_degree": (TORCHTITAN, ("--tp",)),
    "--checkpoint.interval": (TORCHTITAN, ("--save-interval",)),
    "--metrics.log_freq": (TORCHTITAN, ("--log-interval",)),
    # Hugging Face: transformers' TrainingArguments and run_clm.py
    "--per_device_train_batch_size": (HF, ("--micro-batch",)),
    "--num_train_epochs": (HF, ("--max-steps (training counts optimizer steps)",)),
    "--output_dir": (HF, ("--out", "--output")),
    "--model_name_or_path": (HF, ("--init-from",)),
    "--train_file": (HF, ("--data", "--input")),
    "--logging_steps": (HF, ("--log-interval",)),
    "--save_steps": (HF, ("--save-interval",)),
    "--eval_steps": (HF, ("--eval-interval",)),
    "--resume_from_checkpoint": (HF, ("--resume",)),
    "--lr_scheduler_type": (HF, ("--decay",)),
    "--max_grad_norm": (HF, ("--clip-grad",)),
    "--tokenizer_name": (HF, ("--tokenizer",)),
    "--preprocessing_num_workers": (HF, ("--direct_num_workers",)),
}


def _flag_of(ours: str) -> str:
    """The flag an entry of ours names ("--precision bf16" -> "--precision")."""
    return ours.split()[0].split("=")[0]


def foreign_flag_hint(flag: str, known: Collection[str]) -> str | None:
    """The one-line pointer from `flag`, which the command does not take, to the command's own
    flag for the same thing (`known`: the flags it takes); None where there is none."""
    whose, candidates = FOREIGN_FLAGS.get(flag, (None, ()))
    for ours in candidates:
        if _flag_of(ours) in known:
            return f"{flag} is {whose}'s flag; here it is {ours}"
    if not flag.startswith("--"):
        return None
    # ours with the other separator: --max_steps for --max-steps, --direct-num-workers for
    # Beam's --direct_num_workers
    for spelled in ("--" + flag[2:].replace("_", "-"), "--" + flag[2:].replace("-", "_")):
        if spelled != flag and spelled in known:
            return f"{flag}: the flag is spelled {spelled}"
    return None
