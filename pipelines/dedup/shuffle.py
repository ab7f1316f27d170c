"""Shuffle accounting: the bytes each dedup stage sends through a GroupByKey, as Beam counters.

Every step that sends elements to a grouping step of `Deduplicate` counts them with
`ShuffleBytes` (below), which adds the encoded size of each element to the counter
`dedup_shuffle_bytes_<stage>` (SHUFFLE_PREFIX + stage); decontamination's combine still
receives its input through `counted`, a pass-through step that does the same. The size is the
length of the element encoded with the coder Beam picks for that PCollection, which is the
coder the runner uses to write the GroupByKey's input; the runner's own framing (window,
timestamp, key hash) is not counted. For a combine (Distinct, CombinePerKey) the input is
counted before any combiner lifting, an upper bound on what it shuffles (for a Distinct, the
element, before it is paired with None; the verification's roles, stage verify_roles, enter the
roles table's combine). Several steps may send to one stage (apply's four inputs): the stage's
counter is their sum.

The counter `dedup_input_bytes` holds the UTF-8 bytes of the text entering dedup, so
`shuffle_ratio` (pipelines.stats.shuffle_summary, the stats.json section) is the bytes shuffled
per input byte. Each counting step also emits its bundle's counts as data (tag "counts"), so
that pipelines which write stats.json from data (pipelines.preprocess) have exact figures on
every runner.

Why the producers count, rather than a `counted` step in front of each shuffle: every transform
costs ~7 ms of CPU to build and start on the DirectRunner whatever it processes (Beam inspects
each DoFn's methods several times), and dedup has ~30 shuffles (the connected components'
unrolled rounds ~20). A producer that counts must declare the element type Beam inferred for
its output when a `counted` step sat behind it, so that the coder, and every figure, is the
same (tests/integration/test_dedup_pipeline.py checks each counter against the encoded size of
what enters its shuffle).
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam import coders, pvalue, typehints
from apache_beam.transforms.window import GlobalWindows

from pipelines.stats import SHUFFLE_PREFIX, BundleCounts


class ShuffleBytes:
    """A DoFn's count of the encoded bytes it sends to a GroupByKey, under SHUFFLE_PREFIX + stage:
    call start_bundle, add(element) for each element sent, and yield from finish_bundle (the
    bundle's counts, as data, tag "counts"). `coder` must be the coder of the PCollection the
    elements go out in (coders.registry.get_coder of its element type)."""

    def __init__(self, stage: str, coder: coders.Coder) -> None:
        self._counter = SHUFFLE_PREFIX + stage
        self._coder = coder

    def start_bundle(self, counts: BundleCounts | None = None) -> None:
        """`counts`: the DoFn's own BundleCounts, for a DoFn that emits its counts as data
        itself (one "counts" dict a bundle, with the bytes in it); finish_bundle then yields
        nothing. Without it the bytes are kept apart and finish_bundle emits them."""
        self._own = counts is None
        self._counts = BundleCounts() if counts is None else counts

    def add(self, element, shuffles: int = 1) -> None:
        """Count `element`, sent to `shuffles` GroupByKeys (encoded once)."""
        self._counts.inc(self._counter, shuffles * len(self._coder.encode(element)))

    def finish_bundle(self):
        counts = self._counts.drain() if self._own else None
        if counts:
            yield pvalue.TaggedOutput("counts", GlobalWindows.windowed_value(counts))


class _CountBytesFn(beam.DoFn):
    """Passes elements through; counts their encoded size under SHUFFLE_PREFIX + stage."""

    def __init__(self, stage: str, coder: coders.Coder) -> None:
        self._bytes = ShuffleBytes(stage, coder)

    def start_bundle(self) -> None:
        self._bytes.start_bundle()

    def process(self, element):
        self._bytes.add(element)
        yield element

    def finish_bundle(self):
        yield from self._bytes.finish_bundle()


def counted(pcoll: beam.PCollection, label: str, stage: str, counts: list) -> beam.PCollection:
    """pcoll unchanged, its encoded bytes counted under `stage`; the counts PCollection is
    appended to `counts`."""
    coder = coders.registry.get_coder(pcoll.element_type)
    out = pcoll | f"{label}/CountShuffleBytes" >> beam.ParDo(
        _CountBytesFn(stage, coder)
    ).with_outputs("counts", main="main")
    counts.append(out.counts)
    return out.main


# What each step sends to a GroupByKey (or a combine), typed as Beam inferred it
# when a separate `counted` step sat between them, so that the coder the runner writes it with
# and every dedup_shuffle_bytes_* figure stay the same.
ANY = typehints.Any
PAIR = typehints.Tuple[typehints.Any, typehints.Any]
TO_DISTINCT = typehints.Tuple[typehints.Any, type(None)]  # Beam's Distinct's (element, None)


class CountingFn(beam.DoFn):
    """A DoFn whose counts go to Beam metrics once per bundle (BundleCounts.drain)."""

    def start_bundle(self) -> None:
        self._counts = BundleCounts()

    def finish_bundle(self) -> None:
        self._counts.drain()


class SendingFn(CountingFn):
    """A step whose output goes to a GroupByKey (or a combine) of `stage`: it counts the bytes
    it sends there itself (ShuffleBytes, tag "counts"), one transform fewer than a separate
    `counted` step (~7 ms of CPU each to build and start, whatever the data). Its other counts
    go to Beam metrics only."""

    def __init__(self, stage: str, sent_type) -> None:
        self._bytes = ShuffleBytes(stage, coders.registry.get_coder(sent_type))

    def start_bundle(self) -> None:
        super().start_bundle()
        self._sent = BundleCounts()  # data as well as metrics, unlike self._counts
        self._bytes.start_bundle(self._sent)

    def finish_bundle(self):
        super().finish_bundle()
        counts = self._sent.drain()
        if counts:
            yield pvalue.TaggedOutput("counts", GlobalWindows.windowed_value(counts))

    def _send(self, element):
        self._bytes.add(element)
        return element


def sending(pcoll, label: str, fn: SendingFn, sent_type, counts: list, *tags):
    """pcoll | fn, whose main output ("sent", typed sent_type) goes to a GroupByKey; `tags`:
    its other outputs. Its byte counts join `counts`."""
    out = pcoll | label >> beam.ParDo(fn).with_output_types(sent_type).with_outputs(
        "counts", *tags, main="sent"
    )
    counts.append(out.counts)
    return out
