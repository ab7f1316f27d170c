"""Offline export of a training checkpoint: no process group, no GPU, any layout it was saved in.

  python -m train.export torch RUN/checkpoints/step-00000100 model.pt
  python -m train.export hf RUN hf-model/          (a run: its latest checkpoint)

``torch`` consolidates the sharded (DCP) model and optimizer state into one
``torch.save`` file, ``{"model", "optimizer", "trainer"}``, loadable with
``torch.load(weights_only=True)``. ``hf`` writes a Hugging Face directory: ``config.json`` and
``model.safetensors`` (the names of the family's Hugging Face counterpart, declared by its
spec: ``GPT2LMHeadModel``, ``BertForPreTraining`` / ``BertForMaskedLM``...), the run's tokenizer
(:mod:`train.export_tokenizer`) and, for a causal model, ``generation_config.json``: the folder
loads with ``AutoTokenizer``, ``AutoModelForCausalLM`` / ``AutoModelForPreTraining`` and
``transformers.pipeline`` with no other argument. ``transformers`` is needed only for that one.
The checkpoint's sizes and hashes are checked first (:func:`train.checkpoint.verify_checkpoint`)
and its DCP files are read as untrusted input (:func:`train.checkpoint.load_dcp`).
"""

# ruff: noqa: E402 - the stop signals' handlers go in before the imports
from __future__ import annotations

if __name__ == "__main__":
    from common.signals import exit_on_stop_signals

    exit_on_stop_signals("python -m train.export")

import errno
import os
import sys

import torch

from common.cli import ArgumentParser
from common.output_dir import OutputError, OutputFolder, claim_output_folder
from common.storage import write_atomic_to
from train import checkpoint as ckpt
from train.checkpoint_io import SafeFullLoadPlanner
from train.model_check import ModelCheckError, check_fits
from train.models.spec import CAUSAL_LM, ModelSpec
from train.run_record import model_config_of


def checkpoint_of(path: str) -> str:
    """The checkpoint ``path`` names: itself (a step folder), or a run's latest."""
    if os.path.exists(os.path.join(path, "meta.json")):
        return path
    latest = ckpt.latest_checkpoint(path) if os.path.isdir(path) else None
    if latest is None:
        raise ckpt.CheckpointError(
            f"{path}: neither a checkpoint (RUN/checkpoints/step-N) nor a run folder with one"
        )
    return latest


def consolidated_state(checkpoint_dir: str) -> dict:
    """The whole checkpoint in memory: {"model": {name: tensor}, "optimizer": {...},
    "trainer": {...}} (the RNG states of the ranks left out)."""
    ckpt.verify_checkpoint(checkpoint_dir)
    trainer = ckpt.read_trainer_state(checkpoint_dir)
    trainer.pop("rng")
    checked_model_config(checkpoint_dir, trainer)  # before any tensor is read
    state: dict = {}
    try:
        ckpt.load_dcp(checkpoint_dir, state, SafeFullLoadPlanner())
    except RuntimeError as e:
        raise ckpt.CheckpointError(f"{checkpoint_dir}: unreadable DCP files ({e})") from None
    if not isinstance(state.get("model"), dict) or not isinstance(state.get("optimizer"), dict):
        raise ckpt.CheckpointError(f"{checkpoint_dir}: holds no model and optimizer state")
    return {"model": state["model"], "optimizer": state["optimizer"], "trainer": trainer}


def checked_model_config(checkpoint_dir: str, trainer_state: dict) -> tuple[ModelSpec, object]:
    """:func:`model_config_of`, checked to describe the checkpoint's model tensors (names,
    shapes, dtypes, size: :func:`train.model_check.check_fits`); one CheckpointError line."""
    from train.model_check import checkpoint_model_shapes

    spec, config = model_config_of(trainer_state)
    try:
        check_fits(spec, config, checkpoint_model_shapes(checkpoint_dir), checkpoint_dir)
    except ModelCheckError as e:
        raise ckpt.CheckpointError(str(e)) from None
    return spec, config


def export_torch(checkpoint_dir: str, out_file: str) -> None:
    state = consolidated_state(checkpoint_dir)
    if os.path.isdir(out_file):
        raise OSError(errno.EISDIR, f"{out_file} is a directory; name the file to write")
    # by file name: torch.save names the archive inside after it (the temporary's stem)
    write_atomic_to(out_file, lambda tmp: torch.save(state, tmp))


def export_hf(
    checkpoint_dir: str,
    out_dir: str,
    overwrite: bool = False,
    tokenizer: str | None = None,
    weights_only: bool = True,
    no_tokenizer: bool = False,
) -> bool:
    """Write the HF directory ``out_dir`` under the shared output-folder rule
    (:mod:`common.output_dir`): a new or empty folder, or an earlier export of ours with
    ``overwrite``; a folder holding anything else is refused before the checkpoint is read.
    ``tokenizer``: where the run's tokenizer is read from, if not where the run says.
    ``weights_only``: a run that records no tokenizer and names no file of one is exported
    without one (else ExportTokenizerError). ``no_tokenizer``: the weights alone, whatever
    the run records (--no-tokenizer; its tokenizer file need not exist). Whether a tokenizer
    was written."""
    with claim_output_folder(out_dir, tool="export-hf", overwrite=overwrite, flag="OUT") as out:
        wrote_tokenizer = _write_hf(checkpoint_dir, out, tokenizer, weights_only, no_tokenizer)
        out.finish()
    return wrote_tokenizer


def _write_hf(
    checkpoint_dir: str,
    out: OutputFolder,
    tokenizer: str | None,
    weights_only: bool,
    no_tokenizer: bool,
) -> bool:
    from safetensors.torch import save_file

    from train.export_tokenizer import generation_config, write_tokenizer_files

    state = consolidated_state(checkpoint_dir)
    spec, config = model_config_of(state["trainer"])
    hf_config = spec.hf.config_to_hf(config)
    causal = spec.batch == CAUSAL_LM
    positions = getattr(hf_config, "n_positions", None) or hf_config.max_position_embeddings
    exported = None if no_tokenizer else write_tokenizer_files(
        out, state["trainer"], causal, positions, tokenizer, weights_only
    )
    for name, token_id in exported.token_ids.items() if exported else ():
        if name in ("bos_token", "eos_token", "pad_token"):  # config.json names them too
            setattr(hf_config, f"{name}_id", token_id)
    if causal and exported:
        out.record("generation_config.json")
        generation_config(exported, config.vocab_size).save_pretrained(out.root)
    tensors = spec.hf.state_dict_to_hf(state["model"], config)
    # safetensors stores each tensor once: tied entries (the LM head, BERT's decoder bias)
    # are left to transformers' tie_weights when loading.
    unique: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in tensors.items():
        key = tensor.untyped_storage().data_ptr()
        if key in seen:
            continue
        seen.add(key)
        unique[name] = tensor.contiguous()
    weights = out.record("model.safetensors")
    write_atomic_to(weights, lambda tmp: save_file(unique, tmp, metadata={"format": "pt"}))
    out.record("config.json")
    hf_config.save_pretrained(out.root)
    record = state["trainer"].get("tokenizer")
    if record and exported:  # evaluation accepts the written tokenizer.json as the run's
        record = {**record, "exported_sha256": exported.sha256}
    out.write_json("shardsmith.json", {"step": state["trainer"]["step"], "tokenizer": record})
    return exported is not None


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m train.export", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("format", choices=("torch", "hf"))
    parser.add_argument(
        "checkpoint", help="a run folder (its latest checkpoint) or one (RUN/checkpoints/step-N)"
    )
    parser.add_argument("out", help="output file (torch) or directory (hf)")
    parser.add_argument(
        "--overwrite", action="store_true", help="hf: replace an earlier export in OUT"
    )
    parser.add_argument(
        "--tokenizer",
        help="hf: the run's tokenizer, where the run no longer finds it (checked against it)",
    )
    parser.add_argument(
        "--no-tokenizer",
        action="store_true",
        help="hf: export the weights (and config) alone, with no tokenizer files (a folder "
        "AutoTokenizer cannot load); a run that records no tokenizer is refused without it",
    )
    args = parser.parse_args(argv)
    if args.no_tokenizer and args.tokenizer:
        parser.error("give --tokenizer FILE or --no-tokenizer, not both")
    from train.export_tokenizer import ExportTokenizerError

    try:
        checkpoint = checkpoint_of(args.checkpoint)
        if args.format == "torch":
            export_torch(checkpoint, args.out)
        else:
            export_hf(checkpoint, args.out, args.overwrite, args.tokenizer,
                      weights_only=False, no_tokenizer=args.no_tokenizer)
    except (ckpt.CheckpointError, OutputError, OSError, ExportTokenizerError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
