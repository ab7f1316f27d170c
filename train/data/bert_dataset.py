"""BERT pretraining samples from sentence-level shards: sentence pairs, NSP/SOP, masked LM.

The logic of Google's `create_pretraining_data.py` (as Megatron-LM's BertDataset uses it), made
random-access: the packing of each document's sentences into segments is precomputed (and
cached), and everything else about sample i is drawn from its own generator,
`RandomState((seed + i) % 2**32)`, so sample i is the same in whatever order samples are read,
which is what makes a resumed run see exactly the samples an uninterrupted one would.

Where it differs from Google's script, by necessity of random access:
- a segment is fixed before its A/B split is drawn; when B comes from another document, the
  segment's unused sentences are not "put back" for the next segment (Megatron does the same);
- segments need at least two sentences (so A and B can both come from them, as Megatron
  requires); one-sentence documents only serve as the source of random B segments;
- pair truncation removes the same counts from the same ends (always from the longer side, each
  removal front or back with probability 1/2), drawn as binomials instead of token by token.
"""

from __future__ import annotations

import bisect
import dataclasses
import os

import numpy as np

from dataset_format import FormatError, ShardSet
from train.data.blend import build_split_datasets
from train.data.gpt_dataset import split_range
from train.data.indices import (
    MappedDataset,
    cache_key,
    ensure_index_files,
    index_cache_directory,
    open_index_files,
    shard_set_fingerprint,
)
from train.data.spec import Dataset, DataSource

IGNORE_INDEX = -100  # mlm_labels where no prediction is made (torch cross_entropy's default)
MIN_SENTENCES = 2
REQUIRED_SPECIAL = ("cls", "sep", "mask", "pad")


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    mask_prob: float = 0.15  # share of a sequence's tokens to predict
    replace_mask: float = 0.8  # of predicted tokens: replaced by [MASK]
    replace_random: float = 0.1  # ... by a random token (the rest stay as they are)
    whole_word: bool = False  # predict whole words (needs continuation ids)
    # masked positions a sequence at most, and the fixed length of ``mlm_positions``; None:
    # 20 per 128 tokens (NVIDIA's recipe: 20 at seq 128, 80 at 512)
    max_predictions_per_seq: int | None = None
    short_seq_prob: float = 0.1  # share of segments packed to a random shorter length
    sentence_order: bool = False  # sentence-order prediction (swap A/B) instead of NSP

    def __post_init__(self) -> None:
        if not 0 < self.mask_prob < 1:
            raise ValueError(f"mask_prob must be in (0, 1), got {self.mask_prob}")
        if self.replace_mask < 0 or self.replace_random < 0:
            raise ValueError("replace_mask and replace_random must be >= 0")
        if self.replace_mask + self.replace_random > 1:
            raise ValueError(
                f"replace_mask + replace_random = {self.replace_mask + self.replace_random} > 1"
            )
        if self.max_predictions_per_seq is not None and self.max_predictions_per_seq < 1:
            raise ValueError("max_predictions_per_seq must be >= 1")

    def max_predictions(self, seq_len: int) -> int:
        """``max_predictions_per_seq``, or by default 20 per 128 tokens."""
        if self.max_predictions_per_seq is not None:
            return self.max_predictions_per_seq
        return max(1, round(seq_len * 20 / 128))
        if not 0 <= self.short_seq_prob <= 1:
            raise ValueError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")


def continuation_ids_from_vocab(path: str) -> np.ndarray:
    """bool[vocab]: which WordPiece tokens continue a word (their string starts with "##").

    Reads a BERT `vocab.txt` (one token per line, id = line number) or a Hugging Face
    `tokenizer.json` with a WordPiece model (its `continuing_subword_prefix`, default "##"),
    by the pipeline's tokenizer readers (dataset_format.tokenizer_files: capped, ids checked).
    """
    from common.safe_io import TOKENIZER_CAP, parse_json, read_bytes_capped
    from dataset_format.tokenizer_files import token_ids_of_file

    raw = read_bytes_capped(path, "tokenizer file", TOKENIZER_CAP)
    token_ids, kind = token_ids_of_file(raw, path)
    if kind != "wordpiece":
        raise ValueError(f"{path}: not a WordPiece tokenizer ({kind}); no word continuations")
    prefix = "##"
    if path.endswith(".json"):
        given = parse_json(raw, path)["model"].get("continuing_subword_prefix")
        prefix = given if isinstance(given, str) and given else prefix
    flags = np.zeros(max(token_ids.values()) + 1, dtype=bool)
    for token, token_id in token_ids.items():
        flags[token_id] = token.startswith(prefix)
    return flags


class SentenceTable:
    """Global sentence numbering over a set's shards (a document's sentences are contiguous)."""

    def __init__(self, shard_set: ShardSet):
        self.shard_set = shard_set
        counts = [s.num_sequences for s in shard_set.shards]
        self.first_sentence_of_shard = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._shard_starts = self.first_sentence_of_shard[:-1].tolist()
        firsts = [
            np.asarray(s.document_index[:-1], dtype=np.int64) + base
            for s, base in zip(shard_set.shards, self._shard_starts)
        ]
        self.document_first_sentence = np.concatenate(
            firsts + [np.array([self.first_sentence_of_shard[-1]], dtype=np.int64)]
        )
        self.sentence_lengths = shard_set.sequence_lengths().astype(np.int64)

    def tokens(self, first: int, end: int) -> np.ndarray:
        """All tokens of global sentences [first, end) of one document, as one view."""
        shard = bisect.bisect_right(self._shard_starts, first) - 1
        base = self._shard_starts[shard]
        dataset = self.shard_set.shards[shard]
        offsets = dataset.sequence_offsets()
        start = int(offsets[first - base])
        return dataset.tokens(start, int(offsets[end - base]) - start)


def build_segment_mapping(
    document_first_sentence: np.ndarray,
    sentence_lengths: np.ndarray,
    first_document: int,
    *,
    max_num_tokens: int,
    short_seq_prob: float,
    seed: int,
    num_samples: int,
) -> np.ndarray:
    """Shuffled segments (document, first sentence, end sentence, target length), int64[N, 4].

    Each pass over the split packs every document's sentences greedily into segments of at
    least `target` tokens (the target is max_num_tokens, or with short_seq_prob a random length
    in [2, max_num_tokens]), each of at least two sentences, never leaving a one-sentence tail;
    passes repeat with fresh targets until there are `num_samples` segments. All documents are
    advanced together, one segment per numpy step, so the Python loop runs as many times as the
    longest document has segments, not once per sentence.
    `document_first_sentence` holds the split's documents' first sentences plus the end.
    """
    rng = np.random.RandomState(seed % 2**32)
    starts_all = document_first_sentence[:-1]
    ends_all = document_first_sentence[1:]
    eligible = (ends_all - starts_all) >= MIN_SENTENCES
    documents_all = np.arange(first_document, first_document + starts_all.size, dtype=np.int64)
    cumulative = np.zeros(sentence_lengths.size + 1, dtype=np.int64)
    np.cumsum(sentence_lengths, out=cumulative[1:])
    passes: list[np.ndarray] = []
    total = 0
    while total < num_samples:
        documents, start, end = documents_all[eligible], starts_all[eligible], ends_all[eligible]
        segments: list[np.ndarray] = []
        while documents.size:
            short = rng.random_sample(documents.size) < short_seq_prob
            target = np.where(
                short, rng.randint(2, max_num_tokens + 1, size=documents.size), max_num_tokens
            )
            # last = first sentence whose running length reaches the target ...
            last = np.searchsorted(cumulative, cumulative[start] + target, side="left") - 1
            last = np.maximum(last, start + MIN_SENTENCES - 1)  # ... with two sentences at least
            last = np.where(end - (last + 1) < MIN_SENTENCES, end - 1, last)  # no short tail
            segments.append(np.stack([documents, start, last + 1, target], axis=1))
            keep = last + 1 < end
            documents, start, end = documents[keep], last[keep] + 1, end[keep]
        if not segments:
            raise ValueError(f"no document has {MIN_SENTENCES} sentences")
        one_pass = np.concatenate(segments)
        passes.append(one_pass)
        total += one_pass.shape[0]
    mapping = np.concatenate(passes)
    return mapping[rng.permutation(mapping.shape[0])]


def truncate_pair(
    a: np.ndarray, b: np.ndarray, max_num_tokens: int, rng: np.random.RandomState
) -> tuple[np.ndarray, np.ndarray]:
    """Google's truncate_seq_pair in closed form: trim the longer side until the pair fits."""
    excess = a.size + b.size - max_num_tokens
    if excess <= 0:
        return a, b
    gap = abs(a.size - b.size)
    from_longer = min(excess, gap)
    rest = excess - from_longer
    # After equalising, removals alternate and a tie goes to b, so b loses the odd one.
    cut_a = rest // 2 + (from_longer if a.size > b.size else 0)
    cut_b = rest - rest // 2 + (from_longer if b.size >= a.size else 0)
    front_a = rng.binomial(cut_a, 0.5) if cut_a else 0
    front_b = rng.binomial(cut_b, 0.5) if cut_b else 0
    return (
        a[front_a : a.size - (cut_a - front_a)],
        b[front_b : b.size - (cut_b - front_b)],
    )


class BertDataset(MappedDataset):
    """dataset[i] -> input_ids, token_type_ids, attention_mask, mlm_labels, nsp_label, and the
    static-shape form of the MLM targets: ``mlm_positions`` (the predicted positions in order,
    padded with 0) and ``mlm_targets`` (their labels, padded with -100), both of the fixed
    length ``masking.max_predictions(seq_len)`` (see ``Bert.forward``)."""

    _DERIVED = ("sentences", "mapping", "random_documents", "random_token_ids", "_rng")

    def __init__(
        self,
        shard_set: ShardSet,
        index_files: dict[str, str],
        *,
        first_document: int,
        end_document: int,
        seq_len: int,
        seed: int,
        masking: MaskingConfig,
        special_ids: dict[str, int],
        vocab_size: int,
        continuation_ids: np.ndarray | None = None,
        name: str = "",
    ):
        self.first_document = first_document
        self.end_document = end_document
        self.seq_len = seq_len
        self.max_num_tokens = seq_len - 3  # [CLS] A [SEP] B [SEP]
        self.seed = seed
        self.masking = masking
        self.max_predictions = masking.max_predictions(seq_len)
        self.special_ids = dict(special_ids)
        self.vocab_size = vocab_size
        self.continuation_ids = continuation_ids
        self.name = name
        self._attach(shard_set, index_files)

    def _open(self, shard_set: ShardSet | None = None) -> None:
        shard_set = shard_set if shard_set is not None else ShardSet(self._location)
        self.sentences = SentenceTable(shard_set)
        self.mapping = open_index_files(self._index_files)["mapping"]
        running = np.concatenate([[0], np.cumsum(self.sentences.sentence_lengths)])
        first = self.sentences.document_first_sentence
        tokens_per_document = running[first[1:]] - running[first[:-1]]
        documents = np.arange(self.first_document, self.end_document)
        # Random B segments come from documents of this split that have tokens.
        self.random_documents = documents[tokens_per_document[documents] > 0]
        specials = np.array(sorted(set(self.special_ids.values())), dtype=np.int64)
        self.random_token_ids = np.setdiff1d(np.arange(self.vocab_size, dtype=np.int64), specials)
        self.cls_id = self.special_ids["cls"]
        self.sep_id = self.special_ids["sep"]
        self.mask_id = self.special_ids["mask"]
        self.pad_id = self.special_ids["pad"]
        self._rng = np.random.RandomState()

    def __len__(self) -> int:
        return int(self.mapping.shape[0])

    # -- sample assembly -------------------------------------------------------------------
    def _random_b(self, rng: np.random.RandomState, document: int, target: int) -> np.ndarray:
        """Sentences of another document from a random start until `target` tokens (>= 1)."""
        candidates = self.random_documents
        other = document
        for _ in range(10):  # Google's: ten tries at a different document, else keep the last
            other = int(candidates[rng.randint(candidates.size)])
            if other != document:
                break
        first = int(self.sentences.document_first_sentence[other])
        end = int(self.sentences.document_first_sentence[other + 1])
        start = first + rng.randint(end - first)
        running = np.cumsum(self.sentences.sentence_lengths[start:end])
        count = int(np.searchsorted(running, max(target, 1), side="left")) + 1
        return self.sentences.tokens(start, min(start + count, end))

    def _pair(self, rng: np.random.RandomState, segment: np.ndarray):
        document, first, end, target = (int(v) for v in segment)
        lengths = self.sentences.sentence_lengths[first:end]
        tokens = self.sentences.tokens(first, end)
        a_end = rng.randint(1, end - first)  # A = sentences [0, a_end), at least one each side
        cut = int(lengths[:a_end].sum())
        a, b = tokens[:cut], tokens[cut:]
        if self.masking.sentence_order:
            if rng.random_sample() < 0.5:
                return b, a, 1
            return a, b, 0
        if rng.random_sample() < 0.5:
            return a, self._random_b(rng, document, target - a.size), 1
        return a, b, 0

    def _raise_bad_id(self) -> None:
        """FormatError naming the file and document: a scan of the set, on this error path only."""
        for shard in self.sentences.shard_set.shards:
            shard.check_token_ids(self.vocab_size)
        raise FormatError(f"{self.name}: a token id outside the vocabulary of {self.vocab_size}")

    def _mask(self, tokens: np.ndarray, special: np.ndarray, rng: np.random.RandomState):
        """Google's create_masked_lm_predictions: (input ids, labels) with -100 where unmasked."""
        masking = self.masking
        candidates = np.flatnonzero(~special)
        num_to_predict = min(
            self.max_predictions, max(1, int(round(tokens.size * masking.mask_prob)))
        )
        if masking.whole_word:
            continuation = self.continuation_ids[tokens[candidates]]
            # A word starts at a non-continuation token or right after a special token.
            follows_candidate = np.zeros(candidates.size, dtype=bool)
            follows_candidate[1:] = candidates[1:] == candidates[:-1] + 1
            word_starts = np.flatnonzero(~(continuation & follows_candidate))
            word_ends = np.append(word_starts[1:], candidates.size)
            chosen: list[np.ndarray] = []
            count = 0
            for w in rng.permutation(word_starts.size):
                if count >= num_to_predict:
                    break
                size = int(word_ends[w] - word_starts[w])
                if count + size > num_to_predict:
                    continue
                chosen.append(candidates[word_starts[w] : word_ends[w]])
                count += size
            positions = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
        else:
            positions = candidates[rng.permutation(candidates.size)[:num_to_predict]]
        draw = rng.random_sample(positions.size)
        to_mask = draw < masking.replace_mask
        to_random = ~to_mask & (draw < masking.replace_mask + masking.replace_random)
        labels = np.full(tokens.size, IGNORE_INDEX, dtype=np.int64)
        labels[positions] = tokens[positions]
        inputs = tokens.copy()
        inputs[positions[to_mask]] = self.mask_id
        random_positions = positions[to_random]
        inputs[random_positions] = self.random_token_ids[
            rng.randint(self.random_token_ids.size, size=random_positions.size)
        ]
        return inputs, labels

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(f"{self.name}: sample {index} out of range [0, {len(self)})")
        # Reseeding one generator gives the very stream of RandomState(seed) at a fraction of
        # the cost of a new one (~10 us against ~600 us here).
        rng = self._rng
        rng.seed((self.seed + index) % 2**32)
        a, b, label = self._pair(rng, self.mapping[index])
        a, b = truncate_pair(a, b, self.max_num_tokens, rng)
        length = a.size + b.size + 3
        tokens = np.empty(length, dtype=np.int64)
        tokens[0] = self.cls_id
        tokens[1 : 1 + a.size] = a
        tokens[1 + a.size] = self.sep_id
        tokens[2 + a.size : length - 1] = b
        tokens[length - 1] = self.sep_id
        # Checked per sample, as in GPTDataset: no id past the vocabulary reaches the model.
        if int(tokens.max()) >= self.vocab_size or int(tokens.min()) < 0:
            self._raise_bad_id()
        special = np.zeros(length, dtype=bool)
        special[[0, 1 + a.size, length - 1]] = True
        inputs, labels = self._mask(tokens, special, rng)
        size = self.seq_len
        input_ids = np.full(size, self.pad_id, dtype=np.int64)
        input_ids[:length] = inputs
        token_type_ids = np.zeros(size, dtype=np.int64)
        token_type_ids[2 + a.size : length] = 1
        attention_mask = np.zeros(size, dtype=np.int64)
        attention_mask[:length] = 1
        mlm_labels = np.full(size, IGNORE_INDEX, dtype=np.int64)
        mlm_labels[:length] = labels
        predicted = np.flatnonzero(labels != IGNORE_INDEX)  # at most max_predictions (_mask)
        mlm_positions = np.zeros(self.max_predictions, dtype=np.int64)
        mlm_positions[: predicted.size] = predicted
        mlm_targets = np.full(self.max_predictions, IGNORE_INDEX, dtype=np.int64)
        mlm_targets[: predicted.size] = labels[predicted]
        return {
            "input_ids": input_ids,
            "token_type_ids": token_type_ids,
            "attention_mask": attention_mask,
            "mlm_labels": mlm_labels,
            "mlm_positions": mlm_positions,
            "mlm_targets": mlm_targets,
            "nsp_label": np.asarray(label, dtype=np.int64),
        }


def check_sentence_level(shard_set: ShardSet, path: str) -> None:
    """BERT pairs need sentence boundaries; a document-level set has none."""
    manifest = shard_set.manifest
    if manifest is not None and manifest.sequence_unit != "sentence":
        raise ValueError(
            f"{path}: BERT needs sentence-level shards (sequence_unit 'sentence'), this set's "
            f"is {manifest.sequence_unit!r}; re-run the pipeline with sentence splitting"
        )
    if manifest is None and shard_set.num_sequences == shard_set.num_documents:
        raise ValueError(
            f"{path}: every document is a single sequence, so this looks like a document-level "
            "pair; BERT needs sentence-level shards"
        )


def _continuation_ids_for(shard_set: ShardSet, path: str, vocab_size: int) -> np.ndarray:
    tokenizer = shard_set.tokenizer_path
    if tokenizer is None or not os.path.exists(tokenizer):
        raise ValueError(
            f"{path}: whole-word masking needs continuation_ids (which token ids continue a "
            "word), and the set ships no tokenizer file to read them from"
        )
    flags = continuation_ids_from_vocab(tokenizer)
    if flags.size < vocab_size:
        flags = np.concatenate([flags, np.zeros(vocab_size - flags.size, dtype=bool)])
    return flags


def build_bert_split(
    shard_set: ShardSet,
    path: str,
    *,
    split_name: str,
    split: str,
    seq_len: int,
    seed: int,
    num_samples: int,
    masking: MaskingConfig,
    special_ids: dict[str, int],
    vocab_size: int,
    continuation_ids: np.ndarray | None,
    cache_dir: str | None,
) -> BertDataset:
    check_sentence_level(shard_set, path)
    start, end = split_range(shard_set, path, split, split_name)
    table = SentenceTable(shard_set)
    firsts = table.document_first_sentence[start : end + 1]
    max_num_tokens = seq_len - 3
    key = cache_key(
        {
            "kind": "bert",
            "set": shard_set_fingerprint(shard_set),
            "documents": [start, end],
            "max_num_tokens": max_num_tokens,
            "short_seq_prob": masking.short_seq_prob,
            "seed": seed,
            "num_samples": num_samples,
        }
    )

    def build() -> dict[str, np.ndarray]:
        try:
            mapping = build_segment_mapping(
                firsts,
                table.sentence_lengths,
                start,
                max_num_tokens=max_num_tokens,
                short_seq_prob=masking.short_seq_prob,
                seed=seed,
                num_samples=num_samples,
            )
        except ValueError as e:
            raise ValueError(
                f"{path}: the {split_name} split (documents {start}..{end}): {e}"
            ) from None
        return {"mapping": mapping}

    files = ensure_index_files(
        index_cache_directory(shard_set.directory, cache_dir),
        f"bert-{split_name}-{key[:24]}",
        ("mapping",),
        build,
    )
    if masking.whole_word and continuation_ids is None:
        continuation_ids = _continuation_ids_for(shard_set, path, vocab_size)
    return BertDataset(
        shard_set,
        files,
        first_document=start,
        end_document=end,
        seq_len=seq_len,
        seed=seed,
        masking=masking,
        special_ids=special_ids,
        vocab_size=vocab_size,
        continuation_ids=continuation_ids,
        name=f"{path}[{split_name}]",
    )


def build_bert_datasets(
    sources: list[DataSource],
    *,
    seq_len: int,
    split: str,
    seed: int,
    num_samples: dict[str, int],
    masking: MaskingConfig,
    special_ids: dict[str, int],
    vocab_size: int,
    cache_dir: str | None = None,
    continuation_ids: np.ndarray | None = None,
) -> dict[str, Dataset]:
    """A BERT dataset per split with samples wanted: one set's, or a blend of several."""
    if seq_len < 5:
        raise ValueError(f"seq_len must be >= 5 ([CLS] a [SEP] b [SEP]), got {seq_len}")
    missing = [k for k in REQUIRED_SPECIAL if k not in special_ids]
    if missing:
        raise ValueError(f"special_ids lacks {missing}; BERT needs {list(REQUIRED_SPECIAL)}")
    if continuation_ids is not None and len(continuation_ids) < vocab_size:
        raise ValueError(
            f"continuation_ids has {len(continuation_ids)} entries, vocab_size is {vocab_size}"
        )
    return build_split_datasets(
        sources,
        num_samples,
        lambda shard_set, path, split_name, count: build_bert_split(
            shard_set,
            path,
            split_name=split_name,
            split=split,
            seq_len=seq_len,
            seed=seed,
            num_samples=count,
            masking=masking,
            special_ids=special_ids,
            vocab_size=vocab_size,
            continuation_ids=continuation_ids,
            cache_dir=cache_dir,
        ),
    )
