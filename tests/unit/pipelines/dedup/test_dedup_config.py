"""DedupConfig: defaults, validation, and the command-line flags other pipelines reuse."""

from __future__ import annotations

import argparse

import pytest

from pipelines.dedup import DedupConfig, add_dedup_arguments
from pipelines.dedup.config import FALLBACK_CC_ROUNDS
from pipelines.dedup.minhash import candidate_probability


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_dedup_arguments(parser)
    return parser.parse_args(argv)


def test_defaults_from_flags_equal_the_dataclass_defaults():
    assert DedupConfig.from_args(parse([])) == DedupConfig()


def test_flags_reach_the_config():
    args = parse(
        [
            "--dedup-threshold", "0.7", "--dedup-scope", "source",
            "--dedup-shingle", "char", "--dedup-ngram", "9", "--dedup-bands", "20",
            "--dedup-rows", "13", "--dedup-no-verify", "--dedup-bucket-cap", "50",
            "--dedup-cc-rounds", "8", "--dedup-source-priority", "wikipedia,books",
            "--no-url-dedup", "--decontaminate", "a.jsonl", "b/*.tokens",
        ]
    )  # fmt: skip
    config = DedupConfig.from_args(args)
    assert (config.threshold, config.scope, config.shingle, config.ngram) == (
        0.7,
        "source",
        "char",
        9,
    )
    assert (config.bands, config.rows, config.num_perm, config.verify) == (20, 13, 260, False)
    assert (config.max_pairs_members, config.cc_rounds, config.url, config.exact) == (
        50,
        8,
        False,
        True,
    )
    assert config.source_priority == ("wikipedia", "books")
    assert config.decontamination.eval_files == ("a.jsonl", "b/*.tokens")
    assert DedupConfig().decontamination is None


def test_only_preprocess_has_the_switch_to_skip_dedup():
    """--no-dedup turns off a stage of preprocess (PreprocessConfig.dedup, in the same
    argument group); the dedup command has no such flag."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.dedup.__main__ import build_parser
    from pipelines.options import PreprocessOptions

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--input", "x", "--output", "y", "--no-dedup"])
    assert PipelineOptions(["--no-dedup"]).view_as(PreprocessOptions).dedup is False
    assert PipelineOptions([]).view_as(PreprocessOptions).dedup is True


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"threshold": 0.0}, r"^--dedup-threshold must be in \(0, 1\], got 0.0$"),
        ({"threshold": float("nan")}, "--dedup-threshold must be in"),
        ({"scope": "global"}, "^--dedup-scope must be one of all, source, got 'global'$"),
        ({"shingle": "token"}, "--dedup-shingle must be one of word, char"),
        ({"bands": 0}, r"--dedup-bands must be in \[1, 255\], got 0"),
        ({"bands": 300}, r"--dedup-bands must be in \[1, 255\], got 300"),
        ({"max_pairs_members": 1}, "--dedup-bucket-cap must be >= 2, got 1"),
        ({"batch_docs": 0}, "^batch_docs must be >= 1, got 0$"),  # a setting without a flag
    ],
)
def test_invalid_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DedupConfig(**kwargs)


def test_default_bands_rows_propose_pairs_at_the_threshold():
    d = DedupConfig()
    assert candidate_probability(d.threshold, d.bands, d.rows) > 0.9
    assert candidate_probability(0.5, d.bands, d.rows) < 0.06


def test_components_rounds_default_to_auto_and_are_sized_to_a_bound():
    auto = DedupConfig()
    assert auto.cc_rounds is None and parse([]).dedup_cc_rounds is None
    assert parse(["--dedup-cc-rounds", "auto"]).dedup_cc_rounds is None
    assert auto.with_rounds_for(23).cc_rounds == 7  # components.rounds_for
    # at most the former fixed 16: the bound from bytes is loose (config's docstring)
    assert auto.with_rounds_for(10**12 // 50).cc_rounds == 16
    assert auto.with_rounds_for(30_000).cc_rounds == 16  # rounds_for(30_000) is 17
    assert auto.with_rounds_for(None).cc_rounds == FALLBACK_CC_ROUNDS == 16  # size unknown
    given = DedupConfig(cc_rounds=3)
    assert given.with_rounds_for(10**9) is given  # --dedup-cc-rounds N wins over any bound


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_a_bad_rounds_flag_is_refused(value, capsys):
    with pytest.raises(SystemExit):
        parse(["--dedup-cc-rounds", value])
    assert "expected a count >= 1 or 'auto'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--dedup-cc-rounds must be >= 1, got 0"):
        DedupConfig(cc_rounds=0)


def test_each_flag_is_its_config_fields_declaration(capsys):
    """DedupConfig's fields declare the dedup flags (common.option_fields): types,
    choices and checks reach the command line, defaults reach its help."""
    from pipelines.dedup.__main__ import build_parser

    with pytest.raises(ValueError, match=r"^--dedup-bands must be in \[1, 255\], got 300$"):
        DedupConfig.from_args(parse(["--dedup-bands", "300"]))
    with pytest.raises(ValueError, match="^--dedup-bucket-cap must be >= 2, got 1$"):
        DedupConfig.from_args(parse(["--dedup-bucket-cap", "1"]))
    for argv in (["--dedup-shingle", "token"], ["--dedup-rows", "8.5"]):
        with pytest.raises(SystemExit):
            parse(argv)
    assert "invalid choice: 'token'" in capsys.readouterr().err
    priority = DedupConfig.from_args(parse(["--dedup-source-priority", "wikipedia,,books,"]))
    assert priority.source_priority == ("wikipedia", "books")
    text = " ".join(build_parser().format_help().split())
    assert "--dedup-bucket-cap DEDUP_BUCKET_CAP LSH buckets with more members" in text
    assert "instead of linking all pairs (100)" in text
    assert (
        "--decontaminate-ngram DECONTAMINATE_NGRAM n-gram length for decontamination (13)" in text
    )
