"""The exact step's records cross its shuffle in batches by key partition (dedup/keyed.py): the
same documents are kept and removed as when each fingerprint was its own group, one element
crosses per partition a batch touches (not one per document); that a corpus without duplicates
takes none of the pair, verify or components work is a pipeline run:
tests/integration/test_dedup_exact_batches.py."""

from __future__ import annotations

import collections
import random

from apache_beam import pvalue

from pipelines.dedup import DedupConfig, exact
from pipelines.dedup.keyed import (
    PARTITIONS,
    fingerprint_key,
    keyed_batches,
    smallest_of_repeated,
)
from pipelines.dedup.transforms import (
    EXACT_DUPLICATE,
    EXACT_STAGE,
    _KeepSmallestFn,
    _KeepSmallestOfBatchesFn,
    _Record,
)
from pipelines.document import Document
from tests.helpers.dedup_corpus import paragraphs_of_book

# The exact step's DoFns are private to Deduplicate; they are driven here directly (why: a
# run through Deduplicate shows only the kept documents, not that the batched decision equals
# the one-group-per-fingerprint one, nor what crosses the shuffle). A whole run of the step:
# tests/integration/test_dedup_exact_batches.py.
CLEARED = {"fingerprint": b"", "url_key": ""}


def _book_documents() -> list[Document]:
    """Real paragraphs of a shared book, with planted exact copies (case and spacing changed,
    under other ids and sources): some texts twice, some four times."""
    paragraphs = [p for p in paragraphs_of_book("2701-0.txt") if len(p) > 200][:400]
    docs = [Document(f"books:{i:04d}", "books", p) for i, p in enumerate(paragraphs)]
    rng = random.Random(7)
    for n, i in enumerate(rng.sample(range(len(paragraphs)), 60)):
        copies = 3 if n % 4 == 0 else 1
        for c in range(copies):
            text = "  ".join(paragraphs[i].upper().split()) if c % 2 == 0 else paragraphs[i]
            docs.append(Document(f"web:{n:03d}-{c}", "webtext", text))
    rng.shuffle(docs)
    return docs


def _records(docs: list[Document], priority=("books",)) -> list[tuple]:
    return [
        tuple(
            _Record(
                node=(exact.source_rank(d.source, priority), d.id),
                scope="",
                fingerprint=exact.text_fingerprint(d.text),
                url_key="",
                bands=b"",
            )
        )
        for d in docs
    ]


def _plain(output):
    """An output as process would yield it (finish_bundle's carry their window)."""
    if isinstance(output, pvalue.TaggedOutput):
        return pvalue.TaggedOutput(output.tag, _plain(output.value))
    return output.value if hasattr(output, "windows") else output


def _outcome(fn, elements) -> tuple[list, list]:
    """(records sent on, (removed id, kept id) decisions) of a keep-one DoFn over its groups."""
    fn.start_bundle()
    kept, removed = [], []
    outputs = [o for element in elements for o in fn.process(element)]
    outputs += [_plain(o) for o in fn.finish_bundle()]
    for out in outputs:
        if isinstance(out, pvalue.TaggedOutput):
            if out.tag == "decisions":
                _, (_, (doc_id, decision)) = out.value
                removed.append((doc_id, decision.kept_id))
        else:
            kept.append(out)
    return sorted(kept), sorted(removed)


def test_batches_keep_and_remove_what_one_group_per_fingerprint_does():
    docs = _book_documents()
    keyed = [fingerprint_key(r) for r in _records(docs)]
    # the full path: one group per fingerprint (what GroupByKey(fingerprint) handed it)
    groups = collections.defaultdict(list)
    for key, record in keyed:
        groups[key].append(record)
    full = _outcome(_KeepSmallestFn(EXACT_DUPLICATE, 1.0, CLEARED, 16), list(groups.items()))
    # batched: the pairs cut into batches of 64, each batch's pairs grouped by partition
    by_partition = collections.defaultdict(list)
    for start in range(0, len(keyed), 64):
        for partition, pairs in keyed_batches(keyed[start : start + 64]):
            by_partition[partition].append(pairs)
    batched = _outcome(
        _KeepSmallestOfBatchesFn(EXACT_DUPLICATE, 1.0, CLEARED, 16), list(by_partition.items())
    )
    assert batched == full
    kept, removed = batched
    # independent of both: each planted text keeps its books paragraph (ranked first)
    assert len(removed) == 60 + 2 * 15 and len(kept) == len(docs) - len(removed)
    assert all(
        kept_id.startswith("books:") and doc_id.startswith("web:") for doc_id, kept_id in removed
    )


def test_a_record_read_twice_keeps_both_copies_of_the_smallest_node():
    docs = _book_documents()[:50]
    twice = docs + [docs[0]]
    keyed = [fingerprint_key(r) for r in _records(twice)]
    groups = [(partition, [pairs]) for partition, pairs in keyed_batches(keyed)]
    smallest = {}
    for _, batches in groups:
        smallest.update(smallest_of_repeated(batches))
    assert smallest == {keyed[0][0]: keyed[0][1][0]}
    batched = _outcome(_KeepSmallestOfBatchesFn(EXACT_DUPLICATE, 1.0, CLEARED, 16), groups)
    assert len(batched[0]) == len(twice) and batched[1] == []


def test_the_exact_shuffle_gets_one_element_per_partition_a_batch_touches():
    from pipelines.dedup.transforms import _FeaturesFn

    docs = _book_documents()
    config = DedupConfig(url=False, near=False, batch_docs=128)
    fn = _FeaturesFn(config, (EXACT_STAGE,))
    fn.setup()
    fn.start_bundle()
    outputs = [o for d in docs for o in fn.process(d)]
    outputs += [_plain(o) for o in fn.finish_bundle()]
    sent = [o.value for o in outputs if isinstance(o, pvalue.TaggedOutput) and o.tag == EXACT_STAGE]
    batches = -(-len(docs) // 128)
    assert len(sent) <= batches * PARTITIONS < len(docs) / 2
    assert sum(len(pairs) for _, pairs in sent) == len(docs)
    assert {len(partition) for partition, _ in sent} == {1}


class _LazyBatches:
    """A partition's group made on demand, as a runner streams a large group from shuffle:
    batches of 64 (key, record) pairs with distinct keys, but every 50th key repeated."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        for start in range(0, self.n, 64):
            yield tuple(self._pair(i) for i in range(start, min(start + 64, self.n)))

    @staticmethod
    def _pair(i: int):
        key = b"\x00" + (i - i % 2 if i % 50 < 2 else i).to_bytes(16, "little")
        return key, ((0, f"webtext:{i:08d}"), "", b"", "", b"\x02" * 112)


def test_a_partition_group_holds_its_keys_hashes_not_its_records():
    from tests.measure import traced_peak

    fn = _KeepSmallestOfBatchesFn(EXACT_DUPLICATE, 1.0, CLEARED, 16)

    def group(n: int):
        def run():
            fn.start_bundle()
            removed = sum(
                1
                for out in fn.process((b"\x00", _LazyBatches(n)))
                if isinstance(out, pvalue.TaggedOutput) and out.tag == "decisions"
            )
            assert removed == n // 50  # the second of each repeated pair
            list(fn.finish_bundle())

        return run

    group(500)()
    small, large = traced_peak(group(4_000)), traced_peak(group(16_000))
    # held, 12,000 more records would be ~3 MB (a node, an id and 112 bytes of band hashes
    # each); the group holds 16 bytes of hash a record and its working copies, under 100
    assert large - small < 100 * 12_000, (small, large)
