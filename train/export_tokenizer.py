"""The tokenizer half of a Hugging Face export (train/export.py): the files with which
``AutoTokenizer.from_pretrained(dir)`` and ``pipeline(..., model=dir)`` load the tokenizer a
run trained with, with no other argument, and the token ids its config and generation config
name.

The tokenizer is the run's own (its --tokenizer file or its shard set's, or the one given
to the exporter), checked against what the checkpoint records of it as evaluation checks it
(train.run_record.tokenizer_difference), and written as its ``tokenizer.json`` unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.output_dir import OutputFolder
from train.run_record import (
    LoadError,
    read_tokenizer,
    run_tokenizer_path,
    tokenizer_difference,
    tokenizer_sha256s,
)

# Our special-id names (dataset_format.SPECIAL_TOKEN_NAMES) -> the names transformers' tokenizer
# config gives them. A causal model's end-of-document token is also its start and unknown token,
# as GPT-2's <|endoftext|> is.
_HF_TOKEN_NAMES = {
    "cls": ("cls_token",),
    "sep": ("sep_token",),
    "mask": ("mask_token",),
    "pad": ("pad_token",),
    "unk": ("unk_token",),
}
_CAUSAL_EOD_NAMES = ("bos_token", "eos_token", "unk_token")


class ExportTokenizerError(Exception):
    """The run's tokenizer cannot be found or is not the checkpoint's (one line)."""


@dataclass(frozen=True)
class ExportedTokenizer:
    special_tokens: dict[str, str]  # transformers' name (eos_token...) -> token text
    token_ids: dict[str, int]  # the same names -> ids (bos_token_id... of the configs)
    vocab_size: int  # the tokenizer's: ids past it are the model's padding rows
    sha256: str  # of the tokenizer.json written, another checksum the run's tokenizer goes by


def write_tokenizer_files(
    out: OutputFolder,
    trainer: dict,
    causal: bool,
    max_length: int,
    tokenizer: str | None,
    weights_only: bool = True,
) -> ExportedTokenizer | None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json into ``out``
    for the checkpoint whose trainer state is ``trainer``; ``tokenizer`` overrides where the
    run's tokenizer is read from. For a checkpoint that records no tokenizer and names no file
    of one (a run sized by --vocab-size alone): None, nothing written, where ``weights_only``
    allows it, else ExportTokenizerError (the folder would not load with AutoTokenizer)."""
    path = tokenizer or run_tokenizer_path(trainer["config"])
    if path is None and not trainer.get("tokenizer"):
        if weights_only:
            return None
        raise ExportTokenizerError(
            "the checkpoint records no tokenizer (a run sized by --vocab-size): pass "
            "--tokenizer FILE to export one, or --no-tokenizer for the weights alone"
        )
    if path is None:
        raise ExportTokenizerError(
            "the run's tokenizer file is gone (its --tokenizer or its shard set's); pass "
            "--tokenizer FILE, the one it trained with"
        )
    try:
        text_tokenizer = read_tokenizer(path)
    except LoadError as e:
        raise ExportTokenizerError(str(e)) from None
    record = trainer.get("tokenizer") or {}
    identity = text_tokenizer.identity()
    trained = run_tokenizer_path(trainer["config"])
    sha256s = tokenizer_sha256s(text_tokenizer, path, record, trained)
    fault = tokenizer_difference(record, identity, sha256s)
    if fault is not None:
        raise ExportTokenizerError(
            f"tokenizer {path} is not the one the checkpoint was trained with ({fault}, "
            "given vs trained)"
        )
    exported = _special_tokens(text_tokenizer, causal, identity["sha256"])
    out.write_text("tokenizer.json", text_tokenizer.to_json())
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_length,
        # decode gives the text the tokens spell: no spaces removed before punctuation
        "clean_up_tokenization_spaces": False,
        **exported.special_tokens,
    }
    out.write_json("tokenizer_config.json", config)
    out.write_json("special_tokens_map.json", exported.special_tokens)
    return exported


def _special_tokens(text_tokenizer, causal: bool, sha256: str) -> ExportedTokenizer:
    from tokenizers import Tokenizer

    hf_tokenizer = Tokenizer.from_str(text_tokenizer.to_json())
    tokens: dict[str, str] = {}
    ids: dict[str, int] = {}
    for name, token_id in text_tokenizer.special_ids.items():
        hf_names = _CAUSAL_EOD_NAMES if (causal and name == "eod") else _HF_TOKEN_NAMES.get(name)
        for hf_name in hf_names or ():
            tokens[hf_name] = hf_tokenizer.id_to_token(token_id)
            ids[hf_name] = token_id
    return ExportedTokenizer(tokens, ids, text_tokenizer.vocab_size, sha256)


def generation_config(exported: ExportedTokenizer, padded_vocab_size: int):
    """The ``GenerationConfig`` of a causal model: start, end and padding ids (the end token
    pads, as GPT-2 has no padding token), and the padding rows of the vocabulary, which no
    tokenizer id maps to, suppressed (train.generate masks them alike)."""
    import transformers

    ids = exported.token_ids
    eos = ids.get("eos_token")
    return transformers.GenerationConfig(
        bos_token_id=ids.get("bos_token"),
        eos_token_id=eos,
        pad_token_id=ids.get("pad_token", eos),
        suppress_tokens=list(range(exported.vocab_size, padded_vocab_size)) or None,
    )
