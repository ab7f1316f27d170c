"""Conversion between our shard sets and the flat token files of nanoGPT and llm.c.

nanoGPT (`data/*/prepare.py`): `train.bin` / `val.bin` are headerless streams of uint16 token
ids; its openwebtext script appends the EOT token (50256) after each document.

llm.c (`dev/data/data_common.py::write_datafile`, read by `llmc/dataloader.h`): a header of 256
little-endian int32 values, header[0] = magic, header[1] = version, header[2] = token count,
the rest zero, then the tokens: magic 20240520 / version 1 / uint16 tokens for GPT-2, magic
20240801 / version 7 / uint32 tokens for LLaMA-3. The reader checks magic and version and that
the file is exactly header + count tokens long. Its scripts put the EOT token *before* each
document (`fineweb.py`: `all_tokens.append(eot); all_tokens.extend(tokens)`) and cut shards at
a fixed token count, in the middle of a document.

Neither format records document boundaries, so importing splits the stream at the EOD id:
after it (`eod_position="end"`, nanoGPT's layout and our `--append-eod`) or before it
(`"start"`, llm.c's). Unless told, the importer reads the layout from the stream itself
(`eod_position_of`): a stream that starts with EOD has it before each document, one that ends
with EOD after each; only a stream with neither takes the format's usual layout. So a set of
ours exported to llm.c comes back with its own documents, not one more. Several input files are one stream, so a document cut between two llm.c
shards comes back whole. The token stream is preserved exactly both ways: exporting a set
concatenates its documents in order.
"""

from __future__ import annotations

import argparse
import functools
import glob
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import BinaryIO

import numpy as np

from common.cli import ArgumentParser
from common.output_dir import OutputError, OutputFolder, claim_output_folder
from common.storage import write_atomic_with
from dataset_format.files import require_set_file
from dataset_format.indexed import FormatError, IndexedDatasetWriter, ShardInfo
from dataset_format.manifest import MANIFEST_NAME, Manifest, TokenizerInfo, write_shard_set_manifest
from dataset_format.shardset import ShardSet

GPT2_EOD = 50256
LLMC_HEADER_INTS = 256
LLMC_HEADER_BYTES = LLMC_HEADER_INTS * 4
# magic -> (version, token dtype), as llm.c's data_common.py writes them.
LLMC_FORMATS = {
    20240520: (1, np.dtype("<u2")),  # GPT-2
    20240801: (7, np.dtype("<u4")),  # LLaMA-3
}
LLMC_MAGIC_FOR_DTYPE = {np.dtype(np.uint16): 20240520, np.dtype(np.int32): 20240801}
LLMC_MAX_TOKENS = 2**31 - 1  # the count is an int32
EOD_POSITIONS = ("end", "start")
DEFAULT_SHARD_TOKENS = 1 << 28
DEFAULT_LLMC_SHARD_TOKENS = 100_000_000  # llm.c's fineweb.py default shard size
_CHUNK_TOKENS = 1 << 24


# -- reading the foreign formats -----------------------------------------------------------


def read_nanogpt(path: str) -> np.ndarray:
    """The uint16 token stream of a nanoGPT `.bin` (memory-mapped)."""
    size = require_set_file(path, "nanoGPT token file").st_size
    if size % 2:
        raise FormatError(f"{path}: {size} bytes is not a whole number of uint16 tokens")
    if size == 0:
        raise FormatError(f"{path}: empty file, no tokens")
    return np.memmap(path, dtype="<u2", mode="r")


def read_llmc(path: str) -> np.ndarray:
    """The tokens of one llm.c data shard (memory-mapped), after checking its header."""
    size = require_set_file(path, "llm.c data shard").st_size
    if size < LLMC_HEADER_BYTES:
        raise FormatError(
            f"{path}: {size} bytes is shorter than the {LLMC_HEADER_BYTES}-byte llm.c header"
        )
    header = np.fromfile(path, dtype="<i4", count=LLMC_HEADER_INTS)
    magic, version, count = int(header[0]), int(header[1]), int(header[2])
    if magic not in LLMC_FORMATS:
        known = ", ".join(str(m) for m in LLMC_FORMATS)
        raise FormatError(
            f"{path}: bad magic {magic} in the llm.c header (expected one of {known})"
        )
    expected_version, dtype = LLMC_FORMATS[magic]
    if version != expected_version:
        raise FormatError(
            f"{path}: llm.c header version {version}, expected {expected_version} for magic {magic}"
        )
    if count <= 0:
        raise FormatError(f"{path}: llm.c header claims {count} tokens")
    expected_size = LLMC_HEADER_BYTES + count * dtype.itemsize
    if size != expected_size:
        raise FormatError(
            f"{path}: {size} bytes, but the header's {count} {dtype.name} tokens need {expected_size}"
        )
    return np.memmap(path, dtype=dtype, mode="r", offset=LLMC_HEADER_BYTES, shape=(count,))


def expand_inputs(pattern: str) -> list[str]:
    """A file, a directory (its *.bin files), or a glob; sorted, so shards keep their order."""
    if os.path.isdir(pattern):
        files = sorted(glob.glob(os.path.join(pattern, "*.bin")))
    elif os.path.isfile(pattern):
        files = [pattern]
    else:
        files = sorted(glob.glob(pattern))
    if not files:
        raise FormatError(f"{pattern}: no input files")
    return files


# -- splitting a stream into documents -----------------------------------------------------


def split_documents_at_eod(
    chunks: Iterable[np.ndarray], eod: int, eod_position: str = "end"
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(tokens, document_lengths) batches of whole documents of a token stream, in order.

    Documents end after each EOD ("end") or start at each EOD ("start"); a stream that does
    not end (or start) with EOD keeps its partial first/last document as one. No document is
    empty.
    """
    if eod_position not in EOD_POSITIONS:
        raise ValueError(f"eod_position must be one of {EOD_POSITIONS}, got {eod_position!r}")
    pending: list[np.ndarray] = []
    pending_tokens = 0
    for chunk in chunks:
        hits = np.flatnonzero(chunk == eod)
        # Where documents start, in this chunk's coordinates: after an EOD ("end"; the chunk's
        # size when it ends with one) or at one ("start"). A start at 0 closes the pending
        # document, and is no document at all when nothing is pending.
        starts = hits + 1 if eod_position == "end" else hits
        if not pending_tokens:
            starts = starts[starts > 0]
        if not starts.size:
            pending.append(chunk)
            pending_tokens += chunk.size
            continue
        last = int(starts[-1])
        tokens = np.concatenate(pending + [chunk[:last]])
        yield tokens, np.diff(np.concatenate([[0], pending_tokens + starts]))
        pending = [chunk[last:]] if last < chunk.size else []
        pending_tokens = chunk.size - last
    if pending_tokens:
        tokens = np.concatenate(pending)
        yield tokens, np.array([tokens.size], dtype=np.int64)


def eod_position_of(streams: list[tuple[str, np.ndarray]], eod: int, usual: str) -> str:
    """Where the EOD of the stream ``streams`` make stands: "start" when its first token is
    EOD, else "end" when its last token is, else ``usual`` (the format's own layout)."""
    first = next((tokens for _, tokens in streams if tokens.size), None)
    last = next((tokens for _, tokens in reversed(streams) if tokens.size), None)
    if first is not None and int(first[0]) == eod:
        return "start"
    if last is not None and int(last[-1]) == eod:
        return "end"
    return usual


def _import_files(
    files: list[str], read, out_dir: str, source_format: str, usual: str, options: dict
) -> Manifest:
    streams = [(f, read(f)) for f in files]
    if options.get("eod_position") is None:
        options["eod_position"] = eod_position_of(streams, options.get("eod", GPT2_EOD), usual)
    return import_token_stream(streams, out_dir, source_format=source_format, **options)


def _chunks(arrays: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
    for array in arrays:
        for start in range(0, array.size, _CHUNK_TOKENS):
            yield array[start : start + _CHUNK_TOKENS]


# -- importing -----------------------------------------------------------------------------


def _tokenizer_info(
    kind: str | None, vocab_size: int | None, tokenizer_file: str | None, eod: int
) -> TokenizerInfo | None:
    if kind is None and vocab_size is None and tokenizer_file is None:
        return None
    if kind is None or vocab_size is None:
        raise ValueError("tokenizer info needs both a kind and a vocab size")
    if not 0 <= eod < vocab_size:
        raise ValueError(f"EOD id {eod} is outside the vocabulary of {vocab_size}")
    return TokenizerInfo(
        file=os.path.basename(tokenizer_file) if tokenizer_file else None,
        kind=kind,
        vocab_size=vocab_size,
        special_ids={"eod": eod},
    )


def import_token_stream(
    streams: list[tuple[str, np.ndarray]],
    out_dir: str,
    *,
    source_format: str,
    eod: int = GPT2_EOD,
    eod_position: str = "end",
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    tokenizer_kind: str | None = None,
    vocab_size: int | None = None,
    tokenizer_file: str | None = None,
) -> Manifest:
    """Write the concatenation of `streams` ((name, tokens) pairs) as a document-level set.

    Documents are split at `eod`; a shard is closed at the first document boundary after
    `shard_tokens` tokens. The manifest is written last, so a failed import leaves no set.
    `out_dir` is claimed by the shared output-folder rule (`output_dir`): a folder holding
    files that are not ours is refused before anything is written.
    """
    if os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
        raise FormatError(f"{out_dir}: already holds a shard set; choose a new directory")
    if shard_tokens <= 0:
        raise ValueError(f"shard_tokens must be positive, got {shard_tokens}")
    tokenizer = _tokenizer_info(tokenizer_kind, vocab_size, tokenizer_file, eod)
    source_dtypes = {tokens.dtype for _, tokens in streams}
    if len(source_dtypes) != 1:
        raise FormatError(f"inputs mix token types {sorted(str(d) for d in source_dtypes)}")
    source_dtype = source_dtypes.pop()
    # MMIDIDX has no uint32: LLaMA-3 ids (< 2**31) are stored as int32.
    dtype = np.dtype(np.uint16) if source_dtype.itemsize == 2 else np.dtype(np.int32)
    limit = vocab_size if vocab_size is not None else int(np.iinfo(dtype).max) + 1
    with claim_output_folder(out_dir, tool=f"import-{source_format}", flag="OUT_SET") as out:
        manifest = _write_imported(
            streams, out, source_format, eod, eod_position, shard_tokens, dtype, limit,
            tokenizer, tokenizer_file,
        )  # fmt: skip
        out.finish()
    return manifest


def _write_imported(
    streams, out: OutputFolder, source_format, eod, eod_position, shard_tokens, dtype, limit,
    tokenizer, tokenizer_file,
) -> Manifest:  # fmt: skip
    out_dir = out.root
    shards: list[ShardInfo] = []
    writer: IndexedDatasetWriter | None = None

    def checked(name: str, tokens: np.ndarray) -> Iterator[np.ndarray]:
        for chunk in _chunks([tokens]):
            top = int(chunk.max())
            if top >= limit:
                raise FormatError(f"{name}: token id {top} is outside the vocabulary of {limit}")
            yield chunk

    def all_chunks() -> Iterator[np.ndarray]:
        for name, tokens in streams:
            yield from checked(name, tokens)

    try:
        for tokens, lengths in split_documents_at_eod(all_chunks(), eod, eod_position):
            ends = np.cumsum(lengths)
            begin, first = 0, 0
            while first < lengths.size:
                if writer is None:
                    name = f"shard-{len(shards):05d}"
                    out.record(f"{name}.bin", f"{name}.idx")
                    writer = IndexedDatasetWriter(os.path.join(out_dir, name), dtype)
                room = shard_tokens - writer.tokens
                # documents up to and including the one that fills the shard
                last = min(int(np.searchsorted(ends, begin + room, side="left")), lengths.size - 1)
                stop = int(ends[last])
                writer.add_documents(tokens[begin:stop], lengths[first : last + 1])
                begin, first = stop, last + 1
                if writer.tokens >= shard_tokens:
                    shards.append(writer.finalize())
                    writer = None
        if writer is not None and writer.documents:
            shards.append(writer.finalize())
            writer = None
    except BaseException:
        if writer is not None:
            writer.discard()
        raise
    if not shards:
        raise FormatError(f"{streams[0][0] if streams else out_dir}: no tokens to import")
    if tokenizer_file is not None:
        out.record(tokenizer.file or os.path.basename(tokenizer_file))
    out.record(MANIFEST_NAME)
    return write_shard_set_manifest(
        out_dir,
        shards,
        dtype=str(dtype),
        sequence_unit="document",
        tokenizer=tokenizer,
        tokenizer_file=tokenizer_file,
        source={
            "format": source_format,
            "files": [name for name, _ in streams],
            "eod": eod,
            "eod_position": eod_position,
        },
        pipeline={"tool": "tools/convert", "command": f"import-{source_format}"},
    )


def import_nanogpt(path: str, out_dir: str, **options) -> Manifest:
    """A nanoGPT `.bin` (or several, as one stream) -> shard set; documents end with EOD
    unless the stream starts with one (:func:`eod_position_of`)."""
    return _import_files(expand_inputs(path), read_nanogpt, out_dir, "nanogpt", "end", options)


def import_llmc(path: str, out_dir: str, **options) -> Manifest:
    """llm.c shard files (a file, directory or glob, as one stream) -> shard set.

    Documents start with EOD, as llm.c's scripts write them, unless the stream ends with one
    and does not start with one (:func:`eod_position_of`).
    """
    return _import_files(expand_inputs(path), read_llmc, out_dir, "llmc", "start", options)


# -- exporting -----------------------------------------------------------------------------


def _set_chunks(shard_set: ShardSet) -> Iterator[tuple[str, np.ndarray]]:
    """The set's token stream in document order, in chunks, with the shard each came from."""
    for shard in shard_set.shards:
        for start in range(0, shard.num_tokens, _CHUNK_TOKENS):
            length = min(_CHUNK_TOKENS, shard.num_tokens - start)
            yield shard.prefix, shard.tokens(start, length)


def _as_dtype(where: str, chunk: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if chunk.dtype == dtype or not chunk.size:
        return chunk.astype(dtype, copy=False)
    info = np.iinfo(dtype)
    low, high = int(chunk.min()), int(chunk.max())
    if low < info.min or high > info.max:
        raise FormatError(f"{where}: token ids [{low}, {high}] do not fit {dtype.name}")
    return chunk.astype(dtype)


def export_nanogpt(path: str, out_file: str) -> int:
    """A shard set (or bare prefix) -> one headerless uint16 stream; returns the token count."""
    shard_set = ShardSet(path)
    if shard_set.num_tokens == 0:
        raise FormatError(f"{path}: the set has no tokens")

    def write(out: BinaryIO) -> None:
        for where, chunk in _set_chunks(shard_set):
            out.write(_as_dtype(where, chunk, np.dtype("<u2")).tobytes())

    write_atomic_with(out_file, write, sync=False)
    return shard_set.num_tokens


def llmc_header(magic: int, count: int) -> np.ndarray:
    version, _ = LLMC_FORMATS[magic]
    header = np.zeros(LLMC_HEADER_INTS, dtype="<i4")
    header[:3] = (magic, version, count)
    return header


def export_llmc(
    path: str, out_dir: str, *, shard_tokens: int = DEFAULT_LLMC_SHARD_TOKENS
) -> list[str]:
    """A shard set -> llm.c data files `out_dir/data_000000.bin`, ... of `shard_tokens` each.

    uint16 sets become the GPT-2 format (magic 20240520, v1); int32 sets the LLaMA-3 one
    (magic 20240801, v7, uint32 tokens). Files are cut at token counts, like llm.c's own.
    """
    if not 0 < shard_tokens <= LLMC_MAX_TOKENS:
        raise ValueError(f"shard_tokens must be in [1, {LLMC_MAX_TOKENS}], got {shard_tokens}")
    shard_set = ShardSet(path)
    if shard_set.dtype not in LLMC_MAGIC_FOR_DTYPE:
        raise FormatError(f"{path}: llm.c has no format for {shard_set.dtype.name} tokens")
    if shard_set.num_tokens == 0:
        raise FormatError(f"{path}: the set has no tokens")
    with claim_output_folder(out_dir, tool="export-llmc", flag="OUT_DIR") as out:
        names = _write_llmc(shard_set, out, shard_tokens)
        out.finish()
    return names


def _write_llmc(shard_set: ShardSet, out: OutputFolder, shard_tokens: int) -> list[str]:
    out_dir = out.root
    magic = LLMC_MAGIC_FOR_DTYPE[shard_set.dtype]
    token_dtype = LLMC_FORMATS[magic][1]
    total = shard_set.num_tokens
    counts = [min(shard_tokens, total - start) for start in range(0, total, shard_tokens)]
    names = [os.path.join(out_dir, f"data_{i:06d}.bin") for i in range(len(counts))]
    stream = _set_chunks(shard_set)
    carry = np.zeros(0, dtype=token_dtype)

    def write_file(dst: BinaryIO, count: int) -> None:
        nonlocal carry  # the stream's tokens left over from the previous file
        dst.write(llmc_header(magic, count).tobytes())
        remaining = count
        while remaining:
            if not carry.size:
                where, chunk = next(stream)
                carry = _as_dtype(where, chunk, token_dtype)
            take = min(remaining, carry.size)
            dst.write(carry[:take].tobytes())
            carry, remaining = carry[take:], remaining - take

    for name, count in zip(names, counts):
        out.record(os.path.basename(name))
        write_atomic_with(name, functools.partial(write_file, count=count), sync=False)
    return names


# -- Megatron-LM -------------------------------------------------------------------------------

# GPT-2's vocabulary as Megatron-LM's GPT2BPETokenizer knows it: its size and end-of-text id
GPT2_VOCAB_SIZE = 50257
MEGATRON_SPLIT = "969,30,1"  # Megatron-LM's --split default; our trainer's too


def megatron_args(path: str, tokenizer_dir: str | None = None) -> list[str]:
    """The Megatron-LM ``pretrain_gpt.py`` / ``pretrain_bert.py`` flags that train on shard
    set ``path`` as it is: ``--data-path`` with each shard's prefix weighted by its tokens
    (Megatron samples a blend in proportion to its weights, so the set is read as one), the
    split, and the tokenizer flags for the set's tokenizer kind. Megatron reads GPT-2 BPE
    from ``vocab.json`` + ``merges.txt`` and WordPiece from ``vocab.txt``, which a set keeps
    only as ``tokenizer.json``: those files are named in ``tokenizer_dir`` (default: the
    set's directory for a vocab.txt, else ``gpt2`` / ``bert``)."""
    shard_set = ShardSet(path)
    # absolute: Megatron-LM runs from its own directory
    prefixes = [os.path.abspath(shard.prefix) for shard in shard_set.shards]
    data = [x for s, p in zip(shard_set.shards, prefixes) for x in (str(s.num_tokens), p)]
    tokenizer = shard_set.manifest.tokenizer if shard_set.manifest is not None else None
    if tokenizer is None:
        raise FormatError(f"{path}: the set records no tokenizer; Megatron needs its files")
    return ["--data-path", *data, "--split", MEGATRON_SPLIT, *_megatron_tokenizer(
        shard_set, tokenizer, tokenizer_dir
    )]  # fmt: skip


def _megatron_tokenizer(shard_set: ShardSet, tokenizer: TokenizerInfo, directory) -> list[str]:
    kind = tokenizer.kind.replace("-", "_")
    own = shard_set.tokenizer_path
    if kind == "byte_level_bpe" and tokenizer.vocab_size == GPT2_VOCAB_SIZE:
        vocab, merges = _tokenizer_files(shard_set, directory, ("vocab.json", "merges.txt"))
        return ["--tokenizer-type", "GPT2BPETokenizer",
                "--vocab-file", vocab, "--merge-file", merges]  # fmt: skip
    if kind == "wordpiece":
        cased = own is not None and own.endswith(".json") and not _lowercases(own)
        if own and own.endswith(".txt") and directory is None:
            vocab = own
        else:
            (vocab,) = _tokenizer_files(shard_set, directory, ("vocab.txt",))
        return ["--tokenizer-type", "BertWordPieceCase" if cased else "BertWordPieceLowerCase",
                "--vocab-file", vocab]  # fmt: skip
    # Any other tokenizers JSON: an HF tokenizer folder (tools/convert checkpoint-to-hf writes
    # one) that transformers.AutoTokenizer loads.
    (folder,) = _tokenizer_files(shard_set, directory, ("tokenizer.json",))
    return ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", os.path.dirname(folder)]


def _tokenizer_files(shard_set: ShardSet, directory: str | None, names: tuple[str, ...]):
    """The paths of the tokenizer files Megatron-LM reads, in `directory`; FormatError saying
    which files to pass the folder of where none is given or it lacks one (the set keeps its
    tokenizer only as tokenizer.json, which Megatron's own tokenizers do not read)."""
    wanted = " and ".join(names)
    if directory is None:
        raise FormatError(
            f"{shard_set.path}: Megatron-LM reads this tokenizer from {wanted}, which the set "
            f"does not hold: pass the folder holding them, --megatron-args TOKENIZER_DIR"
        )
    paths = tuple(os.path.join(directory, name) for name in names)
    missing = [name for name, path in zip(names, paths) if not os.path.isfile(path)]
    if missing:
        raise FormatError(
            f"--megatron-args {directory}: no {' or '.join(missing)} there (Megatron-LM reads "
            f"this tokenizer from {wanted})"
        )
    return paths


def _lowercases(tokenizer_json: str) -> bool:
    """Whether a tokenizers JSON's normalizer lowercases (a BERT uncased vocabulary)."""
    from common.safe_io import TOKENIZER_CAP, parse_json, read_bytes_capped

    spec = parse_json(read_bytes_capped(tokenizer_json, "tokenizer", TOKENIZER_CAP), tokenizer_json)
    normalizer = spec.get("normalizer") if isinstance(spec, dict) else None
    return isinstance(normalizer, dict) and normalizer.get("lowercase") is True


# -- command line --------------------------------------------------------------------------


def _parser(listed: Mapping[str, str] = MappingProxyType({})) -> argparse.ArgumentParser:
    """The parser of tools/convert's shard-set commands; `listed`: its other commands (name ->
    help), which tools/convert runs itself, for --help to name them too."""
    parser = ArgumentParser(
        prog="tools/convert",
        description="Convert between shard sets and nanoGPT / llm.c token files, and a "
        "training run's checkpoint to one torch file or a Hugging Face folder.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, what in (("import-nanogpt", "a nanoGPT .bin"), ("import-llmc", "llm.c shards")):
        sub = commands.add_parser(name, help=f"{what} -> shard set")
        sub.add_argument("input", help="file, directory of *.bin, or glob (several = one stream)")
        sub.add_argument("output", help="new shard-set directory")
        sub.add_argument("--eod", type=int, default=GPT2_EOD, help="EOD token id (50256)")
        sub.add_argument(
            "--eod-position",
            choices=EOD_POSITIONS,
            help="documents end with EOD (nanoGPT's default) or start with it (llm.c's)",
        )
        sub.add_argument("--shard-tokens", type=int, default=DEFAULT_SHARD_TOKENS)
        sub.add_argument(
            "--tokenizer", dest="tokenizer_file", metavar="FILE", help="tokenizer file to ship in the set"
        )
        # the name this flag had; every other command names it --tokenizer
        sub.add_argument("--tokenizer-file", dest="tokenizer_file", help=argparse.SUPPRESS)
        sub.add_argument("--tokenizer-kind", help="e.g. byte-level-bpe (for the manifest)")
        sub.add_argument("--vocab-size", type=int, help="vocabulary size (ids are checked)")
    sub = commands.add_parser("export-nanogpt", help="shard set -> one nanoGPT .bin")
    sub.add_argument("input", help="shard-set directory or bare prefix")
    sub.add_argument("output", help="output .bin file")
    sub = commands.add_parser("export-llmc", help="shard set -> llm.c data files")
    sub.add_argument("input", help="shard-set directory or bare prefix")
    sub.add_argument("output", help="output directory")
    sub.add_argument("--shard-tokens", type=int, default=DEFAULT_LLMC_SHARD_TOKENS)
    for name, what in listed.items():
        commands.add_parser(name, help=what)
    return parser


def main(argv: list[str] | None = None, listed: Mapping[str, str] = MappingProxyType({})) -> int:
    """tools/convert's shard-set commands (`listed`: its others, named in --help)."""
    args = _parser(listed).parse_args(argv)
    try:
        if args.command.startswith("import-"):
            options = {
                "eod": args.eod,
                "shard_tokens": args.shard_tokens,
                "tokenizer_kind": args.tokenizer_kind,
                "vocab_size": args.vocab_size,
                "tokenizer_file": args.tokenizer_file,
            }
            if args.eod_position:
                options["eod_position"] = args.eod_position
            run = import_nanogpt if args.command == "import-nanogpt" else import_llmc
            manifest = run(args.input, args.output, **options)
            print(
                f"{args.output}: {len(manifest.shards)} shards, {manifest.documents:,} documents, "
                f"{manifest.tokens:,} tokens"
            )
        elif args.command == "export-nanogpt":
            count = export_nanogpt(args.input, args.output)
            print(f"{args.output}: {count:,} tokens")
        else:
            names = export_llmc(args.input, args.output, shard_tokens=args.shard_tokens)
            print(f"{args.output}: {len(names)} files")
    except (FormatError, ValueError, OSError, OutputError) as e:
        print(f"tools/convert: error: {e}", file=sys.stderr)
        return 1
    return 0
