"""The tests of tests/unit/pipelines/test_pipeline_units.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations


def test_help_lists_our_options_and_points_to_beams(capsys):
    from pipelines.preprocess import main

    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "--shard-tokens" in text and "--no-dedup" in text and "--direct_num_workers" in text
