"""The whole dedup stage on real text with planted duplicates, through `python -m pipelines.dedup`
(Parquet in, Parquet out) on the DirectRunner: in process, and with 2 worker processes."""

from __future__ import annotations

import collections
import errno
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from pipelines.dedup import DedupConfig, Deduplicate, shingles
from pipelines.dedup.__main__ import main
from pipelines.dedup.parquet import DOCUMENT_SCHEMA, document_to_row, read_parquet_documents
from pipelines.document import Document
from pipelines.stats import CPU_US, SHUFFLE_PREFIX, MergeCounts, build_stats
from pipelines.write import DEDUP_OUTPUT, MARKER_NAME, claim_output
from tests.conftest import REPO
from tests.helpers.dedup_corpus import (
    PlantedCorpus,
    edit_words,
    paragraphs_of_book,
    planted_corpus,
)

CORPORA = REPO.parent / "shared" / "corpora"


def _write_input(docs: list[Document], directory: Path) -> str:
    directory.mkdir(parents=True)
    half = len(docs) // 2
    for part, chunk in enumerate((docs[:half], docs[half:])):
        table = pa.Table.from_pylist([document_to_row(d) for d in chunk], schema=DOCUMENT_SCHEMA)
        pq.write_table(table, directory / f"part-{part}.parquet", row_group_size=7)
    return str(directory / "*.parquet")


def _read_rows(pattern: Path) -> list[dict]:
    return sorted(
        (
            row
            for f in sorted(pattern.parent.glob(pattern.name))
            for row in pq.read_table(f).to_pylist()
        ),
        key=json.dumps,
    )


def _run(tmp_path: Path, docs: list[Document], *args: str) -> dict:
    pattern = _write_input(docs, tmp_path / "input")
    out = tmp_path / "out"
    assert (
        main(
            [
                "--input",
                pattern,
                "--output",
                str(out),
                "--keep-rejects",
                "--runner",
                "DirectRunner",
                *args,
            ]
        )
        == 0
    )
    return {
        "documents": _read_rows(out / "documents-*.parquet"),
        "rejects": _read_rows(out / "rejects-*.parquet"),
        "clusters": _read_rows(out / "clusters-*.parquet"),
        "stats": json.loads((out / "stats.json").read_text()),
        "out": out,
    }


@pytest.fixture(scope="module")
def corpus() -> PlantedCorpus:
    return planted_corpus()


@pytest.fixture(scope="module")
def default_run(corpus, tmp_path_factory) -> dict:
    return _run(tmp_path_factory.mktemp("default"), corpus.docs)


@pytest.mark.slow
def test_every_planted_duplicate_is_removed_for_its_reason(corpus, default_run):
    rejects = {r["doc_id"]: r for r in default_run["rejects"]}
    assert {
        k: (r["reason"], r["detail"].split()[0].removeprefix("kept=")) for k, r in rejects.items()
    } == corpus.removed
    by_id = {d.id: d for d in corpus.docs}
    assert all(r["text"] == by_id[k].text for k, r in rejects.items())
    kept = {d["id"] for d in default_run["documents"]}
    assert kept == set(by_id) - set(corpus.removed)
    # kept documents are written unchanged
    assert all(d["text"] == by_id[d["id"]].text for d in default_run["documents"])


@pytest.mark.slow
def test_clusters_record_who_was_kept_and_the_measured_similarity(corpus, default_run):
    clusters = {c["removed_id"]: c for c in default_run["clusters"]}
    assert set(clusters) == set(corpus.removed)
    assert clusters["webtext:4-mirror"]["jaccard"] == 1.0
    assert clusters["webtext:6-recrawl"]["jaccard"] is None
    by_id = {d.id: d for d in corpus.docs}
    for removed_id, c in clusters.items():
        if c["reason"] != "near_duplicate":
            continue
        exact = shingles.jaccard(
            shingles.shingle_set(by_id[removed_id].text),
            shingles.shingle_set(by_id[c["matched_id"]].text),
        )
        assert c["jaccard"] == pytest.approx(exact) and exact >= 0.8
    # The chain: copy2 matched copy1 (its closer neighbour); both are kept in favour of the original.
    assert clusters["books:moby:010-copy2"]["matched_id"] == "books:moby:010-copy1"
    assert clusters["books:moby:010-copy2"]["kept_id"] == "books:moby:010"


@pytest.mark.slow
def test_stats_count_every_removal_by_reason(corpus, default_run):
    stats = default_run["stats"]
    reasons = [reason for reason, _ in corpus.removed.values()]
    assert stats["removed"] == {
        "contamination": 0,
        "url_duplicate": reasons.count("url_duplicate"),
        "exact_duplicate": reasons.count("exact_duplicate"),
        "near_duplicate": reasons.count("near_duplicate"),
        "duplicate_id": 0,
    }
    counters = stats["counters"]
    assert counters["dedup_exact_removed"] == 1 and counters["dedup_url_removed"] == 1
    assert counters["dedup_near_dup_removed"] == 5
    assert (
        stats["kept"] + sum(stats["removed"].values())
        == len(corpus.docs)
        == counters["dedup_docs_in"]
    )
    assert (
        counters["dedup_pairs_similar"] >= 5
        and counters["dedup_pairs_verified"] >= counters["dedup_pairs_similar"]
    )
    # The components converged (the planted chain needs rounds that change edges; then none do).
    rounds = sorted(k for k, v in counters.items() if k.startswith("dedup_cc_round") and v)
    assert rounds == [f"dedup_cc_round{r:02d}_changes" for r in range(1, len(rounds) + 1)]


@pytest.mark.slow
def test_stats_account_for_the_bytes_each_stage_shuffles(corpus, default_run):
    shuffle = default_run["stats"]["shuffle"]
    text_bytes = sum(len(d.text.encode("utf-8")) for d in corpus.docs)
    assert shuffle["input_text_bytes"] == text_bytes
    by_stage = shuffle["shuffle_bytes_by_stage"]
    assert {
        "url",
        "exact",
        "lsh_buckets",
        "candidate_edges",
        "verify",
        "components",
        "apply",
    } <= set(by_stage)
    assert shuffle["shuffle_bytes"] == sum(by_stage.values())
    assert shuffle["shuffle_ratio"] == pytest.approx(
        shuffle["shuffle_bytes"] / text_bytes, abs=1e-4
    )
    # No shuffle carries the text (it waits in stash files): apply moves the stash names and the
    # decisions (ids, reasons), and all the stages together far less than the text.
    assert by_stage["apply"] < 400 * len(corpus.removed)
    assert sum(by_stage.values()) < 0.25 * text_bytes
    # Shingle sets travel only for documents in a candidate pair: well under one set for every
    # document (4 bytes a shingle), which is what verification shuffled twice before.
    every_set = sum(4 * len(shingles.shingle_set(d.text)) for d in corpus.docs)
    assert by_stage["verify"] < every_set / 4
    # (the 5 near-duplicates removed and their kept documents at least)
    assert 6 <= default_run["stats"]["counters"]["dedup_pair_shingle_sets"] < len(corpus.docs) / 4


@pytest.mark.slow
def test_the_counts_output_gives_preprocess_the_same_shuffle_account(corpus, default_run, tmp_path):
    # preprocess writes stats.json from data, not metrics: Deduplicate's "counts" output merged
    # as preprocess merges it must give what the CLI read from the Beam counters.
    with beam.Pipeline(options=PipelineOptions(["--runner", "DirectRunner"])) as p:
        result = p | beam.Create(corpus.docs) | Deduplicate(DedupConfig(), str(tmp_path))
        account = (
            result["counts"]
            | beam.CombineGlobally(MergeCounts())
            | beam.Map(lambda counts: build_stats(counts)["dedup_shuffle"])
        )
        assert_that(account, equal_to([default_run["stats"]["shuffle"]]))


# The GroupByKeys each dedup_shuffle_bytes_<stage> accounts for, by
# label under Deduplicate/; a combine's GroupByKey reads the combine's input. The stash names
# enter two (stage "stash"), so those two are checked together with it.
_SHUFFLE_STAGES = {
    "URL/Group": "url",
    "Exact/Group": "exact",
    "Near/Buckets": "lsh_buckets",
    "Near/DistinctEdges/GroupByKey": "candidate_edges",
    "Verify/Stash": "verify_roles+stash",
    "Verify/Group": "verify",
    "Near/BestMatch/GroupByKey": "best_match",
    "Apply/Group": "apply+stash",
}


class _EncodedSize(beam.DoFn):
    """Adds each element's size, encoded with `coder`, to the test counter `stage`; of a
    Distinct's (element, None) pair, the element's (what enters Distinct)."""

    def __init__(self, stage: str, coder, distinct: bool) -> None:
        self._counter = beam.metrics.Metrics.counter("test_sizes", stage)
        self._coder, self._distinct = coder, distinct

    def process(self, element):
        self._counter.inc(len(self._coder.encode(element[0] if self._distinct else element)))


@pytest.mark.slow
def test_each_shuffle_counter_is_the_encoded_size_of_what_enters_its_shuffle(corpus, tmp_path):
    # The steps before each shuffle count what they send themselves; the figures must be those
    # a separate counting step on the shuffle's input PCollection, with its coder, would give.
    from apache_beam import coders

    pipeline = beam.Pipeline(options=PipelineOptions(["--runner", "DirectRunner"]))
    _ = pipeline | beam.Create(corpus.docs) | Deduplicate(DedupConfig(), str(tmp_path))
    entering = []  # (stage, PCollection, whether it is a Distinct's pairs)

    class Inputs(beam.pipeline.PipelineVisitor):
        def visit_transform(self, applied):
            if not applied.full_label.startswith("Deduplicate/"):
                return
            label = applied.full_label.removeprefix("Deduplicate/")
            if isinstance(applied.transform, beam.GroupByKey):
                stage = (
                    "components" if label.startswith("Near/Components/") else _SHUFFLE_STAGES[label]
                )
                entering.append((stage, applied.inputs[0], "Distinct" in label))

    pipeline.visit(Inputs())
    assert {stage for stage, _, _ in entering} == {*_SHUFFLE_STAGES.values(), "components"}
    for i, (stage, pcoll, distinct) in enumerate(entering):
        sent_type = beam.typehints.Any if distinct else pcoll.element_type
        fn = _EncodedSize(stage, coders.registry.get_coder(sent_type), distinct)
        _ = pcoll | f"Size{i}" >> beam.ParDo(fn)
    result = pipeline.run()
    result.wait_until_finish()
    counters = collections.Counter()  # summed over steps: several steps send to one stage
    for c in result.metrics().query()["counters"]:
        if c.key.metric.namespace in ("test_sizes", "pipelines"):
            counters[c.key.metric.name] += c.committed
    counted = {
        name.removeprefix(SHUFFLE_PREFIX): n
        for name, n in counters.items()
        if name.startswith(SHUFFLE_PREFIX)
    }
    sizes = {stage: counters[stage] for stage, _, _ in entering}
    with_stash = ("apply+stash", "verify_roles+stash")
    assert sum(map(sizes.pop, with_stash)) == sum(
        counted.pop(stage) for stage in ("apply", "verify_roles", "stash")
    )
    assert counted == sizes
    assert min(sizes.values()) > 0  # every stage moved something: near-duplicates were verified


@pytest.mark.slow
def test_source_priority_keeps_wikipedia_and_source_scope_keeps_cross_source_copies(
    corpus, tmp_path
):
    prioritised = _run(tmp_path / "priority", corpus.docs, "--dedup-source-priority", "wikipedia")
    rejects = {r["doc_id"]: r for r in prioritised["rejects"]}
    assert "wikipedia:enwiki:2" not in rejects
    assert rejects["webtext:wiki-copy"]["detail"].startswith("kept=wikipedia:enwiki:2")
    scoped = _run(tmp_path / "scoped", corpus.docs, "--dedup-scope", "source")
    scoped_rejects = {r["doc_id"] for r in scoped["rejects"]}
    assert scoped_rejects == set(corpus.removed) - {"wikipedia:enwiki:2"}


@pytest.mark.slow
def _counted(counters: dict) -> dict:
    """The counters that count (CPU time is measured: every run has it, of its own size)."""
    assert counters[CPU_US + "dedup"] > 0
    return {k: v for k, v in counters.items() if not k.startswith(CPU_US)}


def test_one_and_two_worker_processes_give_identical_results(
    corpus, default_run, tmp_path, monkeypatch
):
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the worker processes import pipelines.dedup
    two = _run(
        tmp_path,
        corpus.docs,
        "--direct_num_workers",
        "2",
        "--direct_running_mode",
        "multi_processing",
    )
    for name in ("documents", "rejects", "clusters"):
        assert two[name] == default_run[name]
    # What crosses the LSH shuffle is one reference a band batch (bandfiles.py), the exact
    # step's one element a key partition and batch (keyed.py), and the stash names one a bundle
    # and bucket: how many depends on where the runner cuts bundles.
    one, other = default_run["stats"]["counters"].copy(), two["stats"]["counters"].copy()
    for stage in ("lsh_buckets", "exact", "stash"):
        assert one.pop(SHUFFLE_PREFIX + stage) > 0 and other.pop(SHUFFLE_PREFIX + stage) > 0
    assert _counted(other) == _counted(one)


def test_the_command_writes_nothing_under_home(corpus, default_run, tmp_path):
    """Issue 27.7: `python -m pipelines.dedup` used to make ~/.apache_beam/cache/prism/bin (Beam's
    DirectRunner trying its Prism runner first); a run leaves HOME as it was."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "PYTHONPATH": str(REPO),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.dedup", "--input",
         _write_input(corpus.docs, tmp_path / "in"), "--output", str(tmp_path / "out")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(home.rglob("*")) == []
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert _counted(stats["counters"]) == _counted(default_run["stats"]["counters"])


def test_unreadable_input_fails_with_the_file_named(tmp_path, capsys):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": ["a"], "body": ["no text column"]}), bad)
    with pytest.raises(ValueError, match=r"bad.parquet: not a document file: no column text"):
        list(read_parquet_documents(str(bad)))
    assert (
        main(["--input", str(tmp_path / "missing-*.parquet"), "--output", str(tmp_path / "o")]) == 2
    )
    assert "no input files match" in capsys.readouterr().err


@pytest.mark.slow
def test_decontamination_removes_the_evaluation_articles_before_dedup(corpus, tmp_path):
    # The corpus's Wikipedia documents are WikiText-103 validation articles: decontaminating
    # against that evaluation set removes them and the web copy of one, and counts them.
    eval_file = CORPORA / "wikitext" / "wikitext-103" / "wiki.valid.tokens"
    run = _run(tmp_path, corpus.docs, "--decontaminate", str(eval_file))
    rejects = {r["doc_id"]: r["reason"] for r in run["rejects"]}
    wiki = {d.id for d in corpus.docs if d.source == "wikipedia"} | {"webtext:wiki-copy"}
    assert {k for k, v in rejects.items() if v == "contamination"} == wiki
    expected = {k: v[0] for k, v in corpus.removed.items() if k not in wiki}
    assert {k: v for k, v in rejects.items() if v != "contamination"} == expected
    assert run["stats"]["removed"]["contamination"] == len(wiki) == 7
    assert run["stats"]["counters"]["dedup_contamination_removed"] == 7
    assert run["stats"]["shuffle"]["shuffle_bytes_by_stage"]["decontamination"] > 0
    assert not any(c["removed_id"] in wiki for c in run["clusters"])


@pytest.mark.slow
def test_a_full_disk_under_the_stash_fails_in_one_line(corpus, tmp_path, capsys, monkeypatch):
    # The stash writes the cleaned text to OUTPUT's work area: a full disk there is one line
    # naming OUTPUT, exit 1, not the runner's traceback.
    from pipelines.dedup import stash

    def full(self):
        raise OSError(errno.ENOSPC, "No space left on device", self.path)

    monkeypatch.setattr(stash.StashWriter, "_write_frame", full)
    pattern = _write_input(corpus.docs, tmp_path / "input")
    out = tmp_path / "out"
    assert main(["--input", pattern, "--output", str(out), "--runner", "DirectRunner"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"error: no space left on {out}", err[-3:]
    assert not (out / "_work").exists() and not (out / "stats.json").exists()


def test_too_few_component_rounds_fail_the_run_with_a_clear_message(tmp_path, capsys):
    # A chain of 16 successive light edits, ids in shuffled order: a long path in the
    # near-duplicate graph, which one large-star/small-star round cannot contract.
    text = "\n\n".join(paragraphs_of_book("2701-0.txt")[300:306])
    order = list(range(16))
    random.Random(7).shuffle(order)
    docs = []
    for step in range(16):
        text = edit_words(text, 0.012, step)
        docs.append(Document(f"books:chain:{order[step]:02d}", "books", text))
    pattern = _write_input(docs, tmp_path / "input")
    code = main(["--input", pattern, "--output", str(tmp_path / "out"), "--dedup-cc-rounds", "1"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "did not converge in 1 rounds" in err and "--dedup-cc-rounds 2" in err
    assert "Traceback" not in err
    # With the default rounds the whole chain is one component: one document is kept.
    assert main(["--input", pattern, "--output", str(tmp_path / "ok"), "--keep-rejects"]) == 0
    stats = json.loads((tmp_path / "ok" / "stats.json").read_text())
    assert stats["kept"] == 1 and stats["removed"]["near_duplicate"] == 15


# -- OUTPUT is claimed by the ownership rule, and flags Beam does not know are refused -----------
def _small_input(tmp_path: Path) -> str:
    docs = [Document(f"books:alice:{i:03d}", "books", text)
            for i, text in enumerate(paragraphs_of_book("11-0.txt")[40:46])]  # fmt: skip
    return _write_input(docs, tmp_path / "input")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_folder_of_user_files_is_refused_and_left_as_it_was(tmp_path, capsys):
    """Issue 18: dedup wrote its stats.json over a user's own in such a folder, exit 0."""
    users = tmp_path / "users"
    users.mkdir()
    (users / "stats.json").write_text('{"mine": true}\n')
    (users / "notes.txt").write_text("my notes\n")
    before = _files(users)
    code = main(["--input", _small_input(tmp_path), "--output", str(users)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "not written by this tool" in err and "stats.json" in err
    assert _files(users) == before


def test_an_earlier_dedup_output_is_replaced_only_with_overwrite(default_run, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(default_run["out"], out)  # the fixture's own folder stays as it was
    marker = json.loads((out / MARKER_NAME).read_text())
    assert marker["tool"] == "dedup" and marker["state"] == "finished"
    assert set(marker["files"]) == set(_files(out)) - {MARKER_NAME}
    before = _files(out)
    pattern = str(tmp_path / "missing-*.parquet")  # refused before the input is looked at
    assert main(["--input", pattern, "--output", str(out)]) == 2
    assert "holds a finished dedup output; pass --overwrite" in capsys.readouterr().err
    (out / "notes.txt").write_text("a user's file beside ours")
    assert main(["--input", pattern, "--output", str(out), "--overwrite"]) == 2
    assert "did not write (notes.txt)" in capsys.readouterr().err
    (out / "notes.txt").unlink()
    assert _files(out) == before
    # --overwrite: the claim (what main makes first) takes the earlier output away
    claim_output(str(out), overwrite=True, layout=DEDUP_OUTPUT).release()
    assert sorted(os.listdir(out)) == [MARKER_NAME]


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        ("--keep_rejects", "--keep_rejects: the flag is spelled --keep-rejects"),
        ("--shard-tokens=5", "unknown option(s): --shard-tokens (another command's flag, not "
         "this one's)"),
        ("--dedup-treshold=0.5", "unknown option(s): --dedup-treshold (did you mean "
         "--dedup-threshold?)"),
    ],
)
def test_unknown_flags_are_refused_like_preprocess_refuses_them(tmp_path, capsys, flag, named):
    """Beam only warned about them; a preprocess flag is unknown to dedup too. Each is named in
    one line, with ours where it is a misspelling of one (the parser's own refusal exits)."""
    try:
        code = main(["--input", _small_input(tmp_path), "--output", str(tmp_path / "o"), flag])
    except SystemExit as exited:
        code = exited.code
    err = capsys.readouterr().err
    assert code == 2 and err.splitlines()[0].endswith(f"error: {named}"), err
    assert not (tmp_path / "o").exists()
