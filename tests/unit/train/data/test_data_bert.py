"""BERT samples from real WordPiece sentence shards: layout, pairs, masking statistics, resume."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from dataset_format import FormatError, ShardSet
from tests.conftest import BERT_VOCAB
from tests.shard_fixtures import (
    BERT_SPECIAL_IDS,
    BERT_VOCAB_SIZE,
    bert_tokenizer,
    make_bert_shards,
    make_gpt_shards,
)
from train.data import MaskingConfig, build_bert_datasets, continuation_ids_from_vocab
from train.data.bert_dataset import SentenceTable, build_segment_mapping, truncate_pair

CLS, SEP, MASK, PAD = (BERT_SPECIAL_IDS[k] for k in ("cls", "sep", "mask", "pad"))
SEQ_LEN = 128
NUM = 1500


@pytest.fixture(scope="module")
def bert_set(tmp_path_factory):
    return make_bert_shards(tmp_path_factory.mktemp("bert"), n_docs=400, num_shards=2)


def bert_splits(sources, num_samples: dict, **options) -> dict:
    """build_bert_datasets with this file's defaults (SEQ_LEN, split "100,0,0", seed 1234,
    default masking, the WordPiece specials and vocabulary), `options` replacing them."""
    defaults = dict(seq_len=SEQ_LEN, split="100,0,0", seed=1234, masking=MaskingConfig())
    defaults.update(special_ids=dict(BERT_SPECIAL_IDS), vocab_size=BERT_VOCAB_SIZE)
    return build_bert_datasets(sources, num_samples=num_samples, **{**defaults, **options})


def build(path, cache, masking=None, num=NUM, **options):
    options.update(masking=masking or MaskingConfig(), cache_dir=str(cache))
    return bert_splits([(1.0, path)], {"train": num}, **options)["train"]


@pytest.fixture(scope="module")
def nsp_samples(bert_set, tmp_path_factory):
    dataset = build(bert_set, tmp_path_factory.mktemp("cache"))
    return dataset, [dataset[i] for i in range(NUM)]


def original(sample):
    """The sequence before masking: labels hold the original token where one was masked."""
    return np.where(sample["mlm_labels"] != -100, sample["mlm_labels"], sample["input_ids"])


def parts(sample):
    tokens = original(sample)
    length = int(sample["attention_mask"].sum())
    seps = np.flatnonzero(tokens[:length] == SEP)
    return tokens[1 : seps[0]], tokens[seps[0] + 1 : length - 1], length


def test_layout_cls_a_sep_b_sep_then_padding(nsp_samples):
    _, samples = nsp_samples
    for sample in samples:
        assert set(sample) == {
            "input_ids", "token_type_ids", "attention_mask", "mlm_labels", "mlm_positions",
            "mlm_targets", "nsp_label",
        }  # fmt: skip
        assert all(sample[k].shape == (SEQ_LEN,) and sample[k].dtype == np.int64 for k in
                   ("input_ids", "token_type_ids", "attention_mask", "mlm_labels"))  # fmt: skip
        assert sample["nsp_label"].shape == () and sample["nsp_label"].dtype == np.int64
        tokens = original(sample)
        length = int(sample["attention_mask"].sum())
        assert 5 <= length <= SEQ_LEN
        assert np.array_equal(sample["attention_mask"][:length], np.ones(length))
        assert tokens[0] == CLS and tokens[length - 1] == SEP
        seps = np.flatnonzero(tokens[:length] == SEP)
        assert len(seps) == 2  # WordPiece never emits [SEP] for text
        a_end = int(seps[0])
        assert 1 < a_end < length - 2  # A and B both non-empty
        types = sample["token_type_ids"]
        assert not types[: a_end + 1].any() and types[a_end + 1 : length].all()
        assert not types[length:].any()
        assert (sample["input_ids"][length:] == PAD).all()
        assert (sample["mlm_labels"][length:] == -100).all()
        assert CLS not in tokens[1:length] and PAD not in tokens[:length]


def test_static_mlm_targets_are_the_dense_labels_padded_to_20(nsp_samples):
    """mlm_positions / mlm_targets: the same predictions as mlm_labels, in position order,
    padded to max_predictions_per_seq (20 at seq 128) with position 0 and label -100."""
    _, samples = nsp_samples
    assert MaskingConfig().max_predictions(128) == 20
    assert MaskingConfig().max_predictions(512) == 80
    assert MaskingConfig(max_predictions_per_seq=7).max_predictions(512) == 7
    for sample in samples:
        positions, targets = sample["mlm_positions"], sample["mlm_targets"]
        assert positions.shape == targets.shape == (20,)
        predicted = np.flatnonzero(sample["mlm_labels"] != -100)
        n = predicted.size
        assert np.array_equal(positions[:n], predicted)
        assert np.array_equal(targets[:n], sample["mlm_labels"][predicted])
        assert (positions[n:] == 0).all() and (targets[n:] == -100).all()


def test_masking_statistics_follow_15_percent_and_80_10_10(nsp_samples):
    _, samples = nsp_samples
    predicted = kept = masked = randomised = tokens = 0
    for sample in samples:
        positions = np.flatnonzero(sample["mlm_labels"] != -100)
        length = int(sample["attention_mask"].sum())
        assert positions.size <= 20
        inputs, labels = sample["input_ids"][positions], sample["mlm_labels"][positions]
        assert not np.isin(labels, [CLS, SEP, PAD]).any()
        tokens += length
        predicted += positions.size
        masked += int((inputs == MASK).sum())
        kept += int((inputs == labels).sum())
        randomised += int(((inputs != MASK) & (inputs != labels)).sum())
        assert not np.isin(inputs[(inputs != MASK) & (inputs != labels)], [CLS, SEP, PAD]).any()
    assert abs(predicted / tokens - 0.15) < 0.01
    assert abs(masked / predicted - 0.8) < 0.015
    assert abs(kept / predicted - 0.1) < 0.01
    assert abs(randomised / predicted - 0.1) < 0.01


def test_nsp_labels_are_balanced_and_true_pairs_are_consecutive(nsp_samples):
    dataset, samples = nsp_samples
    labels = np.array([int(s["nsp_label"]) for s in samples])
    assert abs(labels.mean() - 0.5) < 0.04
    table = dataset.sentences
    checked = {0: 0, 1: 0}
    for i, sample in enumerate(samples):
        a, b, length = parts(sample)
        if length == SEQ_LEN:
            continue  # truncated: the pair's ends may have been cut
        document, first, end, _ = (int(v) for v in dataset.mapping[i])
        segment = table.tokens(first, end).astype(np.int64)
        assert np.array_equal(segment[: a.size], a)  # A: the segment's first sentences
        if sample["nsp_label"] == 0:
            assert np.array_equal(segment[a.size :], b)  # B: the rest, in order
        else:
            assert not np.array_equal(segment[a.size : a.size + b.size], b)
        checked[int(sample["nsp_label"])] += 1
    assert checked[0] > 100 and checked[1] > 100


def test_sentence_order_swaps_half_of_the_pairs(bert_set, tmp_path):
    dataset = build(bert_set, tmp_path, MaskingConfig(sentence_order=True), num=600)
    swapped = checked = 0
    for i in range(600):
        sample = dataset[i]
        swapped += int(sample["nsp_label"])
        a, b, length = parts(sample)
        if length == SEQ_LEN:
            continue  # truncated: the pair's ends may have been cut
        _, first, end, _ = (int(v) for v in dataset.mapping[i])
        segment = dataset.sentences.tokens(first, end).astype(np.int64)
        pair = np.concatenate([b, a]) if sample["nsp_label"] == 1 else np.concatenate([a, b])
        assert np.array_equal(pair, segment)
        checked += 1
    assert 0.44 < swapped / 600 < 0.56 and checked > 100


def test_sample_i_is_the_same_in_any_order_and_after_pickling(bert_set, nsp_samples, tmp_path):
    _, samples = nsp_samples
    fresh = build(bert_set, tmp_path)  # same key: same segment mapping
    for i in reversed(range(0, NUM, 37)):
        for key in samples[i]:
            assert np.array_equal(fresh[i][key], samples[i][key])
    restored = pickle.loads(pickle.dumps(fresh))
    assert all(np.array_equal(restored[i]["input_ids"], samples[i]["input_ids"]) for i in (3, 99))
    other_seed = build(bert_set, tmp_path, seed=99)
    assert not all(
        np.array_equal(other_seed[i]["input_ids"], samples[i]["input_ids"]) for i in range(20)
    )


def test_segment_mapping_packs_each_pass_into_whole_documents(bert_set):
    table = SentenceTable(ShardSet(bert_set))
    firsts = table.document_first_sentence
    lengths = table.sentence_lengths
    mapping = build_segment_mapping(
        firsts, lengths, 0, max_num_tokens=61, short_seq_prob=0.2, seed=5, num_samples=1
    )
    assert mapping.shape[1] == 4 and len(mapping) > 100
    targets = mapping[:, 3]
    assert targets.min() >= 2 and targets.max() == 61 and (targets < 61).mean() > 0.1
    by_document = {}
    for document, first, end, target in mapping.tolist():
        assert end - first >= 2 and firsts[document] <= first < end <= firsts[document + 1]
        by_document.setdefault(document, []).append((first, end, target))
    for document, segments in by_document.items():
        segments.sort()
        assert segments[0][0] == firsts[document] and segments[-1][1] == firsts[document + 1]
        assert all(x[1] == y[0] for x, y in zip(segments, segments[1:]))
        for first, end, target in segments[:-1]:
            # ends at the first sentence reaching the target, or at the two-sentence minimum
            assert lengths[first:end].sum() >= target or end == firsts[document + 1]
            assert lengths[first : end - 1].sum() < target or end - first == 2
    eligible = np.diff(firsts) >= 2
    assert set(by_document) == set(np.flatnonzero(eligible).tolist())


def google_truncate_lengths(la, lb, max_tokens):
    while la + lb > max_tokens:
        if la > lb:
            la -= 1
        else:
            lb -= 1
    return la, lb


def test_truncate_pair_removes_what_googles_loop_removes():
    rng = np.random.RandomState(0)
    for la in range(0, 30, 3):
        for lb in range(0, 30, 4):
            for max_tokens in (5, 17, 40):
                a, b = np.arange(la), np.arange(100, 100 + lb)
                ta, tb = truncate_pair(a, b, max_tokens, rng)
                assert (ta.size, tb.size) == google_truncate_lengths(la, lb, max_tokens)
                for kept, whole in ((ta, a), (tb, b)):  # a contiguous piece of the original
                    if kept.size:
                        start = int(kept[0] - whole[0])
                        assert np.array_equal(kept, whole[start : start + kept.size])


def test_continuation_ids_from_vocab_txt_and_tokenizer_json(tmp_path):
    flags = continuation_ids_from_vocab(str(BERT_VOCAB))
    vocab = BERT_VOCAB.read_text(encoding="utf-8").split("\n")
    assert flags.size == BERT_VOCAB_SIZE
    assert flags[vocab.index("##s")] and not flags[vocab.index("whale")]
    bert_tokenizer().save(str(tmp_path / "tokenizer.json"))
    assert np.array_equal(continuation_ids_from_vocab(str(tmp_path / "tokenizer.json")), flags)


def test_whole_word_masking_masks_every_piece_of_a_chosen_word(bert_set, tmp_path):
    dataset = build(bert_set, tmp_path, MaskingConfig(whole_word=True), num=800)
    continuation = continuation_ids_from_vocab(str(BERT_VOCAB))
    words_with_pieces = 0
    for i in range(800):
        sample = dataset[i]
        tokens = original(sample)
        length = int(sample["attention_mask"].sum())
        masked = sample["mlm_labels"][:length] != -100
        is_piece = continuation[tokens[:length]]
        follows_word = np.zeros(length, dtype=bool)
        follows_word[1:] = ~np.isin(tokens[: length - 1], [CLS, SEP])
        joined = is_piece & follows_word  # belongs to the word on its left
        assert np.array_equal(masked[1:][joined[1:]], masked[:-1][joined[1:]])
        words_with_pieces += int((masked & joined).sum())
    assert words_with_pieces > 20


def test_bert_over_document_level_shards_is_refused(tmp_path):
    gpt_set = make_gpt_shards(tmp_path, 30)
    with pytest.raises(ValueError, match="sentence-level"):
        build(gpt_set, tmp_path)
    with pytest.raises(ValueError, match="document-level"):
        build(os.path.join(gpt_set, "shard-00000"), tmp_path)


def test_whole_word_without_a_vocabulary_is_a_clear_error(bert_set, tmp_path):
    with pytest.raises(ValueError, match="continuation_ids"):
        build(os.path.join(bert_set, "shard-00000"), tmp_path, MaskingConfig(whole_word=True))


def test_bad_configuration_is_rejected(bert_set, tmp_path):
    with pytest.raises(ValueError, match="special_ids lacks"):
        bert_splits(
            [(1.0, bert_set)],
            {"train": 5},
            seq_len=64,
            split="1",
            seed=1,
            special_ids={"cls": CLS, "sep": SEP},
        )
    with pytest.raises(ValueError, match="replace_mask"):
        MaskingConfig(replace_mask=0.95, replace_random=0.1)
    splits = {"train": 5, "valid": 5}
    with pytest.raises(ValueError, match="valid split is empty"):
        bert_splits([(1.0, bert_set)], splits, seq_len=64, seed=1, cache_dir=str(tmp_path))


def test_two_sentence_sets_blend_by_weight(bert_set, tmp_path):
    carol = make_bert_shards(tmp_path, n_docs=200, name="carol", book="46-0.txt")
    sources = [(0.6, bert_set), (0.4, carol)]
    blended = bert_splits(
        sources, {"train": 500}, seq_len=64, split="1", seed=3, cache_dir=str(tmp_path)
    )["train"]
    assert len(blended) == 500
    assert np.bincount(blended.dataset_index).tolist() == [300, 200]
    d, k = int(blended.dataset_index[7]), int(blended.dataset_sample_index[7])
    assert np.array_equal(blended[7]["input_ids"], blended.datasets[d][k]["input_ids"])


def test_token_id_past_the_vocabulary_names_the_file(bert_set, tmp_path):
    # The real WordPiece ids run to ~30k; declared against a 2,000-id vocabulary (a set paired
    # with the wrong --tokenizer) the first sample with a larger id is refused, not fed on.
    dataset = build(bert_set, tmp_path, num=50, vocab_size=2000)
    with pytest.raises(FormatError, match=r"shard-00000\.bin: token id \d+ \(document 0, token"):
        dataset[0]


def test_static_mlm_loss_on_real_batches_equals_the_dynamic_one(nsp_samples):
    """Bert's loss from (mlm_positions, mlm_targets), the fixed-shape path compile needs,
    equals its loss from the dense labels on real padded batches, and so do the logits."""
    import torch

    from train.models.bert import Bert, BertConfig

    _, samples = nsp_samples
    torch.manual_seed(0)
    config = BertConfig(vocab_size=BERT_VOCAB_SIZE, n_layer=2, n_head=2, n_embd=32,
                        intermediate_size=64, max_position_embeddings=SEQ_LEN, dropout=0.0)  # fmt: skip
    model = Bert(config).eval()
    for start in (0, 8, 16):
        batch = {k: torch.from_numpy(np.stack([s[k] for s in samples[start : start + 8]]))
                 for k in samples[0]}  # fmt: skip
        common = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        dynamic = model(*common, batch["mlm_labels"], batch["nsp_label"])
        static = model(*common, batch["mlm_targets"], batch["nsp_label"],
                       mlm_positions=batch["mlm_positions"])  # fmt: skip
        torch.testing.assert_close(static.mlm_loss, dynamic.mlm_loss, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(static.loss, dynamic.loss, rtol=1e-6, atol=1e-6)
        counted = batch["mlm_targets"].flatten() != -100
        torch.testing.assert_close(static.mlm_logits[counted], dynamic.mlm_logits)
