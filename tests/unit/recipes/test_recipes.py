"""The in-process tests of what tests/integration/test_recipes.py covers (that file holds the
tests that start a process or run a Beam pipeline, and says what they cover)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers.recipes import RECIPE_FILES, RECIPES, load, make_scaling


def test_every_recipe_is_checked():
    assert RECIPE_FILES == [
        "bert_large_lamb.sh",
        "corpora.sh",
        "gpt2_345m.sh",
        "megatron_8.3b.sh",
    ]
    assert {r.recipe for r in make_scaling.RUNS} <= set(RECIPE_FILES)


def test_scaling_sheet_is_current():
    written = (RECIPES / "SCALING.md").read_text(encoding="utf-8")
    assert written == make_scaling.render(), (
        "recipes/SCALING.md is stale: run python recipes/make_scaling.py"
    )


@pytest.fixture()
def results_copy(tmp_path) -> Path:
    copy = tmp_path / "results"
    shutil.copytree(REPO / "bench" / "results", copy)
    (copy / "gpu.md").unlink(missing_ok=True)
    return copy


def test_sheet_reads_the_bench_tables(results_copy):
    """The per-MB costs follow the committed tables: double tiktoken's web text rate and its
    rows halve; drop a row the sheet reads and it says which one."""
    before = make_scaling.render(results_copy)
    # the factor is the pipeline's cost over the plain loop, from preprocess.md
    row = re.search(
        r"\| webtext \| 1 clean \| GPT-2 encode \(by-product shards\) \| 1 \| 0\.127 x ([\d.]+) \|",
        before,
    )
    assert row, "the webtext encode row is missing"
    factor = row.group(1)
    table = results_copy / "clean_tokenize.md"
    text = table.read_text()
    assert "| GPT-2 encode: tiktoken fast path | 5.1 | 6.4 | 7.9 |" in text
    table.write_text(text.replace("| 6.4 | 7.9 |", "| 6.4 | 15.8 |"))
    after = make_scaling.render(results_copy)
    assert (
        f"| webtext | 1 clean | GPT-2 encode (by-product shards) | 1 | 0.0633 x {factor} |" in after
    )

    table.write_text("\n".join(line for line in text.splitlines() if "tiktoken" not in line))
    with pytest.raises(SystemExit, match="no table row 'GPT-2 encode: tiktoken fast path'"):
        make_scaling.render(results_copy)


def test_measured_gpu_mfu_is_used_when_gpu_md_exists(results_copy):
    """A gpu.md as bench/gpu.sh writes it (its own MFU section) puts the measured MFU in
    the sheet for the run of that preset, on that device's peak; HF's rows beside ours and a
    failed row are not taken."""
    bench_gpu = load("bench_gpu", REPO / "bench" / "bench_gpu.py")
    ours = {"case": "gpt2-355m seq 1024 bf16", "preset": "gpt2-355m", "side": "ours",
            "compile": "model", "mfu": 0.44}  # fmt: skip
    theirs = {**ours, "side": "hf", "mfu": 0.31}
    failed = {"case": "gpt2-124m seq 1024 bf16", "side": "ours", "failed": "OutOfMemoryError"}
    (results_copy / "gpu.md").write_text(
        "\n".join(bench_gpu.mfu_section([ours, theirs, failed], "NVIDIA H100 80GB HBM3")),
        encoding="utf-8",
    )
    sheet = make_scaling.render(results_copy)
    assert "gpu.md is not there" not in sheet
    run = next(r for r in make_scaling.RUNS if r.preset == "gpt2-355m")
    flops = run.steps * run.global_batch * run.seq_len * make_scaling.run_flops_per_token(run)
    hours = flops / (0.44 * 989e12) / 3600
    (line,) = [x for x in sheet.splitlines() if x.startswith("| GPT-2 345M | NVIDIA H100")]
    assert "| 989 | 44.0% ([gpu.md:" in line
    assert line.endswith(f"| {make_scaling.significant(hours)} |")
